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


@pytest.mark.parametrize("layer", ["conv_256_36_7x7_s1_2x2", "conv_160_96_3x3_s1_8x8", "conv_192_96_3x3_s1_9x9", "conv_320_24_3x3_s2_32x25",
                                   "conv_128_160_3x3_s1_14x14"])
def test_cosa_keeps_diannaos_partial_sums_in_the_psum_registers(layer):
    """DianNao's one-word PsumRegFile writes one word a cycle: every revisit of an output costs a cycle beyond the
    MACs'. timeloop-mapper orders the loops above it so each output is visited once (all C, R, S inside); cosa's
    factors were right but a loop relevant to the outputs sat below the reduction loops (1.7% slower)."""
    hw = load_descriptor((DATA / "archs" / "diannao_arch_v02.yaml").read_text(), name="diannao")
    spec = next(p for p in json.loads((DATA / "problems.json").read_text()) if p["name"] == layer)
    plan = make_plan(parse_layer({k: v for k, v in spec.items() if k != "dims"}), hw,
                     ScheduleOptions(baseline=False, time_limit_s=6, objective=LATENCY))
    assert plan.metrics.cycles <= _mapper_cycles("diannao_arch_v02", layer)


def test_strided_tiles_exact_or_bounding_box():
    """Tileplan's own descriptors say how their hardware fetches a strided input window: exactly the rows the taps
    touch (the default) or, like Timeloop, the whole span."""
    hw = get_hardware("simba").model_copy(update={"input_tiles": "exact", "cost_model": "first-order"})
    layer = parse_layer({"op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 55, "in_w": 55, "kernel": 1,
                         "stride": 2})
    problem = Problem.from_layer(layer)
    tile = dict.fromkeys(problem.dims, 1) | {"P": 28, "Q": 28, "C": 8}
    exact = problem.for_hardware(hw.input_tiles).tile_elements("I", tile)
    box = problem.for_hardware("bounding_box").tile_elements("I", tile)
    assert (hw.input_tiles, exact, box) == ("exact", 8 * 28 * 28, 8 * 55 * 55)
    # the checker and the cost model read the descriptor's choice: the same plan's input tiles grow with the box
    plan = make_plan(layer, hw, ScheduleOptions(baseline=False, time_limit_s=3, model="first-order"))
    assert check(problem, hw, plan.mapping) == []
    boxed = hw.model_copy(update={"input_tiles": "bounding_box"})
    level = next(i for i, lv in enumerate(hw.memory_levels) if "I" in lv.keeps)
    grown = footprint(problem, boxed.resolve(plan.mapping.dataflow), plan.mapping, level)["I"]
    assert grown > footprint(problem, hw.resolve(plan.mapping.dataflow), plan.mapping, level)["I"]


@pytest.mark.parametrize("layer", [
    # W is 95% of the DRAM reads: the 2% that refetching I twice adds must be visible to the MIP
    {"op": "conv2d", "in_channels": 512, "out_channels": 2048, "in_h": 7, "in_w": 7},
    # only the outputs' writes set the pace: counting them as reads made the MIP settle for half the array
    {"op": "conv2d", "in_channels": 64, "out_channels": 256, "in_h": 56, "in_w": 56},
    # partial sums spilled 8 times read back 7/8 of their traffic, not half
    {"op": "conv2d", "in_channels": 512, "out_channels": 1024, "in_h": 28, "in_w": 28, "stride": 2},
    {"op": "matmul", "M": 128, "K": 64, "N": 128},
])
def test_cosa_beats_random_on_simba_with_a_latency_objective(layer):
    """The catalog's simba is scored by Timeloop's semantics, and the MIP sees that model: DRAM reads of W, I and
    O's read-backs against one budget, resolved to a few percent, and O's writes against their own."""
    hw = get_hardware("simba")
    options = dict(baseline=False, time_limit_s=10, objective=LATENCY)
    cosa = make_plan(parse_layer(layer), hw, ScheduleOptions(**options))
    rnd = make_plan(parse_layer(layer), hw, ScheduleOptions(mapper="random", **options))
    assert cosa.metrics.model == rnd.metrics.model == "timeloop"
    assert cosa.metrics.cycles <= rnd.metrics.cycles


def test_cosa_not_slower_than_random_where_the_hand_written_tiling_pads():
    """Legacy Gemmini's hand-written tiling pads C (256 as 5 DRAM tiles of 52: 260) and scored better than the MIP's
    answer before polish (165,315 against 172,606 cycles), so polish started from it alone and could not undo the
    padding; from the MIP's answer it reaches 162,772, the best of 200 random mappings (bench/timeloop.py: cosa
    was 1.6% slower than random there). Since the block_wait_cycles refit of the Gemmini model (whose library terms
    the MIP's latency proxy reads on Gemmini-like hardware, Timeloop semantics too: cosa/spec.py) it lands at
    162,822, 0.03% above random's best: within 0.1% is what this guards (the padded start was 1.6% off)."""
    hw = load_descriptor((DATA / "archs" / "gemmini_arch_legacy.yaml").read_text(), name="gemmini_arch_legacy")
    spec = next(p for p in json.loads((DATA / "problems.json").read_text()) if p["name"] == "conv_256_36_7x7_s1_2x2")
    layer = parse_layer({k: v for k, v in spec.items() if k != "dims"})
    options = dict(baseline=False, time_limit_s=6, seed=1, objective=LATENCY, model="timeloop")
    cosa = make_plan(layer, hw, ScheduleOptions(**options))
    rnd = make_plan(layer, hw, ScheduleOptions(mapper="random", **options))
    assert cosa.metrics.cycles <= 1.001 * rnd.metrics.cycles
    assert cosa.metrics.cycles <= _mapper_cycles("gemmini_arch_legacy", "conv_256_36_7x7_s1_2x2")


def test_a_layer_larger_than_a_sized_backing_store_is_refused_not_planned():
    """A backing store with a size (an SRAM MainMemory of 16,384 words, seed 7's fuzz7_022) cannot hold a layer
    whose tensors need 48,064 words: timeloop-model refuses every map of it ('couldn't map level MainMemory: mapped
    tile size 48064 exceeds buffer capacity 16384'). cosa planned it anyway (the checker knew no size there), and
    bench/timeloop_vs_mapper.py counted a map Timeloop rejected; now the plan is refused, saying why."""
    from tileplan.errors import MappingInfeasible

    hw = load_descriptor((BENCH_DATA / "timeloop_fuzz_seed7" / "archs" / "fuzz7_022.yaml").read_text(),
                         name="fuzz7_022")
    layer = parse_layer({"batch": 1, "dilation": [1, 1], "in_channels": 64, "in_h": 39, "in_w": 18, "kernel": [3, 3],
                         "name": "L1", "op": "conv2d", "out_channels": 4, "padding": [0, 0], "stride": [3, 1]})
    with pytest.raises(MappingInfeasible) as err:
        make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=2.0, model="timeloop"))
    assert "MainMemory" in str(err.value) and "48064" in str(err.value).replace(",", "")
    small = parse_layer({"op": "matmul", "M": 16, "K": 16, "N": 16, "name": "fits"})
    assert make_plan(small, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=2.0, model="timeloop"))


def test_cosa_under_a_latency_objective_is_not_slower_than_the_mapper_on_seed7s_fuzz7_000():
    """Seed 7's fuzz7_000 L1 (12 MACs under six one-word-per-cycle scratchpads): cosa's answers polished to 3,584
    cycles (C split over the scratchpads and the PEs), a basin no single move or exchange leaves, where a 3-second
    timeloop-mapper search found 3,164 (C6 over the scratchpads, K2 over the PEs: bench/results/
    timeloop_mapper_seed7.md). Polishing the trivial mapping too (every loop at the backing store, the fan-outs filled
    by the search's unrollings) reaches it."""
    hw = load_descriptor((BENCH_DATA / "timeloop_fuzz_seed7" / "archs" / "fuzz7_000.yaml").read_text(),
                         name="fuzz7_000")
    layer = parse_layer({"batch": 1, "dilation": [1, 1], "in_channels": 24, "in_h": 1, "in_w": 13, "kernel": [1, 1],
                         "name": "L1", "op": "conv2d", "out_channels": 64, "padding": [0, 0], "stride": [1, 2]})
    plan = make_plan(layer, hw, ScheduleOptions(mapper="cosa", baseline=False, time_limit_s=10.0, model="timeloop",
                                                objective=LATENCY))
    assert plan.metrics.cycles <= 3164
