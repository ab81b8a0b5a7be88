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
