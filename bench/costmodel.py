"""Fidelity of the cost model against real Gemmini cycles (FireSim), calibrated vs uncalibrated.

    PYTHONPATH=service python bench/costmodel.py [--data CSV] [--artifact DIR] [--out bench/results/costmodel.md]

Fits the Gemmini model's parameters on both FireSim data sets (tileplan.cost.calibrate), cross-validates
(one layer shape of the random-mapping set, or one 16x16 configuration-and-network file, held out at a time),
scores the uncalibrated first-order model, compares readings of the harness, checks the fit against the
library utilisations published in gemmini.md, times cost evaluation, prints the tables and writes Markdown.

Data: DOSA (Hong et al., MICRO 2023), ucb-bar/dosa, data/firesim_training_data/firesim_results.csv,
BSD 2-Clause licence, Copyright (c) 2022 Charles Hong; 16x16 runs from ucb-bar/gemmini-rocc-tests
(bench/data/dosa_artifact/README.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

from tileplan.cost import evaluate_mapping
from tileplan.cost.calibrate import (
    DatasetReport,
    FeatureSet,
    FitMetrics,
    artifact_dataset,
    calibrate,
    fit,
    predict,
    random_mapping_dataset,
    score,
)
from tileplan.cost.firesim import _factors, load_artifact, load_rows
from tileplan.cost.gemmini import call_features, cycles_from_calls, execution_from_mapping
from tileplan.cost.params import FITTED, CostParams
from tileplan.problem import Problem

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "bench" / "data" / "firesim" / "gemmini_firesim_random_mappings.csv"
DEFAULT_ARTIFACT = ROOT / "bench" / "data" / "dosa_artifact"
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


def reading_variants(csv_path: Path, artifact: list[Path]) -> list[tuple[str, FitMetrics, FitMetrics]]:
    """In-sample fits (both data sets) under alternative readings of the harness (evidence for the choice): how its
    K / C loops step, and whether a convolution runs on the configured array or on the power-of-two array covering
    its spatial factors; figures on the random-mapping set and on the 16x16 artifact runs."""
    rand, art = random_mapping_dataset(csv_path), artifact_dataset(artifact)
    rows = load_rows(csv_path)
    runs = [r for p in artifact for r in load_artifact(p)]
    out = []
    # (K steps by the spatial factor, C steps by the spatial factor, conv calls use the configured array,
    #  register-level P/Q factors counted a second time in the tile, as the stored extract_data_csv.py does)
    readings = (
        (False, False, False, False), (False, True, False, False), (True, False, False, False),
        (True, True, False, False), (False, False, True, False), (False, False, False, True),
    )
    for k_sp, c_sp, whole, reg_twice in readings:
        def variant(e, text, hw_dim):  # type: ignore[no-untyped-def]
            if text is None:
                return e
            temporal, spatial, reg, _ = _factors(text)
            if e.kind != "conv":
                cols = temporal.get("P", 1) * (reg.get("P", 1) if reg_twice else 1)
                return dataclasses.replace(e, t_h=max(1, cols >> 4))
            return dataclasses.replace(
                e, k_step=spatial.get("K", 1) if k_sp else e.t_k, c_step=spatial.get("C", 1) if c_sp else e.t_c,
                dim=hw_dim if whole else e.dim,
                t_w=e.t_w * (reg.get("P", 1) if reg_twice else 1), t_h=e.t_h * (reg.get("Q", 1) if reg_twice else 1),
            )

        r2 = dataclasses.replace(rand, x=FeatureSet([
            call_features(variant(r.execution, r.mapping_text, r.hardware.pe_array.rows), 16.0) for r in rows
        ]))
        a2 = dataclasses.replace(art, x=FeatureSet([
            call_features(variant(r.execution, r.mapping_text if r.kind == "mapping" else None, r.hardware.pe_array.rows), 16.0)
            for r in runs
        ]))
        p = fit([r2, a2], CostParams())
        name = f"K step = {'spatial K' if k_sp else 'K tile'}, C step = {'spatial C' if c_sp else 'C tile'}"
        name += ", conv on the configured array" if whole else ", array covering the spatial factors"
        name += ", register-level P/Q factors counted twice" if reg_twice else ""
        out.append((name, score(predict(r2.x, p), r2.y, r2.keys), score(predict(a2.x, p), a2.y, a2.keys)))
    return out


# FireSim utilisation of Gemmini's own library (tiled_*_auto) on the default 16x16 Gemmini, as published with
# DOSA and quoted in Gemmini's and DOSA's publications: (what, low, high). They were measured over three DOSA-sized buffer
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
    wl = ROOT / "examples" / "workloads"

    def utils(path: Path) -> list[tuple[str, int, float, float]]:
        out = []
        for layer in load_workload(path)[1]:
            prob = Problem.from_layer(layer)
            met = evaluate_mapping(prob, arch, gemmini_auto(prob, hw).mapping, "library")
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
        within = "-" if m.within_layer_spearman_median != m.within_layer_spearman_median else f"{m.within_layer_spearman_median:.3f}"
        out.append(f"| {name} | {m.mape * 100:.1f}% | {m.median_ape * 100:.1f}% | {m.spearman:.3f} | {within} |")
    return out


def breakdown(rows: list[dict], label: str) -> list[str]:
    out = [f"| {label} | runs | MAPE | median APE | bias (mean log pred/meas) | Spearman | first-order MAPE |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        rho = f"{r['spearman']:.2f}" if "spearman" in r else "-"
        fo = f"{r['first_order_mape'] * 100:.0f}%" if "first_order_mape" in r else "-"
        out.append(f"| {r[label.lower()]} | {r['runs']} | {r['mape'] * 100:.0f}% | {r['median_ape'] * 100:.0f}% | "
                   f"{r['bias']:+.2f} | {rho} | {fo} |")
    return out


def dataset_section(d: DatasetReport, unit: str) -> list[str]:
    assert d.cross_validated is not None
    rows = [(f"calibrated, cross-validated (leave one {unit} out)", d.cross_validated), ("calibrated, in-sample", d.fitted),
            ("shipped parameters before this fit", d.default_params)]
    if d.uncalibrated is not None:
        rows.append(("first-order model (uncalibrated)", d.uncalibrated))
    return [f"### {d.name}: {d.runs} runs, {d.groups} {unit}s", "", *table(rows), "",
            "Cross-validated, by kind of run:", "", *breakdown(d.per_kind, "Kind"), ""]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--artifact", type=Path, default=DEFAULT_ARTIFACT, help="directory of DOSA artifact CSVs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "costmodel.md")
    args = ap.parse_args()
    artifact = sorted(args.artifact.glob("*.csv"))

    t0 = time.perf_counter()
    params, rep = calibrate(args.data, artifact, cv=True)
    fit_s = time.perf_counter() - t0
    speed_med, speed_max = eval_speed(args.data)
    gem_ms = gemmini_part_speed(args.data)
    variants = reading_variants(args.data, artifact)
    rand, art = rep.datasets
    assert rand.cross_validated is not None and art.cross_validated is not None
    lines = [
        "# Cost model fidelity on real Gemmini cycles (FireSim)",
        "",
        ATTRIBUTION,
        "16x16 runs: ucb-bar/gemmini-rocc-tests, `gemmini-data-collection/artifact/` (DOSA's artifact), copied with "
        "their commits in `bench/data/dosa_artifact/README.md`.",
        "",
        "Generated by `PYTHONPATH=service python bench/costmodel.py`. Two data sets, fitted together (each carries "
        "half the weight):",
        f"- {rand.runs} runs of random mappings of {rand.groups} layer shapes, described as a 128x128 Gemmini "
        "(1 MiB scratchpad and accumulator);",
        f"- {art.runs} runs on 16x16 Gemminis with other buffer sizes: ResNet-50, BERT, U-Net and RetinaNet layers, "
        f"each under a DOSA mapping and under Gemmini's own tiler ({art.groups} configuration-and-network files).",
        "",
        "Cross-validation holds out one layer shape of the first set (with its every run) or one whole file of the "
        "second, fits on everything else, and predicts what was held out.",
        "",
        "## Fidelity",
        "",
        *dataset_section(rand, "layer shape"),
        *dataset_section(art, "file"),
        "Targets of issue 3 (cross-validated): MAPE <= 12%, Spearman >= 0.95, median within-layer Spearman >= 0.8.",
        "",
        "| target | required | random mappings (CV) | met | 16x16 runs (CV) | met |",
        "|---|---:|---:|---|---:|---|",
    ]
    for key, want in TARGETS.items():
        cells = []
        for d in (rand, art):
            got = getattr(d.cross_validated, key)
            if got != got:  # NaN: no layer has >= 3 runs in that set
                cells += ["-", "-"]
                continue
            ok = got <= want if key == "mape" else got >= want
            cells += [f"{got * 100:.1f}%" if key == "mape" else f"{got:.3f}", "yes" if ok else "NO"]
        wanted = f"{want * 100:.0f}%" if key == "mape" else f"{want}"
        lines.append(f"| {key} | {wanted} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "(The 16x16 files hold one or two runs per layer, so they have no within-layer ranking to score.)",
        "",
        "## Mechanism (how the runs were executed; details in `service/tileplan/cost/gemmini.py`)",
        "",
        "Each DRAM-loop iteration is one Gemmini library call (`tiled_conv` -> `loop_conv_ws` FSM, or `tiled_matmul` ->",
        "`loop_ws` for Q = R = S = 1 layers) on a scratchpad tile whose sizes are the products of all factors below DRAM.",
        "Every call refetches its input and weight tiles (DMA rows of up to 64 B); outputs leave only after the last",
        "reduction tile; the FSM computes one output row at a time in DIM-wide pieces; two calls overlap (double",
        "buffering, to a degree fitted separately for the two FSMs); a call's work is max(DMA, compute) + part of the",
        "shorter, and it lasts at least the host's time to issue it (one floor for tiled_conv, one for tiled_matmul:",
        "the next call is set up while this one runs); a layer pays once its first load's and last store's latency.",
        "DRAM throughput is the DMA's 16 B/cycle peak times a fitted efficiency, capped",
        "by the descriptor's DRAM figure. The DOSA harness ran square convolutions (in_dim = P x stride, padding R/2);",
        "Gemmini's own tiler in the 16x16 runs sized its tiles for the default 256 KiB / 64 KiB buffers whatever the",
        "configuration (its recorded tiles, `dse.auto_tiling`, are used); tiles whose input window lies wholly in the",
        "padding make the 16-bit loader iterator wrap (a DMA storm of ~2^16 rows).",
        "",
        "Readings of the harness (in-sample, both sets fitted together; the first is the model's): how its K / C loops step,",
        "whether a convolution runs on the configured 128x128 array or, like its matmuls, on the power-of-two array",
        "covering its spatial factors (the harness builds one binary per `--pe_dim`), and whether the register-level",
        "P/Q factors enter the call tile once (like every factor below DRAM) or twice (as the stored harness script reads them):",
        "",
        "| reading | random mappings MAPE | Spearman | within-layer | 16x16 runs MAPE |",
        "|---|---:|---:|---:|---:|",
        *[f"| {name} | {a.mape * 100:.1f}% | {a.spearman:.3f} | {a.within_layer_spearman_median:.3f} | {b.mape * 100:.1f}% |"
          for name, a, b in variants],
        "",
        "## Fitted parameters (stored as `cost_params` of the Gemmini catalog entries)",
        "",
        "| parameter | value |",
        "|---|---:|",
        *[f"| {n} | {round(rep.params[n], 4):.4g} |" for n in FITTED],
        f"| dma_bytes_per_cycle (hardware fact, not fitted) | {params.dma_bytes_per_cycle:g} |",
        "",
        f"Fit + cross-validation ({rand.groups} + {art.groups} folds): {fit_s:.1f} s. Cost evaluation (`evaluate_mapping`, "
        f"Gemmini model, all {rand.runs} random-mapping runs, traffic and energy included): median {speed_med:.3f} ms "
        f"per mapping, slowest pass {speed_max:.3f} ms; the Gemmini cycle model alone: {gem_ms:.3f} ms.",
        "",
        "## Transfer check against published library utilisations (gemmini-16x16 catalog entry)",
        "",
        "Utilisation (ideal MACs/256 cycles over predicted cycles) of Gemmini's own tiling, against the FireSim",
        "figures published for the library on 16x16 Gemminis (gemmini.md; three buffer configurations, so ranges):",
        "",
        *transfer_check(params),
        "",
        "## Per 16x16 file (cross-validated: the file was held out of the fit)",
        "",
        *breakdown(art.per_group, "Group"),
        "",
        "## Per layer shape of the random-mapping set (cross-validated)",
        "",
        *breakdown(rand.per_group, "Group"),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print("fitted params:", {n: round(v, 4) for n, v in params.as_dict().items()})


if __name__ == "__main__":
    main()
