"""bench/costmodel.py's held-out check of the prediction intervals (the intervals held out with their fold)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _load(script: str):
    """bench/<script>.py as a module (the benches are scripts, not a package)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
    spec = importlib.util.spec_from_file_location(f"bench_{script}", BENCH / f"{script}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_intervals_from_other_folds_cover_their_share_and_a_shifted_fold_falls_out():
    cm = _load("costmodel")
    rng = np.random.default_rng(0)
    other = (["a"] * 400, rng.normal(0.0, 0.2, 400))
    groups = [f"g{i % 8}" for i in range(800)]
    res = rng.normal(0.0, 0.2, 800)
    inside = cm.held_out_coverage([other, (["a"] * 800, res)], 1, groups, confidence=0.8)
    assert len(inside["a"]) == 800
    assert 0.75 <= np.mean(inside["a"]) <= 0.85
    # one fold measured 3 standard deviations off: its own runs cannot widen the interval it is judged by
    res = res.copy()
    shifted = np.array(groups) == "g3"
    res[shifted] += 0.6
    inside = cm.held_out_coverage([other, (["a"] * 800, res)], 1, groups, confidence=0.8)
    mask = np.array(inside["a"])
    order = [i for g in sorted(set(groups)) for i in np.flatnonzero(np.array(groups) == g)]
    assert np.mean(mask[[order.index(i) for i in np.flatnonzero(shifted)]]) < 0.2


def test_runs_with_identical_call_features_put_their_spread_under_the_mape():
    from types import SimpleNamespace

    from tileplan.cost.calibrate import Dataset, FeatureSet

    rb = _load("costmodel_residuals")
    same, other = np.ones((1, 17)), np.full((1, 17), 2.0)

    def run(config: str, layer: str = "L") -> SimpleNamespace:
        return SimpleNamespace(kind="library", layer_key=layer, config=config, source="t")

    # three configurations run identical calls (100, 150, 200 cycles); a fourth run has calls of its own
    runs = [run("a"), run("b"), run("c"), run("a", "M")]
    d = Dataset("t", runs, FeatureSet([same, same, same, other], merged=True), np.array([100.0, 150.0, 200.0, 50.0]))  # type: ignore[arg-type]
    pred = np.array([150.0, 150.0, 150.0, 50.0])
    lines = rb.indistinguishable(d, {"by configuration": pred, "by network": pred})
    library = next(line for line in lines if line.startswith("| library |"))
    # the best single prediction of the group is 150: APE 0.5 + 0 + 0.25 over the kind's four runs
    assert library == "| library | 4 | 3 | 1 | 2.00x | 18.8% |"
    # configuration a sits log(100 / geometric mean) below its twins
    offset = next(line for line in lines if line.startswith("| a |"))
    assert offset == f"| a | 1 | {np.log(100.0) - np.mean(np.log([100.0, 150.0, 200.0])):+.3f} |"
