"""Timeloop's min-utilization: a level that states it refuses maps whose kept tiles fill less than that share of its
usable words. cosa's MIP bounds tiles from above only, so its answers could leave such a level too empty (the seed-2
fuzz's architectures: timeloop-model refuses those maps); they are grown until the level is full enough, and a layer
too small to fill it gets a refusal that says so."""

import pytest
import yaml

from tileplan.check import check
from tileplan.cost.timeloop import timeloop_violations
from tileplan.errors import MappingInfeasible
from tileplan.hardware.catalog import load_descriptor
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer

LATENCY = {"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0}


def _hw(min_util: float):
    doc = {"architecture": {"version": 0.3, "subtree": [{"name": "sys", "local": [
        {"name": "DRAM", "class": "DRAM", "attributes": {"word-bits": 8, "read_bandwidth": 4, "write_bandwidth": 4}},
        {"name": "GLB", "class": "SRAM", "attributes": {"entries": 2048, "word-bits": 8,
                                                        "min-utilization": min_util}}],
        "subtree": [{"name": "PE[0..3]", "local": [
            {"name": "Reg", "class": "regfile", "attributes": {"entries": 4, "word-bits": 8}},
            {"name": "MAC", "class": "intmac", "attributes": {"datawidth": 8}}]}]}]},
        "architecture_constraints": {"targets": [{"target": "Reg", "type": "datatype", "keep": ["Weights"],
                                                  "bypass": ["Inputs", "Outputs"]}]}}
    return load_descriptor(yaml.safe_dump(doc), name=f"minutil{min_util}")


def test_cosa_fills_a_level_to_its_min_utilization():
    layer = parse_layer({"op": "conv2d", "in_channels": 16, "out_channels": 32, "in_h": 18, "in_w": 18,
                         "kernel": [3, 3]})
    problem = Problem.from_layer(layer)
    for share in (0.0, 0.6):
        hw = _hw(share)
        plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=30, model="timeloop",
                                                    objective=LATENCY))
        assert check(problem, hw, plan.mapping) == []
        if not plan.mapping.padded_dims:
            assert timeloop_violations(problem, hw.resolve(plan.mapping.dataflow), plan.mapping) == []
        tiles = plan.mapping.level_tiles()
        glb = problem.for_hardware("bounding_box")
        words = sum(glb.tile_elements(t, tiles[1]) for t in "WIO")
        if share:
            assert words >= 0.6 * 2048


def test_a_layer_too_small_for_the_min_utilization_is_refused_with_the_reason():
    layer = parse_layer({"op": "matmul", "M": 4, "K": 8, "N": 4})  # 32 + 16 + 16 words in all < 0.6 x 2048
    with pytest.raises(MappingInfeasible) as err:
        make_plan(layer, _hw(0.6), ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=30, model="timeloop",
                                                   objective=LATENCY))
    assert "GLB to its minimum utilization" in str(err.value)


def test_cosa_grows_the_trivial_mapping_when_its_answers_stall():
    """The seed-2 fuzz's fuzz2_023 (min-utilization at its PE buffer and a shared one) and a 3x5 conv: every MIP answer's
    growth stalled and cosa refused the layer, where a 3-second timeloop-mapper search found 2,520 cycles; growing
    the trivial mapping (every loop at the backing store) finds a legal one."""
    from tests.conftest import BENCH_DATA

    hw = load_descriptor((BENCH_DATA / "timeloop_fuzz_seed2/archs/fuzz2_023.yaml").read_text(), name="fuzz2_023")
    layer = parse_layer({"batch": 1, "dilation": [1, 1], "in_channels": 1, "in_h": 3, "in_w": 27, "kernel": [3, 5],
                         "name": "L2", "op": "conv2d", "out_channels": 12, "padding": [1, 2], "stride": [1, 2]})
    plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=60, model="timeloop",
                                                objective=LATENCY))
    problem = Problem.from_layer(layer)
    assert check(problem, hw, plan.mapping) == []
    assert timeloop_violations(problem, hw.resolve(plan.mapping.dataflow), plan.mapping) == []


def test_a_stalled_growth_takes_a_detour_through_moves_that_fill_nothing():
    """The seed-4 fuzz's fuzz4_010 L2 (cosa 18,432 cycles where timeloop-mapper's 3 s search found 12,720): the MIP's
    answer (10,584 cycles) left Spad2_i, an input buffer of 16 words with min-utilization 0.25, holding one word, and
    every single move that fills it (C, R or S down to it) overflows Spad2_w above, the weights' sibling buffer, while
    K12 sits at Spad2_i; the growth took only moves that shrink the shortfall, so it stalled and the answer was
    dropped. A move that fills nothing (K up from Spad2_i) first frees the room: 10,728 cycles, three moves away."""
    from tests.conftest import BENCH_DATA

    from tileplan.check import check_arch
    from tileplan.cost.model import evaluate_mapping
    from tileplan.mappers.utilization import fill_to_min_utilization
    from tileplan.mapping import LevelMapping, Mapping

    hw = load_descriptor((BENCH_DATA / "timeloop_fuzz_seed4/archs/fuzz4_010.yaml").read_text(), name="fuzz4_010")
    layer = parse_layer({"batch": 1, "dilation": [1, 1], "in_channels": 96, "in_h": 3, "in_w": 5, "kernel": [3, 3],
                         "name": "L2", "op": "conv2d", "out_channels": 96, "padding": [0, 0], "stride": [2, 2]})
    problem = Problem.from_layer(layer)
    arch = hw.resolve()
    answer = Mapping(dataflow=arch.dataflow, levels=[  # the MIP's answer
        LevelMapping(name="Spad2_i", temporal=[("K", 12)], spatial=[]),
        LevelMapping(name="Spad2_w", temporal=[("Q", 2)], spatial=[]),
        LevelMapping(name="Spad1", temporal=[("C", 2), ("S", 3)], spatial=[]),
        LevelMapping(name="Buf0", temporal=[("R", 3)], spatial=[("C", 4), ("K", 8)]),
        LevelMapping(name="DRAM", temporal=[("C", 12)], spatial=[])])
    assert [v.split(":")[0] for v in check_arch(problem, arch, answer)] == ["Spad2_i"]
    grown = fill_to_min_utilization(problem, arch, answer)
    assert grown is not None and check_arch(problem, arch, grown) == []
    assert evaluate_mapping(problem, arch, grown, model="timeloop").cycles <= 12720
    plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=10, model="timeloop",
                                                objective=LATENCY))
    assert plan.metrics.cycles <= 12720
