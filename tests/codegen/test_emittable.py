"""One rule for what the code generator emits as planned (tileplan.emittable), and one Gemmini timing for the
emulator and the cost model."""

from __future__ import annotations

import pytest

from tileplan import emittable
from tileplan.codegen.pipeline import Epilogue, build_module, random_inputs, run, target_spec
from tileplan.hardware.catalog import get_hardware
from tileplan.mappers.gemmini_auto import gemmini_shape
from tileplan.mappers.retile import _Fits
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer


def test_channel_tiles_take_whole_array_blocks():
    """A 48-channel tile on a 32-wide array takes two blocks of rows (what a byte count misses)."""
    assert emittable.weight_rows(32, 48, 3, 3, 64) == 2 * 9 * 64
    assert emittable.acc_rows(32, 1, 4, 8, 48) == 2 * 32
    assert emittable.input_rows(32, 1, 4, 8, 3, 3, 48, (1, 1), (1, 1)) == 2 * 6 * 10


def test_a_strided_1x1_window_is_its_output_tile():
    """The host subsamples a strided 1x1 conv's input, so a call's window is its output tile."""
    assert emittable.array_stride(1, 1, (2, 2)) == (1, 1)
    assert emittable.array_stride(3, 3, (2, 2)) == (2, 2)
    layer = parse_layer({"op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 28, "in_w": 28, "kernel": 1,
                         "stride": 2})
    spad, acc = emittable.call_memory(Problem.from_layer(layer), {"P": 7, "Q": 14, "C": 64, "K": 64}, 16)
    assert spad == 4 * 7 * 14 + 4 * 64 and acc == 4 * 7 * 14


@pytest.mark.parametrize("hw_name", ["gemmini-16x16", "gemmini-32x32"])
def test_planner_and_code_generator_count_memory_alike(hw_name):
    """The code generator's memory rows are the rule's (target_spec from memory_rows), and the planner's tiling
    filter refuses exactly the tiles the rule says overflow half the memories."""
    hw = get_hardware(hw_name)
    arch = hw.resolve()
    rows = emittable.memory_rows(arch)
    t = target_spec(hw)
    assert rows is not None and (rows.dim, rows.spad_rows, rows.acc_rows) == (t.dim, t.spad_rows, t.acc_rows)
    layer = parse_layer({"op": "conv2d", "in_channels": 48, "out_channels": 48, "in_h": 58, "in_w": 58, "kernel": 3})
    problem = Problem.from_layer(layer)
    shape = gemmini_shape(arch)
    assert shape is not None
    fits = _Fits(problem, shape, {})
    for tile in ({"P": 56, "Q": 56, "K": 48, "C": 48, "R": 3, "S": 3}, {"P": 8, "Q": 56, "K": 48, "C": 48, "R": 3, "S": 3},
                 {"P": 2, "Q": 8, "K": 16, "C": 16, "R": 3, "S": 3}):
        full = {"N": 1, "G": 1, **tile}
        if not emittable.fits_halves(problem, full, rows):
            assert not fits(full)
    whole = {"N": 1, "G": 1, "P": 56, "Q": 56, "K": 48, "C": 48, "R": 3, "S": 3}  # 3 x 3,136 accumulator rows
    assert not emittable.fits_halves(problem, whole, rows) and not fits(whole)


@pytest.mark.parametrize("hw_name", ["gemmini-8x8", "gemmini-32x32"])
def test_a_plan_runs_as_scored_and_the_emulator_times_it_as_the_model(hw_name):
    """cosa's plan of a layer whose 48 channels are a block and a half on a 32-wide array: the code generator
    shrinks nothing, and the emulator's cycles (the cost model's per-call timing of the instructions it ran) are
    within 10% of the model's cycles for the code."""
    hw = get_hardware(hw_name)
    layer = parse_layer({"op": "conv2d", "name": "c48", "in_channels": 48, "out_channels": 48, "in_h": 30,
                         "in_w": 30, "kernel": 3, "bias": True})
    plan = make_plan(layer, hw, ScheduleOptions(time_limit_s=2, baseline=False))
    assert emittable.emittable(Problem.from_layer(layer), hw.resolve(plan.mapping.dataflow), plan.mapping)
    art = build_module(plan, layer, hw, epilogue=Epilogue(scale=0.01))
    assert not [n for n in art.notes if "shrunk" in n]
    res = run(art, random_inputs(art.geometry, 0))
    assert abs(res.cycles / art.model_cycles - 1) < 0.10
    assert res.calls == art.realization.calls


def _mapping(dram, spad, acc):
    from tileplan.mapping import Mapping

    return Mapping.model_validate({"levels": [
        {"name": "Registers"}, {"name": "Accumulator", "temporal": acc, "spatial": [["C", 16]]},
        {"name": "Scratchpad", "temporal": spad, "spatial": [["K", 16]]}, {"name": "DRAM", "temporal": dram}],
        "double_buffered": {"Scratchpad": ["I", "W"], "Accumulator": ["O"]}})


@pytest.mark.parametrize("spec, mapping", [
    # a squeeze-excite 1x1 conv on the 1x1 output of a global pool (EfficientNet-B0's 480 -> 20): the code runs
    # conv calls (tiled_conv's call floor), which the model once counted as tiled_matmul's (emulated 1.52x)
    ({"op": "conv2d", "name": "se", "in_channels": 480, "out_channels": 20, "in_h": 1, "in_w": 1, "kernel": 1},
     _mapping([["C", 10]], [["K", 10]], [["K", 2], ["C", 3]])),
    # a 1000-class classifier: the code reads weights laid out to its K tiles (rows of 8 x 128 = 1024 B, aligned),
    # which the model once counted as rows of 1000 B (a request more per unaligned 64-B piece: emulated 0.82x). Its
    # tile covers all 1000 real columns, moved as 16 mvins of 64 B per row: the emulator once took those pieces (more
    # than it tracked) and the 24 B of padding no transfer reads for a strided tile, and charged a DRAM wait on each
    # of the 1.3 MB copy's requests (emulated 1.23x: 193,029 vs 157,076)
    ({"op": "matmul", "name": "fc", "M": 1, "K": 1280, "N": 1000},
     _mapping([["K", 8], ["C", 2]], [["K", 8]], [["K", 8], ["C", 40]])),
])
@pytest.mark.parametrize("stream", ["tileplan", "baseline"])  # the compile also builds the library's tiling
def test_the_model_counts_what_the_code_runs_for_tiny_spatial_and_padded_weights(spec, mapping, stream):
    hw = get_hardware("gemmini-16x16")
    layer = parse_layer(spec)
    art = build_module(mapping, layer, hw, epilogue=Epilogue(scale=0.01), stream=stream)
    res = run(art, random_inputs(art.geometry, 0))
    assert abs(res.cycles / art.model_cycles - 1) < 0.05, (res.cycles, art.model_cycles)


@pytest.mark.parametrize("fold_ok", [True, False])
def test_halves_rule_answers_as_fits_halves(fold_ok):
    """`halves_rule` (the retile search's precomputed form) gives `fits_halves`'s answer on every tile of a sweep:
    convs (strided 1x1, folded kernel columns, dilated, grouped), matmuls (row / channel blocks), tiles past the
    layer's bounds and with dimensions missing, on both array sizes."""
    import itertools
    import random

    layers = [
        {"op": "conv2d", "in_channels": 3, "out_channels": 64, "in_h": 224, "in_w": 224, "kernel": 7, "stride": 2,
         "padding": 3},
        {"op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 28, "in_w": 28, "kernel": 1, "stride": 2},
        {"op": "conv2d", "in_channels": 256, "out_channels": 512, "in_h": 14, "in_w": 14, "kernel": 3, "padding": 2,
         "dilation": 2},
        {"op": "conv2d", "in_channels": 96, "out_channels": 96, "in_h": 56, "in_w": 56, "kernel": 3, "padding": 1,
         "groups": 96},
        {"op": "matmul", "M": 197, "K": 768, "N": 3072},
        {"op": "matmul", "M": 1, "K": 2048, "N": 1000},
    ]
    rng = random.Random(7)
    for hw_name, spec in itertools.product(["gemmini-16x16", "gemmini-32x32"], layers):
        hw = get_hardware(hw_name)
        memory = emittable.emittable_memory(hw.resolve())
        assert memory is not None
        problem = Problem.from_layer(parse_layer(spec))
        rule = emittable.halves_rule(problem, memory, fold_ok)
        answers = set()
        for _ in range(3000):
            tile = {d: rng.randint(1, 2 * n + 3) if rng.random() < 0.5 else rng.randint(1, max(1, n // 4))
                    for d, n in problem.dims.items() if rng.random() < 0.95}
            want = emittable.fits_halves(problem, tile, memory, fold_ok)
            assert rule(tile) is want, (hw_name, spec, tile)
            answers.add(want)
        assert answers == {True, False}, (hw_name, spec)  # the sweep reaches both sides of the rule
