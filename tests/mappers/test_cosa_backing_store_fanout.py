"""A Timeloop backing store that feeds several instances (DRAM over Spad0[0..5]) is a fan-out like any other:
timeloop-mapper unrolls across it, and so must cosa (it was barred from the backing store's fan-out, leaving the
instances below idle: 18,816 cycles where a 3-second timeloop-mapper search found 4,704)."""

from tests.conftest import BENCH_DATA

from tileplan.check import check
from tileplan.cost.timeloop import timeloop_violations
from tileplan.hardware.catalog import load_descriptor
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer

LATENCY = {"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0}


def test_cosa_unrolls_across_the_backing_stores_fanout():
    hw = load_descriptor((BENCH_DATA / "timeloop_fuzz/archs/fuzz1_001.yaml").read_text(), name="fuzz1_001")
    arch = hw.resolve(hw.dataflow_names[0])
    assert arch.levels[-1].is_backing_store and arch.levels[-1].fanout == 6
    layer = parse_layer({"op": "conv2d", "in_channels": 3, "out_channels": 64, "in_h": 9, "in_w": 8, "kernel": [7, 7]})
    # (60 s: the MIP stops at its gap long before on an idle machine; 3 s cut it short under load)
    plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=60, model="timeloop",
                                                objective=LATENCY))
    problem = Problem.from_layer(layer)
    assert check(problem, hw, plan.mapping) == []
    assert plan.mapping.levels[-1].spatial_total > 1
    assert plan.metrics.cycles <= 4704  # timeloop-mapper's 3 s search (timeloop-model agrees: 3,136 when measured)
    if not plan.mapping.padded_dims:
        assert timeloop_violations(problem, arch, plan.mapping) == []
