"""Fidelity of the cost model against real Gemmini cycles (FireSim), calibrated vs uncalibrated.

    PYTHONPATH=service python bench/costmodel.py [--data CSV] [--out bench/results/costmodel.md]

Fits the Gemmini model's parameters on the DOSA FireSim data set, cross-validates leave-one-layer-out
(fit on 65 layer shapes, predict the 66th), scores the uncalibrated first-order model on the same runs,
times cost evaluation, prints the tables and writes them as Markdown.

Data: DOSA (Hong et al., MICRO 2023), ucb-bar/dosa, data/firesim_training_data/firesim_results.csv,
BSD 2-Clause licence, Copyright (c) 2022 Charles Hong.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import dataclasses

import numpy as np

from tileplan.cost import evaluate_mapping
from tileplan.cost.calibrate import FeatureSet, FitMetrics, calibrate, fit, predict, score
from tileplan.cost.firesim import _factors, load_rows
from tileplan.cost.gemmini import call_features, cycles_from_calls, execution_from_mapping
from tileplan.cost.params import CostParams
from tileplan.cost.params import FITTED
from tileplan.problem import Problem

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "gemmini_firesim_random_mappings.csv"
ATTRIBUTION = (
    "Data: DOSA (Hong et al., \"DOSA: Differentiable Model-Based One-Loop Search for DNN Accelerators\", "
    "MICRO 2023), ucb-bar/dosa, `data/firesim_training_data/firesim_results.csv`, BSD 2-Clause licence, "
    "Copyright (c) 2022 Charles Hong."
)
TARGETS = {"mape": 0.12, "spearman": 0.95, "within_layer_spearman_median": 0.8}


def eval_speed(csv_path: Path, repeats: int = 3) -> tuple[float, float]:
    """Median and worst ms per evaluate_mapping call over every run of the data set."""
    rows = load_rows(csv_path)
    jobs = [(Problem.from_layer(r.layer), r.hardware.resolve(r.mapping.dataflow), r.mapping) for r in rows]
    per_pass = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for p, a, m in jobs:
            evaluate_mapping(p, a, m)
        per_pass.append((time.perf_counter() - t0) / len(jobs) * 1e3)
    return statistics.median(per_pass), max(per_pass)


def gemmini_part_speed(csv_path: Path) -> float:
    """Mean ms per mapping of the Gemmini cycle model alone (execution, call features, cycle formula)."""
    rows = load_rows(csv_path)
    jobs = [(Problem.from_layer(r.layer), r.hardware.resolve(r.mapping.dataflow), r.mapping) for r in rows]
    p = CostParams()
    t0 = time.perf_counter()
    for prob, arch, m in jobs:
        cycles_from_calls(call_features(execution_from_mapping(prob, arch, m), 16.0), p)
    return (time.perf_counter() - t0) / len(jobs) * 1e3


def reading_variants(csv_path: Path) -> list[tuple[str, FitMetrics]]:
    """In-sample fits under alternative readings of the harness's K / C loop steps (evidence for the choice)."""
    rows = load_rows(csv_path)
    y = np.array([r.cycles for r in rows])
    keys = [r.layer_key for r in rows]
    out = []
    for k_sp in (True, False):
        for c_sp in (False, True):
            blocks = []
            for r in rows:
                e = r.execution
                if e.kind == "conv":
                    spatial_c = _factors(r.mapping_text)[1].get("C", 1)
                    e = dataclasses.replace(e, k_step=e.k_step if k_sp else e.t_k, c_step=spatial_c if c_sp else e.t_c)
                blocks.append(call_features(e, 16.0))
            x = FeatureSet(blocks)
            out.append((f"K step = {'spatial K' if k_sp else 'K tile'}, C step = {'spatial C' if c_sp else 'C tile'}",
                        score(predict(x, fit(x, y, CostParams())), y, keys)))
    return out


# FireSim utilisation of Gemmini's own library (tiled_*_auto) on the default 16x16 Gemmini, as published with
# DOSA and quoted in ../shared/docs/gemmini.md: (what, low, high). They were measured over three DOSA-sized buffer
# configurations, so they bound rather than pin the default configuration's figures.
PUBLISHED_16X16 = (
    ("ResNet-50, all 24 unique layers (x count)", 0.33, 0.38),
    ("ResNet-50 1x1 convolutions at 56x56", 0.16, 0.44),
    ("ResNet-50 conv1 7x7/2", 0.18, 0.18),
    ("ResNet-50 FC", 0.016, 0.016),
    ("BERT-base matmuls, M = 128 (x count)", 0.75, 0.78),
)


def transfer_check(params: CostParams) -> list[str]:
    """The fitted parameters on gemmini-16x16 (not in the training data): the model's utilisation of the
    gemmini-auto plans next to the FireSim figures published for Gemmini's library."""
    from tileplan.hardware.catalog import get_hardware
    from tileplan.mappers.gemmini_auto import gemmini_auto
    from tileplan.workload import load_workload

    base = get_hardware("gemmini-16x16")
    hw = base.model_copy(update={"cost_params": params.as_dict()})
    arch = hw.resolve("weight_stationary")
    wl = ROOT.parent / "shared" / "data" / "workloads"

    def utils(path: Path) -> list[tuple[str, int, float, float]]:
        out = []
        for layer in load_workload(path)[1]:
            prob = Problem.from_layer(layer)
            met = evaluate_mapping(prob, arch, gemmini_auto(prob, hw).mapping)
            out.append((layer.name, layer.count, met.ideal_cycles, met.cycles))
        return out

    def total(rows: list[tuple[str, int, float, float]]) -> float:
        return sum(c * i for _, c, i, _ in rows) / sum(c * t for _, c, _, t in rows)

    resnet, bert = utils(wl / "resnet50_unique.yaml"), utils(wl / "bert_base_matmuls.yaml")
    one = [i / t for n, _, i, t in resnet if n.endswith("1x1_s1_56")]
    model = {
        PUBLISHED_16X16[0][0]: f"{total(resnet):.1%}",
        PUBLISHED_16X16[1][0]: f"{min(one):.1%} - {max(one):.1%}",
        PUBLISHED_16X16[2][0]: f"{next(i / t for n, _, i, t in resnet if n.startswith('conv_3_64')):.1%}",
        PUBLISHED_16X16[3][0]: f"{next(i / t for n, _, i, t in resnet if n == 'fc'):.1%}",
        PUBLISHED_16X16[4][0]: f"{total(bert):.1%}",
    }
    lines = [
        "| gemmini-auto plans on gemmini-16x16 | FireSim (published) | this model |",
        "|---|---:|---:|",
    ]
    for what, lo, hi in PUBLISHED_16X16:
        pub = f"{lo:.1%}" if lo == hi else f"{lo:.0%} - {hi:.0%}"
        lines.append(f"| {what} | {pub} | {model[what]} |")
    return lines


def table(rows: list[tuple[str, FitMetrics]]) -> list[str]:
    out = [
        "| model | MAPE | median APE | Spearman (all runs) | median within-layer Spearman |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, m in rows:
        out.append(
            f"| {name} | {m.mape * 100:.1f}% | {m.median_ape * 100:.1f}% | {m.spearman:.3f} | "
            f"{m.within_layer_spearman_median:.3f} |"
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "costmodel.md")
    args = ap.parse_args()

    t0 = time.perf_counter()
    params, rep = calibrate(args.data, cv=True)
    fit_s = time.perf_counter() - t0
    speed_med, speed_max = eval_speed(args.data)
    gem_ms = gemmini_part_speed(args.data)
    variants = reading_variants(args.data)
    cv = rep.cross_validated
    assert cv is not None
    lines = [
        "# Cost model fidelity on real Gemmini cycles (FireSim)",
        "",
        ATTRIBUTION,
        "",
        f"{rep.runs} runs of random mappings of {rep.layers} layer shapes on a 128x128 Gemmini (1 MiB scratchpad, "
        "1 MiB accumulator). Generated by `PYTHONPATH=service python bench/costmodel.py`.",
        "",
        "## Fidelity",
        "",
        *table(
            [
                ("Gemmini model, calibrated, leave-one-layer-out CV", cv),
                ("Gemmini model, calibrated, in-sample", rep.fitted),
                ("First-order model (uncalibrated)", rep.uncalibrated),
            ]
        ),
        "",
        "Targets (cross-validated): MAPE <= 12%, Spearman >= 0.95, median within-layer Spearman >= 0.8.",
        "",
        "| target | required | calibrated (CV) | met |",
        "|---|---:|---:|---|",
    ]
    for key, want in TARGETS.items():
        got = getattr(cv, key)
        ok = got <= want if key == "mape" else got >= want
        shown = f"{got * 100:.1f}%" if key == "mape" else f"{got:.3f}"
        wanted = f"{want * 100:.0f}%" if key == "mape" else f"{want}"
        lines.append(f"| {key} | {wanted} | {shown} | {'yes' if ok else 'NO'} |")
    lines += [
        "",
        "## Mechanism (how the runs were executed; details in `service/tileplan/cost/gemmini.py`)",
        "",
        "Each DRAM-loop iteration is one Gemmini library call (`tiled_conv` -> `loop_conv_ws` FSM, or `tiled_matmul` ->",
        "`loop_ws` for Q = R = S = 1 layers) on a scratchpad tile whose sizes are the products of all factors below DRAM.",
        "Every call refetches its input and weight tiles; outputs leave only after the last reduction tile; the FSM",
        "computes one output row at a time in DIM-wide pieces; two calls overlap (double buffering); a call costs",
        "max(DMA, compute) + a fixed issue cost. The DOSA harness ran square convolutions (in_dim = P x stride, padding",
        "R/2), stepped the output-channel loop by the spatial K factor (each call computing the whole K tile) and tiled",
        "matmuls in power-of-two software blocks covering the spatial factors; tiles whose input window lies wholly in",
        "the padding make the 16-bit loader iterator wrap (a DMA storm of ~2^16 rows).",
        "",
        "Readings of the harness's K / C loop steps (in-sample fit, same 6 parameters):",
        "",
        *table(variants),
        "",
        "## Fitted parameters (stored as `cost_params` of the Gemmini catalog entries)",
        "",
        "| parameter | value |",
        "|---|---:|",
        *[f"| {n} | {rep.params[n]:.4g} |" for n in FITTED],
        "",
        f"Fit + 66-fold cross-validation: {fit_s:.1f} s. Cost evaluation (`evaluate_mapping`, Gemmini model, "
        f"all {rep.runs} runs, traffic and energy included): median {speed_med:.3f} ms per mapping, slowest pass "
        f"{speed_max:.3f} ms; the Gemmini cycle model alone (execution, call features, formula): {gem_ms:.3f} ms.",
        "",
        "## Transfer to the 16x16 catalog entry (same parameters, not fitted there)",
        "",
        "Utilisation (ideal MACs/256 cycles over predicted cycles) of Gemmini's own tiling, against the FireSim",
        "figures published for the library on 16x16 Gemminis (gemmini.md; three buffer configurations, so ranges):",
        "",
        *transfer_check(params),
        "",
        "## Per layer (cross-validated)",
        "",
        "| layer | runs | CV MAPE | CV Spearman | first-order MAPE | first-order Spearman |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rep.per_layer:
        def f(key: str, pct: bool = False) -> str:
            v = row.get(key)
            if v is None:
                return "-"
            return f"{float(v) * 100:.0f}%" if pct else f"{float(v):.2f}"

        lines.append(
            f"| {row['layer']} | {row['runs']} | {f('cv_mape', True)} | {f('cv_spearman')} | "
            f"{f('first_order_mape', True)} | {f('first_order_spearman')} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print("fitted params:", {n: round(v, 4) for n, v in params.as_dict().items()})


if __name__ == "__main__":
    main()
