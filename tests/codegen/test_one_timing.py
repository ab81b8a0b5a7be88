"""One Gemmini timing: the emulator's cycles and the cost model's agree on the layers where they used to part
(zoo.md's classifier Gemms at 0.82x, squeeze-and-excitation fc1 convolutions at 1.4-1.5x)."""

from __future__ import annotations

import pytest

from tileplan.codegen.pipeline import Epilogue, generate, random_inputs, reference, run
from tileplan.cost.gemmini import FEATURE_COLUMNS, gemmini_calls
from tileplan.hardware.catalog import get_hardware
from tileplan.mappers.base import MapperOptions, get_mapper
from tileplan.mapping import Mapping
from tileplan.problem import Problem
from tileplan.workload import parse_layer

EPI = Epilogue(scale=0.0025, relu=True)


def _emulate(layer, hw, mapping, executor):
    art = generate(layer, hw, mapping, EPI)
    inputs = random_inputs(art.geometry, 0)
    res = run(art, inputs)
    assert (res.buffers["out"] == reference(art.geometry, EPI, **inputs)).all()
    prob = Problem.from_layer(layer)
    x = gemmini_calls(prob, hw.resolve(mapping.dataflow), mapping, executor)
    model = {k: float((x[:, FEATURE_COLUMNS.index(k)] * x[:, 0]).sum()) for k in res.features}
    return art, res, model


def test_misaligned_weight_rows_count_the_blocks_they_touch():
    """A classifier (1280 -> 1000) on gemmini-8x8, whose weights the kernel reads in place: rows 1,000 bytes apart,
    so its 64-byte mvin rows mostly start mid-block and touch two 64-byte blocks. The model counts a request per
    block touched (DMA.scala; `_row_req`); the emulator counted one per 64 bytes moved (0.85x the model)."""
    hw = get_hardware("gemmini-8x8")
    layer = parse_layer({"op": "matmul", "name": "fc", "M": 1, "K": 1280, "N": 1000})
    mapping = get_mapper("gemmini-auto").map(Problem.from_layer(layer), hw, MapperOptions(time_limit_s=5)).mapping
    art, res, model = _emulate(layer, hw, mapping, "library")
    assert res.features["ld_req"] == pytest.approx(model["ld_req"], rel=0.1)
    assert res.features["dram_req"] == pytest.approx(model["dram_req"], rel=0.1)
    assert 0.9 <= res.cycles / art.model_cycles <= 1.1, (res.cycles, art.model_cycles)


def test_a_pointwise_conv_on_one_pixel_is_timed_as_the_model_times_it():
    """A squeeze-and-excitation fc1 (1x1 conv, 480 -> 20 channels, on a 1x1 map) whose reduction is split over 10
    calls: the model costs a Q = R = S = 1 layer as tiled_matmul calls (call floor call_floor_matmul); the emulator
    used the convolution's floor for the same calls (1.52x the model)."""
    hw = get_hardware("gemmini-16x16")
    layer = parse_layer({"op": "conv2d", "name": "se_fc1", "in_channels": 480, "out_channels": 20, "in_h": 1,
                         "in_w": 1, "kernel": 1})
    mapping = Mapping.model_validate({
        "levels": [
            {"name": "Registers", "temporal": [], "spatial": []},
            {"name": "Accumulator", "temporal": [["C", 3], ["K", 2]], "spatial": [["C", 16]]},
            {"name": "Scratchpad", "temporal": [], "spatial": [["K", 10]]},
            {"name": "DRAM", "temporal": [["C", 10]], "spatial": []},
        ],
        "double_buffered": {"Accumulator": ["O"], "Scratchpad": ["I", "W"]},
        "dataflow": "weight_stationary",
    })
    art, res, _ = _emulate(layer, hw, mapping, "tileplan")
    assert art.realization.calls == 10
    assert 0.9 <= res.cycles / art.model_cycles <= 1.1, (res.cycles, art.model_cycles)


@pytest.mark.parametrize("hw_name", ["gemmini-16x16", "gemmini-32x32"])
def test_padded_weight_rows_are_counted_as_the_code_lays_them_out(hw_name):
    """The same classifier where 1,000 output channels are not a whole number of DIM blocks: the kernel's weights
    are laid out padded to the tile grid (W_p, rows K_p = 1,024 bytes apart: aligned), so model(code) counts those
    rows, not 1,000-byte ones (it counted misaligned rows: emulated 0.82x model(code))."""
    hw = get_hardware(hw_name)
    layer = parse_layer({"op": "matmul", "name": "fc", "M": 1, "K": 1280, "N": 1000})
    mapping = get_mapper("gemmini-auto").map(Problem.from_layer(layer), hw, MapperOptions(time_limit_s=5)).mapping
    art, res, _ = _emulate(layer, hw, mapping, "library")
    assert art.layout.padded["K"] > 1000 and not art.layout.w_in_place
    assert 0.9 <= res.cycles / art.model_cycles <= 1.1, (res.cycles, art.model_cycles)
