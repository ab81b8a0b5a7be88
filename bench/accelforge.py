"""cosa against AccelForge's mapper on catalog simba, both judged by Tileplan's Timeloop-semantics model.

Issue 17 asks cosa (latency-only objective) to be within 2% of AccelForge's plans on every layer on Simba and
no worse in total. AccelForge 1.0.467 (PyPI, Python >= 3.12) runs in its own environment, never imported here:
    python3.12 -m venv af-venv && af-venv/bin/pip install accelforge==1.0.467
    .venv/bin/python bench/accelforge.py --accelforge-python af-venv/bin/python     (or TILEPLAN_ACCELFORGE_PYTHON)
Per layer:
1. the catalog descriptor becomes an AccelForge spec with the same levels, capacities (entries x word bits per
   instance), keep sets (each level keeps exactly its descriptor tensors: AccelForge's `keep`, no bypass
   choice), fan-outs (one 1-D spatial container per level that fans out; any dimension may be unrolled, as in
   Timeloop), one word per element at every level (a 24-bit accumulator word holds one partial sum), DRAM's
   separate read / write words per cycle as action throughputs, unlimited on-chip bandwidth, one MAC a cycle;
   the layer is one convolution Einsum (a matmul is a 1x1 convolution, as Tileplan's Problem has it);
2. AccelForge's mapper (latency objective, its defaults otherwise, one process) returns its best mapping as a
   loop tree; its search is capped at --af-cpu-cap CPU seconds per layer (default 600; it took 18-613 s a
   layer for a peer), past which the layer has no AccelForge plan (AccelForge keeps no best-so-far to return);
3. that tree becomes a Tileplan Mapping: spatial loops go to the level whose fan-out they unroll, temporal loops
   to the innermost level whose tile they lie outside of. A level whose tensors AccelForge keeps at different
   depths of the tree (its loop tree can, Timeloop's per-level form cannot) has each of those depths tried as
   the level's tile boundary, and the best Timeloop-legal one is kept (the table says how many levels split);
4. cosa's plan (latency-only objective) and the translated AccelForge plan are both scored by
   `tileplan.plan.evaluate(..., model="timeloop")`, which also checks Timeloop's legality; AccelForge's own
   model scores both too (cosa's plan as a loop tree: `mapping_yaml`), with its DRAM word counts.
CPU seconds: cosa's in this process; AccelForge's as the child process's user+system time (its Python start
and spec parsing included). Writes bench/results/accelforge.md and accelforge.json (AccelForge's trees, so
`--reuse` re-scores them without re-running AccelForge, except for layers it had no plan for when
--accelforge-python is given).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "service"))

from tileplan.dims import RELEVANT  # noqa: E402
from tileplan.hardware import Architecture  # noqa: E402
from tileplan.hardware.catalog import get_hardware  # noqa: E402
from tileplan.mappers.base import MapperOptions, Objective, get_mapper  # noqa: E402
from tileplan.mapping import LevelMapping, Mapping  # noqa: E402
from tileplan.plan import evaluate  # noqa: E402
from tileplan.problem import Problem  # noqa: E402
from tileplan.workload import load_workload  # noqa: E402

DRIVER = Path(__file__).with_name("accelforge_driver.py")
WORKLOADS = [REPO / "examples/workloads/resnet50_unique.yaml", REPO / "examples/workloads/bert_base_matmuls.yaml"]
# ResNet-50: the 1x1s where cosa's plan (bench/results/mapper.md) is furthest above the larger of the compute
# ideal and DRAM's compulsory traffic (the room a better mapper has), 1x1s and 3x3s where it is at a bound, the
# strided 3x3s; and a BERT matmul. AccelForge needs the most CPU on the 3x3s.
LAYERS = ["conv_64_64_1x1_s1_56", "conv_256_64_1x1_s1_56", "conv_64_256_1x1_s1_56", "conv_128_512_1x1_s1_28",
          "conv_256_512_1x1_s2_28", "conv_512_1024_1x1_s2_14", "conv_1024_2048_1x1_s2_7", "conv_512_2048_1x1_s1_7",
          "attn_scores", "conv_512_512_3x3_s2_7", "conv_128_128_3x3_s2_28", "conv_256_256_3x3_s1_14"]
ROLE = {"I": "input", "W": "weight", "O": "output"}
NAME = {"I": "I", "W": "Wt", "O": "O"}  # AccelForge tensor names (a rank of I is called W)


def fanout_container(level: str) -> str:
    return f"{level}_fanout"


def arch_yaml(arch: Architecture) -> str:
    """AccelForge's arch for a Tileplan architecture, outermost level first (see the module doc)."""
    lines = ["arch:", "  nodes:"]
    for i in range(len(arch.levels) - 1, -1, -1):
        lv = arch.levels[i]
        bits = round(lv.word_bytes * 8)
        reads = lv.read_bandwidth / lv.word_bytes if lv.read_bandwidth else math.inf
        writes = lv.write_bandwidth / lv.word_bytes if lv.write_bandwidth else math.inf
        # a shared budget (Tileplan's `bandwidth`) serves reads and writes together
        latency = ("sum(a.n_calls for a in actions) / actions[0].throughput" if lv.shared_bandwidth
                   else "max(a.n_calls / a.throughput for a in actions)")
        keep = " | ".join(ROLE[t] for t in sorted(lv.keeps))
        size = "inf" if lv.capacity is None else str(round(lv.capacity / lv.word_bytes) * bits)
        lines += [
            "  - !Memory",
            f"    name: {lv.name}",
            f"    size: {size}",
            "    component_class: Dummy",
            f"    bits_per_value: {{All: {bits}}}",
            f"    bits_per_action: {bits}",
            "    actions:",
            f"    - {{name: read, energy: 0, throughput: {reads}}}",
            f"    - {{name: write, energy: 0, throughput: {writes}}}",
            f"    total_latency: {latency}",
            f"    tensors: {{keep: {keep}}}",
        ]
        if lv.fanout > 1:
            lines += ["  - !Container", f"    name: {fanout_container(lv.name)}",
                      f"    spatial: [{{name: X, fanout: {lv.fanout}}}]"]
    lines += ["  - !Compute", "    name: MAC", "    component_class: Dummy", "    actions:",
              "    - {name: compute, energy: 0, throughput: 1}"]
    return "\n".join(lines).replace("inf}", ".inf}").replace("size: inf", "size: .inf") + "\n"


def workload_yaml(problem: Problem) -> str:
    """One convolution Einsum with the problem's bounds (input rows / columns are bounding boxes, as Timeloop)."""
    d = problem.dims
    (sh, sw), (dh, dw) = problem.stride, problem.dilation
    einsum = (f'O[n, k, p, q] = I[n, c, H: p * {sh} + r * {dh}, W: q * {sw} + s * {dw}] * Wt[k, c, r, s]')
    bounds = "\n".join(f"    - 0 <= {v.lower()} < {d[v]}" for v in ("N", "K", "C", "P", "Q", "R", "S"))
    return ("workload:\n  bits_per_value: {All: 8}\n  einsums:\n"
            f'  - einsum: "{einsum}"\n    iteration_space_shape:\n{bounds}\n'
            "    renames: {output: O, input: I, weight: Wt}\n")


def mapping_yaml(mapping: Mapping, problem: Problem, arch: Architecture) -> str | None:
    """A Tileplan mapping as AccelForge's loop tree (None for a padded one: AccelForge maps the real bounds).
    Per level, outermost first: its tensors' storage, its temporal loops (outermost first), its spatial loops.
    Timeloop keeps a tile across the loops directly above it that leave its tensor alone; AccelForge refetches
    a tile under every loop above its storage node, so each tensor's storage node is raised above such loops
    (not past a spatial loop or another level's storage node, which Timeloop's rule crosses but a loop tree
    cannot)."""
    if mapping.padded_dims:
        return None
    shape = dict(problem.dims)
    nodes: list[tuple[str, str, str]] = []  # (kind, tensor or dim, the rest of the YAML entry)
    for i in range(len(arch.levels) - 1, -1, -1):
        lv, m = arch.levels[i], mapping.levels[i]
        for t in sorted(lv.keeps):
            node = ("Storage", t, f"tensors: [{NAME[t]}], component: {lv.name}")
            at = len(nodes)
            while i < len(arch.levels) - 1 and at > 0 and (
                    (nodes[at - 1][0] == "Temporal" and nodes[at - 1][1] not in RELEVANT[t])
                    or nodes[at - 1][2].endswith(f"component: {lv.name}")):  # this level's other tensors
                at -= 1
            while nodes[at:] and nodes[at][0] == "Storage" and at < len(nodes) and (
                    nodes[at][2].endswith(f"component: {lv.name}")):
                at += 1  # no loop to pass: stay below this level's other tensors
            nodes.insert(at, node)
        loops = [("Temporal", d, f, "") for d, f in reversed(m.temporal)]
        loops += [("Spatial", d, f, f", name: X, component: {fanout_container(lv.name)}") for d, f in m.spatial]
        for kind, d, f, extra in loops:
            if f > 1:
                shape[d] //= f
                nodes.append((kind, d, f"rank_variable: {d.lower()}, tile_shape: {shape[d]}{extra}"))
    body = [f"  - !{kind} {{{rest}}}" for kind, _, rest in nodes]
    return "\n".join(["mapping:", "  nodes:", *body, "  - !Compute {einsum: O, component: MAC}"]) + "\n"


def tree_yaml(nodes: list[list]) -> str:
    """AccelForge's loop tree as the driver returned it, as a mapping YAML to evaluate again."""
    lines = ["mapping:", "  nodes:"]
    for node in nodes:
        if node[0] == "storage":
            lines.append(f"  - !Storage {{tensors: [{', '.join(node[2])}], component: {node[1]}}}")
        elif node[0] == "temporal":
            lines.append(f"  - !Temporal {{rank_variable: {node[1]}, tile_shape: {node[2]}}}")
        else:
            lines.append(f"  - !Spatial {{rank_variable: {node[1]}, tile_shape: {node[2]}, name: X, "
                         f"component: {node[3]}}}")
    return "\n".join([*lines, "  - !Compute {einsum: O, component: MAC}"]) + "\n"


def run_accelforge(python: str, problem: Problem, arch: Architecture, cpu_cap: float, search: bool = True,
                   evaluated: str | None = None, best: str | None = None) -> dict[str, Any]:
    """AccelForge's best mapping for the problem (if `search`), and its model's latency and DRAM words for the
    mappings given as YAML: `evaluated` (cosa's plan) and `best` (its own earlier best)."""
    job = json.dumps({"spec": arch_yaml(arch) + workload_yaml(problem), "time_limit": cpu_cap, "search": search,
                      "evaluated": evaluated, "best": best, "outer": arch.levels[-1].name})
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        # -P: the script's folder holds this file, accelforge.py, which would shadow the package
        proc = subprocess.run([python, "-P", str(DRIVER)], input=job, capture_output=True, text=True,
                              timeout=3 * cpu_cap + 300)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer within {3 * cpu_cap + 300:.0f} s"}
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = proc.stdout.strip().splitlines()
    try:
        out: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        out = {"error": f"exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:] or 'no output'}"}
    out["process_cpu_s"] = cpu
    return out


def translate(nodes: list[list], problem: Problem, arch: Architecture) -> list[tuple[Mapping, int]]:
    """Tileplan mappings for AccelForge's loop tree (outermost first), one per choice of tile boundary for levels
    whose tensors sit at different depths; with the number of such split levels."""
    names = [lv.name for lv in arch.levels]
    index = {n: i for i, n in enumerate(names)}
    by_container = {fanout_container(n): i for i, n in enumerate(names)}
    depths: dict[int, list[int]] = {}
    for pos, node in enumerate(nodes):
        if node[0] == "storage":
            depths.setdefault(index[node[1]], []).append(pos)
    split = sum(len(set(v)) > 1 for v in depths.values())
    choices = [sorted(set(depths.get(i, []))) or [None] for i in range(len(names))]
    out = []
    for pick in itertools.product(*choices):
        shape = dict(problem.dims)
        temporal: list[list[tuple[str, int]]] = [[] for _ in names]
        spatial: list[list[tuple[str, int]]] = [[] for _ in names]
        for pos, node in enumerate(nodes):
            if node[0] == "storage":
                continue
            dim = node[1].upper()
            factor, rest = divmod(shape[dim], node[2])
            if rest:
                raise ValueError(f"{node}: tile {node[2]} does not divide {shape[dim]}")
            shape[dim] = node[2]
            if factor == 1:
                continue
            if node[0] == "spatial":
                spatial[by_container[node[3]]].append((dim, factor))
                continue
            # inside the tile of every level whose boundary is above it: the innermost of those owns the loop
            owner = min(i for i, b in enumerate(pick) if b is not None and b < pos)
            temporal[owner].append((dim, factor))
        for dim, rest in shape.items():  # what is left below every loop runs at the innermost level
            if rest > 1:
                temporal[0].append((dim, rest))
        levels = [LevelMapping(name=n, temporal=list(reversed(temporal[i])), spatial=spatial[i])
                  for i, n in enumerate(names)]
        out.append((Mapping(levels=levels), split))
    return out


def lower_bound(problem: Problem, arch: Architecture) -> int:
    """Cycles no mapping can beat under Timeloop's semantics: the compute ideal on every MAC, and DRAM's reads
    (every weight and every input element some output uses, once) and writes (every output, once) at its
    words per cycle. Assumes DRAM has separate read and write budgets, as catalog simba's."""
    d = problem.dims
    (sh, sw), (dh, dw) = problem.stride, problem.dilation
    rows = len({p * sh + r * dh for p in range(d["P"]) for r in range(d["R"])})
    cols = len({q * sw + s * dw for q in range(d["Q"]) for s in range(d["S"])})
    reads = d["N"] * d["G"] * d["C"] * rows * cols + d["G"] * d["K"] * d["C"] * d["R"] * d["S"]
    writes = d["N"] * d["G"] * d["K"] * d["P"] * d["Q"]
    dram = arch.levels[-1]
    bound = math.ceil(problem.macs / arch.macs)
    if dram.read_bandwidth and dram.write_bandwidth:
        bound = max(bound, math.ceil(reads * dram.word_bytes / dram.read_bandwidth),
                    math.ceil(writes * dram.word_bytes / dram.write_bandwidth))
    return bound


def judge(layer: Any, hw: Any, mapping: Mapping) -> tuple[float | None, list[str]]:
    ev = evaluate(layer, hw, mapping, model="timeloop")
    return (ev.metrics.cycles if ev.valid and ev.metrics else None), list(ev.violations or [])


def best_translation(layer: Any, hw: Any, arch: Architecture, nodes: list[list]) -> dict[str, Any]:
    problem = Problem.from_layer(layer)
    best: dict[str, Any] = {"cycles": None, "violations": [], "candidates": 0, "split_levels": 0}
    for mapping, split in translate(nodes, problem, arch):
        best["candidates"] += 1
        best["split_levels"] = split
        cycles, violations = judge(layer, hw, mapping)
        if cycles is not None and (best["cycles"] is None or cycles < best["cycles"]):
            best.update(cycles=cycles, mapping=mapping.describe(), violations=[])
        elif best["cycles"] is None:
            best["violations"] = violations
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accelforge-python", default=os.environ.get("TILEPLAN_ACCELFORGE_PYTHON"),
                    help="AccelForge's interpreter (or env TILEPLAN_ACCELFORGE_PYTHON)")
    ap.add_argument("--hw", default="simba")
    ap.add_argument("--layers", default=",".join(LAYERS), help="layer names from the ResNet-50 / BERT workloads")
    ap.add_argument("--af-cpu-cap", type=float, default=600.0, help="AccelForge's CPU seconds per layer")
    ap.add_argument("--cosa-time-limit", type=float, default=10.0)
    ap.add_argument("--reuse", action="store_true", help="re-score the AccelForge trees in accelforge.json")
    ap.add_argument("--no-search", action="store_true",
                    help="with --reuse: only re-evaluate, never search (layers without a tree stay without)")
    ap.add_argument("--out", default=str(REPO / "bench/results/accelforge.md"))
    args = ap.parse_args()
    raw_path = Path(args.out).with_suffix(".json")
    kept = json.loads(raw_path.read_text()) if args.reuse and raw_path.exists() else {}
    if not args.accelforge_python and not args.reuse:
        ap.error("give --accelforge-python (or TILEPLAN_ACCELFORGE_PYTHON), or --reuse")

    hw = get_hardware(args.hw)
    arch = hw.resolve(None)
    layers = {lay.name: lay for w in WORKLOADS for lay in load_workload(w)[1]}
    objective = Objective(latency=1, energy=0, memory_utilization=0)
    rows: list[dict[str, Any]] = []
    raw = dict(kept)  # layers not run this time keep their trees
    for name in args.layers.split(","):
        layer = layers[name]
        problem = Problem.from_layer(layer)
        c0 = time.process_time()
        cosa = get_mapper("cosa").map(problem, hw, MapperOptions(time_limit_s=args.cosa_time_limit,
                                                                  objective=objective))
        cosa_cpu = time.process_time() - c0
        cosa_cycles, cosa_violations = judge(layer, hw, cosa.mapping)
        if name in kept and ("nodes" in kept[name] or not args.accelforge_python or args.no_search):
            af = dict(kept[name])
        elif not args.accelforge_python or args.no_search:
            af = {"error": "not searched"}
        else:
            print(f"{name}: AccelForge ...", file=sys.stderr, flush=True)
            af = run_accelforge(args.accelforge_python, problem, arch, args.af_cpu_cap)
        if args.accelforge_python:  # both plans as AccelForge's model sees them (today's cosa plan)
            ev = run_accelforge(args.accelforge_python, problem, arch, args.af_cpu_cap, search=False,
                                evaluated=mapping_yaml(cosa.mapping, problem, arch),
                                best=tree_yaml(af["nodes"]) if "nodes" in af else None)
            af = {k: v for k, v in af.items() if not k.startswith(("evaluated", "best"))}
            af |= {k: v for k, v in ev.items() if k.startswith(("evaluated", "best"))}
        raw[name] = af
        raw_path.write_text(json.dumps(raw, indent=1, sort_keys=True) + "\n")  # a stopped run keeps what it has
        tr = best_translation(layer, hw, arch, af["nodes"]) if "nodes" in af else {"cycles": None}
        rows.append({"layer": layer, "problem": problem, "bound": lower_bound(problem, arch), "cosa": cosa_cycles, "cosa_violations": cosa_violations,
                     "cosa_cpu": cosa_cpu, "cosa_map": cosa.mapping.describe(), "af": af, "tr": tr})
        print(f"{name}: cosa {cosa_cycles} ({cosa_cpu:.1f} s), AccelForge {tr.get('cycles')} "
              f"(own {af.get('latency')}, {af.get('process_cpu_s', 0):.1f} s) {af.get('error', '')}",
              file=sys.stderr, flush=True)
    Path(args.out).write_text(report(rows, args))
    return 0


def findings(rows: list[dict[str, Any]]) -> list[str]:
    """What the table says, counted from it."""
    both = [r for r in rows if r["cosa"] and r["tr"].get("cycles")]
    faster = [r for r in both if r["tr"]["cycles"] > r["cosa"] * 1.001]
    slower = [r for r in both if r["tr"]["cycles"] < r["cosa"] * 0.999]
    at_bound = [r for r in rows if r["cosa"] and r["cosa"] <= r["bound"] * 1.001]
    gaps = [abs(own / tl - 1) for r in rows for own, tl in ((r["af"].get("latency"), r["tr"].get("cycles")),
                                                            (r["af"].get("evaluated_latency"), r["cosa"]))
            if own and tl]
    reached = [r for r in faster if r["af"].get("evaluated_latency")
               and abs(r["af"]["evaluated_latency"] / r["cosa"] - 1) < 0.001]
    out = ["## Findings", "",
           f"- Of {len(both)} layers both tools planned: cosa faster on {len(faster)}, equal (within 0.1%) on "
           f"{len(both) - len(faster) - len(slower)}, slower on {len(slower)}"
           + (f" ({', '.join(r['layer'].name for r in slower)})." if slower else ".")
           + f" cosa is at the bound on {len(at_bound)} of {len(rows)} layers (no mapper can beat it there).",
           f"- AccelForge's model against Tileplan's Timeloop-semantics model, on both tools' plans ({len(gaps)} "
           f"plans): largest difference {max(gaps, default=0):.2%}: the two agree on what the plans cost, so the "
           "comparison is between searches, not models."]
    if reached:
        out.append(
            f"- Where cosa is faster ({', '.join(r['layer'].name for r in reached)}), its plan written as an "
            "AccelForge loop tree gets cosa's cycles from AccelForge's own model: AccelForge can express and "
            "evaluate it, but its mapper (which searches a pruned space of loop placements) did not return it or "
            "anything as fast; which of its pruning rules drops cosa's plan was not isolated. DRAM words by "
            "AccelForge's count (reads are the bound: 10 words a cycle):")
        for r in reached:
            out.append(f"  - {r['layer'].name}: cosa {words(r['af'].get('evaluated_outer_words'))}; AccelForge "
                       f"{words(r['af'].get('best_outer_words'))}")
    return out


def words(counts: dict[str, float] | None) -> str:
    if not counts:
        return "-"
    reads = sum(v for k, v in counts.items() if k.endswith("read"))
    return ", ".join(f"{k} {v:,.0f}" for k, v in sorted(counts.items())) + f" (reads {reads:,.0f})"


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = ("| layer | x | bound | cosa cycles | AccelForge cycles | AccelForge / cosa | AccelForge's latency: of cosa's "
            "plan | of its own | split levels | cosa CPU s | AccelForge CPU s |")
    lines = [
        f"# cosa vs AccelForge 1.0.467 on {args.hw}, judged by Tileplan's Timeloop-semantics model",
        "",
        f"`python bench/accelforge.py --accelforge-python ...` on {platform.machine()} ({os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the end), AccelForge's search capped at {args.af_cpu_cap:.0f} "
        "CPU s per layer (trees kept with --reuse from runs under another cap: a row without a plan names its "
        f"cap), cosa's {args.cosa_time_limit:.0f} s; both latency-only. How the spec and the plans are "
        "translated: the module doc of bench/accelforge.py. Cycles: `tileplan.plan.evaluate(..., "
        "model=\"timeloop\")` of each tool's plan (within 1% of timeloop-model on every accepted reference case); "
        "a ratio above 1 means cosa's plan is faster. AccelForge's own latency is its model's number for its own "
        "plan. Bound: cycles no mapping can beat (compute on every MAC; each DRAM word read and written once at "
        "DRAM's words per cycle); a plan at the bound cannot be beaten. Split levels: levels whose tensors "
        "AccelForge keeps at different depths of its loop tree (not "
        "expressible per level as Timeloop maps are; the best legal boundary is scored).",
        "",
        head,
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    tot = {"cosa": 0.0, "af": 0.0}
    complete = True
    for r in rows:
        c, a = r["cosa"], r["tr"].get("cycles")
        n = r["layer"].count
        if c is None or a is None:
            complete = False
        else:
            tot["cosa"] += c * n
            tot["af"] += a * n
        own, of_cosa = r["af"].get("latency"), r["af"].get("evaluated_latency")
        lines.append(
            f"| {r['layer'].name} | {n} | {r['bound']:,} | {f'{c:,.0f}' if c else 'illegal'} "
            f"| {f'{a:,.0f}' if a else r['af'].get('error', 'illegal')} | {f'{a / c:.3f}' if a and c else '-'} "
            f"| {f'{of_cosa:,.0f}' if of_cosa else '-'} | {f'{own:,.0f}' if own else '-'} "
            f"| {r['tr'].get('split_levels', '-')} | {r['cosa_cpu']:.1f} | {r['af'].get('cpu_s', 0):.0f} |")
    if rows:
        ratio = f"{tot['af'] / tot['cosa']:.3f}" if tot["cosa"] else "-"
        cpu_c = sum(r["cosa_cpu"] for r in rows)
        cpu_a = sum(r["af"].get("cpu_s", 0) for r in rows)
        lines.append(f"| **total (x count)** | | | {tot['cosa']:,.0f} | {tot['af']:,.0f} | **{ratio}** | | | "
                     f"| {cpu_c:.1f} | {cpu_a:.0f} |")
        lines += ["", "Totals over the layers where both tools have a legal plan" + ("." if complete else
                  " (not every layer: see the rows without one).") + " AccelForge CPU s: its search "
                  "(the driver's process time in `map_workload_to_arch`); with its Python start, spec parsing "
                  "and the evaluation of cosa's plan the child processes took "
                  f"{sum(r['af'].get('process_cpu_s', 0) for r in rows):.0f} s in all."]
    lines += ["", *findings(rows)]
    lines += ["", "## Plans (outermost level first; loops outermost first, `X` = spatial)", ""]
    for r in rows:
        lines.append(f"- {r['layer'].name}: cosa `{r['cosa_map']}`")
        lines.append(f"  AccelForge `{r['tr'].get('mapping', r['tr'].get('violations'))}`")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
