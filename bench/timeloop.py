"""Tileplan against timeloop-model, on the recorded reference set (bench/data/timeloop_reference).

Re-measures the tables of that folder's README with the current code:
1. agreement per architecture: Tileplan's verdict on every recorded map (`timeloop_verdict`) against Timeloop's,
   and on accepted maps its Timeloop-semantics cycles and energy against timeloop-model's;
2. acceptance per source: today's cosa and random plans for the 40 layers on the 4 files, exported as bundles
   (padded problem, mesh splits, the source's structure) and judged by Timeloop's rules (`timeloop_verdict`,
   which agrees with timeloop-model on every recorded case);
3. cosa vs timeloop-mapper and vs random: Timeloop-semantics cycles of today's cosa plans (latency-only objective)
   against the recorded timeloop-mapper maps' timeloop-model cycles on the same layer, and against the best of
   200 random mappings (seed 1) scored the same way.
4. with `--timeloop-bin DIR` (a build of NVlabs/timeloop at commit 019f107, without Accelergy): cosa's plans for
   ResNet-50's 24 unique layers on the Simba file, run through real timeloop-model.
Writes bench/results/timeloop.md.   Run: .venv/bin/python bench/timeloop.py [--archs simba_arch_legacy,...]
[--timeloop-bin DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "service"))

from tileplan.cost.timeloop_energy import block_access_pj, mac_pj  # noqa: E402
from tileplan.hardware.catalog import load_descriptor  # noqa: E402
from tileplan.hardware.model import DTYPE_BITS  # noqa: E402
from tileplan.interop.timeloop_map import timeloop_verdict, to_timeloop_bundle  # noqa: E402
from tileplan.interop.timeloop_reference import judge, load_cases  # noqa: E402
from tileplan.plan import ScheduleOptions, make_plan  # noqa: E402
from tileplan.problem import Problem  # noqa: E402
from tileplan.workload import parse_layer  # noqa: E402

DATA = REPO / "bench/data/timeloop_reference"
ARCHS = ["simba_arch_legacy", "gemmini_arch_v03", "gemmini_arch_legacy", "diannao_arch_v02"]


def agreement(cases: list[dict]) -> str:
    by: dict[str, list] = defaultdict(list)
    for case in cases:
        j = judge(DATA, case)
        by[j.arch].append(j)
    lines = [
        "## 1. Agreement with timeloop-model on the recorded maps",
        "",
        "Verdict: Tileplan calls the map invalid exactly when Timeloop rejected it. Cycles and energy: accepted maps, "
        "Tileplan's Timeloop-semantics model (`model: timeloop`) / timeloop-model. Energy: Timeloop's built-in "
        "table (the reference runs had no Accelergy) priced on each level's geometry (`cost/timeloop_energy.py`: "
        "array size, access width, block and cluster sizes, DRAM; no network, address-generation or reduction "
        "energy, as in Timeloop's table) times the per-level counts, which equal timeloop-model's.",
        "",
        "| arch | cases | verdicts agree | accepted | cycles within 5% | within 1% | max abs(TP/TL-1) cycles "
        "| energy within 15% | within 0.01% | max abs(TP/TL-1) energy |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for arch in ARCHS:
        js = by[arch]
        acc = [j for j in js if j.case["timeloop"]["accepted"]]
        cyc = [j.cycle_ratio for j in acc if j.cycle_ratio is not None]
        en = [j.energy_ratio for j in acc if j.energy_ratio is not None]
        lines.append(
            f"| {arch} | {len(js)} | {sum(j.agrees for j in js)}/{len(js)} | {len(acc)} "
            f"| {sum(abs(r - 1) <= 0.05 for r in cyc)}/{len(acc)} | {sum(abs(r - 1) <= 0.01 for r in cyc)}/{len(acc)} "
            f"| {max(abs(r - 1) for r in cyc):.3f} | {sum(abs(r - 1) <= 0.15 for r in en)}/{len(acc)} "
            f"| {sum(abs(r - 1) <= 1e-4 for r in en)}/{len(acc)} | {max(abs(r - 1) for r in en):.1e} |"
        )
    return "\n".join(lines) + "\n"


def energy_table() -> str:
    """The per-access energies the Timeloop-semantics model charges on each file (Timeloop's built-in table on the
    level's geometry): what Accelergy's plug-ins would replace, had the reference runs used them."""
    lines = [
        "### Energy per access, as charged (Timeloop's built-in table)",
        "",
        "Per level: words per access (block), instances per physical array (cluster), rows x bits of that array, and "
        "pJ per access and per word (an access serves a whole cluster); per MAC: (bits/16)^2 pJ. Network transfers, "
        "address generation and reductions cost nothing in this table. With Accelergy (CACTI-like SRAM, table-based "
        "DRAM and MAC plug-ins) the figures would differ, the action counts not.",
        "",
        "| arch | level | block | cluster | array (rows x bits) | pJ / access | pJ / word |",
        "|---|---|--:|--:|---|--:|--:|",
    ]
    for arch in ARCHS:
        hw = load_descriptor((DATA / "archs" / f"{arch}.yaml").read_text(), name=arch)
        for lv in hw.resolve().levels:
            pj = block_access_pj(lv)[0]
            bits = round(lv.word_bytes * 8)
            if lv.capacity is None:
                shape = "DRAM"
            else:
                entries = round(lv.capacity / lv.word_bytes) * lv.instances // (lv.source_instances or lv.instances)
                shape = f"{-(-entries // lv.block_size)} x {bits * lv.block_size * lv.cluster_size}"
            lines.append(f"| {arch} | {lv.name} | {lv.block_size} | {lv.cluster_size} | {shape} | {pj:.3f} "
                         f"| {pj / lv.block_size:.3f} |")
        bits_in = DTYPE_BITS[hw.pe_array.input_dtype]
        lines.append(f"| {arch} | MAC ({bits_in}-bit) | | | | {mac_pj(bits_in, bits_in):.3f} | |")
    return "\n".join(lines) + "\n"


def _bundle_verdict(text: str, hw) -> list[str]:  # type: ignore[no-untyped-def]
    doc = yaml.safe_load(text)
    inst = doc["problem"]["instance"]
    dims = {d: inst[d] for d in ("N", "K", "C", "P", "Q", "R", "S")} | {"G": 1}
    problem = Problem(dims=dims, stride=(inst["Wstride"], inst["Hstride"]), dilation=(inst["Wdilation"], inst["Hdilation"]))
    return timeloop_verdict({"mapping": doc["mapping"]}, hw, problem)[1]


def plan_all(cases: list[dict], archs: list[str], time_limit: float) -> tuple[str, str]:
    problems = json.loads((DATA / "problems.json").read_text())
    mapper_cycles = {(Path(c["arch"]).stem, c["layer"]["name"]): c["timeloop"]["cycles"]
                     for c in cases if c["source"] == "timeloop-mapper" and c["timeloop"]["accepted"]}
    accept_rows, vs_rows = [], []
    for arch in archs:
        hw = load_descriptor((DATA / "archs" / f"{arch}.yaml").read_text(), name=arch)
        stats: dict[str, dict[str, float]] = {m: defaultdict(float) for m in ("cosa", "random")}
        secs: list[float] = []
        pairs: list[tuple[str, float, float]] = []
        vs_random: list[tuple[str, float, float]] = []
        for p in problems:
            layer = parse_layer({k: v for k, v in p.items() if k != "dims"})
            cycles = {}
            for mapper in ("cosa", "random"):
                opts = ScheduleOptions(mapper=mapper, baseline=False, time_limit_s=time_limit, seed=1,
                                       objective={"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0},
                                       model="timeloop")
                t0 = time.perf_counter()
                try:
                    plan = make_plan(layer, hw, opts)
                except Exception as exc:  # noqa: BLE001 (a failure is a row of the table, not the end of the bench)
                    stats[mapper]["failed"] += 1
                    print(f"{arch} {layer.name} {mapper}: {exc}", file=sys.stderr)
                    continue
                if mapper == "cosa":
                    secs.append(time.perf_counter() - t0)
                text = to_timeloop_bundle(Problem.from_layer(layer), hw, plan.mapping)
                verdict = _bundle_verdict(text, hw)
                s = stats[mapper]
                s["plans"] += 1
                s["accepted"] += not verdict
                s["padded"] += bool(plan.mapping.padded_dims)
                s["padded_accepted"] += bool(plan.mapping.padded_dims) and not verdict
                if verdict:
                    print(f"{arch} {layer.name} {mapper} rejected: {verdict}", file=sys.stderr)
                cycles[mapper] = plan.metrics.cycles
            if "cosa" in cycles and "random" in cycles:
                vs_random.append((layer.name, cycles["cosa"], cycles["random"]))
            if "cosa" in cycles and (arch, layer.name) in mapper_cycles:
                pairs.append((layer.name, cycles["cosa"], float(mapper_cycles[arch, layer.name])))
        for mapper, s in stats.items():
            accept_rows.append(
                f"| {arch} | {mapper} | {int(s['plans'])} | {int(s['accepted'])} | {int(s['padded'])} "
                f"| {int(s['padded_accepted'])} | {int(s['failed'])} |"
            )
        if pairs:
            ratios = [c / t for _, c, t in pairs]
            worst = max(pairs, key=lambda x: x[1] / x[2])
            vs_rows.append(
                f"| {arch} | timeloop-mapper | {len(pairs)} | {sum(r < 1 - 1e-9 for r in ratios)} "
                f"| {sum(abs(r - 1) <= 1e-9 for r in ratios)} | {sum(r > 1 + 1e-9 for r in ratios)} "
                f"| {statistics.median(ratios):.3f} | {worst[1] / worst[2]:.3f} ({worst[0]}) "
                f"| {statistics.median(secs):.2f} |"
            )
        if vs_random:
            ratios = [c / r for _, c, r in vs_random]
            worst = max(vs_random, key=lambda x: x[1] / x[2])
            vs_rows.append(
                f"| {arch} | random (best of 200) | {len(vs_random)} | {sum(r < 1 - 1e-9 for r in ratios)} "
                f"| {sum(abs(r - 1) <= 1e-9 for r in ratios)} | {sum(r > 1 + 1e-9 for r in ratios)} "
                f"| {statistics.median(ratios):.3f} | {worst[1] / worst[2]:.3f} ({worst[0]}) | |"
            )
        print(accept_rows[-2:], vs_rows[-2:], flush=True)
    acceptance = "\n".join([
        "## 2. Today's plans, exported and judged by Timeloop's rules",
        "",
        f"cosa and random (seed 1) on the 40 layers, `model: timeloop`, latency-only objective, time limit "
        f"{time_limit:g} s; each plan's bundle (`to_timeloop_bundle`: padded problem for padded plans, X/Y splits, "
        "the source's levels and fan-outs) judged by `timeloop_verdict` against the source architecture file.",
        "",
        "| arch | mapper | plans | accepted | padded | padded accepted | no plan |",
        "|---|---|--:|--:|--:|--:|--:|",
        *accept_rows,
    ]) + "\n"
    versus = "\n".join([
        "## 3. cosa against timeloop-mapper's recorded maps and against random",
        "",
        "Cycles of today's cosa plan (Timeloop semantics; exact against timeloop-model on the recorded cases) over "
        "timeloop-mapper's recorded map's timeloop-model cycles (a 3-second search, the same layer and file), and "
        "over the best of 200 random mappings scored the same way. Ratio < 1: cosa faster.",
        "",
        "| arch | against | pairs | cosa faster | equal | cosa slower | median cosa/other | worst | cosa median s |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
        *vs_rows,
    ]) + "\n"
    return acceptance, versus


def resnet_by_timeloop(timeloop_bin: str, time_limit: float) -> str:
    """cosa's plans for ResNet-50's 24 unique layers on the Simba file (the service's defaults: default objective,
    the file's Timeloop semantics), each exported as a bundle and run through real timeloop-model."""
    sys.path.insert(0, str(REPO / "bench"))
    from timeloop_fuzz import Timeloop

    from tileplan.workload import load_workload

    tl = Timeloop(timeloop_bin)
    hw = load_descriptor((DATA / "archs" / "simba_arch_legacy.yaml").read_text(), name="simba_arch_legacy")
    _, layers = load_workload(REPO / "examples/workloads/resnet50_unique.yaml")
    rows, total, predicted, accepted = [], 0, 0.0, 0
    for layer in layers:
        plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=time_limit))
        doc = yaml.safe_load(to_timeloop_bundle(Problem.from_layer(layer), hw, plan.mapping))
        arch = yaml.safe_dump({"architecture": doc["architecture"]}, sort_keys=False)
        r = tl.run(arch, yaml.safe_dump({"problem": doc["problem"]}, sort_keys=False),
                   yaml.safe_dump({"mapping": doc["mapping"]}, sort_keys=False))
        accepted += r["accepted"]
        if r["accepted"]:
            total += r["cycles"]
        predicted += plan.metrics.cycles
        rows.append(f"| {layer.name} | {'accepted' if r['accepted'] else r['error']} | {r.get('cycles') or ''} "
                    f"| {plan.metrics.cycles:.0f} |")
        print(rows[-1], flush=True)
    return "\n".join([
        "## 4. ResNet-50 on Simba, judged by real timeloop-model",
        "",
        f"cosa's plan for each of the 24 unique layers (service defaults, time limit {time_limit:g} s) on "
        "`simba_arch_legacy.yaml`, exported as a bundle (its own architecture, the padded problem where the plan "
        f"pads) and run by timeloop-model (`--timeloop-bin`). Accepted: {accepted}/{len(layers)}; Timeloop's cycles "
        f"summed over the 24 plans: **{total:,}** (Tileplan's prediction {predicted:,.0f}).",
        "",
        "| layer | timeloop-model | Timeloop cycles | Tileplan cycles |",
        "|---|---|--:|--:|",
        *rows,
    ]) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default=",".join(ARCHS))
    ap.add_argument("--time-limit", type=float, default=6.0)
    ap.add_argument("--timeloop-bin", help="folder with timeloop-model (NVlabs/timeloop@019f107, no Accelergy): "
                    "also run ResNet-50's plans on Simba through it")
    ap.add_argument("--out", default=str(REPO / "bench/results/timeloop.md"))
    args = ap.parse_args()
    cases = load_cases(DATA)
    t0 = time.perf_counter()
    parts = [
        "# Tileplan against timeloop-model",
        "",
        f"`python bench/timeloop.py` on {platform.machine()} ({os.cpu_count()} cores), {time.strftime('%Y-%m-%d')}; "
        "data: `bench/data/timeloop_reference` (684 recorded timeloop-model runs, see its README).",
        "",
        agreement(cases),
        energy_table(),
    ]
    print(parts[-2] + "\n" + parts[-1], flush=True)
    acceptance, versus = plan_all(cases, args.archs.split(","), args.time_limit)
    parts += [acceptance, versus]
    if args.timeloop_bin:
        parts.append(resnet_by_timeloop(args.timeloop_bin, args.time_limit))
    parts.append(f"Total bench time {time.perf_counter() - t0:.0f} s.\n")
    Path(args.out).write_text("\n".join(parts))
    print(acceptance + "\n" + versus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
