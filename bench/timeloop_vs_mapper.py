"""cosa against timeloop-mapper on the fuzzed Timeloop architectures, both judged by real timeloop-model.

For every (architecture, layer) pair of bench/data/timeloop_fuzz (the architectures and layers the differential fuzz
recorded), cosa plans the layer (`mapper: cosa`, `model: timeloop`, latency objective, --cosa-time limit), its map is
exported and run by timeloop-model (on the padded problem when the plan pads: Timeloop has no padding); and
timeloop-mapper searches the same problem on the same file (its keep-sets are the file's own
`architecture_constraints`) for each of the given --seconds, stopped by SIGINT (it then writes its best map so far),
with the search settings of the reference set's mapper cases (bench/data/timeloop_reference/tools/mapper.yaml:
random-pruned, one thread, metrics [delay, energy]). The mapper's cycles and map per pair and budget are recorded in
bench/data/timeloop_fuzz/mapper.jsonl (CI compares today's cosa with them: tests/timeloop_reference/
test_vs_mapper.py) and the table goes to bench/results/timeloop_mapper.md.

    python bench/timeloop_vs_mapper.py --timeloop-bin DIR --seconds 3 30 [--pairs N] [--seconds-sample K]
    python bench/timeloop_vs_mapper.py --timeloop-bin DIR --seconds 30 --missing --shard 1/2   (and 2/2, in parallel)
    python bench/timeloop_vs_mapper.py --merge-shards 2

DIR holds timeloop-model and timeloop-mapper (NVlabs/timeloop@019f107 without Accelergy). --pairs takes the first N
pairs; --seconds-sample runs the longer budgets (all but the first) on every K-th pair only (the machine is shared).
--rejudge rewrites the table from mapper.jsonl and cosa's recorded Timeloop cycles without running anything.
--missing keeps the recorded searches and runs only the budgets of --seconds a pair lacks (cosa is re-planned and
judged for every pair); --shard I/N takes every N-th pair from the I-th and writes mapper.shardI.jsonl, which
--merge-shards N folds back into mapper.jsonl (in the fuzz's pair order) before writing the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "service"))
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "bench/data/timeloop_reference/tools"))

import tlstats  # noqa: E402
from timeloop_fuzz import Timeloop  # noqa: E402

from tileplan.errors import InputError, MappingInfeasible  # noqa: E402
from tileplan.hardware.catalog import load_descriptor  # noqa: E402
from tileplan.interop.timeloop_map import dump_mapping_yaml, to_timeloop_mapping, to_timeloop_problem  # noqa: E402
from tileplan.plan import ScheduleOptions, make_plan  # noqa: E402
from tileplan.problem import Problem  # noqa: E402
from tileplan.workload import parse_layer  # noqa: E402

DATA = REPO / "bench/data/timeloop_fuzz"
MAPPER_YAML = REPO / "bench/data/timeloop_reference/tools/mapper.yaml"
LATENCY = {"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0}


def fuzz_pairs(data: Path) -> list[tuple[str, dict[str, Any]]]:
    """(architecture file, layer) of every pair the fuzz recorded, in its order."""
    seen: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {}
    for line in (data / "cases.jsonl").read_text().splitlines():
        if line.strip():
            c = json.loads(line)
            seen.setdefault((c["arch"], c["layer"]["name"]), (c["arch"], c["layer"]))
    return list(seen.values())


def run_mapper(bin_dir: Path, env: dict[str, str], arch_text: str, prob_text: str, seconds: float) -> dict[str, Any]:
    """timeloop-mapper's best map after `seconds` (SIGINT, as tools/run_mapper.sh) or when its search ends."""
    with tempfile.TemporaryDirectory() as d:
        Path(d, "arch.yaml").write_text(arch_text)
        Path(d, "prob.yaml").write_text(prob_text)
        Path(d, "mapper.yaml").write_text(MAPPER_YAML.read_text())
        t0 = time.perf_counter()
        p = subprocess.Popen([str(bin_dir / "timeloop-mapper"), "arch.yaml", "prob.yaml", "mapper.yaml"], cwd=d,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            out, _ = p.communicate(timeout=seconds)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            try:
                out, _ = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                out, _ = p.communicate()
        wall = time.perf_counter() - t0
        stats, mp = Path(d, "timeloop-mapper.stats.txt"), Path(d, "timeloop-mapper.map.yaml")
        if stats.exists() and mp.exists() and stats.stat().st_size > 0:
            s = tlstats.parse(stats.read_text())
            return {"found": True, "cycles": s["cycles"], "energy_pj": s.get("energy_pj"), "map_yaml": mp.read_text(),
                    "wall_s": round(wall, 2)}
        tail = [ln.strip() for ln in (out or "").splitlines() if ln.strip()]
        return {"found": False, "error": (tail[-1] if tail else f"rc {p.returncode}")[:200], "wall_s": round(wall, 2)}


def run_cosa(tl: Timeloop, arch_text: str, layer_doc: dict[str, Any], cosa_time: float) -> dict[str, Any]:
    hw = load_descriptor(arch_text, name="arch")
    layer = parse_layer(layer_doc)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=cosa_time,
                                                   model="timeloop", objective=LATENCY))
    except (MappingInfeasible, InputError) as exc:
        return {"refused": str(exc), "cpu_s": round(time.process_time() - c0, 3),
                "wall_s": round(time.perf_counter() - t0, 3)}
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    problem = Problem.from_layer(layer)
    if plan.mapping.padded_dims:
        problem = Problem(dims={**problem.dims, **plan.mapping.padded_dims}, stride=problem.stride,
                          dilation=problem.dilation, name=problem.name)
    map_text = dump_mapping_yaml(to_timeloop_mapping(plan.mapping, hw))
    r = tl.run(arch_text, yaml.safe_dump(to_timeloop_problem(problem), sort_keys=False), map_text)
    return {"predicted": plan.metrics.cycles, "timeloop": r.get("cycles") if r["accepted"] else None,
            "timeloop_error": r.get("error"), "padded": bool(plan.mapping.padded_dims), "cpu_s": round(cpu, 3),
            "wall_s": round(wall, 3)}


def judge_mapper_map(tl: Timeloop, arch_text: str, prob_text: str, m: dict[str, Any]) -> None:
    """timeloop-model's own verdict on the mapper's best map, into `m` (model_accepts, model_error): the mapper's
    mapspace and the model's check of a file's loop constraints disagree (a spatial constraint where the map unrolls
    nothing, permutations with unit loops), so a map the mapper reports may be one timeloop-model refuses."""
    if not m.get("found") or "model_accepts" in m:
        return
    r = tl.run(arch_text, prob_text, m["map_yaml"])
    m["model_accepts"] = bool(r["accepted"])
    m["model_error"] = None if r["accepted"] else r["error"]


def _usable(m: dict[str, Any]) -> bool:
    """A mapper map found and (where judged) accepted by timeloop-model."""
    return bool(m.get("found")) and m.get("model_accepts", True)


def merge_shards(data: Path, record: Path, n: int) -> list[dict[str, Any]]:
    """mapper.jsonl with the rows of mapper.shard1..n.jsonl in place of its own (pairs the shards lack keep theirs),
    in the fuzz's pair order; the shard files are removed once merged."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    shards = [record / f"mapper.shard{i}.jsonl" for i in range(1, n + 1)]
    for path in [record / "mapper.jsonl", *shards]:
        for x in path.read_text().splitlines():
            if x.strip():
                r = json.loads(x)
                rows[(r["arch"], r["layer"]["name"])] = r
    ordered = [rows[(a, lay["name"])] for a, lay in fuzz_pairs(data) if (a, lay["name"]) in rows]
    (record / "mapper.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in ordered))
    for path in shards:
        path.unlink()
    return ordered


def table(rows: list[dict[str, Any]], budgets: list[float], header: list[str]) -> str:
    lines = header + ["", "## Summary", "",
                      "| mapper budget | pairs | mapper found a map timeloop-model accepts | cosa <= mapper | cosa <= 1.10x mapper | worst cosa / mapper "
                      "| geomean cosa / mapper |", "|--:|--:|--:|--:|--:|--:|--:|"]
    for s in budgets:
        key = f"{s:g}"
        rs = [r for r in rows if key in r["mapper"]]
        found = [r for r in rs if _usable(r["mapper"][key])]
        ratios = [r["cosa"]["timeloop"] / r["mapper"][key]["cycles"] for r in found if r["cosa"].get("timeloop")]
        no_cosa = sum(1 for r in found if not r["cosa"].get("timeloop"))
        gm = statistics.geometric_mean(ratios) if ratios else float("nan")
        lines.append(f"| {key} s | {len(rs)} | {len(found)} | {sum(x <= 1 + 1e-9 for x in ratios)}/{len(found)} "
                     f"({sum(x <= 1 + 1e-9 for x in ratios) / max(1, len(found)):.1%}) "
                     f"| {sum(x <= 1.10 for x in ratios)}/{len(found)} | {max(ratios, default=float('nan')):.3f} "
                     f"| {gm:.3f} |" + (f" ({no_cosa} without cosa's cycles)" if no_cosa else ""))
    for s in budgets:
        key = f"{s:g}"
        judged = [r["mapper"][key] for r in rows if key in r["mapper"] and "model_accepts" in r["mapper"][key]]
        if judged:
            lines.append(f"\nmapper {key} s: timeloop-model refuses {sum(not m['model_accepts'] for m in judged)} of the "
                         f"{len(judged)} maps it found (they break the file's loop constraints as the model checks them)")
    refused = [r for r in rows if "refused" in r["cosa"]]
    rejected = [r for r in rows if "refused" not in r["cosa"] and r["cosa"].get("timeloop") is None]
    # (rows planned before cosa's CPU time was recorded hold only the wall seconds, under "cpu_s")
    timed = "CPU" if all("wall_s" in r["cosa"] for r in rows) else "wall"
    cpu = [r["cosa"]["cpu_s"] for r in rows]
    wall = [r["cosa"].get("wall_s", r["cosa"]["cpu_s"]) for r in rows]
    lines += ["", f"cosa: {len(rows)} pairs, refused {len(refused)}, maps Timeloop rejected {len(rejected)}; "
              f"{timed} seconds per layer median {statistics.median(cpu):.2f}, p95 "
              f"{sorted(cpu)[int(0.95 * (len(cpu) - 1))]:.2f}" + (
                  f"; wall seconds median {statistics.median(wall):.2f}, p95 "
                  f"{sorted(wall)[int(0.95 * (len(wall) - 1))]:.2f}" if timed == "CPU" else "")
              + " (shared machine).", ""]
    lines += ["## Pairs where cosa is slower than a mapper budget", "",
              "| architecture | layer | cosa (Timeloop) | " + " | ".join(f"mapper {s:g} s" for s in budgets) + " |",
              "|---|---|--:|" + "--:|" * len(budgets)]
    for r in rows:
        c = r["cosa"].get("timeloop")
        ms = [r["mapper"].get(f"{s:g}") for s in budgets]
        if c is None or any(m and _usable(m) and c > m["cycles"] for m in ms):
            cells = [("" if m is None else (f"{m['cycles']:,} ({c / m['cycles']:.3f}x)" if _usable(m) and c
                      else ("none" if not m["found"] else f"{m['cycles']:,}" + (
                          "" if _usable(m) else " (timeloop-model refuses it)")))) for m in ms]
            lines.append(f"| {r['arch']} | {r['layer']['name']} | {'' if c is None else f'{c:,}'} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--timeloop-bin", help="folder with timeloop-model and timeloop-mapper")
    ap.add_argument("--seconds", type=float, nargs="+", default=[3.0, 30.0])
    ap.add_argument("--pairs", type=int, default=0, help="only the first N pairs (0: all)")
    ap.add_argument("--seconds-sample", type=int, default=1, help="longer budgets on every K-th pair only")
    ap.add_argument("--cosa-time", type=float, default=3.0)
    ap.add_argument("--rejudge", action="store_true")
    ap.add_argument("--judge-mapper", action="store_true", help=(
        "run timeloop-model on the recorded mapper maps not yet judged (model_accepts in mapper.jsonl), no new "
        "searches, and write the table"))
    ap.add_argument("--reuse-mapper", action="store_true", help=(
        "re-plan with today's cosa and run its maps through timeloop-model, keeping the mapper searches recorded in "
        "mapper.jsonl (for the pairs and budgets it has)"))
    ap.add_argument("--missing", action="store_true", help=(
        "keep the recorded mapper searches; run only the budgets of --seconds a pair lacks (cosa re-planned)"))
    ap.add_argument("--shard", default=None, help="I/N: every N-th pair from the I-th, into mapper.shardI.jsonl")
    ap.add_argument("--merge-shards", type=int, default=0, help="fold mapper.shard1..N.jsonl into mapper.jsonl")
    ap.add_argument("--data", default=str(DATA), help="the fuzz data: its architectures and layers")
    ap.add_argument("--record", default=None, help="where mapper.jsonl is written (and read by --rejudge); default --data")
    ap.add_argument("--out", default=str(REPO / "bench/results/timeloop_mapper.md"))
    args = ap.parse_args()
    data = Path(args.data)
    record = Path(args.record) if args.record else data
    record.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    load_start = " ".join(f"{x:.1f}" for x in os.getloadavg())
    rows: list[dict[str, Any]]
    if args.merge_shards:
        rows = merge_shards(data, record, args.merge_shards)
    elif args.rejudge or args.judge_mapper:
        rows = [json.loads(x) for x in (record / "mapper.jsonl").read_text().splitlines() if x.strip()]
        if args.judge_mapper:
            if not args.timeloop_bin:
                ap.error("--judge-mapper needs --timeloop-bin")
            tl = Timeloop(args.timeloop_bin)
            for r in rows:
                prob_text = yaml.safe_dump(to_timeloop_problem(Problem.from_layer(parse_layer(r["layer"]))),
                                           sort_keys=False)
                for m in r["mapper"].values():
                    judge_mapper_map(tl, (data / r["arch"]).read_text(), prob_text, m)
            (record / "mapper.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    else:
        if not args.timeloop_bin:
            ap.error("--timeloop-bin is required unless --rejudge")
        tl = Timeloop(args.timeloop_bin)
        pairs = fuzz_pairs(data)
        if args.pairs:
            pairs = pairs[: args.pairs]
        before: dict[tuple[str, str], dict[str, Any]] = {}
        if args.reuse_mapper or args.missing:
            for x in (record / "mapper.jsonl").read_text().splitlines():
                if x.strip():
                    r = json.loads(x)
                    before[(r["arch"], r["layer"]["name"])] = r["mapper"]
            pairs = [p for p in pairs if (p[0], p[1]["name"]) in before or args.missing]
        out_file = record / "mapper.jsonl"
        if args.shard:
            i, n = (int(x) for x in args.shard.split("/"))
            pairs = pairs[i - 1::n]
            out_file = record / f"mapper.shard{i}.jsonl"
        rows = []
        for k, (arch_rel, layer_doc) in enumerate(pairs):
            arch_text = (data / arch_rel).read_text()
            problem = Problem.from_layer(parse_layer(layer_doc))
            prob_text = yaml.safe_dump(to_timeloop_problem(problem), sort_keys=False)
            cosa = run_cosa(tl, arch_text, layer_doc, args.cosa_time)
            mapper = before.get((arch_rel, layer_doc["name"]), {})
            for j, s in enumerate(args.seconds if not args.reuse_mapper else []):
                if j > 0 and k % args.seconds_sample and not args.missing:
                    continue
                if args.missing and f"{s:g}" in mapper:
                    continue
                mapper[f"{s:g}"] = run_mapper(tl.bin.parent, tl.env, arch_text, prob_text, s)
            for m in mapper.values():
                judge_mapper_map(tl, arch_text, prob_text, m)
            rows.append({"arch": arch_rel, "layer": layer_doc, "cosa": cosa, "mapper": mapper})
            with open(out_file, "a" if k else "w") as f:  # as it goes: a long run keeps what it did
                f.write(json.dumps(rows[-1], sort_keys=True) + "\n")
            print(f"{arch_rel} {layer_doc['name']}: cosa {cosa.get('timeloop') or cosa.get('refused')} "
                  + " ".join(f"{s}s={m.get('cycles')}" for s, m in mapper.items()), flush=True)
    if args.shard:
        return 0  # a shard's rows are folded in by --merge-shards, which writes the table
    budgets = sorted({float(s) for r in rows for s in r["mapper"]})
    command = f"--merge-shards {args.merge_shards}" if args.merge_shards else "--rejudge" if args.rejudge else \
        "--timeloop-bin DIR --judge-mapper" if args.judge_mapper else \
        f"--reuse-mapper --cosa-time {args.cosa_time:g} (cosa re-planned; mapper searches as recorded)" \
        if args.reuse_mapper else (
        f"--timeloop-bin DIR --seconds {' '.join(f'{s:g}' for s in args.seconds)} --seconds-sample "
        f"{args.seconds_sample} --cosa-time {args.cosa_time:g}" + (f" --pairs {args.pairs}" if args.pairs else "")
        + (" --missing (mapper searches as recorded where a pair had them; cosa re-planned)" if args.missing else ""))
    header = ["# cosa against timeloop-mapper on the fuzzed architectures, both judged by timeloop-model", "",
              f"`python bench/timeloop_vs_mapper.py {command}` on {platform.machine()} ({os.cpu_count()} cores, shared "
              f"with other jobs; load average {load_start} at the start, "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end), {time.strftime('%Y-%m-%d')}, {time.perf_counter() - t0:.0f} s; NVlabs/timeloop@019f107. "
              "cosa: latency objective, its cycles are timeloop-model's on cosa's exported map (on the padded problem "
              "where the plan pads). timeloop-mapper: random-pruned, one thread, metrics [delay, energy] "
              "(bench/data/timeloop_reference/tools/mapper.yaml), stopped by SIGINT after the budget; its cycles are "
              "its best map's. Ratios are cosa / mapper (<= 1: cosa at least as fast)."]
    text = table(rows, budgets, header)
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
