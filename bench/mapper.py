"""Mapper benchmark: ResNet-50 and BERT-base on gemmini-16x16 and simba, every mapper.

Per layer: cycles by the cost model for each mapper, cosa's speedup over the baseline, utilisation vs ideal,
and cosa's solve time; per network: count-weighted totals and solve time median / p95 / max.
Writes bench/results/mapper.md.   Run: .venv/bin/python bench/mapper.py [--quick] [--hardware NAME...] [--against REV]
(`--against REV` measures cosa of an earlier release, a git revision of this repository, in the same run and
compares plans under today's cost model and CPU seconds per layer; `--record-reference` stores this run as the
reference used when no release is named.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "service"))

from tileplan.check import check  # noqa: E402
from tileplan.cost import evaluate_mapping  # noqa: E402
from tileplan.cost.gemmini import (  # noqa: E402
    call_features,
    cycles_from_calls,
    effective_dram_bandwidth,
    execution_from_mapping,
    nominal_dram_bandwidth,
)
from tileplan.cost.params import CostParams  # noqa: E402
from tileplan.errors import TileplanError  # noqa: E402
from tileplan.hardware.catalog import get_hardware  # noqa: E402
from tileplan.mappers.base import MapperOptions, available_mappers, get_mapper  # noqa: E402
from tileplan.mapping import Mapping  # noqa: E402
from tileplan.plan import executor_for  # noqa: E402
from tileplan.problem import Problem  # noqa: E402
from tileplan.workload import load_workload  # noqa: E402

WORKLOADS = [REPO / "examples/workloads/resnet50_unique.yaml", REPO / "examples/workloads/bert_base_matmuls.yaml"]
HARDWARE = ["gemmini-16x16", "simba"]
# simba is scored by Timeloop's semantics and compared with its random baseline, issue 17's test: both mappers
# optimise cycles alone there, so the cycle ratio compares searches, not trade-offs between cycles and energy
LATENCY_ONLY = {"simba"}
# `--objective default`: every hardware under the default weights, what a user of the service gets (on simba the
# weighted MIP and the latency-only re-solve of cosa.mapper both run, which the latency-only bench never times)
OBJECTIVES = ("bench", "default")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def latency_only(objective: str) -> set[str]:
    """The bench hardware planned for latency alone under `--objective` (none under the default weights)."""
    return LATENCY_ONLY if objective == "bench" else set()


def run(hw_name: str, workload: Path, mappers: list[str], time_limit: float, objective_mode: str = "bench") -> tuple[str, dict]:
    from tileplan.mappers.base import Objective

    hw = get_hardware(hw_name)
    lat_only = hw_name in latency_only(objective_mode)
    objective = Objective(latency=1, energy=0, memory_utilization=0) if lat_only else Objective()
    network, layers = load_workload(workload)
    rows = []
    totals = {m: 0.0 for m in mappers}
    ideal_total = 0.0
    times: dict[str, list[float]] = {m: [] for m in mappers}
    cpu: dict[str, list[float]] = {m: [] for m in mappers}  # this process's CPU seconds: what other load leaves alone
    illegal = 0
    load_start = os.getloadavg()[0]  # CPU seconds still stretch on a loaded machine (caches, turbo): say how loaded
    plans: list = []  # (problem, count, cosa mapping)
    per_layer: dict[str, dict[str, float]] = {}  # cosa's cycles, wall and CPU seconds per layer
    for layer in layers:
        problem = Problem.from_layer(layer)
        res = {}
        for m in mappers:
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                out = get_mapper(m).map(problem, hw, MapperOptions(time_limit_s=time_limit, objective=objective))
            except TileplanError as exc:
                res[m] = None
                if "too" not in str(exc) and "not apply" not in str(exc) and "applicable" not in str(exc):
                    print(f"  {m} on {layer.name}: {exc}", file=sys.stderr)
                continue
            dt = time.perf_counter() - t0
            times[m].append(dt)
            cpu[m].append(time.process_time() - c0)
            if check(problem, hw, out.mapping):
                illegal += 1
                res[m] = None
                continue
            # gemmini-auto's tiles run as Gemmini's library (the baseline), every other plan as Tileplan's code
            # unless the mapper says otherwise (cosa hands back the hand-written tiling, as the library runs it,
            # when its own plan would be slower), as tileplan.plan.run_mapper costs plans
            met = evaluate_mapping(problem, hw.resolve(out.mapping.dataflow), out.mapping,
                                   out.mapping.executor or executor_for(m))
            res[m] = (met.cycles, dt, met.utilization)
            if m == "cosa":
                plans.append((problem, layer.count, out.mapping))
                per_layer[layer.name] = {"cycles": met.cycles, "seconds": dt, "cpu": cpu[m][-1],
                                         "mapping": out.mapping.model_dump(mode="json")}
        ideal = problem.macs / hw.pe_array.macs
        ideal_total += ideal * layer.count
        for m in mappers:
            if res[m] is not None and totals[m] is not None:
                totals[m] += res[m][0] * layer.count
            elif m in totals:
                totals[m] = None  # a mapper that skipped a layer has no network total
        rows.append((layer, ideal, res))
    base = "gemmini-auto" if "gemmini-auto" in mappers and totals.get("gemmini-auto") else "random"
    head = ["layer", "x", "ideal"] + [f"{m} cycles" for m in mappers] + [f"cosa vs {base}", "cosa util", "cosa s"]
    title = f"### {network} on {hw_name}" + (" (latency-only objective)" if lat_only else " (default objective)")
    lines = [title, "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for layer, ideal, res in rows:
        cells = [layer.name, str(layer.count), f"{ideal:,.0f}"]
        cells += [f"{res[m][0]:,.0f}" if res[m] else "-" for m in mappers]
        c, b = res.get("cosa"), res.get(base)
        cells += [f"{b[0] / c[0]:.2f}x" if c and b else "-", f"{c[2]:.0%}" if c else "-", f"{c[1]:.2f}" if c else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    tot_cells = ["**total (x count)**", "", f"{ideal_total:,.0f}"]
    tot_cells += [f"{totals[m]:,.0f}" if totals[m] else "-" for m in mappers]
    c, b = totals.get("cosa"), totals.get(base)
    tot_cells += [f"**{b / c:.2f}x**" if c and b else "-", f"{ideal_total / c:.0%}" if c else "-", ""]
    lines.append("| " + " | ".join(tot_cells) + " |")
    lines.append("")
    lines.append("Solve time per layer (s): " + "; ".join(
        f"{m} median {statistics.median(times[m]):.2f} / p95 {pct(times[m], 0.95):.2f} / max {max(times[m]):.2f}"
        for m in mappers if times[m]))
    if cpu.get("cosa"):
        c = cpu["cosa"]
        lines.append(f"cosa CPU seconds per layer (this process only, whatever else loads the machine): median "
                     f"{statistics.median(c):.2f} / p95 {pct(c, 0.95):.2f} / max {max(c):.2f} (1-minute load average "
                     f"{load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, {os.cpu_count()} cores)")
    lines.append(f"Illegal plans: {illegal}.")
    if plans and totals.get("gemmini-auto"):
        lines += ["", *execution_ablation(hw, plans, totals["gemmini-auto"])]
    summary = {"totals": totals, "ideal": ideal_total, "times": times, "illegal": illegal, "cosa": per_layer}
    return "\n".join(lines) + "\n", summary


def execution_ablation(hw, plans: list, baseline_total: float) -> list[str]:  # type: ignore[no-untyped-def]
    """cosa's plans (unchanged) costed as three executions: Gemmini's library (every call reloads its tiles),
    Tileplan's code keeping the tiles consecutive calls share, and Tileplan's code as it is (also folding kernel
    columns into the array rows for few-channel convolutions). Shows what each part of the execution is worth."""
    params = CostParams.for_descriptor(hw)
    variants = {
        "as Gemmini's library runs them": lambda p, a, m: execution_from_mapping(p, a, m, "library"),
        "Tileplan's code, tiles kept between calls": lambda p, a, m: dataclasses.replace(
            execution_from_mapping(p, a, m, "tileplan"), fold=1),
        "Tileplan's code, also folding kernel columns (what plans are costed as)": lambda p, a, m: execution_from_mapping(
            p, a, m, m.executor or "tileplan"),
    }
    lines = ["cosa's plans costed as three executions (the same mappings; gemmini-auto as Gemmini's library):", "",
             "| execution of cosa's plans | total cycles | vs gemmini-auto |", "|---|---:|---:|"]
    for name, change in variants.items():
        total = 0.0
        for problem, count, mp in plans:
            arch = hw.resolve(mp.dataflow)
            e = change(problem, arch, mp)
            total += count * cycles_from_calls(call_features(e, nominal_dram_bandwidth(arch)), params).cycles
        lines.append(f"| {name} | {total:,.0f} | {baseline_total / total:.2f}x |")
    bound = sum(count * lower_bound(hw, problem, params) for problem, count, _ in plans)
    lines.append(f"| no plan can beat (every MAC on a full array, each weight block preloaded once, weights and "
                 f"outputs moved once at the effective DRAM rate) | {bound:,.0f} | {baseline_total / bound:.2f}x |")
    return lines


def lower_bound(hw, problem: Problem, params: CostParams) -> float:  # type: ignore[no-untyped-def]
    """Cycles below which no plan of the layer can run under the calibrated model, whatever its tiles and order:
    the larger of (the MACs on a full array + one preload of every DIM x DIM weight block) and (the weights and
    outputs crossing DRAM once at the effective rate). Issue floors, DMA requests, inputs and overlap losses are
    left out, so it is below what any plan can reach."""
    dim = hw.pe_array.rows
    d = problem.dims
    blocks = d["G"] * -(-d["K"] // dim) * -(-d["C"] // dim) * d["R"] * d["S"]
    compute = problem.macs / hw.pe_array.macs + blocks * params.preload_dims * dim
    arch = hw.resolve("weight_stationary")
    bw = float(effective_dram_bandwidth(nominal_dram_bandwidth(arch), params.as_dict()))
    # weights and outputs cross DRAM at least once (inputs too, but their counted extent includes zero padding)
    moved = problem.tensor_elements("W") * arch.input_bytes + problem.tensor_elements("O") * arch.output_bytes
    return max(compute, moved / bw)


SMALL_LAYERS = [
    {"name": "mm_4x8x4", "op": "matmul", "M": 4, "K": 8, "N": 4},
    {"name": "mm_3x12x10", "op": "matmul", "M": 3, "K": 12, "N": 10},
    {"name": "conv_4_6_1x1_3x3", "op": "conv2d", "in_channels": 4, "out_channels": 6, "in_h": 3, "in_w": 3},
]


def small_vs_exhaustive(hw_name: str) -> str:
    """cosa against the true optimum (exhaustive search) where the space is small enough to enumerate;
    latency-only objective so both optimise cycles."""
    from tileplan.mappers.base import Objective
    from tileplan.workload import parse_layer

    hw = get_hardware(hw_name)
    obj = Objective(latency=1, energy=0, memory_utilization=0)
    lines = [f"### cosa vs exhaustive on {hw_name} (small layers, latency objective)", "",
             "| layer | exhaustive cycles | candidates | exhaustive s | cosa cycles | cosa / optimum |", "|---|---|---|---|---|---|"]
    for spec in SMALL_LAYERS:
        layer = parse_layer(spec)
        problem = Problem.from_layer(layer)
        t0 = time.perf_counter()
        ex = get_mapper("exhaustive").map(problem, hw, MapperOptions(objective=obj, time_limit_s=120))
        te = time.perf_counter() - t0
        co = get_mapper("cosa").map(problem, hw, MapperOptions(objective=obj))
        ce = evaluate_mapping(problem, hw.resolve(ex.mapping.dataflow), ex.mapping, "tileplan").cycles
        cc = evaluate_mapping(problem, hw.resolve(co.mapping.dataflow), co.mapping, "tileplan").cycles
        lines.append(f"| {layer.name} | {ce:,.0f} | {ex.solver.candidates:,} ({ex.solver.status}) | {te:.0f} | {cc:,.0f} | {cc / ce:.3f} |")
    return "\n".join(lines) + "\n"


REFERENCE = REPO / "bench/results/mapper_reference.json"


def cosa_alone(service: Path, time_limit: float, label: str, hardware: list[str] = HARDWARE,
               objective: str = "bench") -> dict[str, dict]:
    """cosa's plans and solve times from the package in `service`, each layer solved by `bench/mapper_release.py`
    in a fresh process that does nothing else (the bench's own process also runs the baselines and holds every
    result, which costs cosa CPU time: garbage collection over more objects, shared caches)."""
    cmd = [sys.executable, str(REPO / "bench/mapper_release.py"), str(service),
           *map(str, WORKLOADS), "--hardware", *hardware, "--latency-only", *sorted(latency_only(objective)),
           "--time-limit", str(time_limit)]
    done = subprocess.run(cmd, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "TILEPLAN_CATALOG_DIR"})
    if done.returncode:
        raise SystemExit(f"{label}: cosa failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


def release_reference(rev: str, time_limit: float, hardware: list[str] = HARDWARE,
                      objective: str = "bench") -> dict[str, dict]:
    """cosa's plans and solve times from release `rev` of this repository, measured now, on this machine: its
    `service/` and `hw_catalog/` exported by `git archive` and run alone (`cosa_alone`)."""
    import io
    import tarfile
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tileplan-release-") as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "service", "hw_catalog"], capture_output=True, check=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        return cosa_alone(Path(tmp) / "service", time_limit, f"release {rev}", hardware, objective)


def rescored(reference: dict[str, dict]) -> dict[str, dict]:
    """The reference's cosa cycles under today's cost model: each layer's recorded mapping scored again as this run
    scores its own (the mapping's executor, else Tileplan's code), so a model change moves both sides alike. Layers
    recorded without a mapping (older reference files) keep their recorded cycles."""
    problems = {}
    for wl in WORKLOADS:
        _, layers = load_workload(wl)
        problems[wl.stem] = {layer.name: Problem.from_layer(layer) for layer in layers}
    out: dict[str, dict] = {}
    for net, layers in reference.items():
        wl_name, hw_name = net.split(" on ")
        hw = get_hardware(hw_name)
        out[net] = {}
        for name, rec in layers.items():
            rec = dict(rec)
            if "mapping" in rec and name in problems.get(wl_name, {}):
                mapping = Mapping.model_validate(rec["mapping"])
                rec["cycles"] = evaluate_mapping(problems[wl_name][name], hw.resolve(mapping.dataflow), mapping,
                                                 mapping.executor or executor_for("cosa")).cycles
                rec["rescored"] = True
            out[net][name] = rec
    return out


def against_reference(results: dict[str, dict], reference: dict[str, dict], label: str) -> str:
    """This run's cosa against a reference (an earlier release, same machine): plan quality (cycles per layer,
    which must stay within 1%) and solve time (median / p95 per layer, as ratios)."""
    reference, results = rescored(reference), rescored(results)
    all_rescored = all(rec.get("rescored") for layers in reference.values() for rec in layers.values())
    quality = ("both sides' plans scored by today's cost model (the reference's recorded mappings re-scored), so the "
               "ratio compares plans, not models" if all_rescored else
               "the reference's recorded cycles (it holds no mappings to re-score): where the cost model changed "
               "since, the ratio mixes plan and model changes")
    lines = [f"### cosa now vs {label}", "",
             f"Plan quality: cosa's cycles per layer against the reference's, {quality}; must stay within 1%. Solve "
             "time: CPU seconds of the solving process per layer (wall seconds where the reference has no CPU "
             "times): on a shared machine the wall clock follows whatever else runs, CPU time much less.", "",
             "| network | layers | worst cycles now / ref | total cycles now / ref | layers > 1% worse | layers > 1% "
             "better | median s now (ref) | now / ref | p95 s now (ref) | now / ref | wall median / p95 s now (ref) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    moved: list[str] = []  # the layers behind the > 1% columns, so a regression names itself
    by_hw: dict[str, list[tuple[dict, dict]]] = {}  # every layer of each hardware, for its all-networks row

    def row(label: str, pairs: list[tuple[dict, dict]]) -> str:
        ratios = [now["cycles"] / ref["cycles"] for now, ref in pairs]
        total = sum(now["cycles"] for now, _ in pairs) / sum(ref["cycles"] for _, ref in pairs)
        worse, better = sum(r > 1.01 for r in ratios), sum(r < 0.99 for r in ratios)
        clock = "cpu" if all("cpu" in now and "cpu" in ref for now, ref in pairs) else "seconds"
        now_t, ref_t = [now[clock] for now, _ in pairs], [ref[clock] for _, ref in pairs]
        med, med_ref = statistics.median(now_t), statistics.median(ref_t)
        p95, p95_ref = pct(now_t, 0.95), pct(ref_t, 0.95)
        wall, wall_ref = [now["seconds"] for now, _ in pairs], [ref["seconds"] for _, ref in pairs]
        return (f"| {label} | {len(pairs)} | {max(ratios):.4f} | {total:.4f} | {worse} | {better} | "
                f"{med:.2f} ({med_ref:.2f}) | {med / med_ref:.2f} | {p95:.2f} ({p95_ref:.2f}) | {p95 / p95_ref:.2f} | "
                f"{statistics.median(wall):.2f} / {pct(wall, 0.95):.2f} ({statistics.median(wall_ref):.2f} / "
                f"{pct(wall_ref, 0.95):.2f}) |")

    for net, layers in results.items():
        ref = reference.get(net)
        if not ref:
            continue
        common = [name for name in layers if name in ref]
        pairs = [(layers[n], ref[n]) for n in common]
        moved += [f"- {net}, {n}: {now['cycles'] / old['cycles']:.4f} ({now['cycles']:,.0f} vs {old['cycles']:,.0f} "
                  "cycles)" for n, (now, old) in zip(common, pairs) if not 0.99 <= now["cycles"] / old["cycles"] <= 1.01]
        by_hw.setdefault(net.split(" on ")[1], []).extend(pairs)
        lines.append(row(net, pairs))
    for hw_name, pairs in by_hw.items():
        if sum(net.endswith(f" on {hw_name}") for net in results) > 1:  # (issue 15 asks per layer of a hardware)
            lines.append(row(f"**all layers on {hw_name}**", pairs))
    if moved:
        lines += ["", "Layers more than 1% away from the reference (cycles now / ref):", *moved]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="cosa and the baseline only")
    ap.add_argument("--time-limit", type=float, default=10.0)
    ap.add_argument("--out", help="default bench/results/mapper.md (mapper_default_objective.md under "
                    "--objective default)")
    ap.add_argument("--objective", choices=OBJECTIVES, default="bench",
                    help="bench: latency only on simba (issue 17's comparison with random), the default weights "
                    "elsewhere; default: the default weights (latency 0.6, energy 0.3, memory 0.1) on every "
                    "hardware, as the service plans; --against then measures the release under them too")
    ap.add_argument("--reference", default=str(REFERENCE),
                    help="cosa's per-layer cycles and seconds of an earlier release, compared with this run's")
    ap.add_argument("--record-reference", action="store_true", help="write this run's cosa results as the reference")
    ap.add_argument("--against", metavar="REV",
                    help="measure release REV (a git revision of this repository) in this run and compare with it "
                    "instead of the stored reference")
    ap.add_argument("--hardware", nargs="+", choices=HARDWARE, default=HARDWARE, metavar="NAME",
                    help=f"run only on these bench hardware ({', '.join(HARDWARE)}; default: all of them)")
    ap.add_argument("--profile", action="store_true",
                    help="where cosa's time goes (cProfile by phase) on every bench layer; writes mapper_profile.md")
    args = ap.parse_args()
    if args.record_reference and (args.hardware != HARDWARE or args.objective != "bench"):
        ap.error("--record-reference records every bench hardware under the bench's objectives; drop --hardware "
                 "and --objective")
    if args.out is None:
        args.out = str(REPO / "bench/results" / ("mapper.md" if args.objective == "bench" else
                                                 "mapper_default_objective.md"))
    if args.profile:
        from mapper_profile import profile_main

        # (the profile plans under the default objective on every hardware, whatever --objective says)
        return profile_main(args.hardware, WORKLOADS, args.time_limit)
    wanted = ["cosa", "gemmini-auto", "random", "exhaustive"]
    mappers = [m for m in wanted if m in available_mappers()]
    if args.quick:
        mappers = [m for m in mappers if m in ("cosa", "gemmini-auto")]
    parts = [
        "# Mapper benchmark",
        "",
        f"`python bench/mapper.py{' --quick' if args.quick else ''}"
        f"{' --hardware ' + ' '.join(args.hardware) if args.hardware != HARDWARE else ''}"
        f"{' --objective ' + args.objective if args.objective != 'bench' else ''}"
        f"{f' --against {args.against}' if args.against else ''}` on {platform.machine()} ({os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d')}. Cycles by Tileplan's cost model (`tileplan.cost`: calibrated Gemmini model on "
        "gemmini-16x16, timeloop-model's semantics on simba, which is CoSA's Simba as Timeloop reads it); "
        + ("default objective (latency 0.6, energy 0.3, memory 0.1) on gemmini-16x16, latency only on simba"
           if args.objective == "bench" else "default objective (latency 0.6, energy 0.3, memory 0.1) on every "
           "hardware, as the service plans")
        + "; `random` = best of 200 legal random mappings under the same objective. Speedup = baseline cycles / "
        "cosa cycles.",
        "",
    ]
    results: dict[str, dict] = {}
    for hw_name in args.hardware:
        for wl in WORKLOADS:
            # Exhaustive search refuses every layer of these networks (> 50,000 candidates); its comparison
            # is on small layers below.
            ms = [m for m in mappers if m != "exhaustive" and not (m == "gemmini-auto" and not hw_name.startswith("gemmini"))]
            text, summary = run(hw_name, wl, ms, args.time_limit, args.objective)
            results[f"{wl.stem} on {hw_name}"] = summary["cosa"]
            print(text)
            parts.append(text)
    if args.record_reference:
        Path(args.reference).write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    if args.against:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.against], capture_output=True,
                             text=True, check=True).stdout.strip()
        # both sides measured the same way, each in a process of its own running cosa alone
        ref = release_reference(args.against, args.time_limit, args.hardware, args.objective)
        now = cosa_alone(REPO / "service", args.time_limit, "this tree", args.hardware, args.objective)
        text = against_reference(now, ref, f"release {args.against} ({sha}), measured in this run, both sides in "
                                 "processes running cosa alone (`bench/mapper_release.py`)"
                                 + (", default objective on every hardware" if args.objective == "default" else ""))
        print(text)
        parts.append(text)
    elif Path(args.reference).exists() and not args.record_reference and args.objective == "bench":
        # (the stored reference holds plans under the bench's objectives: under others it would compare trade-offs)
        text = against_reference(results, json.loads(Path(args.reference).read_text()),
                                 "the reference release (`bench/results/mapper_reference.json`)")
        print(text)
        parts.append(text)
    if not args.quick:
        text = small_vs_exhaustive("gemmini-16x16")
        print(text)
        parts.append(text)
    Path(args.out).write_text("\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
