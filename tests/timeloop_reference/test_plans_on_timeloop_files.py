"""Plans on hardware read from Timeloop files: the array is used, and bundles are accepted."""

import json

import pytest

from tests.conftest import BENCH_DATA
from tileplan.check import check, footprint
from tileplan.hardware.catalog import get_hardware, load_descriptor
from tileplan.interop.timeloop_reference import load_cases
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer

DATA = BENCH_DATA / "timeloop_reference"
LATENCY = {"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0}


def _mapper_cycles(arch: str, layer: str) -> int:
    case = next(c for c in load_cases(DATA) if c["id"] == f"{arch}/{layer}/timeloop-mapper")
    return case["timeloop"]["cycles"]


@pytest.mark.parametrize("layer", ["conv_64_512_3x3_s1_30x40", "conv_16_256_7x7_s2_28x28"])
def test_cosa_fills_diannaos_array_and_matches_timeloop_mapper(layer):
    """DianNao's DRAM states no bandwidth and its 16-word buffers feed 256 MACs: cosa used to leave 94% of the MACs
    idle (15x slower than a 3-second timeloop-mapper search); now it multicasts and keeps them busy."""
    hw = load_descriptor((DATA / "archs" / "diannao_arch_v02.yaml").read_text(), name="diannao")
    spec = next(p for p in json.loads((DATA / "problems.json").read_text()) if p["name"] == layer)
    plan = make_plan(parse_layer({k: v for k, v in spec.items() if k != "dims"}), hw,
                     ScheduleOptions(baseline=False, time_limit_s=6, objective=LATENCY))
    assert plan.metrics.model == "timeloop"
    assert plan.metrics.spatial_utilization >= 0.9
    assert plan.metrics.cycles <= _mapper_cycles("diannao_arch_v02", layer)


def test_strided_tiles_exact_or_bounding_box():
    """Tileplan's own descriptors say how their hardware fetches a strided input window: exactly the rows the taps
    touch (the default) or, like Timeloop, the whole span."""
    hw = get_hardware("simba")
    layer = parse_layer({"op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 55, "in_w": 55, "kernel": 1,
                         "stride": 2})
    problem = Problem.from_layer(layer)
    tile = dict.fromkeys(problem.dims, 1) | {"P": 28, "Q": 28, "C": 8}
    exact = problem.for_hardware(hw.input_tiles).tile_elements("I", tile)
    box = problem.for_hardware("bounding_box").tile_elements("I", tile)
    assert (hw.input_tiles, exact, box) == ("exact", 8 * 28 * 28, 8 * 55 * 55)
    # the checker and the cost model read the descriptor's choice: the same plan's input tiles grow with the box
    plan = make_plan(layer, hw, ScheduleOptions(baseline=False, time_limit_s=3))
    assert check(problem, hw, plan.mapping) == []
    boxed = hw.model_copy(update={"input_tiles": "bounding_box"})
    level = next(i for i, lv in enumerate(hw.memory_levels) if "I" in lv.keeps)
    grown = footprint(problem, boxed.resolve(plan.mapping.dataflow), plan.mapping, level)["I"]
    assert grown > footprint(problem, hw.resolve(plan.mapping.dataflow), plan.mapping, level)["I"]
