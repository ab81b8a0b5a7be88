"""Cost model: FireSim parsing, calibrated fidelity, Gemmini facts on the 16x16 catalog entry, energy."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import spearmanr

from tileplan.check import check
from tileplan.cost import CostParams, evaluate_mapping, first_order_metrics
from tileplan.cost.calibrate import (
    artifact_dataset,
    cross_validate,
    feature_matrix,
    fit,
    loss,
    predict,
    random_mapping_dataset,
    score,
)
from tileplan.cost.firesim import load_artifact, load_rows, parse_mapping_string
from tileplan.cost.gemmini import FEATURE_COLUMNS, call_features, execution_from_mapping, gemmini_levels
from tileplan.hardware.catalog import get_hardware
from tileplan.mapping import LevelMapping, Mapping
from tileplan.nest import analyse
from tileplan.problem import Problem
from tileplan.workload import Conv2dLayer, MatmulLayer

DATA = Path(__file__).resolve().parents[2] / "bench" / "data" / "firesim" / "gemmini_firesim_random_mappings.csv"


ARTIFACT = sorted((Path(__file__).resolve().parents[2] / "bench" / "data" / "dosa_artifact").glob("*.csv"))


@pytest.fixture(scope="module")
def rows():
    return load_rows(DATA)


@pytest.fixture(scope="module")
def data():
    """Both calibration data sets, as `tileplan calibrate` fits them."""
    return [random_mapping_dataset(DATA), artifact_dataset(ARTIFACT)]


@pytest.fixture(scope="module")
def cv_random(data):
    """Each layer shape of the random-mapping set predicted by a fit on everything else."""
    return cross_validate(data, 0, CostParams())


@pytest.fixture(scope="module")
def cv_artifact(data):
    """Each 16x16 configuration-and-network file predicted by a fit on everything else."""
    return cross_validate(data, 1, CostParams())


@pytest.fixture(scope="module")
def cv_artifact_by_network(data):
    """Each network's 16x16 runs (all configurations) predicted by a fit on everything else."""
    return cross_validate(data, 1, CostParams(), groups=data[1].labels(lambda r: r.network))


def test_restarts_leave_the_local_minimum_the_shipped_parameters_sat_in(data) -> None:
    """The fit's loss has local minima: the parameters shipped until issue 25 (fitted from the previous ones) sat in
    one that least squares from there does not leave; fits from starts scattered around it reach a lower loss, and
    `fit(restarts=...)` keeps the lowest. The shipped parameters now sit at that lower loss. (With the LLC term,
    llc_miss_cycles, and DRAM's own rate beyond the LLC, dram_byte_cycles, which those parameters lacked (0), the
    minimum a plain fit from them reaches is 16.07, restarts 16.01; with the memory-bus bound of strided requests
    DRAM serves, cost25g, the restarts from them reach 15.91 and the shipped parameters, fitted with four restarts
    from the previous ones, sit lower still, 15.87; with a strided store beyond the LLC waiting on DRAM twice,
    cost25h, a plain fit from them reaches 16.19, the restarts 15.85, where the shipped parameters sit; with
    loop_conv_ws's two call slots on, cost25l, a plain fit from them reaches 16.04, the restarts 15.69, where the
    shipped parameters sit; with the whole-row reads DRAM serves waiting as strided ones do, cost25m, a plain fit from
    them reaches 15.80, the restarts 15.72, and the shipped parameters sit at 15.68; with the caches' random replacement
    and dram_byte_cycles held at FireSim's DRAM rate, cost25n, a plain fit from them reaches 14.99, the restarts 14.91,
    where the shipped parameters sit.)"""
    before = CostParams(
        dram_efficiency=0.71, dma_request_cycles=0.9722, dram_request_cycles=0.9483, block_wait_cycles=11.22,
        op_overhead_cycles=0.0032, compute_floor_dims=0.4265, preload_dims=0.3242, call_floor_cycles=274.0251,
        call_floor_matmul=129.4556, run_overhead_cycles=776.6998, overlap_loss=0.2591, tile_search_cycles=275.5847,
        llc_miss_cycles=0.0, dram_byte_cycles=0.0,
    )
    stuck = loss(data, fit(data, before))
    assert stuck > 14.95
    restarted = loss(data, fit(data, before, restarts=2))
    assert restarted < stuck - 0.05
    assert loss(data, CostParams()) <= restarted + 0.01


def ex(run):  # type: ignore[no-untyped-def]
    """How a FireSim run executes, read from what a user sends (hardware, layer, mapping)."""
    return execution_from_mapping(run.problem, run.hardware.resolve(run.mapping.dataflow), run.mapping)


def test_mapping_string_order() -> None:
    m = parse_mapping_string("L3[WIO] K8 Q28 - L2[WI] N1 K4X - L1[O] K2 S7 R7 Q4 P7 C3X - L0[W] P16")
    assert [lv.name for lv in m.levels] == ["Registers", "Accumulator", "Scratchpad", "DRAM"]
    # innermost first; DOSA's P / R run along the output's width (Timeloop's CNN layer), Tileplan's Q / S
    assert m.levels[3].temporal == [("P", 28), ("K", 8)]
    assert m.levels[1].temporal == [("Q", 7), ("P", 4), ("S", 7), ("R", 7), ("K", 2)]
    assert m.levels[1].spatial == [("C", 3)] and m.levels[2].spatial == [("K", 4)]
    assert m.levels[0].temporal == [("Q", 16)]
    # a matmul's string (no Q, R or S factor) keeps P as the rows of A
    mm = parse_mapping_string("L3[WIO] P4 - L2[WI] K16X - L1[O] P32 C16X - L0[W]")
    assert mm.levels[3].temporal == [("P", 4)] and mm.levels[1].temporal == [("P", 32)]


def test_every_row_parses_and_is_legal(rows) -> None:
    assert len(rows) == 1567
    assert len({r.layer_key for r in rows}) == 66
    for r in rows:
        assert check(r.problem, r.hardware, r.mapping) == [], r.mapping_text
        assert gemmini_levels(r.hardware.resolve()) is not None


def test_calibrated_model_beats_first_order_under_cross_validation(data, cv_random) -> None:
    """Leave-one-layer-out with the shipped parameters as the start: ranking clearly better than first order."""
    d = data[0]
    cv = score(cv_random, d.y, d.keys)
    base = score(d.first_order, d.y, d.keys)
    assert cv.within_layer_spearman_median >= 0.8
    assert cv.within_layer_spearman_median >= base.within_layer_spearman_median + 0.05
    assert cv.spearman >= base.spearman + 0.02
    assert cv.median_ape < base.median_ape


def test_cross_validated_ranking_targets(data, cv_random) -> None:
    """Leave-one-layer-out: the ranking targets of issue 3 (Spearman >= 0.95 overall, within-layer median
    >= 0.8) are met; the MAPE target is not on this data set (see test below and bench/results/costmodel.md),
    but the error stays where the call-floor model put it (18.3% MAPE, 11.1% median; it was 28.2% / 23.1%)."""
    d = data[0]
    cv = score(cv_random, d.y, d.keys)
    assert cv.spearman >= 0.95
    assert cv.within_layer_spearman_median >= 0.8
    assert cv.mape <= 0.20
    assert cv.median_ape <= 0.13


@pytest.mark.xfail(strict=True, reason="issue 3 MAPE target (<= 12%) not reached on the random-mapping set; see costmodel.md")
def test_cross_validated_mape_target(data, cv_random) -> None:
    assert score(cv_random, data[0].y, data[0].keys).mape <= 0.12


def test_16x16_runs_are_predicted_out_of_file(data, cv_artifact) -> None:
    """DOSA's 16x16 FireSim runs (DOSA mappings and Gemmini's own tiler, 12 configuration-and-network files), each
    file predicted by a fit that never saw it: within 25% on average, biased by less than 15% (the library's own
    runs come out ~10% fast, costmodel.md), and within 30% for each kind."""
    d = data[1]
    ape = np.abs(cv_artifact - d.y) / d.y
    assert len(d.y) == 444
    assert ape.mean() <= 0.25
    assert abs(np.mean(np.log(cv_artifact / d.y))) <= 0.15
    kinds = np.array(d.labels(lambda r: f"{r.kind} {r.op}"))
    for kind in ("mapping conv", "library conv", "mapping matmul", "library matmul"):
        assert ape[kinds == kind].mean() <= 0.30, kind
    # each configuration held out (through the user path): issue 13's targets (test below) with some margin for
    # refits (DOSA's mappings 11.9%, Spearman 0.993; the library's own runs 14.5%, with the DMA's 64-byte blocks,
    # tiled_conv_auto's host search, strided requests on tensors beyond the L2 and loop_ws's pipeline fill;
    # bench/results/costmodel.md)
    mapping = np.char.startswith(kinds.astype(str), "mapping")
    assert ape[mapping].mean() <= 0.125
    assert spearmanr(cv_artifact[mapping], d.y[mapping]).statistic >= 0.99
    assert ape[~mapping].mean() <= 0.155


def test_issue_13_held_out_targets(data, cv_artifact) -> None:
    """Issue 13's targets, each 16x16 configuration predicted by a fit that never saw it (through the user path):
    DOSA's mappings within 12% MAPE with Spearman >= 0.99, the library's own runs within 15% (11.9% / 0.993 /
    14.5% now, bench/results/costmodel.md)."""
    d = data[1]
    ape = np.abs(cv_artifact - d.y) / d.y
    mapping = np.char.startswith(np.array(d.labels(lambda r: r.kind)).astype(str), "mapping")
    assert ape[mapping].mean() <= 0.12 and ape[~mapping].mean() <= 0.15
    assert spearmanr(cv_artifact[mapping], d.y[mapping]).statistic >= 0.99


def test_issue_25_held_out_targets_met(data, cv_artifact, cv_artifact_by_network) -> None:
    """The targets of issue 25 met now (bench/results/costmodel.md): DOSA's mappings within 10% MAPE held out by
    configuration, and their Spearman >= 0.993 held out by configuration and by network."""
    d = data[1]
    mapping = np.char.startswith(np.array(d.labels(lambda r: r.kind)).astype(str), "mapping")
    assert (np.abs(cv_artifact - d.y) / d.y)[mapping].mean() <= 0.10
    for pred in (cv_artifact, cv_artifact_by_network):
        assert spearmanr(pred[mapping], d.y[mapping]).statistic >= 0.993


@pytest.mark.xfail(strict=True, reason="issue 25's worst-run target no longer reached held out by network since the "
                   "caches' random replacement is modelled (bench/results/costmodel.md: U-Net's C1024_K1024_P28 under a "
                   "DOSA mapping at 0.55x; it was 0.57x)")
def test_issue_25_no_run_off_by_more_than_1_8x_held_out_by_network(data, cv_artifact_by_network) -> None:
    """Issue 25's worst-run target, held out by network: every 16x16 run predicted within [0.556, 1.8] x its measured
    cycles. Met before the caches' random replacement was modelled (0.57x-1.66x; U-Net's 2-channel head was at 0.41x
    before its whole-row DRAM reads waited as strided ones do, cost25m); with it and the refit, U-Net's
    C1024_K1024_P28 under DOSA's 448-call mapping comes out 0.55x (0.55x-1.63x, bench/results/costmodel.md)."""
    ratio = cv_artifact_by_network / data[1].y
    assert ratio.min() >= 0.556 and ratio.max() <= 1.8


@pytest.mark.xfail(strict=True, reason="issue 25's worst-run target not reached held out by configuration "
                   "(bench/results/costmodel.md: U-Net's C1024_K1024_P28 under a DOSA mapping at 0.54x)")
def test_issue_25_no_run_off_by_more_than_1_8x_held_out_by_configuration(data, cv_artifact) -> None:
    """Issue 25's worst-run target, held out by configuration: every 16x16 run within [0.556, 1.8] x measured."""
    ratio = cv_artifact / data[1].y
    assert ratio.min() >= 0.556 and ratio.max() <= 1.8


def test_issue_25_library_target_met(data, cv_artifact, cv_artifact_by_network) -> None:
    """Issue 25's target for Gemmini's own tiler met since the caches' random replacement is modelled
    (`gemmini._miss_shares`; bench/results/costmodel.md): the library's runs within 12% MAPE held out by configuration
    and by network (every fold refitting every parameter; 12.3% / 12.6% before)."""
    d = data[1]
    mapping = np.char.startswith(np.array(d.labels(lambda r: r.kind)).astype(str), "mapping")
    for pred in (cv_artifact, cv_artifact_by_network):
        ape = np.abs(pred - d.y) / d.y
        assert ape[~mapping].mean() <= 0.12


def test_issue_25_mappings_by_network_target_met(data, cv_artifact_by_network) -> None:
    """Issue 25's last MAPE target, met since the caches' random replacement is modelled, at the edge: DOSA's mappings
    on the 16x16 runs within 10% MAPE held out by network, every fold refitting every parameter (10.0%, 9.996%, in
    bench/results/costmodel.md; 10.1% before)."""
    d = data[1]
    mapping = np.char.startswith(np.array(d.labels(lambda r: r.kind)).astype(str), "mapping")
    assert (np.abs(cv_artifact_by_network - d.y) / d.y)[mapping].mean() <= 0.10


def test_artifact_library_runs_use_the_recorded_tiles() -> None:
    """The library's tile as recorded (dse.auto_tiling) drives its run; gemmini-auto reproduces most of them."""
    runs = [r for p in ARTIFACT for r in load_artifact(p) if r.kind == "library" and r.library_tile]
    assert len(runs) >= 200
    conv1 = next(r for r in runs if r.source == "dnn_resnet50" and r.layer_key.startswith("C3_K64_P112"))
    assert conv1.library_tile == {"krows": 7, "kcols": 7, "ocols": 23, "orows": 22, "kchs": 3, "ochs": 16, "batches": 1}
    e = ex(conv1)
    assert (e.t_h, e.t_w, e.t_k, e.t_c, e.k_step) == (22, 23, 16, 3, 16)


def test_dosa_harness_steps_output_channels_by_the_tile() -> None:
    """A DOSA mapping with K4 below DRAM under K16X: calls of 64 output channels stepping by 64, not by 16."""
    runs = load_artifact(next(p for p in ARTIFACT if p.stem == "both_resnet50"))
    r = next(r for r in runs if r.kind == "mapping" and r.layer_key.startswith("C64_K256_P56"))
    assert (ex(r).t_k, ex(r).k_step) == (256, 256)


def test_dosa_execution_reproduces_the_harness(rows) -> None:
    """Row 1 of the data: L1 S7 Q14 P112 C3X under L2 K4X, DRAM Q8 K16 R7 -> tiled_conv with 14 output rows x
    112 output cols, 7 kernel rows x 1 kernel col, K tile 4 stepped by 4, C tile 3; square 224 input, pad 3."""
    e = ex(rows[1])
    assert (e.kind, e.out_h, e.out_w, e.in_h, e.pad) == ("conv", 112, 112, 224, (3, 3))
    assert (e.t_h, e.t_w, e.t_r, e.t_s, e.t_k, e.t_c, e.k_step) == (14, 112, 7, 1, 4, 3, 4)
    # Spatial factors K4 x C3: the harness's binary for a 4-wide array (pe_dim 4).
    assert e.dim == 4
    calls = call_features(e, 16.0)
    # 8 row tiles x 7 kernel-col tiles x 16 output-channel steps = 896 calls, each 14 output rows x 7 kernel
    # rows x 28 computes of 4 output columns.
    assert calls[:, 0].sum() == 896
    assert (calls[:, 0] * calls[:, 6]).sum() == 896 * 14 * 7 * 28


def test_spatial_factors_set_the_harness_array_size(rows) -> None:
    """Rows 484 and 488 run the same layer with the same call tiles (K 16, C 8, 7x7 outputs, 3x3 kernel) but
    spatial factors K16 x C8 and K4 x C4: FireSim measured 1.58e5 and 1.08e6 cycles. The harness builds its
    binary for the power-of-two array covering the spatial factors (16 and 4), and so does the model."""
    a, b = rows[484], rows[488]
    assert a.layer_key == b.layer_key
    tiles = lambda e: (e.t_n, e.t_h, e.t_w, e.t_k, e.t_c, e.t_r, e.t_s)  # noqa: E731
    assert tiles(ex(a)) == tiles(ex(b))
    assert (ex(a).dim, ex(b).dim) == (16, 4)
    assert b.cycles > 5 * a.cycles
    pred = predict(feature_matrix([a, b]), CostParams())
    assert pred[1] > 3 * pred[0]
    # FC layers run as tiled_matmul; matmul P=128 layers too (Q = R = S = 1).
    assert {ex(r).kind for r in rows if r.layer_key.startswith(("C128_K128_P128", "C512_K512_P128"))} == {"matmul"}


def test_register_level_factors_count_once_in_the_call_tile(rows) -> None:
    """Rows 1105, 1106, 1113 and 1116 run one matmul layer (C128 K128 P128, 4-wide binary) with the same
    factors below DRAM, placed differently between the accumulator and register levels (L0 P2, P8, P8, none).
    FireSim measured them within 0.2% of each other (4.132e6-4.138e6 cycles), so the register-level factor
    is part of the call tile once, like every other factor below DRAM. Reading it twice (as the harness's
    later extract_data_csv.py does) gives them 1- to 8-block row tiles and predictions 2x apart."""
    group = [rows[i] for i in (1105, 1106, 1113, 1116)]
    assert len({r.layer_key for r in group}) == 1
    assert max(r.cycles for r in group) < 1.002 * min(r.cycles for r in group)
    assert len({ex(r) for r in group}) == 1
    # and a conv: row 1's L0 holds no P factor, row 0's does; its output-column tile is the product of the
    # P factors below DRAM (L1 P7 x L0 P16 = 112), not 112 x 16.
    assert ex(rows[0]).t_w == 112


def test_padding_wrap_pathology_is_predicted(rows) -> None:
    """A 1-row tile of a 7x7 stride-2 conv under 1-row kernel tiles has calls whose input window lies wholly in
    the zero padding; the 16-bit loader iterator wraps. Measured 4.7e8 cycles (row 3) vs 1.0e7 for row 1."""
    params = CostParams()
    x = feature_matrix([rows[1], rows[3]])
    pred = predict(x, params)
    assert pred[1] > 10 * pred[0]
    assert rows[3].cycles > 10 * rows[1].cycles
    assert abs(math.log(pred[1] / rows[3].cycles)) < math.log(3)


def test_execution_of_a_tileplan_mapping_uses_tiles_below_dram() -> None:
    hw = get_hardware("gemmini-16x16")
    # with a bias, so both executors load the accumulator alike (Tileplan's code loads zeros without one)
    layer = Problem.from_layer(Conv2dLayer(in_channels=64, out_channels=64, in_h=30, in_w=30, kernel=(3, 3), bias=True))
    m = Mapping(
        levels=_levels(
            acc_t=[("Q", 14), ("P", 7)], acc_s=[("C", 16)], spad_t=[("C", 4), ("R", 3), ("S", 3)],
            spad_s=[("K", 16)], dram_t=[("Q", 2), ("P", 4), ("K", 4)],
        ),
        # Tileplan's code overlaps calls where the plan double buffers (the library always does)
        double_buffered={"Scratchpad": ["I", "W"], "Accumulator": ["O"]},
        dataflow="weight_stationary",
    )
    assert check(layer, hw, m) == []
    arch = hw.resolve(m.dataflow)
    e = execution_from_mapping(layer, arch, m, "tileplan")
    assert (e.kind, e.t_h, e.t_w, e.t_k, e.t_c, e.t_r, e.t_s) == ("conv", 7, 14, 16, 64, 3, 3)
    assert e.k_step == e.t_k and e.c_step == e.t_c and e.pad == (0, 0)
    calls = call_features(e, 8.0)
    assert calls[:, 0].sum() == 4 * 2 * 4  # P, Q and K tiles; C, R, S fit in one tile
    # Gemmini's library refetches both tiles in every call: the DRAM loop order does not change its cost.
    m2 = m.model_copy(deep=True)
    m2.levels[3].temporal = [("K", 4), ("P", 4), ("Q", 2)]
    assert evaluate_mapping(layer, arch, m, "library").cycles == evaluate_mapping(layer, arch, m2, "library").cycles
    # Tileplan's code keeps the tile that consecutive calls share: pixels innermost (m) keep the weight tile
    # across the 8 pixel tiles, output channels innermost (m2) the input tile across the 4 channel tiles. Both
    # tiles are 9216 B (9 x 16 input pixels x 64 channels; 3 x 3 x 64 x 16 weights).
    col = FEATURE_COLUMNS.index("ld_bytes")

    def loaded(mp, executor):  # type: ignore[no-untyped-def]
        x = call_features(execution_from_mapping(layer, arch, mp, executor), 8.0)
        return (x[:, 0] * x[:, col]).sum()

    assert loaded(m, "library") - loaded(m, "tileplan") == (32 - 4) * 9216
    assert loaded(m2, "library") - loaded(m2, "tileplan") == (32 - 8) * 9216
    for mp in (m, m2):
        assert evaluate_mapping(layer, arch, mp, "tileplan").cycles < evaluate_mapping(layer, arch, mp, "library").cycles
    # a bare mapping runs as the hardware's library; one that says it is Tileplan's code runs as that
    assert evaluate_mapping(layer, arch, m).executor == "library"
    ours = m.model_copy(update={"executor": "tileplan"})
    assert evaluate_mapping(layer, arch, ours).cycles == evaluate_mapping(layer, arch, m, "tileplan").cycles


def _levels(acc_t=(), acc_s=(), spad_t=(), spad_s=(), dram_t=()) -> list[LevelMapping]:
    return [
        LevelMapping(name="Registers"),
        LevelMapping(name="Accumulator", temporal=list(acc_t), spatial=list(acc_s)),
        LevelMapping(name="Scratchpad", temporal=list(spad_t), spatial=list(spad_s)),
        LevelMapping(name="DRAM", temporal=list(dram_t)),
    ]


def test_fc_layer_is_dram_bound_on_16x16() -> None:
    hw = get_hardware("gemmini-16x16")
    fc = Problem.from_layer(MatmulLayer(M=1, K=2048, N=1000))
    m = Mapping(
        levels=_levels(acc_s=[("C", 16)], spad_t=[("C", 128)], spad_s=[("K", 16)], dram_t=[("K", 63)]),
        padded_dims={"K": 1008},
        dataflow="weight_stationary",
    )
    assert check(fc, hw, m) == []
    met = evaluate_mapping(fc, hw.resolve(m.dataflow), m)
    assert met.model == "gemmini"
    assert met.bound == "DRAM"
    # Every weight byte crosses DRAM once at the DMA's sustained rate: the cycles cannot beat that.
    assert met.cycles >= 2048 * 1000 / (16 * CostParams().dram_efficiency)
    assert met.utilization < 0.05


def test_gemmini_auto_1x1_conv_rereads_inputs_per_16_channels() -> None:
    """56x56 1x1 conv 256->64 under a tiled_conv_auto-style mapping (16 output channels x ~22x23 pixels
    per tile, channels outermost): inputs come from DRAM out_channels/16 = 4 times."""
    hw = get_hardware("gemmini-16x16")
    layer = Conv2dLayer(in_channels=256, out_channels=64, in_h=56, in_w=56)
    prob = Problem.from_layer(layer)
    # P, Q padded 56 -> 66 = 22 x 3 and 56 -> 69 = 23 x 3 would not divide; use 28 x 2 rows / 28 x 2 cols.
    m = Mapping(
        levels=_levels(
            acc_t=[("Q", 28), ("P", 28)], acc_s=[("C", 16)], spad_t=[("C", 16)], spad_s=[("K", 16)],
            dram_t=[("Q", 2), ("P", 2), ("K", 4)],
        ),
        dataflow="weight_stationary",
    )
    assert check(prob, hw, m) == []
    arch = hw.resolve(m.dataflow)
    nest = analyse(prob, arch, m)
    dram = len(arch.levels) - 1
    inputs = next(t for t in nest.transfers if t.tensor == "I" and t.upper == dram)
    assert inputs.fills == prob.tensor_elements("I") * (64 // 16)
    met = evaluate_mapping(prob, arch, m)
    by = {lv.level: lv for lv in met.levels}
    assert by["DRAM"].by_tensor["I"]["reads"] == pytest.approx(256 * 56 * 56 * 4)
    # Inner K would read them once: the calibrated model must prefer that order when DRAM matters.
    m2 = m.model_copy(deep=True)
    m2.levels[3].temporal = [("K", 4), ("Q", 2), ("P", 2)]
    n2 = analyse(prob, arch, m2)
    assert next(t for t in n2.transfers if t.tensor == "I" and t.upper == dram).fills == prob.tensor_elements("I")


def test_same_params_generalise_and_scale_with_dim() -> None:
    """The same parameters on 8x8, 16x16 and 32x32: larger arrays are not slower on a big GEMM."""
    layer = Problem.from_layer(MatmulLayer(M=512, K=512, N=512))
    cycles = {}
    for name, d in (("gemmini-8x8", 8), ("gemmini-16x16", 16), ("gemmini-32x32", 32)):
        hw = get_hardware(name)
        m = Mapping(
            levels=_levels(
                acc_t=[("P", 128)], acc_s=[("C", d)], spad_t=[("C", 128 // d)], spad_s=[("K", d)],
                dram_t=[("P", 4), ("K", 512 // d), ("C", 4)],
            ),
            dataflow="weight_stationary",
        )
        assert check(layer, hw, m) == [], name
        met = evaluate_mapping(layer, hw.resolve(m.dataflow), m)
        assert met.model == "gemmini" and math.isfinite(met.cycles)
        assert met.cycles >= met.ideal_cycles
        cycles[d] = met.cycles
    assert cycles[8] > cycles[16] > cycles[32]


def test_descriptor_without_cost_params_gets_defaults_and_non_gemmini_falls_back() -> None:
    hw = get_hardware("gemmini-16x16").model_copy(update={"cost_params": {}})
    assert CostParams.for_descriptor(hw) == CostParams()
    simba = get_hardware("simba")
    assert gemmini_levels(simba.resolve()) is None


def test_energy_breakdown_sums_to_total() -> None:
    hw = get_hardware("gemmini-16x16")
    fc = Problem.from_layer(MatmulLayer(M=16, K=256, N=64))
    m = Mapping(
        levels=_levels(acc_t=[("P", 16)], acc_s=[("C", 16)], spad_t=[("C", 16)], spad_s=[("K", 16)], dram_t=[("K", 4)]),
        dataflow="weight_stationary",
    )
    assert check(fc, hw, m) == []
    met = evaluate_mapping(fc, hw.resolve(m.dataflow), m)
    per_level = sum(met.energy_breakdown_pj.values())
    per_tensor = sum(v for lv in met.energy_by_tensor_pj.values() for v in lv.values())
    assert per_level == pytest.approx(met.energy_pj)
    assert per_tensor == pytest.approx(met.energy_pj)
    assert met.energy_by_tensor_pj["DRAM"]["W"] > 0 and met.energy_by_tensor_pj["MAC"]["MAC"] > 0
    assert first_order_metrics(fc, hw.resolve(m.dataflow), m).energy_pj == pytest.approx(met.energy_pj)


def test_dma_requests_follow_mvin_block_length() -> None:
    """gemmini.h moves up to MAX_BLOCK_LEN = 64 B / (DIM x 1 B) blocks per mvin row: on a 16x16 int8 array one
    request carries 4 channel blocks (64 B), on a 128x128 array one 128-channel block needs two requests."""
    from tileplan.cost.gemmini import Execution

    def conv(dim: int) -> Execution:
        return Execution(
            kind="conv", dim=dim, batch=1, groups=1, out_h=8, out_w=8, k=16, c=256, r=1, s=1, stride=(1, 1),
            pad=(0, 0), in_h=8, in_w=8, t_n=1, t_h=8, t_w=8, t_k=16, t_c=256, t_r=1, t_s=1, k_step=16, c_step=256,
        )

    cols = dict(zip(("count", "dim", "dram_bw", "ld_req"), range(4)))
    for dim, per_pixel in ((16, 4), (128, 4)):
        calls = call_features(conv(dim), 8.0)
        assert calls.shape[0] == 1
        weights = 256 * 1  # one request per input-channel row of 16 output channels
        bias = 64 * -(-16 // dim)  # accumulator initialisation: one row per pixel and DIM output channels
        assert calls[0, cols["ld_req"]] == 64 * per_pixel + weights + bias, dim


def test_timeloop_described_gemmini_predicts_like_the_catalog_entry() -> None:
    """The same chip described in Timeloop v0.3 (DRAM 'shared_bandwidth: 8', no cost_params) and by catalog name:
    the same mapping costs the same cycles, and DRAM runs at the calibrated DMA rate (peak x efficiency), not at
    the descriptor's nominal figure (DOSA's YAML says 8 B/cycle; FireSim sustains ~9.8)."""
    from tileplan.cost.gemmini import effective_dram_bandwidth, library_terms, nominal_dram_bandwidth
    from tileplan.hardware.catalog import load_descriptor

    v03 = Path(__file__).resolve().parents[2] / "examples" / "timeloop" / "gemmini_arch_v03.yaml"
    timeloop = load_descriptor(v03.read_text())
    catalog = get_hardware("gemmini-16x16")
    layer = Problem.from_layer(Conv2dLayer(in_channels=64, out_channels=64, in_h=30, in_w=30, kernel=(3, 3)))
    m = Mapping(
        levels=_levels(acc_t=[("Q", 7), ("P", 7)], acc_s=[("C", 16)], spad_t=[("C", 4), ("R", 3), ("S", 3)],
                       spad_s=[("K", 16)], dram_t=[("Q", 4), ("P", 4), ("K", 4)]),
        dataflow="weight_stationary",
    )
    got = []
    for hw in (timeloop, catalog):
        arch = hw.resolve("weight_stationary")
        assert check(layer, hw, m) == [], hw.name
        met = evaluate_mapping(layer, arch, m)
        assert met.model == "gemmini"
        got.append(met.cycles)
        p = CostParams.for_descriptor(hw).as_dict()
        assert nominal_dram_bandwidth(arch) == 8.0
        rate = effective_dram_bandwidth(8.0, p)
        assert rate == 16.0 * p["dram_efficiency"] > 8.0
        assert library_terms(arch, CostParams.for_descriptor(hw)).cycles_per_byte == pytest.approx(1 / rate)
    assert got[0] == pytest.approx(got[1])


def test_accumulator_initialisation_is_loaded_once_per_output_tile_when_there_is_a_bias() -> None:
    """Tileplan's code (and a library call with a bias) loads each output tile's accumulator rows on its first
    reduction call; DOSA's harness ran without bias and skips that load. Matmuls and convs alike."""
    import dataclasses

    from tileplan.cost.gemmini import Execution

    mm = Execution(kind="matmul", dim=16, batch=1, groups=1, out_h=64, out_w=1, k=64, c=128, r=1, s=1, stride=(1, 1),
                   pad=(0, 0), in_h=64, in_w=1, t_n=1, t_h=4, t_w=1, t_k=4, t_c=4, t_r=1, t_s=1, k_step=0, c_step=0)
    cols = {name: i for i, name in enumerate(("count", "dim", "dram_bw", "ld_req", "ld_bytes"))}
    with_bias = call_features(mm, 8.0)
    without = call_features(dataclasses.replace(mm, bias=False), 8.0)
    per_tile = lambda x, c: (x[:, cols["count"]] * x[:, cols[c]]).sum()  # noqa: E731
    # two reduction calls (C = 2 x 64) per output tile, one output tile: 64 rows x 4 column blocks loaded once
    assert per_tile(with_bias, "ld_req") - per_tile(without, "ld_req") == 64 * 4
    assert per_tile(with_bias, "ld_bytes") - per_tile(without, "ld_bytes") == 4 * 4 * 16 * 4


def test_kernel_columns_fold_when_channels_are_few() -> None:
    """kernel_fold: with every input channel in the call and adjacent kernel columns, DIM // C columns share a
    weight block; not with dilation, split channels, one kernel column or channels filling half the array."""
    from tileplan.cost.gemmini import kernel_fold

    assert kernel_fold(16, 3, 3, 7, 1) == 5
    assert kernel_fold(16, 1, 1, 3, 1) == 3  # depthwise: one channel per group
    assert kernel_fold(16, 3, 3, 7, 2) == 1 and kernel_fold(16, 6, 3, 7, 1) == 1
    assert kernel_fold(16, 3, 3, 1, 1) == 1 and kernel_fold(16, 9, 9, 3, 1) == 1
    # ResNet-50's conv1 under the hand-written tiles: as Tileplan's code (folded, tiles kept) about 3x faster
    # than as Gemmini's library runs it (the emulator measures the same: bench/results/codegen.md)
    hw = get_hardware("gemmini-16x16")
    arch = hw.resolve("weight_stationary")
    conv1 = Problem.from_layer(Conv2dLayer(in_channels=3, out_channels=64, in_h=224, in_w=224, kernel=7, stride=2,
                                           padding=3))
    from tileplan.mappers.gemmini_auto import gemmini_auto

    m = gemmini_auto(conv1, hw).mapping
    assert execution_from_mapping(conv1, arch, m, "tileplan").fold == 5 and execution_from_mapping(conv1, arch, m).fold == 1
    assert evaluate_mapping(conv1, arch, m, "tileplan").cycles < 0.4 * evaluate_mapping(conv1, arch, m, "library").cycles


def test_library_matmul_keeps_only_whole_matrix_operands() -> None:
    """gemmini.md: tiled_matmul reuses an A tile across j0 only when it is the whole of A (similarly B)."""
    from tileplan.cost.gemmini import library_matmul_keeps

    hw = get_hardware("gemmini-16x16")
    arch = hw.resolve("weight_stationary")
    layer = Problem.from_layer(MatmulLayer(M=64, K=64, N=256, bias=True))
    col = FEATURE_COLUMNS.index("ld_bytes")

    def loaded(tiles_p, tiles_k, executor):  # type: ignore[no-untyped-def]
        # M split in `tiles_p` row tiles, N in `tiles_k` column tiles, the reduction whole
        m = Mapping(levels=_levels(acc_t=[("P", 64 // tiles_p)], acc_s=[("C", 16)],
                                   spad_t=[("C", 4), ("K", 256 // tiles_k // 16)], spad_s=[("K", 16)],
                                   dram_t=[("K", tiles_k), ("P", tiles_p)]),
                    dataflow="weight_stationary")
        assert check(layer, hw, m) == []
        x = call_features(execution_from_mapping(layer, arch, m, executor), 8.0)
        return (x[:, 0] * x[:, col]).sum()

    # A whole (one row tile): the library loads it once for the 4 column tiles, like Tileplan's code
    assert loaded(1, 4, "library") == loaded(1, 4, "tileplan")
    # A in two row tiles: the library reloads it in each of the 8 calls; Tileplan's code keeps it across the 4
    assert loaded(2, 4, "library") - loaded(2, 4, "tileplan") == (8 - 2) * 32 * 64
    assert library_matmul_keeps(True, False, True) == (("P", "K", "C"), True)
    assert library_matmul_keeps(False, False, True)[1] is False and library_matmul_keeps(True, True, False)[1] is False


def test_a_channel_tile_starting_mid_block_needs_more_dma_requests() -> None:
    """Gemmini's DMA reads a row as aligned packets of at most 64 B, one request per 64-byte block it touches: a
    624-channel tile of a 2048-channel layer takes 10 requests per pixel when it starts at channel 0, 20 when it
    starts at channel 624 (byte 48 of a block), and the calls that load the misaligned tiles say so."""
    from tileplan.cost.gemmini import Execution, _row_req

    assert _row_req(624, 0, 2048, 64, 1.0) == 10
    assert _row_req(624, 48, 2048, 64, 1.0) == 20
    assert _row_req(64, 0, 3, 64, 1.0) == pytest.approx(1 + 63 / 64)  # rows 3 bytes apart cross a block 63/64 of the time

    e = Execution(
        kind="conv", dim=16, batch=1, groups=1, out_h=7, out_w=7, k=16, c=2048, r=1, s=1, stride=(1, 1),
        pad=(0, 0), in_h=7, in_w=7, t_n=1, t_h=7, t_w=7, t_k=16, t_c=624, t_r=1, t_s=1, k_step=16, c_step=624,
        bias=False,
    )
    calls = call_features(e, 8.0)
    col = {c: i for i, c in enumerate(FEATURE_COLUMNS)}
    full = calls[calls[:, col["ld_bytes"]] == 49 * 624 + 624 * 16]  # the three 624-channel tiles
    inputs = sorted(full[:, col["ld_req"]] - 624)  # minus one request per 16-byte weight row
    assert inputs == [49 * 10, 49 * 20, 49 * 20]  # channel 0: aligned; 624 and 1248: 48 and 32 bytes into a block


def test_dma_requests_per_chunk_equal_the_general_row_count() -> None:
    """conv_calls_many counts DMA requests once per distinct channel chunk (`_chunk_row_req`) and matmul_calls once
    per number (`_row_req` on scalars): both must equal `_row_req` on arrays (every row worked out on its own),
    misaligned chunks and narrower outputs included."""
    from tileplan.cost.gemmini import _chunk_row_req, _chunk_table, _row_req

    for total, tile, in_b, out_b, span in ((2048, 624, 1.0, 1.0, 64), (1000, 48, 1.0, 4.0, 16), (96, 40, 2.0, 1.0, 32),
                                           (3, 3, 1.0, 1.0, 64), (577, 577, 1.0, 1.0, 16)):
        table = _chunk_table(total, tile, tile, in_b)
        sizes, offsets = table[:, 1], table[:, 4]
        for mul, div, req_b in ((1.0, 1.0, in_b), (out_b, in_b, out_b)):
            row = float(total * req_b)
            general = _row_req(sizes, offsets * mul / div, row, float(span), req_b)
            chunked = _chunk_row_req(total, tile, tile, in_b, row, float(span), req_b, mul, div)
            assert np.array_equal(chunked, general)
            assert [_row_req(float(z), float(o) * mul / div, row, float(span), req_b) for z, o in zip(sizes, offsets)] \
                == list(general)


def test_library_auto_pays_the_tilers_host_search() -> None:
    """tiled_conv_auto searches for its tile on the host inside the run: the same calls as the library with that
    tile, plus tile_search_cycles per candidate the search sizes (replayed from gemmini.h's search)."""
    from tileplan.cost.gemmini import gemmini_cycles, tile_search_evaluations
    from tileplan.mappers.gemmini_auto import gemmini_auto

    hw = get_hardware("gemmini-16x16")
    arch = hw.resolve("weight_stationary")
    params = CostParams.for_descriptor(hw)
    wide = Problem.from_layer(Conv2dLayer(in_channels=2048, out_channels=512, in_h=7, in_w=7, kernel=(1, 1)))
    narrow = Problem.from_layer(Conv2dLayer(in_channels=64, out_channels=64, in_h=7, in_w=7, kernel=(1, 1)))
    for problem, many in ((wide, True), (narrow, False)):
        mapping = gemmini_auto(problem, hw).mapping
        searched = tile_search_evaluations(problem, arch)
        assert (searched > 500) == many  # 2048 channels shrink 16 at a time; 64 fit at once
        lib = gemmini_cycles(problem, arch, mapping, "library").cycles
        auto = gemmini_cycles(problem, arch, mapping, "library-auto").cycles
        assert auto == pytest.approx(lib + searched * params.tile_search_cycles)
    assert evaluate_mapping(wide, arch, gemmini_auto(wide, hw).mapping, "library-auto").executor == "library-auto"


def test_merging_identical_call_rows_keeps_every_runs_cycles(data) -> None:
    """The calibration merges call rows that differ only in their count (FeatureSet): each run's predicted cycles
    are those of its unmerged rows, for the shipped parameters and for perturbed ones."""
    from tileplan.cost.calibrate import FeatureSet
    from tileplan.cost.gemmini import cycles_vectorised

    runs = data[1].runs[:60]
    raw = [call_features(ex(r), 8.0) for r in runs]
    merged = FeatureSet(raw)
    unmerged = FeatureSet(raw, merged=True)  # taken as they are
    assert len(merged.x) < len(unmerged.x)
    for scale in (1.0, 1.7):
        theta = {k: (v * scale if isinstance(v, float) else v) for k, v in CostParams().model_dump().items()}
        a = cycles_vectorised(merged.x, merged.row_id, merged.n_rows, theta)
        b = cycles_vectorised(unmerged.x, unmerged.row_id, unmerged.n_rows, theta)
        np.testing.assert_allclose(a, b, rtol=1e-9)


def test_strided_requests_on_tensors_beyond_the_l2_wait_on_dram() -> None:
    """A request pays dram_request_cycles when its tensor is larger than the L2 (512 KiB) and its row is narrower than
    the tensor's: U-Net's 3x3 1024->1024 weights (9.4 MB) in 16-channel tiles (16-byte rows 1 KB apart) do, the same
    tile of a layer with only 16 output channels (whole, contiguous rows) or of a small layer does not, nor a
    descriptor with a larger L2."""
    from tileplan.cost.gemmini import Execution

    col = FEATURE_COLUMNS.index("dram_req")

    def dram_requests(c: int, k: int, t_k: int, l2: float = 512 * 1024) -> float:
        e = Execution(
            kind="conv", dim=16, batch=1, groups=1, out_h=28, out_w=28, k=k, c=c, r=3, s=3, stride=(1, 1),
            pad=(1, 1), in_h=28, in_w=28, t_n=1, t_h=4, t_w=28, t_k=t_k, t_c=c, t_r=3, t_s=3, k_step=t_k, c_step=c,
            bias=False, l2_bytes=l2,
        )
        calls = call_features(e, 8.0)
        return float((calls[:, col] * calls[:, 0]).sum())

    weight_rows = 9 * 1024  # per call: one 16-byte row per (kernel row, kernel col, input channel)
    assert dram_requests(1024, 1024, 16) == 7 * 64 * weight_rows + 7 * 64 * 4 * 28  # weights + the 16-channel stores
    assert dram_requests(1024, 16, 16) == 0  # whole rows of a 147 KB weight tensor, 50 KB of outputs
    assert dram_requests(64, 64, 16) == 0  # 37 KB of weights: the L2 keeps them
    assert dram_requests(1024, 1024, 16, l2=64 << 20) == 0
    hw = get_hardware("gemmini-16x16")
    assert CostParams.for_descriptor(hw).dram_request_cycles > 0


def test_strided_requests_on_tensors_beyond_the_llc_wait_on_dram_longer() -> None:
    """DOSA's FireSim image (..._l2_llc4mb_ddr3) has FASED's 4 MiB LLC behind the 512 KiB L2: a strided request on a
    tensor larger than the LLC too (far_req) waits on DRAM, llc_miss_cycles more; one on a tensor between the two
    is served by the LLC (dram_req only). U-Net's 3x3 1024->1024 weights (9.4 MB) are beyond both, a 3x3 512->512
    layer's (2.4 MB) beyond the L2 only; its outputs (0.4 MB) beyond neither."""
    from tileplan.cost.gemmini import Execution

    far, near = FEATURE_COLUMNS.index("far_req"), FEATURE_COLUMNS.index("dram_req")

    def requests(c: int, k: int, llc: float = 4 << 20) -> tuple[float, float]:
        e = Execution(
            kind="conv", dim=16, batch=1, groups=1, out_h=28, out_w=28, k=k, c=c, r=3, s=3, stride=(1, 1),
            pad=(1, 1), in_h=28, in_w=28, t_n=1, t_h=4, t_w=28, t_k=16, t_c=c, t_r=3, t_s=3, k_step=16, c_step=c,
            bias=False, llc_bytes=llc,
        )
        calls = call_features(e, 8.0)
        return float((calls[:, near] * calls[:, 0]).sum()), float((calls[:, far] * calls[:, 0]).sum())

    weight_rows = 9 * 1024
    assert requests(1024, 1024) == (7 * 64 * weight_rows + 7 * 64 * 4 * 28, 7 * 64 * weight_rows)
    on_l2, on_llc = requests(512, 512)
    assert on_l2 == 7 * 32 * 9 * 512 and on_llc == 0  # weights: strided, beyond the L2, within the LLC
    assert requests(1024, 1024, llc=64 << 20)[1] == 0
    p = CostParams.for_descriptor(get_hardware("gemmini-16x16"))
    assert p.llc_bytes == 4 << 20 and p.llc_miss_cycles > 0


def test_the_dma_cannot_outrun_dram_beyond_the_llc() -> None:
    """A tensor larger than the 4 MiB LLC is read from DRAM, slower than the DMA: a call's DMA lasts at least the bytes
    its loads read there x dram_byte_cycles (`far_bytes`). U-Net's 2-channel head reads a 9.6 MB input (64 channels at
    388 x 388) in whole 64-byte rows, which no request term marks (FireSim: 3.8-5.4M cycles, the model without the
    bound 2.4-2.7M). What the LLC still holds of a tile read again is not DRAM's (`_miss_shares`: a block survives the
    bytes touched in between with probability exp(-D / 4 MiB), the LLC replacing a random way); the input window a
    kernel-column tile only shifts is not read again."""
    from tileplan.cost.gemmini import Execution, _miss_shares, cycles_from_calls

    col = FEATURE_COLUMNS.index("far_bytes")

    def far(order: tuple[str, ...], t_k: int = 64, t_s: int = 3, llc: float = 4 << 20) -> float:
        e = Execution(
            kind="conv", dim=16, batch=1, groups=1, out_h=388, out_w=388, k=64, c=64, r=3, s=3, stride=(1, 1),
            pad=(0, 0), in_h=390, in_w=390, t_n=1, t_h=4, t_w=388, t_k=t_k, t_c=64, t_r=3, t_s=t_s, k_step=t_k,
            c_step=64, bias=False, order=order, llc_bytes=llc,
        )
        x = call_features(e, 8.0)
        return float((x[:, col] * x[:, 0]).sum())

    library = ("N", "G", "P", "Q", "K", "R", "S", "C")
    k_outer = ("N", "G", "K", "P", "Q", "C", "R", "S")
    halo = 97 * 6 * 390 * 64  # 97 tiles of 4 output rows read 6 input rows each (9.7 MB input, 37 KB weights)
    assert far(library) == pytest.approx(halo)
    # 16 output channels a call, inside the pixel loops: the three calls after a tile's first read the same input
    # tile again, and DRAM reads only what the LLC lost in between (one call's 150 KB input window, its weights and
    # its outputs: ~6.6%; the previous-call rule read none of it again)
    e16 = Execution(
        kind="conv", dim=16, batch=1, groups=1, out_h=388, out_w=388, k=64, c=64, r=3, s=3, stride=(1, 1),
        pad=(0, 0), in_h=390, in_w=390, t_n=1, t_h=4, t_w=388, t_k=16, t_c=64, t_r=3, t_s=3, k_step=16,
        c_step=64, bias=False, order=library,
    )
    lost = _miss_shares(e16, {"P": 97, "Q": 1, "K": 4, "C": 1, "N": 1, "R": 1, "S": 1, "G": 1}, "I", 4 << 20)["K"]
    assert 0.05 < lost < 0.08
    assert far(library, t_k=16) == pytest.approx(halo * (1 + 3 * lost))
    # output channels outermost: each 16-channel tile comes back to an input the LLC has all but lost (the whole
    # 9.7 MB input and more read in between)
    evicted = _miss_shares(dataclasses.replace(e16, order=k_outer),
                           {"P": 97, "Q": 1, "K": 4, "C": 1, "N": 1, "R": 1, "S": 1, "G": 1}, "I", 4 << 20)["K"]
    assert evicted > 0.98
    assert far(k_outer, t_k=16) == pytest.approx(halo * (1 + 3 * evicted))
    # kernel columns one call at a time only shift the window: DRAM reads the first column's (388 input columns;
    # the one new column of each shift is not counted), and of the two shifted windows what the LLC lost in between
    shifted = _miss_shares(dataclasses.replace(e16, order=k_outer, t_k=64, k_step=64, t_s=1),
                           {"P": 97, "Q": 1, "K": 1, "C": 1, "N": 1, "R": 1, "S": 3, "G": 1}, "I", 4 << 20)["S"]
    assert 0.03 < shifted < 0.08
    assert far(k_outer, t_s=1) == pytest.approx(97 * 6 * 388 * 64 * (1 + 2 * shifted))
    assert far(library, llc=64 << 20) == 0
    # the bound binds on the 2-channel head under the catalog's parameters
    p = CostParams.for_descriptor(get_hardware("gemmini-16x16"))
    e = Execution(
        kind="conv", dim=16, batch=1, groups=1, out_h=388, out_w=388, k=2, c=64, r=1, s=1, stride=(1, 1), pad=(0, 0),
        in_h=388, in_w=388, t_n=1, t_h=22, t_w=23, t_k=2, t_c=64, t_r=1, t_s=1, k_step=2, c_step=64, bias=False,
        order=library,
    )
    with_bound = cycles_from_calls(call_features(e, 8.0), p)
    without = cycles_from_calls(call_features(e, 8.0), p.model_copy(update={"dram_byte_cycles": 0.0}))
    assert p.dram_byte_cycles > 0
    assert with_bound.dma >= 388 * 388 * 64 * p.dram_byte_cycles
    # at FireSim's measured DRAM rate (0.15 cycles/B, held by a prior since the caches' random replacement is modelled;
    # the fit put it at 0.30 before) the requests' own waits, which since cost25m count the whole-row reads DRAM serves
    # too, exceed it on this head: it no longer binds there; it does when the reads do not wait (below)
    assert with_bound.cycles == without.cycles
    no_reads_wait = p.model_copy(update={"llc_miss_cycles": 0.0, "dram_request_cycles": 0.0})
    # (by 11% at 0.15 cycles/B; 40% and more at the 0.30 fitted before)
    assert cycles_from_calls(call_features(e, 8.0), no_reads_wait).cycles > 1.1 * cycles_from_calls(
        call_features(e, 8.0), no_reads_wait.model_copy(update={"dram_byte_cycles": 0.0})).cycles


def test_strided_requests_dram_serves_move_whole_blocks_over_the_memory_bus() -> None:
    """A strided request DRAM serves (`far_req`: a channel tile of a tensor beyond the LLC) brings its whole 64-byte
    block into the L2 over the 8-byte memory bus (rocket-chip's MemoryBusParams), and a strided store's block goes
    back out again (the L2 allocates on a write and writes the block back): a call's DMA lasts at least (far_req +
    far_st_req) x 64 / mem_bus_bytes. U-Net's 1-channel 3x3 layer (C1_K64_P570) writes its 20.8 MB output 32
    channels a call (FireSim: 35-44M cycles; the model without the bound ~27M)."""
    from tileplan.cost.gemmini import Execution, cycles_from_calls, refill_cycles

    cols = {c: FEATURE_COLUMNS.index(c) for c in ("far_req", "far_st_req", "st_req")}

    def features(t_k: int, llc: float = 4 << 20) -> np.ndarray:
        e = Execution(
            kind="conv", dim=16, batch=1, groups=1, out_h=570, out_w=570, k=64, c=1, r=3, s=3, stride=(1, 1),
            pad=(1, 1), in_h=570, in_w=570, t_n=1, t_h=2, t_w=570, t_k=t_k, t_c=1, t_r=3, t_s=3, k_step=t_k,
            c_step=1, bias=False, order=("N", "G", "K", "P", "Q", "C", "R", "S"), llc_bytes=llc,
        )
        return call_features(e, 8.0)

    def total(x: np.ndarray, name: str) -> float:
        return float((x[:, cols[name]] * x[:, 0]).sum())

    half = features(32)
    # every store is a strided row (32 of 64 channels) of a 20.8 MB output: all DRAM's, and all stores
    assert total(half, "st_req") > 0
    assert total(half, "far_st_req") == pytest.approx(total(half, "st_req"))
    assert total(half, "far_req") >= total(half, "far_st_req")
    # whole rows (all 64 channels a call) are not strided; within the LLC nothing is DRAM's
    assert total(features(64), "far_st_req") == 0
    assert total(features(32, llc=64 << 20), "far_st_req") == 0
    p = CostParams.for_descriptor(get_hardware("gemmini-16x16"))
    assert p.mem_bus_bytes == 8 and refill_cycles(p.as_dict()) == 8
    assert cycles_from_calls(half, p).dma >= (total(half, "far_req") + total(half, "far_st_req")) * 8 * (1 - 1e-9)
    # (the bound binds where DRAM's waits are short: with the shipped llc_miss_cycles, each store's two waits on DRAM
    # already take longer than its block's two trips over the bus)
    q = p.model_copy(update={"llc_miss_cycles": 0.0})
    with_bound = cycles_from_calls(half, q)
    without = cycles_from_calls(half, q.model_copy(update={"mem_bus_bytes": 1e9}))
    assert with_bound.dma >= (total(half, "far_req") + total(half, "far_st_req")) * 8 * (1 - 1e-9)
    assert with_bound.cycles > without.cycles


def test_strided_stores_dram_serves_wait_on_it_twice() -> None:
    """A strided store request on a tensor beyond the LLC (`far_st_req`: part of a 64-byte block the L2 does not hold)
    goes to DRAM twice, where a strided load goes once: the write-allocate L2 fetches the block before merging the
    write, and writes the dirty block back later. Each of those DRAM transfers waits llc_miss_cycles (no parameter of
    its own): a call's DMA is (far_req + far_st_req) x llc_miss_cycles above what it is without the wait (U-Net's
    C1_K64_P570, 32 of its 64 output channels a call)."""
    from tileplan.cost.gemmini import Execution, cycles_from_calls

    e = Execution(
        kind="conv", dim=16, batch=1, groups=1, out_h=570, out_w=570, k=64, c=1, r=3, s=3, stride=(1, 1), pad=(1, 1),
        in_h=570, in_w=570, t_n=1, t_h=2, t_w=570, t_k=32, t_c=1, t_r=3, t_s=3, k_step=32, c_step=1, bias=False,
        order=("N", "G", "K", "P", "Q", "C", "R", "S"),
    )
    x = call_features(e, 8.0)
    total = {c: float((x[:, FEATURE_COLUMNS.index(c)] * x[:, 0]).sum()) for c in ("far_req", "far_st_req")}
    assert total["far_st_req"] > 0
    # the bounds (DRAM's own rate, the memory bus) off, so the DMA is the sum of its terms
    p = CostParams.for_descriptor(get_hardware("gemmini-16x16")).model_copy(
        update={"mem_bus_bytes": 1e9, "dram_byte_cycles": 0.0})
    assert p.llc_miss_cycles > 0
    waiting = cycles_from_calls(x, p).dma
    without = cycles_from_calls(x, p.model_copy(update={"llc_miss_cycles": 0.0})).dma
    assert waiting - without == pytest.approx((total["far_req"] + total["far_st_req"]) * p.llc_miss_cycles, rel=1e-9)


def test_whole_rows_dram_reads_wait_as_strided_requests_do() -> None:
    """Every 64-byte block DRAM reads for a call's loads is one read (DMA.scala's StreamReader: one get per block), and
    waits on DRAM whether its row is whole or strided: U-Net's 2-channel head reads its 9.6 MB input in whole 64-byte
    rows (far_bytes, no strided request), each read waiting dram_request_cycles + llc_miss_cycles and crossing the
    memory bus, as a strided request DRAM serves does (`whole_far_reads`, no parameter of its own). A strided load DRAM
    serves is one read however few of its block's bytes it uses, so it is not counted twice."""
    from tileplan.cost.gemmini import Execution, cycles_from_calls, whole_far_reads

    library = ("N", "G", "P", "Q", "K", "R", "S", "C")
    e = Execution(
        kind="conv", dim=16, batch=1, groups=1, out_h=388, out_w=388, k=2, c=64, r=1, s=1, stride=(1, 1), pad=(0, 0),
        in_h=388, in_w=388, t_n=1, t_h=22, t_w=23, t_k=2, t_c=64, t_r=1, t_s=1, k_step=2, c_step=64, bias=False,
        order=library,
    )
    x = call_features(e, 8.0)
    col = {c: x[:, FEATURE_COLUMNS.index(c)] for c in FEATURE_COLUMNS}
    reads = float((whole_far_reads(col) * col["count"]).sum())
    assert reads == pytest.approx(388 * 388)  # one 64-byte pixel row a read, no strided far request
    # the bounds (DRAM's own rate, the memory bus) off, so the DMA is the sum of its terms
    p = CostParams.for_descriptor(get_hardware("gemmini-16x16")).model_copy(
        update={"mem_bus_bytes": 1e9, "dram_byte_cycles": 0.0})
    waiting = cycles_from_calls(x, p).dma
    without = cycles_from_calls(x, p.model_copy(update={"llc_miss_cycles": 0.0, "dram_request_cycles": 0.0})).dma
    assert waiting - without == pytest.approx(reads * (p.llc_miss_cycles + p.dram_request_cycles), rel=1e-9)
    # within the LLC the reads are the LLC's: none counted
    near = call_features(dataclasses.replace(e, llc_bytes=64 << 20), 8.0)
    ncol = {c: near[:, FEATURE_COLUMNS.index(c)] for c in FEATURE_COLUMNS}
    assert float((whole_far_reads(ncol) * ncol["count"]).sum()) == 0
    # strided weight rows beyond the LLC (16 of U-Net's 1024 output channels: 16-byte reads) are far_req already
    w = Execution(
        kind="conv", dim=16, batch=1, groups=1, out_h=28, out_w=28, k=1024, c=1024, r=3, s=3, stride=(1, 1),
        pad=(1, 1), in_h=28, in_w=28, t_n=1, t_h=4, t_w=28, t_k=16, t_c=1024, t_r=3, t_s=3, k_step=16, c_step=1024,
        bias=False,
    )
    wx = call_features(w, 8.0)
    wcol = {c: wx[:, FEATURE_COLUMNS.index(c)] for c in FEATURE_COLUMNS}
    assert float((whole_far_reads(wcol) * wcol["count"]).sum()) == 0


def test_narrow_output_rows_wait_behind_their_block() -> None:
    """A store request waits behind earlier ones of its mvout to the same 64-byte block (block_req x
    block_wait_cycles): U-Net's head (2 output channels: 16 pixels' rows in 32 bytes per mvout) waits on ~10 of every
    16 requests; 64 output channels (rows 64 bytes apart) on none. Under the catalog's parameters the 2-channel
    layer costs more per output byte than it did without the term."""
    from tileplan.cost.gemmini import Execution, cycles_from_calls

    col = FEATURE_COLUMNS.index("block_req")

    def calls(k: int) -> np.ndarray:
        e = Execution(
            kind="conv", dim=16, batch=1, groups=1, out_h=8, out_w=32, k=k, c=64, r=1, s=1, stride=(1, 1),
            pad=(0, 0), in_h=8, in_w=32, t_n=1, t_h=8, t_w=32, t_k=k, t_c=64, t_r=1, t_s=1, k_step=k, c_step=64,
            bias=False,
        )
        return call_features(e, 8.0)

    def waiting(k: int) -> float:
        x = calls(k)
        return float((x[:, col] * x[:, 0]).sum())

    mvouts = 8 * 2  # 8 output rows of 32 pixels, 16 pixels per mvout
    per_mvout = 16 / (1 + 31 / 64) - 1  # 16 requests over the 1.48 blocks 32 bytes touch (expected), less the first
    assert waiting(2) == pytest.approx(mvouts * per_mvout)
    assert waiting(64) == 0
    p = CostParams.for_descriptor(get_hardware("gemmini-16x16"))
    assert p.block_wait_cycles > 0
    without = p.model_copy(update={"block_wait_cycles": 0.0})
    assert cycles_from_calls(calls(2), p).dma > cycles_from_calls(calls(2), without).dma + waiting(2) * 0.99 * p.block_wait_cycles


def test_descriptor_params_are_the_stored_values_and_shared_between_equal_descriptors():
    """The mappers ask for a descriptor's parameters once per candidate: equal stored values give one frozen
    instance (no re-validation), and a descriptor's own values still override the defaults, key by key."""
    hw = get_hardware("gemmini-16x16")
    a = CostParams.for_descriptor(hw)
    assert a == CostParams(**{k: v for k, v in hw.cost_params.items() if k in CostParams.model_fields})
    assert CostParams.for_descriptor(hw.model_copy(deep=True)) is a
    slower = hw.model_copy(update={"cost_params": {**hw.cost_params, "dma_request_cycles": 7.0}})
    b = CostParams.for_descriptor(slower)
    assert b.dma_request_cycles == 7.0 and b.preload_dims == a.preload_dims and b is not a


def test_descriptor_params_follow_stored_values_changed_in_place():
    """`for_descriptor` remembers its last answer per descriptor; a descriptor whose stored dict was changed in place
    since (a frozen model's dict can be) gets the new values, not the remembered ones."""
    hw = get_hardware("gemmini-16x16").model_copy(deep=True)
    assert CostParams.for_descriptor(hw).dma_request_cycles == hw.cost_params["dma_request_cycles"]
    hw.cost_params["dma_request_cycles"] = 5.5
    assert CostParams.for_descriptor(hw).dma_request_cycles == 5.5
    hw.cost_params.clear()
    assert CostParams.for_descriptor(hw) == CostParams()


def test_notes_follow_the_mapping_and_the_descriptors_stored_values():
    """The model's notes are remembered per (architecture, occupied array, executor); a different occupied array or
    executor, or cost_params changed in place, give the notes worked out afresh."""
    from tileplan.cost.gemmini import _notes, gemmini_notes, occupied_array
    from tileplan.mappers.gemmini_auto import gemmini_auto

    hw = get_hardware("gemmini-16x16").model_copy(deep=True)
    arch = hw.resolve("weight_stationary")
    problem = Problem.from_layer(MatmulLayer(name="mm", M=64, K=64, N=64))
    mapping = gemmini_auto(problem, hw).mapping
    for executor in ("library", "tileplan", "library-auto"):
        assert gemmini_notes(arch, mapping, executor) == _notes(arch, occupied_array(arch, mapping), executor)
    before = gemmini_notes(arch, mapping, "tileplan")
    hw.cost_params["dram_efficiency"] = 0.5
    after = gemmini_notes(arch, mapping, "tileplan")
    assert after != before and any("8.00 B/cycle" in n for n in after)
    assert after == _notes(arch, occupied_array(arch, mapping), "tileplan")


def test_calls_costed_together_are_what_each_mapping_costs_alone():
    """`gemmini_cycles_many` (polish costs its moves' calls in one pass) gives each mapping exactly its own
    `gemmini_cycles`, mappings that run alike included, and None where another model scores the hardware."""
    from tileplan.cost.gemmini import gemmini_cycles
    from tileplan.cost.model import gemmini_cycles_many
    from tileplan.mappers.gemmini_auto import gemmini_auto
    from tileplan.mappers.polish import neighbours

    hw = get_hardware("gemmini-16x16")
    arch = hw.resolve("weight_stationary")
    for layer in (Conv2dLayer(name="c", in_channels=64, out_channels=64, in_h=28, in_w=28, kernel=3, padding=1),
                  MatmulLayer(name="mm", M=100, K=768, N=512)):
        problem = Problem.from_layer(layer)
        start = gemmini_auto(problem, hw).mapping
        moves = [m for m in neighbours(start) if not check(problem, hw, m)]
        assert len(moves) > 5
        for executor in ("tileplan", "library"):
            together = gemmini_cycles_many(problem, arch, moves + moves[:2], executor)
            assert together == [gemmini_cycles(problem, arch, m, executor) for m in moves + moves[:2]]
            assert [evaluate_mapping(problem, arch, m, executor, gemmini=g).model_dump() for m, g in
                    zip(moves, together)] == [evaluate_mapping(problem, arch, m, executor).model_dump() for m in moves]
    simba = get_hardware("simba")
    problem = Problem.from_layer(MatmulLayer(name="mm", M=64, K=64, N=64))
    assert gemmini_cycles_many(problem, simba.resolve(), [Mapping(levels=[])], "tileplan") == [None]


def test_a_prior_holds_dram_byte_cycles_at_firesims_measured_dram_rate() -> None:
    """With U-Net held out no 16x16 run pins dram_byte_cycles, and the fold's answer depended on where the optimiser
    started (costmodel_residuals.md, seventh round). The fit carries one extra residual per prior, weight x
    log(parameter / value): zero at the value (FireSim's measured DRAM bandwidth, gemmini.md). With the caches' random
    replacement (`gemmini._miss_shares`) the runs leave the rate flat between ~0.15 and ~0.40 cycles/B, and a weak
    prior (weight 0.01) let the fold without RetinaNet fit 0.40 (2.5 B/cycle, below anything FireSim measured;
    thirteenth round): the weight (5) now holds it at the measured rate in every fold."""
    import math

    from tileplan.cost import calibrate

    value, weight = calibrate.PRIORS["dram_byte_cycles"]
    assert 1 / 8 <= value <= 1 / 5.5
    theta = CostParams().as_dict()
    at_value = calibrate._residuals([], {**theta, "dram_byte_cycles": value})
    assert at_value.tolist() == [0.0]
    twice = calibrate._residuals([], {**theta, "dram_byte_cycles": 2 * value})
    assert twice.tolist() == pytest.approx([weight * math.log(2)])
    assert weight >= 1


def test_a_tile_read_again_misses_the_caches_as_random_replacement_and_their_sets_say() -> None:
    """A convolution's tile read again when a DRAM loop that does not index it comes back to it is partly still in the
    L2 and the LLC: both replace a random way, so a block survives the D bytes the calls in between touch with
    probability exp(-D / cache) (`_miss_shares`). D counts each tensor's rows in whole 64-byte blocks, and a strided
    tile's own rows as its sets see them: weight rows 1 KiB apart (16 of 1,024 output channels) start in 64 of the L2's
    1,024 sets, so each takes 16 blocks' worth of the L2 (U-Net's C1024_K1024_P28 under DOSA's 448-call mapping measured
    20.5 cycles a weight request: every re-read misses), where rows 1,040 B apart spread over every set."""
    from tileplan.cost.gemmini import Execution, _miss_shares

    l2, llc = 512 << 10, 4 << 20
    order = ("N", "G", "K", "C", "R", "S", "P", "Q")  # the pixel loops innermost: each call re-reads the weight tile
    e = Execution(
        kind="conv", dim=16, batch=1, groups=1, out_h=28, out_w=28, k=1024, c=1024, r=3, s=3, stride=(1, 1),
        pad=(1, 1), in_h=28, in_w=28, t_n=1, t_h=4, t_w=28, t_k=16, t_c=1024, t_r=3, t_s=3, k_step=16, c_step=1024,
        bias=False, order=order,
    )
    trips = {"P": 7, "Q": 1, "K": 64, "C": 1, "N": 1, "R": 1, "S": 1, "G": 1}
    input_blocks = 6 * 30 * 1024 // 64  # the call's input window (whole 1,024-byte pixel rows)
    output_blocks = 4 * 28  # 16-byte output rows, a block each
    weight_rows = 3 * 3 * 1024
    shares = _miss_shares(e, trips, "W", l2)
    assert set(shares) == {"P"}  # the one loop of several trips that does not index the weights
    assert shares["P"] == pytest.approx(1 - math.exp(-(weight_rows * 16 + input_blocks + output_blocks) * 64 / l2))
    assert shares["P"] > 0.999
    # rows 1,040 bytes apart (a padded copy) spread over every set: a block each
    padded = dataclasses.replace(e, w_row=1040)
    spread = _miss_shares(padded, trips, "W", l2)["P"]
    assert spread == pytest.approx(1 - math.exp(-(weight_rows + input_blocks + output_blocks) * 64 / l2))
    assert spread < 0.8
    # the LLC (eight times the sets) keeps more of the same tile
    assert _miss_shares(padded, trips, "W", llc)["P"] < 0.2
    # the features: the first pixel tile's call reads every weight row from DRAM, the six after it the share the LLC
    # misses (far_req), and the share the L2 misses waits behind it (dram_req)
    x = call_features(padded, 8.0)
    col = {c: x[:, FEATURE_COLUMNS.index(c)] for c in FEATURE_COLUMNS}
    w_req = float((col["far_req"] * col["count"]).sum())
    # 64 output-channel tiles of 9,216 16-byte rows (at 1,040-byte offsets each stays within a block: a request each)
    per_tile = weight_rows * 64.0
    llc_share = _miss_shares(padded, trips, "W", llc)["P"]
    assert w_req == pytest.approx(per_tile * (1 + 6 * llc_share), rel=1e-9)
    # (the 802 KB output's 16-byte stores are strided beyond the L2 too)
    l2_req = float(((col["dram_req"] - col["st_req"]) * col["count"]).sum())
    assert l2_req == pytest.approx(per_tile * (1 + 6 * spread), rel=1e-9)


def test_miss_rows_are_the_miss_shares_of_each_cache_and_operand() -> None:
    """`conv_calls_many` reads the caches' miss shares of (L2, I), (L2, W), (LLC, I), (LLC, W) per loop from
    `_miss_rows`, which works each loop's tiles out once for all four: bit for bit `_miss_shares` of each (1.0 where a
    loop has one trip or indexes the operand), over orders, strides, dilations, groups, padded copies and byte widths."""
    import itertools
    import random

    from tileplan.cost.gemmini import _FIRST, Execution, _miss_rows, _miss_shares

    rng = random.Random(7)
    dims = ("N", "G", "K", "C", "R", "S", "P", "Q")
    checked = 0
    for _ in range(400):
        out_h, out_w, k, c = rng.choice((7, 14, 28, 56)), rng.choice((7, 14, 28, 56)), rng.choice((16, 64, 256, 1024)), \
            rng.choice((3, 16, 64, 512))
        r = s = rng.choice((1, 3, 7))
        stride, dilation = rng.choice(((1, 1), (2, 2))), rng.choice(((1, 1), (2, 2)))
        groups, batch = rng.choice((1, 1, 4)), rng.choice((1, 2))
        t = {"h": rng.randint(1, out_h), "w": rng.randint(1, out_w), "k": rng.choice((16, 32, k)), "c": rng.choice((16, 3, c)),
             "r": rng.randint(1, r), "s": rng.randint(1, s), "n": rng.randint(1, batch)}
        order = tuple(rng.sample(dims, len(dims)))
        e = Execution(
            kind="conv", dim=16, batch=batch, groups=groups, out_h=out_h, out_w=out_w, k=k, c=c, r=r, s=s,
            stride=stride, pad=(0, 0), in_h=(out_h - 1) * stride[0] + (r - 1) * dilation[0] + 1,
            in_w=(out_w - 1) * stride[1] + (s - 1) * dilation[1] + 1, dilation=dilation, t_n=t["n"], t_h=t["h"],
            t_w=t["w"], t_k=min(t["k"], k), t_c=min(t["c"], c), t_r=t["r"], t_s=t["s"], k_step=min(t["k"], k),
            c_step=min(t["c"], c), order=order, in_bytes=rng.choice((1.0, 2.0)), out_bytes=rng.choice((1.0, 4.0)),
            w_row=rng.choice((0, 1040)), o_row=rng.choice((0, 80)), i_row=rng.choice((0, 48)),
            l2_bytes=rng.choice((512 << 10, 1 << 20)), llc_bytes=4 << 20,
        )
        trips = {"P": -(-out_h // e.t_h), "Q": -(-out_w // e.t_w), "K": -(-k // e.k_step), "C": -(-c // e.c_step),
                 "N": -(-batch // e.t_n), "R": -(-r // e.t_r), "S": -(-s // e.t_s), "G": groups}
        expected = [[m.get(d, 1.0) for d in _FIRST] for m in (
            _miss_shares(e, trips, x, cache) for cache, x in itertools.product((e.l2_bytes, e.llc_bytes), ("I", "W")))]
        assert _miss_rows(e, trips) == expected
        checked += any(v != 1.0 for row in expected for v in row)
    assert checked > 200  # most draws have a loop that comes back to a tile
