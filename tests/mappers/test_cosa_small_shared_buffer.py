"""A shared buffer of a few words: cosa's MIP splits a shared buffer's capacity among the tensors it keeps in fixed
shares (sixteenths under timeloop-model's terms), which cannot give 2 + 2 + 1 of 5 words (20 bytes in steps of 1.25:
8 + 8 + 4 needs 8.75 + 8.75 + 5). The seed-4 fuzz's fuzz4_005 L0 (a grouped 1x1 conv on one 5-word buffer over 3 MACs):
C2 across the MACs was infeasible to the MIP, so cosa planned 4,176 cycles where timeloop-mapper's 3 s search found
3,344 (C2 unrolled, every other loop at DRAM)."""

from tests.conftest import BENCH_DATA

from tileplan.cost.timeloop import timeloop_violations
from tileplan.hardware.catalog import load_descriptor
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer

LATENCY = {"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0}


def test_a_few_word_shared_buffer_is_split_in_whole_words():
    hw = load_descriptor((BENCH_DATA / "timeloop_fuzz_seed4/archs/fuzz4_005.yaml").read_text(), name="fuzz4_005")
    layer = parse_layer({"batch": 1, "dilation": [2, 2], "groups": 2, "in_channels": 4, "in_h": 37, "in_w": 8,
                         "kernel": [1, 1], "name": "L0", "op": "conv2d", "out_channels": 8, "padding": [0, 0],
                         "stride": [3, 1]})
    plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=10, model="timeloop",
                                                objective=LATENCY))
    problem = Problem.from_layer(layer)
    assert timeloop_violations(problem, hw.resolve(plan.mapping.dataflow), plan.mapping) == []
    assert plan.metrics.cycles <= 3344
