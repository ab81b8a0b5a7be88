"""The checker on hand-made legal and illegal mappings."""

import copy

import pytest

from tileplan.check import check
from tileplan.hardware.catalog import get_hardware
from tileplan.mapping import Mapping
from tileplan.problem import Problem
from tileplan.workload import parse_layer

HW = get_hardware("gemmini-16x16")
LAYER = parse_layer({"name": "res2_1x1", "op": "conv2d", "in_channels": 64, "out_channels": 256, "in_h": 56, "in_w": 56})
PROBLEM = Problem.from_layer(LAYER)
# The example Mapping of contracts.md.
CONTRACT = {
    "levels": [
        {"name": "Registers", "temporal": [], "spatial": []},
        {"name": "Accumulator", "temporal": [["P", 56], ["K", 2]], "spatial": [["C", 16]]},
        {"name": "Scratchpad", "temporal": [["C", 4], ["Q", 8]], "spatial": [["K", 16]]},
        {"name": "DRAM", "temporal": [["Q", 7], ["K", 8]], "spatial": []},
    ],
    "padded_dims": {},
    "double_buffered": {"Scratchpad": ["I", "W"]},
    "dataflow": "weight_stationary",
}


def variant(**changes):
    data = copy.deepcopy(CONTRACT)
    for path, value in changes.items():
        target = data
        *head, last = path.split(".")
        for part in head:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value
    return Mapping.model_validate(data)


def test_contract_example_is_legal():
    assert check(PROBLEM, HW, Mapping.model_validate(CONTRACT)) == []


def test_factors_must_multiply_to_bounds():
    v = check(PROBLEM, HW, variant(**{"levels.3.temporal": [["Q", 7], ["K", 4]]}))
    assert v == ["factors of K multiply to 128, bound is 256"]


def test_fanout_and_allowed_spatial_dims():
    m = variant(**{"levels.1.spatial": [["C", 16], ["P", 2]], "levels.1.temporal": [["P", 28], ["K", 2]]})
    v = check(PROBLEM, HW, m)
    assert "Accumulator unrolls 32 ways, fan-out is 16" in v
    assert "Accumulator cannot unroll P (allowed: C)" in v


def test_capacity_violation_reads_like_the_contract():
    # All of C, K and 56x56 pixels in the scratchpad, double buffered: 2 x (200704 I + 16384 W) bytes.
    m = variant(
        **{
            "levels.1.temporal": [["P", 2]],
            "levels.2.temporal": [["C", 4], ["Q", 56], ["P", 28], ["K", 16]],
            "levels.3.temporal": [],
        }
    )
    v = check(PROBLEM, HW, m)
    assert "Scratchpad holds 424 KiB of I+W, capacity 256 KiB" in v


def _wide_c(in_h: int):
    return Problem.from_layer(parse_layer({"op": "conv2d", "in_channels": 256, "out_channels": 16, "in_h": in_h, "in_w": 56}))


def _spad_tile(p_tile: int, p_outer: int) -> Mapping:
    return Mapping.model_validate(
        {
            "levels": [
                {"name": "Registers", "temporal": [["Q", 28], ["P", p_tile]]},
                {"name": "Accumulator", "temporal": [["C", 16]], "spatial": [["C", 16]]},
                {"name": "Scratchpad", "spatial": [["K", 16]]},
                {"name": "DRAM", "temporal": [["Q", 2], ["P", p_outer]]},
            ],
            "double_buffered": {"Scratchpad": ["I", "W"]},
            "dataflow": "weight_stationary",
        }
    )


def test_double_buffering_halves_the_room():
    # Scratchpad tile: 14 x 28 pixels x 256 channels = 98 KiB of I + 256 x 16 = 4 KiB of W = 102 KiB:
    # fits once and twice. With 21 x 28 pixels, I is 147 KiB: 151 KiB fits once only.
    assert check(_wide_c(56), HW, _spad_tile(14, 4)) == []
    fits_once = _spad_tile(21, 4)
    assert check(_wide_c(84), HW, fits_once) == ["Scratchpad holds 302 KiB of I+W, capacity 256 KiB"]
    assert check(_wide_c(84), HW, fits_once.model_copy(update={"double_buffered": {}})) == []


def test_one_call_keeps_its_whole_output_tile_in_the_accumulator():
    # Gemmini runs one library call per DRAM iteration; the call's outputs (everything below DRAM: here
    # 56 x 28 pixels x 16 channels x 4 B = 98 KiB) must stay in the 64 KiB accumulator, although the
    # accumulator's own loop-nest tile (28 pixels per column slice) is small.
    m = Mapping.model_validate(
        {
            "levels": [
                {"name": "Registers", "temporal": [["Q", 28]]},
                {"name": "Accumulator", "temporal": [["C", 4]], "spatial": [["C", 16]]},
                {"name": "Scratchpad", "temporal": [["P", 56]], "spatial": [["K", 16]]},
                {"name": "DRAM", "temporal": [["Q", 2], ["K", 16]]},
            ],
            "dataflow": "weight_stationary",
        }
    )
    assert check(PROBLEM, HW, m) == [
        "Accumulator holds 98 KiB of O for one call (the tile below DRAM), capacity 64 KiB"
    ]


def test_halo_exact_input_tile_in_capacity():
    layer = parse_layer({"op": "conv2d", "in_channels": 256, "out_channels": 16, "in_h": 30, "in_w": 30, "kernel": 3})
    p = Problem.from_layer(layer)  # P = Q = 28
    # Scratchpad tile: C=256 (16x16), P=Q=28 with R=S=3 -> 256*30*30 = 230400 B of I + 256*9*16 W = 36864 B
    # = 267264 B > 256 KiB, although the halo-free estimate (256*28*28 = 200704 B + W) would fit.
    m = Mapping.model_validate(
        {
            "levels": [
                {"name": "Registers", "temporal": [["Q", 28], ["P", 28]]},
                {"name": "Accumulator", "temporal": [["S", 3], ["R", 3]], "spatial": [["C", 16]]},
                {"name": "Scratchpad", "temporal": [["C", 16]], "spatial": [["K", 16]]},
                {"name": "DRAM"},
            ],
            "dataflow": "weight_stationary",
        }
    )
    assert check(p, HW, m) == ["Scratchpad holds 261 KiB of I+W, capacity 256 KiB"]


def test_padded_dims():
    fc = Problem.from_layer(parse_layer({"op": "matmul", "M": 1, "K": 64, "N": 1000}))
    m = Mapping.model_validate(
        {
            "levels": [
                {"name": "Registers"},
                {"name": "Accumulator", "spatial": [["C", 16]]},
                {"name": "Scratchpad", "temporal": [["C", 4], ["K", 63]], "spatial": [["K", 16]]},
                {"name": "DRAM"},
            ],
            "padded_dims": {"K": 1008},
            "dataflow": "weight_stationary",
        }
    )
    assert check(fc, HW, m) == []
    bad = m.model_copy(update={"padded_dims": {"K": 992}})
    assert check(fc, HW, bad)[0] == "padded_dims.K=992 is smaller than the bound 1000"


def test_level_names_and_double_buffer_rules():
    m = variant(**{"levels.0.name": "Regs"})
    assert check(PROBLEM, HW, m)[0].startswith("levels must be ['Registers', 'Accumulator', 'Scratchpad', 'DRAM']")
    m = variant(**{"double_buffered": {"Scratchpad": ["O"], "Registers": ["W"]}})
    v = check(PROBLEM, HW, m)
    assert "Scratchpad double buffers O, which it does not keep" in v
    assert "Registers cannot double buffer (buffer_count 1)" in v


def test_unknown_dataflow():
    m = variant(dataflow="row_stationary")
    assert check(PROBLEM, HW, m)[0].startswith("dataflow: unknown dataflow 'row_stationary'")


@pytest.mark.parametrize("hw", ["gemmini-chip"])
def test_register_holds_one_weight(hw):
    m = variant(**{"levels.0.temporal": [["C", 2]], "levels.2.temporal": [["C", 2], ["Q", 8]]})
    # Registers keep one weight per PE; a C loop inside them needs two.
    assert any(x.startswith("Registers holds 8 B of W") for x in check(PROBLEM, get_hardware(hw), m))
