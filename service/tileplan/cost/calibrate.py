"""Fit the Gemmini model's free parameters to measured cycles, and say honestly how well it fits.

`calibrate(csv_path)` reads a FireSim CSV in the DOSA format (tileplan.cost.firesim), fits the parameters
named in `tileplan.cost.params.FITTED` by robust least squares on log(predicted / measured) (scipy,
soft-L1 loss, so a few pathological runs do not drag the rest), and reports for the fitted model,
for leave-one-layer-out cross-validation (fit on all layer shapes but one, predict that one) and for the
uncalibrated first-order model: MAPE, median absolute percentage error, Spearman rank correlation
over all runs and the median of the per-layer Spearman correlations (does the model order alternative
mappings of one layer correctly?).

The data set of the repository is DOSA's (ucb-bar/dosa, BSD-2-Clause, Copyright (c) 2022 Charles Hong).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field
from scipy.optimize import least_squares
from scipy.stats import spearmanr

from tileplan.cost.firesim import FireSimRow, load_rows
from tileplan.cost.gemmini import call_features, cycles_vectorised, gemmini_levels
from tileplan.cost.model import first_order_metrics
from tileplan.cost.params import DEFAULT_PARAMS, FITTED, CostParams
from tileplan.problem import Problem

# Bounds of the fitted parameters: physical ranges, wide enough not to bind on sensible data.
BOUNDS: dict[str, tuple[float, float]] = {
    "dram_efficiency": (0.05, 1.0),  # cannot beat the nominal bandwidth
    "dma_request_cycles": (0.0, 100.0),
    "op_overhead_cycles": (0.0, 1000.0),
    "preload_dims": (0.0, 8.0),
    "call_overhead_cycles": (0.0, 1e5),
    "overlap_loss": (0.0, 1.0),
}


class FitMetrics(BaseModel):
    mape: float = Field(description="Mean absolute percentage error (0.12 = 12%).")
    median_ape: float
    spearman: float = Field(description="Rank correlation over all runs.")
    within_layer_spearman_median: float = Field(description="Median over layers (>= 3 runs) of the per-layer rank correlation.")
    layers: int
    runs: int


class CalibrationReport(BaseModel):
    data: str
    runs: int
    layers: int
    params: dict[str, float]
    fitted: FitMetrics = Field(description="Calibrated model, fitted and scored on all runs (in-sample).")
    cross_validated: FitMetrics | None = Field(default=None, description="Leave-one-layer-out, calibrated model.")
    default_params: FitMetrics = Field(description="The Gemmini model with the shipped default parameters.")
    uncalibrated: FitMetrics = Field(description="The first-order model (no parameters to fit).")
    per_layer: list[dict[str, float | str | int]] = Field(default_factory=list)


class FeatureSet:
    """Per-call feature rows of many data rows, stacked (`row_id` says which data row a call belongs to)."""

    def __init__(self, blocks: list[np.ndarray]):
        self.blocks = blocks
        self.n_rows = len(blocks)
        self.x = np.concatenate(blocks) if blocks else np.zeros((0, 10))
        self.row_id = np.concatenate([np.full(len(b), i) for i, b in enumerate(blocks)]).astype(int)

    def subset(self, mask: np.ndarray) -> "FeatureSet":
        return FeatureSet([b for b, m in zip(self.blocks, mask) if m])


def feature_matrix(rows: list[FireSimRow]) -> FeatureSet:
    """Call features of every run, as DOSA's harness executed it (`FireSimRow.execution`)."""
    out = []
    for r in rows:
        arch = r.hardware.resolve(r.mapping.dataflow)
        levels = gemmini_levels(arch)
        if levels is None:
            raise ValueError(f"row {r.index}: hardware is not Gemmini-like")
        dram = arch.levels[levels[2]]
        out.append(call_features(r.execution, dram.read_bandwidth or dram.write_bandwidth or 16.0))
    return FeatureSet(out)


def first_order_cycles(rows: list[FireSimRow]) -> np.ndarray:
    return np.array(
        [
            first_order_metrics(Problem.from_layer(r.layer), r.hardware.resolve(r.mapping.dataflow), r.mapping).cycles
            for r in rows
        ]
    )


def score(pred: np.ndarray, measured: np.ndarray, keys: list[str]) -> FitMetrics:
    ape = np.abs(pred - measured) / measured
    groups: dict[str, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        groups[k].append(i)
    within = []
    for idx in groups.values():
        if len(idx) >= 3:
            rho = spearmanr(pred[idx], measured[idx]).statistic
            within.append(0.0 if math.isnan(rho) else float(rho))
    return FitMetrics(
        mape=float(ape.mean()),
        median_ape=float(np.median(ape)),
        spearman=float(spearmanr(pred, measured).statistic),
        within_layer_spearman_median=float(np.median(within)) if within else float("nan"),
        layers=len(groups),
        runs=len(measured),
    )


def _theta(vec: np.ndarray, base: CostParams) -> dict[str, float]:
    theta = base.as_dict()
    theta.update(dict(zip(FITTED, (float(v) for v in vec))))
    return theta


def fit(x: FeatureSet, measured: np.ndarray, start: CostParams = DEFAULT_PARAMS, max_nfev: int | None = None) -> CostParams:
    """Least squares on log cycles (soft-L1), parameters within BOUNDS."""
    lo = np.array([BOUNDS[n][0] for n in FITTED])
    hi = np.array([BOUNDS[n][1] for n in FITTED])
    x0 = np.clip(np.array([getattr(start, n) for n in FITTED], dtype=float), lo, hi)
    log_y = np.log(measured)
    scale = np.maximum(np.abs(x0), 1e-2)

    def residuals(v: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(cycles_vectorised(x.x, x.row_id, x.n_rows, _theta(v, start)), 1.0)) - log_y

    sol = least_squares(
        residuals, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.3, x_scale=scale, max_nfev=max_nfev
    )
    values = {n: float(v) for n, v in zip(FITTED, sol.x)}
    return start.model_copy(update=values)


def predict(x: FeatureSet, params: CostParams) -> np.ndarray:
    return cycles_vectorised(x.x, x.row_id, x.n_rows, params.as_dict())


def cross_validate(
    x: FeatureSet, measured: np.ndarray, keys: list[str], start: CostParams, max_nfev: int | None = None
) -> tuple[np.ndarray, dict[str, CostParams]]:
    """Leave-one-layer-out predictions (each layer shape predicted by a fit on all the others)."""
    pred = np.empty_like(measured)
    fits = {}
    karr = np.array(keys)
    for k in sorted(set(keys)):
        test = karr == k
        p = fit(x.subset(~test), measured[~test], start, max_nfev=max_nfev)
        pred[test] = predict(x.subset(test), p)
        fits[k] = p
    return pred, fits


def calibrate(
    csv_path: str | Path, cv: bool = True, start: CostParams = DEFAULT_PARAMS, max_nfev: int | None = None
) -> tuple[CostParams, CalibrationReport]:
    """Fit the parameters on a FireSim CSV; the report carries in-sample, cross-validated and baseline figures."""
    rows = load_rows(csv_path)
    x = feature_matrix(rows)
    y = np.array([r.cycles for r in rows])
    keys = [r.layer_key for r in rows]
    params = fit(x, y, start, max_nfev=max_nfev)
    fitted_pred = predict(x, params)
    cv_metrics, cv_pred = None, None
    if cv:
        cv_pred, _ = cross_validate(x, y, keys, params, max_nfev=max_nfev)
        cv_metrics = score(cv_pred, y, keys)
    first = first_order_cycles(rows)
    per_layer = []
    karr = np.array(keys)
    for k in sorted(set(keys)):
        idx = np.flatnonzero(karr == k)
        row: dict[str, float | str | int] = {"layer": k, "runs": int(len(idx))}
        for name, pred in (("cv", cv_pred), ("fitted", fitted_pred), ("first_order", first)):
            if pred is None:
                continue
            row[f"{name}_mape"] = float(np.mean(np.abs(pred[idx] - y[idx]) / y[idx]))
            if len(idx) >= 3:
                rho = spearmanr(pred[idx], y[idx]).statistic
                row[f"{name}_spearman"] = 0.0 if math.isnan(rho) else float(rho)
        per_layer.append(row)
    report = CalibrationReport(
        data=str(csv_path),
        runs=len(rows),
        layers=len(set(keys)),
        params={n: getattr(params, n) for n in FITTED},
        fitted=score(fitted_pred, y, keys),
        cross_validated=cv_metrics,
        default_params=score(predict(x, start), y, keys),
        uncalibrated=score(first, y, keys),
        per_layer=per_layer,
    )
    return params, report
