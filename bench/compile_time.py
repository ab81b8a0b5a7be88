"""Compile time, before and after, in the same run (issue 24's speed targets):

    python bench/compile_time.py --models DIR/resnet50.qdq.onnx,DIR/mobilenet_v2.qdq.onnx,DIR/vit_b_16.qdq.onnx
                                 [--baseline REV]
                                 [--hw gemmini-16x16] [--jobs 2] [--repeat 1] [--out bench/results/compile_time.md]

Each model is compiled by `tileplan compile --jobs J` in a fresh process, cold (an empty TMPDIR, so empty kernel,
host-lowering, build and compile caches, and a new plan store) and then warm (the same caches again), by this
checkout's code and by the code of git revision REV (default: the merge base with main; its `service/` and
`hw_catalog/` extracted to a temporary directory and put first on PYTHONPATH, run by the same interpreter).
The two are interleaved model by model, so they share the machine's load.  Both trees' Python is byte-compiled
first (`compileall`, as a pip install does): a process started with PYTHONDONTWRITEBYTECODE=1 (this machine's
environment sets it) would otherwise compile Tileplan's ~1 MB of source again in every compile and in each
worker process that imports the planner.  Reported: wall seconds and CPU
seconds (user + system of the compile process and everything it started: workers, the C compiler), and their
ratios baseline / this checkout.  On a shared machine the CPU seconds are the comparable number; the wall seconds
of an idle machine lie between the CPU seconds / cores and the CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def compile_once(model: Path, hw: str, jobs: int, cache: Path, code: Path | None) -> dict[str, Any]:
    env = {**os.environ, "TMPDIR": str(cache)}
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code / "service"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    out = cache / "out"
    cmd = [sys.executable, "-m", "tileplan.cli", "compile", str(model), "--hw", hw, "--out", str(out),
           "--plans-db", f"sqlite:///{cache}/plans.db", "--jobs", str(jobs), "--json"]
    load = os.getloadavg()[0]
    c0, t0 = _children_cpu(), time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if run.returncode != 0:
        return {"error": (run.stderr.strip().splitlines() or ["?"])[-1], "wall": wall, "cpu": cpu, "load": load}
    total = json.loads(run.stdout)["total"]
    return {"wall": wall, "cpu": cpu, "load": load, "phases": total.get("phase_seconds"),
            "cpu_phases": total.get("phase_cpu_seconds"), "outputs": _outputs_digest(cache),
            "artifact": _artifact_digest(out), "plans": _plans_digest(cache),
            "cycles_model": total["cycles_model"], "cycles_emulated": total["cycles_emulated"],
            "share": total["accelerator_mac_share"]}


def _artifact_digest(out: Path) -> str | None:
    """sha256 of the compile's tar (kernels, host C, glue, weights, manifest with the summary); None unless one."""
    import hashlib

    tars = sorted(out.glob("*.tar"))
    return hashlib.sha256(tars[0].read_bytes()).hexdigest()[:16] if len(tars) == 1 else None


def _plans_digest(cache: Path) -> str | None:
    """sha256 of every plan in the compile's plan store, by layer (mapping, metrics, baseline, solver status,
    notes; without the solve's seconds, which are wall time, and without the plan's key and links, which carry
    the digest of the code that made it since 50b5665: two revisions' plans of one layer compare equal when they
    are the same plan); None without a store."""
    import hashlib
    import sqlite3

    db = cache / "plans.db"
    if not db.exists():
        return None
    h = hashlib.sha256()
    with sqlite3.connect(db) as con:
        for layer, doc in sorted(con.execute("select layer, doc from plans")):
            d = json.loads(doc)
            d.pop("key", None)
            d.pop("links", None)
            for part in (d, d.get("baseline") or {}):
                if isinstance(part.get("solver"), dict):
                    part["solver"].pop("seconds", None)
            h.update(layer.encode() + json.dumps(d, sort_keys=True).encode())
    return h.hexdigest()[:16]


def _outputs_digest(cache: Path) -> str | None:
    """sha256 of the emulated run's outputs (the compile's own run on its seeded input, which the runner keeps
    beside the build as run-*.npz); None unless there is exactly one such run in `cache`."""
    import hashlib

    import numpy as np

    runs = sorted(cache.rglob("run-*.npz"))
    if len(runs) != 1:
        return None
    h = hashlib.sha256()
    with np.load(runs[0]) as z:
        for k in sorted(k for k in z.files if k.startswith("out")):
            h.update(k.encode() + z[k].tobytes())
    return h.hexdigest()[:16]


def extract(rev: str, into: Path) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "service", "hw_catalog"], capture_output=True,
                             check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    byte_compile(into / "service")


def byte_compile(tree: Path) -> None:
    """The tree's .pyc files, as installing the package writes them (the compiles then only read them)."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True, stdout=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", required=True, help="comma-separated ONNX files")
    ap.add_argument("--baseline", default="", help="git revision to compare with (default: merge base with main)")
    ap.add_argument("--this", default="", help="git revision measured as 'this' (default: the checkout's files, "
                    "which must then not change during the run: a warm compile after an edit is a cold one)")
    ap.add_argument("--hw", default="gemmini-16x16")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "compile_time.md")
    args = ap.parse_args()
    rev = args.baseline or subprocess.run(["git", "-C", str(ROOT), "merge-base", "HEAD", "main"], capture_output=True,
                                          text=True, check=True).stdout.strip()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "service"], capture_output=True,
                           text=True, check=True).stdout.strip()
    load0 = os.getloadavg()
    rows = []
    if args.this:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.this], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = ""
    with tempfile.TemporaryDirectory(prefix="tp-ct-base-") as base, \
            tempfile.TemporaryDirectory(prefix="tp-ct-this-") as this:
        extract(rev, Path(base))
        if args.this:
            extract(args.this, Path(this))
        else:
            byte_compile(ROOT / "service")
        for model in [Path(m) for m in args.models.split(",") if m]:
            for rep in range(args.repeat):
                for variant, code in (("baseline", Path(base)), ("this", Path(this) if args.this else None)):
                    with tempfile.TemporaryDirectory(prefix="tp-ct-") as cache:
                        cold = compile_once(model, args.hw, args.jobs, Path(cache), code)
                        warm = compile_once(model, args.hw, args.jobs, Path(cache), code)
                    row = {"model": model.name, "variant": variant, "repeat": rep, "cold": cold, "warm": warm}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    load1 = os.getloadavg()
    write(args, rev, head + (" (with uncommitted changes)" if dirty else ""), rows, load0, load1)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "-"


def write(args: argparse.Namespace, rev: str, head: str, rows: list[dict[str, Any]], load0: tuple[float, ...],
          load1: tuple[float, ...]) -> None:
    lines = ["# Compile time: before and after, in one run", "",
             f"`python bench/compile_time.py --models {','.join(Path(m).name for m in args.models.split(','))} "
             f"--baseline {rev[:12]}" + (f" --this {args.this}" if args.this else "")
             + f" --hw {args.hw} --jobs {args.jobs} --repeat {args.repeat}` (models from "
             "bench/zoo_export.py); this checkout: " + head + f". Load average at start {load0[0]:.1f}, at end "
             f"{load1[0]:.1f} on {os.cpu_count()} cores" + (": a shared, loaded machine, so wall seconds are far above "
                                                           "an idle machine's; CPU seconds compare the code"
                                                           if max(load0[0], load1[0]) > (os.cpu_count() or 1) else "")
             + ".", "",
             "Cold: empty caches (fresh TMPDIR and plan store; both trees' Python byte-compiled beforehand, as an "
             "install leaves it); warm: the same compile again. CPU: user + system "
             "seconds of the compile and its children (workers, C compiler). Ratio: baseline / this checkout.", "",
             "Load: the 1-minute load average when each cold compile started (base / this).", "",
             "Same outputs: the emulated run's outputs (the compile's own run on its seeded input) are byte-identical; "
             "same artifact: the compile's tar (every file of the program, and the summary in its manifest) is; same "
             "plans: every plan the compile stored, by layer (mapping, metrics, baseline, solver status; not its seconds, key "
             "or links, which carry the code's digest) is. "
             "Phases: this checkout's cold compile, wall seconds and CPU seconds (user + system of the compile and of "
             "the children it has waited for by then: a worker pool's CPU lands in the phase that shuts it down; "
             "`workers`, where a revision has that phase, is the worker processes' planning and code generation).", "",
             "| model | cold wall s (base / this / ratio) | cold CPU s (base / this / ratio) | warm wall s | "
             "warm CPU s | load | same modelled cycles | same emulated cycles | same outputs | same artifact | "
             "same plans | this checkout's cold phases, wall s | ... CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        by.setdefault((r["model"], r["repeat"]), {})[r["variant"]] = r
    for (model, _), v in by.items():
        b, t = v.get("baseline"), v.get("this")
        if not b or not t:
            continue
        if "error" in b["cold"] or "error" in t["cold"]:
            lines.append(f"| {model} | error: {b['cold'].get('error', '')[:80]} / {t['cold'].get('error', '')[:80]} "
                         "| | | | | | | | | | | |")
            continue
        cells = []
        for phase in ("cold", "warm"):
            for k in ("wall", "cpu"):
                x, y = b[phase][k], t[phase][k]
                cells.append(f"{x:.1f} / {y:.1f} / {_ratio(x, y)}")
        same = "yes" if b["cold"]["cycles_model"] == t["cold"]["cycles_model"] else (
            f"no: {b['cold']['cycles_model']:.0f} vs {t['cold']['cycles_model']:.0f}")
        emu = "yes" if b["cold"]["cycles_emulated"] == t["cold"]["cycles_emulated"] else (
            f"no: {b['cold']['cycles_emulated']} vs {t['cold']['cycles_emulated']}")
        outs = "-" if not (b["cold"].get("outputs") and t["cold"].get("outputs")) else (
            "yes" if b["cold"]["outputs"] == t["cold"]["outputs"] else "no")
        arts = "-" if not (b["cold"].get("artifact") and t["cold"].get("artifact")) else (
            "yes" if b["cold"]["artifact"] == t["cold"]["artifact"] else "no")
        plans = "-" if not (b["cold"].get("plans") and t["cold"].get("plans")) else (
            "yes" if b["cold"]["plans"] == t["cold"]["plans"] else "no")
        load = " / ".join(f"{r['cold'].get('load', float('nan')):.1f}" for r in (b, t))
        phases = ", ".join(f"{k} {v:.1f}" for k, v in (t["cold"].get("phases") or {}).items() if v >= 0.05)
        cpu_phases = ", ".join(f"{k} {v:.1f}" for k, v in (t["cold"].get("cpu_phases") or {}).items() if v >= 0.05)
        lines.append(f"| {model} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | {load} | {same} | {emu} | "
                     f"{outs} | {arts} | {plans} | {phases} | {cpu_phases or '-'} |")
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"baseline": rev, "head": head, "rows": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
