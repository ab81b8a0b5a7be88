"""A full fan-out whose factors are the wrong ones: the seed-2 fuzz's fuzz2_007 (192 PEs under a buffer of 2 words per
cycle that keeps only the outputs) and a dilated 3x3 grouped conv. cosa spread P13 Q7 across the PEs and summed the
R3 S3 partial sums in time at the buffer, bound by its bandwidth at 13,104 cycles (timeloop-model agreed); a 3-second
timeloop-mapper search found 7,120 with P13 R3 across them. No single factor move reaches that (the fan-out is full),
so polish also exchanges a spatial factor for another dimension's (`polish.swaps`)."""

from tests.conftest import BENCH_DATA

from tileplan.check import check
from tileplan.cost.timeloop import timeloop_violations
from tileplan.hardware.catalog import load_descriptor
from tileplan.mappers.polish import swaps
from tileplan.mapping import LevelMapping, Mapping
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer

LATENCY = {"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0}
LAYER = {"batch": 1, "dilation": [2, 2], "groups": 8, "in_channels": 8, "in_h": 27, "in_w": 29, "kernel": [3, 3],
         "name": "L0", "op": "conv2d", "out_channels": 8, "padding": [1, 1], "stride": [2, 2]}


def test_cosa_exchanges_the_factors_of_a_full_fanout():
    hw = load_descriptor((BENCH_DATA / "timeloop_fuzz_seed2/archs/fuzz2_007.yaml").read_text(), name="fuzz2_007")
    layer = parse_layer(LAYER)
    plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=60, model="timeloop",
                                                objective=LATENCY))
    problem = Problem.from_layer(layer)
    assert check(problem, hw, plan.mapping) == []
    assert timeloop_violations(problem, hw.resolve(plan.mapping.dataflow), plan.mapping) == []
    assert plan.metrics.cycles <= 7120  # timeloop-mapper's 3 s search (bench/results/timeloop_mapper_seed2.md)


def test_swaps_exchange_one_spatial_factor_for_another_dimensions():
    m = Mapping(levels=[LevelMapping(name="A", temporal=[("R", 3)], spatial=[("Q", 7)]),
                        LevelMapping(name="B", temporal=[], spatial=[])], dataflow="default")
    got = {tuple((tuple(lv.temporal), tuple(lv.spatial)) for lv in c.levels) for c in swaps(m)}
    assert (((("Q", 7),), (("R", 3),)), ((), ())) in got  # Q7 into A's time, R3 across A's fan-out
    assert ((((), (("R", 3),))), ((("Q", 7),), ())) in got  # Q7 into B's time instead
    assert len(got) == 2
