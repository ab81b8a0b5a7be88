"""The cosa mapper: always legal, deterministic, honours the time limit, and uses what it adds."""

import copy

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tileplan.check import check
from tileplan.hardware.catalog import catalog_dir, get_hardware, load_descriptor
from tileplan.mappers.base import MapperOptions, get_mapper
from tileplan.problem import Problem
from tileplan.workload import parse_layer

COSA = get_mapper("cosa")


def plan(layer, hw, **opts):
    problem = Problem.from_layer(parse_layer(layer))
    result = COSA.map(problem, hw, MapperOptions(**opts))
    return problem, result


conv_layers = st.builds(
    lambda c, k, hw, r, s, groups: {
        "op": "conv2d",
        "in_channels": c * groups,
        "out_channels": k * groups,
        "in_h": hw,
        "in_w": hw + 3,
        "kernel": r,
        "stride": s,
        "padding": r // 2,
        "groups": groups,
    },
    st.sampled_from([1, 3, 16, 24, 64, 100]),
    st.sampled_from([1, 8, 16, 48, 120]),
    st.integers(7, 40),
    st.sampled_from([1, 3, 5]),
    st.sampled_from([1, 2]),
    st.sampled_from([1, 1, 1, 4]),
)
matmuls = st.builds(
    lambda m, k, n: {"op": "matmul", "M": m, "K": k, "N": n},
    st.integers(1, 300),
    st.integers(1, 600),
    st.integers(1, 600),
)


def gemmini_like(dim: int, spad_kib: int, acc_kib: int, dram_bw: float) -> object:
    data = yaml.safe_load((catalog_dir() / "gemmini-16x16.yaml").read_text())
    data["name"] = f"gemmini-{dim}-{spad_kib}-{acc_kib}"
    data["pe_array"]["rows"] = data["pe_array"]["cols"] = dim
    regs, acc, spad, dram = data["memory_levels"]
    regs["instances"], regs["capacity"] = dim * dim, dim * dim * 4
    acc["instances"], acc["capacity"] = dim, f"{acc_kib}KiB"
    spad["capacity"] = f"{spad_kib}KiB"
    dram["bandwidth"] = dram_bw
    return load_descriptor(data)


def simba_like(gb_kib: int, ib_kib: int) -> object:
    data = yaml.safe_load((catalog_dir() / "simba.yaml").read_text())
    data["name"] = f"simba-{gb_kib}-{ib_kib}"
    data["memory_levels"][4]["capacity"] = f"{gb_kib}KiB"
    data["memory_levels"][3]["capacity"] = f"{ib_kib}KiB"
    return load_descriptor(data)


hardware = st.one_of(
    st.builds(gemmini_like, st.sampled_from([4, 8, 16, 32]), st.sampled_from([32, 64, 256]),
              st.sampled_from([16, 64]), st.sampled_from([4.0, 8.0, 16.0])),
    st.builds(simba_like, st.sampled_from([32, 64, 128]), st.sampled_from([16, 64])),
    st.sampled_from([get_hardware("eyeriss-os"), get_hardware("gemmini-chip")]),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer=st.one_of(conv_layers, matmuls), hw=hardware)
def test_plans_are_always_legal(layer, hw):
    problem, result = plan(layer, hw, time_limit_s=5)
    assert check(problem, hw, result.mapping) == []
    assert result.solver.status in ("optimal", "time_limit")


def test_same_input_same_plan():
    hw = get_hardware("gemmini-16x16")
    layer = {"op": "conv2d", "in_channels": 128, "out_channels": 128, "in_h": 28, "in_w": 28, "kernel": 3, "padding": 1}
    first = plan(layer, hw)[1].mapping
    for _ in range(2):
        assert plan(copy.deepcopy(layer), hw)[1].mapping == first


def test_time_limit_returns_best_so_far_with_gap():
    hw = get_hardware("simba")
    layer = {"op": "conv2d", "in_channels": 256, "out_channels": 512, "in_h": 56, "in_w": 56, "stride": 2}
    problem, result = plan(layer, hw, time_limit_s=0.1)
    assert result.solver.status == "time_limit"
    # the status says the limit stopped the search; no wall-clock bound here (it failed at 3.03 s once on a loaded
    # machine: timings belong in bench/mapper.py)
    assert check(problem, hw, result.mapping) == []
    _, full = plan(layer, hw, time_limit_s=30)
    assert full.solver.status == "optimal" and full.solver.mip_gap is not None and full.solver.mip_gap <= 1e-3


def loop_nest_gemmini():
    """Gemmini's shape, but with a scratchpad that may also hold outputs: no longer executed as library
    calls (tileplan.execution), so the plain loop-nest model, where unrolling is what fills the array,
    applies."""
    data = yaml.safe_load((catalog_dir() / "gemmini-16x16.yaml").read_text())
    data["name"] = "gemmini-loop-nest"
    data["memory_levels"][2]["keeps"] = ["I", "W", "O"]
    return load_descriptor(data)


def test_padding_fills_the_array_when_no_divisor_does():
    hw = loop_nest_gemmini()
    problem, result = plan({"op": "matmul", "M": 64, "K": 256, "N": 1000}, hw, dataflow="weight_stationary")
    assert result.mapping.padded_dims == {"K": 1008}
    spad = result.mapping.levels[2]
    assert spad.spatial_factor("K") == 16


def test_dataflow_choice_uses_output_stationary_when_channels_are_few():
    # Three input channels fill 3 of 16 rows under WS; OS unrolls output pixels over the rows instead.
    hw = loop_nest_gemmini()
    layer = {"op": "conv2d", "in_channels": 3, "out_channels": 64, "in_h": 224, "in_w": 224, "kernel": 7,
             "stride": 2, "padding": 3}
    problem, result = plan(layer, hw)
    assert result.mapping.dataflow == "output_stationary"
    _, ws = plan(layer, hw, dataflow="weight_stationary")
    assert ws.mapping.dataflow == "weight_stationary"


def test_infeasible_hardware_is_a_clear_error():
    from tileplan.errors import MappingInfeasible

    data = yaml.safe_load((catalog_dir() / "gemmini-16x16.yaml").read_text())
    data["memory_levels"][1]["capacity"] = "64B"  # 4 bytes per accumulator slice: one int32
    data["memory_levels"][2]["capacity"] = "1B"
    hw = load_descriptor(data)
    with pytest.raises(MappingInfeasible, match="no dataflow admits a legal mapping"):
        plan({"op": "matmul", "M": 16, "K": 16, "N": 16}, hw)


def test_layer_with_nothing_to_split():
    hw = get_hardware("gemmini-16x16")
    problem, result = plan({"op": "matmul", "M": 1, "K": 1, "N": 1}, hw)
    assert check(problem, hw, result.mapping) == []
    assert all(not lv.temporal and not lv.spatial for lv in result.mapping.levels)


def test_library_hardware_plans_the_dataflow_its_library_runs():
    # Gemmini's library runs weight-stationary only; cosa plans that unless asked for another dataflow.
    hw = get_hardware("gemmini-16x16")
    layer = {"op": "conv2d", "in_channels": 3, "out_channels": 64, "in_h": 56, "in_w": 56, "kernel": 7,
             "stride": 2, "padding": 3}
    assert plan(layer, hw)[1].mapping.dataflow == "weight_stationary"
    problem, result = plan(layer, hw, dataflow="output_stationary")
    assert result.mapping.dataflow == "output_stationary" and check(problem, hw, result.mapping) == []


@pytest.mark.parametrize(
    "layer",
    [
        {"op": "matmul", "M": 1, "K": 2048, "N": 1000},  # ResNet-50's FC: energy and cycles pull apart here
        {"op": "conv2d", "in_channels": 512, "out_channels": 512, "in_h": 7, "in_w": 7, "kernel": 3, "padding": 1},
    ],
)
def test_weighted_objective_never_returns_a_plan_slower_than_the_hand_written_one(layer):
    from tileplan.cost.model import evaluate_mapping

    hw = get_hardware("gemmini-16x16")
    problem, result = plan(layer, hw)  # default objective: latency 0.6, energy 0.3, memory 0.1
    base = get_mapper("gemmini-auto").map(problem, hw, MapperOptions())
    ours = evaluate_mapping(problem, hw.resolve(result.mapping.dataflow), result.mapping).cycles
    theirs = evaluate_mapping(problem, hw.resolve(base.mapping.dataflow), base.mapping).cycles
    assert ours <= theirs * (1 + 1e-9)


def test_the_latency_optimum_competes_when_other_terms_weigh():
    """BERT-base's ffn_down (128 x 3072 -> 768) on Gemmini under the default weights: the proxy's memory-fill term
    pulls the MIP to 64-row x 96-channel x 768-deep call tiles (1,288k cycles when this was written); the latency
    optimum competes, so the weighted plan (128 x 64 x 512) runs within 1% of the latency-only plan (after the
    block_wait_cycles refit the latency-only MIP finds 128 x 64 x 128, 0.7% faster and costlier in energy; before
    it, the two were the same plan). Planned here rather than cycles written down: a refit moves both."""
    from tileplan.cost.model import evaluate_mapping
    from tileplan.mappers.base import Objective

    hw = get_hardware("gemmini-16x16")
    layer = {"op": "matmul", "M": 128, "K": 3072, "N": 768}

    def cycles(**opts):  # type: ignore[no-untyped-def]
        problem, result = plan(layer, hw, **opts)
        mp = result.mapping
        return evaluate_mapping(problem, hw.resolve(mp.dataflow), mp, mp.executor or "tileplan").cycles

    weighted, fastest = cycles(), cycles(objective=Objective(latency=1.0, energy=0.0, memory_utilization=0.0))
    assert weighted <= 1.01 * fastest
    assert weighted < 1_288_000 * 0.98  # not the fill-pulled 64 x 96 x 768 tiles


@pytest.mark.parametrize("hw_name, weights, solves", [
    # the weighted MIP (fill weighs) without presolve; the latency re-solve from its answer with a tight gap
    ("simba", (0.6, 0.3, 0.1), [(False, False, None), (True, True, 2e-6)]),
    ("simba", (1.0, 0.0, 0.0), [(True, False, None)]),  # latency alone: one solve, as before
    ("simba", (0.7, 0.3, 0.0), [(True, False, None), (True, True, 2e-6)]),  # no fill term: presolve pays there
    ("gemmini-16x16", (0.6, 0.3, 0.1), [(True, False, None), (True, False, None)]),  # no timeloop-model terms
])
def test_weighted_timeloop_mips_skip_presolve_and_the_re_solve_starts_from_the_weighted_answer(
        monkeypatch, hw_name, weights, solves):
    """issue 15: simba's weighted MIP is faster without HiGHS's presolve, and its latency re-solve started from the
    weighted answer (CPU per layer median 0.30 -> 0.23 s under the default weights, cycles equal or better on every
    bench layer); neither paid on the other catalog hardware, whose solves stay as they were."""
    from tileplan.mappers.base import Objective
    from tileplan.mappers.cosa import mapper as cosa_mapper

    seen: list[tuple] = []
    solve = cosa_mapper.Session.solve

    def spy(self, time_limit_s, presolve=True, from_last=False, mip_rel_gap=None):  # type: ignore[no-untyped-def]
        seen.append((presolve, from_last, mip_rel_gap))
        return solve(self, time_limit_s, presolve=presolve, from_last=from_last, mip_rel_gap=mip_rel_gap)

    monkeypatch.setattr(cosa_mapper.Session, "solve", spy)
    layer = parse_layer({"op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 14, "in_w": 14, "kernel": 1})
    lw, ew, mw = weights
    get_mapper("cosa").map(Problem.from_layer(layer), get_hardware(hw_name),
                           MapperOptions(objective=Objective(latency=lw, energy=ew, memory_utilization=mw)))
    assert seen == solves


def test_simba_default_weights_conv_256_64_is_not_held_back_by_the_fill_term():
    """ResNet-50's conv_256_64_1x1 (56 x 56) on simba under the default weights: the latency re-solve from scratch
    stopped, within its 1e-4 gap, at an answer whose plan ran 91,751 cycles; started from the weighted answer with a
    2e-6 gap it reaches the 86,836-cycle plan the latency-only objective finds (and a better weighted score)."""
    from tileplan.cost.model import evaluate_mapping

    hw = get_hardware("simba")
    layer = parse_layer({"op": "conv2d", "in_channels": 256, "out_channels": 64, "in_h": 56, "in_w": 56, "kernel": 1})
    problem = Problem.from_layer(layer)
    mp = get_mapper("cosa").map(problem, hw, MapperOptions()).mapping
    assert evaluate_mapping(problem, hw.resolve(mp.dataflow), mp, mp.executor or "tileplan").cycles <= 86_836
