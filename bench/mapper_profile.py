"""`bench/mapper.py --profile`: where a cosa solve's time goes, by phase, on every bench layer.

cProfile runs around `CosaMapper.map` only; each phase is the cumulative time of the function that does it (the
phases do not nest). Start-up (a fresh interpreter importing the mapper) is measured apart, in subprocesses, since
a solver process pays it once. Writes bench/results/mapper_profile.md.
"""

from __future__ import annotations

import cProfile
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (label, source file suffix, function name): the phases of CosaMapper.map, none inside another
PHASES = [
    ("MIP spec (descriptor -> factor alternatives, capacities)", "mappers/cosa/spec.py", "build_spec"),
    ("MIP construction (Pyomo model)", "mappers/cosa/model.py", "build_model"),
    ("HiGHS: Pyomo -> HiGHS translation (linear visitor, passModel)", "mappers/cosa/solve.py", "pass_model"),
    ("HiGHS: branch and bound (highspy run)", "~", "<built-in method highspy._core.run>"),
    ("decode + re-rank the MIP's factorisations (cost model)", "mappers/cosa/mapper.py", "consider"),
    ("hand-written tiling (gemmini-auto seed)", "mappers/cosa/mapper.py", "_heuristic_seeds"),
    ("polish (prime-factor moves, cost model)", "mappers/polish.py", "polish"),
    ("retile (call-tile search, Gemmini-like only)", "mappers/retile.py", "refine"),
    ("never slower than the hand-written tiling", "mappers/cosa/mapper.py", "_not_slower_than"),
]


def _cumulative(stats: pstats.Stats, suffix: str, name: str) -> float:
    total = 0.0
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if func == name and file.replace(os.sep, "/").endswith(suffix):
            total += ct
    return total


def _startup() -> tuple[float, float, bool]:
    """(interpreter alone, interpreter + importing the cosa mapper, whether TVM got imported), in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "service")}

    def timed(code: str) -> tuple[float, str]:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        return time.perf_counter() - t0, out.stdout.strip()

    bare = min(timed("pass")[0] for _ in range(3))
    runs = [timed("import sys; from tileplan.plan import make_plan; import tileplan.mappers.cosa; "
                  "print('tvm' in sys.modules)") for _ in range(3)]
    return bare, min(t for t, _ in runs), any(flag == "True" for _, flag in runs)


def profile_hardware(hw_name: str, workloads: list[Path], time_limit: float) -> str:
    from tileplan.hardware.catalog import get_hardware
    from tileplan.mappers.base import MapperOptions, get_mapper
    from tileplan.problem import Problem
    from tileplan.workload import load_workload

    hw = get_hardware(hw_name)
    mapper = get_mapper("cosa")  # imports happen here, outside the profile
    prof = cProfile.Profile()
    walls: list[float] = []
    for wl in workloads:
        for layer in load_workload(wl)[1]:
            problem = Problem.from_layer(layer)
            t0 = time.perf_counter()
            prof.enable()
            mapper.map(problem, hw, MapperOptions(time_limit_s=time_limit))
            prof.disable()
            walls.append(time.perf_counter() - t0)
    stats = pstats.Stats(prof)
    total = _cumulative(stats, "mappers/cosa/mapper.py", "map")
    lines = [f"### cosa on {hw_name} ({len(walls)} layers: {', '.join(w.stem for w in workloads)})", "",
             f"Wall time per layer (under the profiler): median {statistics.median(walls):.2f} s, "
             f"max {max(walls):.2f} s, total {sum(walls):.1f} s.", "",
             "| phase | s (all layers) | share of cosa |", "|---|---:|---:|"]
    accounted = 0.0
    for label, suffix, name in PHASES:
        t = _cumulative(stats, suffix, name)
        accounted += t
        lines.append(f"| {label} | {t:.2f} | {t / total:.0%} |")
    lines.append(f"| everything else (Pyomo result loading, no-good cuts, bookkeeping) | {total - accounted:.2f} | "
                 f"{(total - accounted) / total:.0%} |")
    lines.append(f"| **CosaMapper.map** | {total:.2f} | 100% |")
    buf = []
    stats.sort_stats("tottime")
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:8]  # type: ignore[attr-defined]
    for (file, line, func), (_cc, nc, tt, ct, _c) in top:
        where = func if file == "~" else f"{Path(file).name}:{line} {func}"
        buf.append(f"| `{where}` | {nc:,} | {tt:.2f} | {ct:.2f} |")
    lines += ["", "Hottest functions by own time:", "", "| function | calls | own s | cumulative s |",
              "|---|---:|---:|---:|", *buf]
    return "\n".join(lines) + "\n"


def profile_main(hardware: list[str], workloads: list[Path], time_limit: float) -> int:
    bare, with_mapper, tvm = _startup()
    parts = [
        "# Where cosa's time goes",
        "",
        f"`python bench/mapper.py --profile` on {platform.machine()} ({os.cpu_count()} cores, shared), "
        f"{time.strftime('%Y-%m-%d %H:%M')}; load average at the start {os.getloadavg()[0]:.1f}. cProfile around "
        "`CosaMapper.map` (the profiler itself slows Python-heavy phases more than HiGHS), default objective (latency 0.6, "
        "energy 0.3, memory 0.1) on every hardware, as the service plans.",
        "",
        f"Start-up, once per solver process: interpreter {bare:.2f} s; interpreter + `tileplan.plan` + the cosa "
        f"mapper (Pyomo, highspy, numpy) {with_mapper:.2f} s, i.e. {with_mapper - bare:.2f} s of imports "
        f"({with_mapper / bare:.1f}x the bare interpreter). TVM loaded on the solve path: {'YES' if tvm else 'no'}.",
        "",
    ]
    for hw_name in hardware:
        text = profile_hardware(hw_name, workloads, time_limit)
        print(text)
        parts.append(text)
    out = REPO / "bench/results/mapper_profile.md"
    out.write_text("\n".join(parts))
    print(f"wrote {out}")
    return 0
