"""gemmini-auto: gemmini.h's tile choices (docs/gemmini.md) and legal contract mappings."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tileplan.check import check
from tileplan.errors import InputError, MappingInfeasible
from tileplan.hardware.catalog import get_hardware
from tileplan.mappers.base import MapperOptions, get_mapper
from tileplan.mappers.gemmini_auto import (
    GRIDS,
    ConvGeometry,
    applicable,
    conv_rows,
    conv_tiles,
    find_shape,
    gemmini_auto,
    matmul_tiles,
)
from tileplan.problem import Problem
from tileplan.workload import load_workload, parse_layer

GEMMINIS = ["gemmini-16x16", "gemmini-32x32", "gemmini-8x8", "gemmini-chip"]


def _problem(**layer) -> Problem:
    return Problem.from_layer(parse_layer(layer))


def test_shape_is_derived_from_the_descriptor():
    s16 = find_shape(get_hardware("gemmini-16x16"))
    assert (s16.dim, s16.spad_rows, s16.acc_rows) == (16, 16384, 1024)  # 4 x 4096 rows; 2 x 512 rows
    s32 = find_shape(get_hardware("gemmini-32x32"))
    assert (s32.dim, s32.spad_rows, s32.acc_rows) == (32, 4096, 512)  # 128 KiB / 32 B; 64 KiB / (32 x 4 B)
    chip = find_shape(get_hardware("gemmini-chip"))
    assert (chip.dim, chip.spad_rows, chip.acc_rows) == (16, 4096, 512)


def test_applicable():
    for name in GEMMINIS:
        assert applicable(get_hardware(name)), name
    assert not applicable(get_hardware("simba"))
    assert not applicable(get_hardware("eyeriss-os"))


@pytest.mark.parametrize(
    "i,j,k,want",
    [((512, 512, 512), None, None, (5, 6, 32)), ((1024, 1024, 1024), None, None, (5, 5, 51)),
     ((128, 768, 768), None, None, (5, 5, 48))],
)
def test_matmul_tiles_of_the_doc(i, j, k, want):
    dim_i, dim_j, dim_k = i
    t = matmul_tiles(dim_i, dim_j, dim_k, 16, 16384, 1024)
    assert (t.tile_i, t.tile_j, t.tile_k) == want


def test_matmul_tiles_through_the_mapper():
    hw = get_hardware("gemmini-16x16")
    plan = gemmini_auto(_problem(op="matmul", M=512, K=512, N=512), hw)
    assert plan.tile == {"tile_I": 5, "tile_J": 6, "tile_K": 32}
    # 32 I blocks / 5 -> 7 tiles, 32 J blocks / 6 -> 6 tiles, K whole: 42 loop_ws calls, k0 innermost.
    assert plan.calls == 7 * 6 * 1
    dram = plan.mapping.levels[-1]
    assert [d for d, _ in dram.temporal] == ["K", "P"]


# (layer, gemmini.h tile (batches, orows, ocols, ochs, krows, kcols, kchs)) from docs/gemmini.md
DOC_CONVS = [
    (dict(in_channels=3, out_channels=64, in_h=224, in_w=224, kernel=7, stride=2, padding=3), (1, 22, 23, 16, 7, 7, 3)),
    (dict(in_channels=256, out_channels=64, in_h=56, in_w=56, kernel=1), (1, 22, 23, 16, 1, 1, 240)),
    (dict(in_channels=256, out_channels=256, in_h=14, in_w=14, kernel=3, padding=1), (1, 14, 14, 32, 3, 3, 240)),
    (dict(in_channels=2048, out_channels=512, in_h=7, in_w=7, kernel=1), (1, 7, 7, 160, 1, 1, 624)),
]


@pytest.mark.parametrize("layer,want", DOC_CONVS)
def test_conv_tiles_of_the_doc(layer, want):
    hw = get_hardware("gemmini-16x16")
    plan = gemmini_auto(_problem(op="conv2d", **layer), hw)
    assert tuple(plan.tile.values()) == want
    for grid in GRIDS:
        p = _problem(op="conv2d", **layer)
        assert check(p, hw, gemmini_auto(p, hw, grid=grid).mapping) == []


def test_conv_rows_count_like_gemmini_h():
    # conv1 tile: inputs 22*2+7-1 = 50 rows x 23*2+7-1 = 52 cols, 1 channel block; weights 1 block x 7x7x3.
    s, a = conv_rows((1, 22, 23, 16, 7, 7, 3), ConvGeometry(stride=(2, 2)), 16)
    assert s == 50 * 52 + 7 * 7 * 3 and a == 22 * 23
    assert s <= 8192 and a <= 512
    # one more output column no longer fits the accumulator half (22*24 = 528 > 512)
    assert conv_rows((1, 22, 24, 16, 7, 7, 3), ConvGeometry(stride=(2, 2)), 16)[1] > 512


def test_pooling_would_change_conv1():
    # gemmini's own ResNet-50 fuses the 3x3/2 max-pool into conv1; the doc's tile is the un-pooled call.
    pooled = conv_tiles(1, 56, 56, 64, 7, 7, 3, ConvGeometry(stride=(2, 2), pool_size=3, pool_stride=2), 16, 16384, 1024)
    assert pooled != (1, 22, 23, 16, 7, 7, 3)


def test_mapping_structure_conv():
    hw = get_hardware("gemmini-16x16")
    p = _problem(op="conv2d", in_channels=256, out_channels=64, in_h=56, in_w=56, kernel=1)
    m = gemmini_auto(p, hw).mapping
    reg, acc, spad, dram = m.levels
    assert reg.temporal == [] and acc.spatial == [("C", 16)] and spad.spatial == [("K", 16)]
    assert [d for d, _ in acc.temporal] == ["Q", "P", "C"]  # ocol innermost, then orow, kch blocks
    assert [d for d, _ in dram.temporal] == ["C", "K", "Q", "P"]  # kch innermost ... orow outermost
    assert m.double_buffered == {"Accumulator": ["O"], "Scratchpad": ["I", "W"]}
    # balanced grid: 256 channels in 2 tiles of 128 (8 blocks), 56 rows in 3 tiles of 19 (padded to 57)
    assert acc.temporal_factor("C") == 8 and dram.temporal_factor("C") == 2
    assert m.padded_dims == {"P": 57, "Q": 57}
    lit = gemmini_auto(p, hw, grid="literal").mapping
    assert lit.padded_dims == {"C": 480, "P": 66, "Q": 69}
    assert lit.levels[1].temporal_factor("P") == 22 and lit.levels[1].temporal_factor("Q") == 23


def test_resnet50_all_legal_on_all_gemminis(examples):
    _, layers = load_workload(examples / "workloads" / "resnet50_unique.yaml")
    literal_overflows = []
    for name in GEMMINIS:
        hw = get_hardware(name)
        for layer in layers:
            p = Problem.from_layer(layer)
            bal = gemmini_auto(p, hw)  # the default grid always yields a legal mapping
            assert check(p, hw, bal.mapping) == [], (name, layer.name)
            try:
                lit = gemmini_auto(p, hw, grid="literal")
            except MappingInfeasible:
                literal_overflows.append((name, layer.name))
                continue
            assert check(p, hw, lit.mapping) == []
            if not lit.resized and not bal.resized:
                assert lit.calls == bal.calls and lit.tile == bal.tile
            def padded(m, p=p):  # type: ignore[no-untyped-def]
                return math.prod(m.padded_dims.get(d, v) for d, v in p.dims.items())

            assert padded(bal.mapping) <= padded(lit.mapping)
    # Literal tiles of a channel count that is not a whole number of DIM blocks pad the weight tile beyond
    # gemmini.h's own row count; on the default Gemmini that happens for the two 1024->N 1x1 @14 layers,
    # which then fit only single buffered.
    assert literal_overflows == []
    hw = get_hardware("gemmini-16x16")
    single = [
        layer.name for layer in layers
        if not gemmini_auto(Problem.from_layer(layer), hw, grid="literal").mapping.double_buffered
    ]
    assert single == ["conv_1024_256_1x1_s1_14", "conv_1024_512_1x1_s1_14"]


def test_registered_mapper_and_refusal():
    hw = get_hardware("gemmini-16x16")
    mapper = get_mapper("gemmini-auto")
    p = _problem(op="matmul", M=1, K=2048, N=1000)
    res = mapper.map(p, hw, MapperOptions())
    assert res.solver.status == "heuristic" and check(p, hw, res.mapping) == []
    with pytest.raises(InputError):
        mapper.map(p, get_hardware("simba"), MapperOptions())
    with pytest.raises(InputError):
        mapper.map(p, hw, MapperOptions(dataflow="output_stationary"))


def _matmul_spad(i, j, k, dim=16):
    return (i * k + k * j) * dim


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 3000), st.integers(1, 3000), st.sampled_from(GEMMINIS))
def test_matmul_tiles_fit_and_are_maximal(m, n, k, name):
    hw = get_hardware(name)
    s = find_shape(hw)
    dim = s.dim
    t = matmul_tiles(m, n, k, dim, s.spad_rows, s.acc_rows)
    bi, bj, bk = -(-m // dim), -(-n // dim), -(-k // dim)
    half_s, half_a = s.spad_rows // 2, s.acc_rows // 2
    assert 1 <= t.tile_i <= bi and 1 <= t.tile_j <= bj and 1 <= t.tile_k <= bk
    assert _matmul_spad(t.tile_i, t.tile_j, t.tile_k, dim) <= half_s and t.tile_i * t.tile_j * dim <= half_a
    # no growth step the greedy loop tries would still fit
    assert not (t.tile_j < bj and _matmul_spad(t.tile_i, t.tile_j + 1, t.tile_k, dim) <= half_s
                and t.tile_i * (t.tile_j + 1) * dim <= half_a)
    assert not (t.tile_i < bi and _matmul_spad(t.tile_i + 1, t.tile_j, t.tile_k, dim) <= half_s
                and (t.tile_i + 1) * t.tile_j * dim <= half_a)
    assert not (t.tile_k < bk and _matmul_spad(t.tile_i, t.tile_j, t.tile_k + 1, dim) <= half_s)
    p = _problem(op="matmul", M=m, K=k, N=n)
    assert check(p, hw, gemmini_auto(p, hw).mapping) == []
    try:  # the literal grid may overflow by its padded weight channels; if it answers, it is legal
        assert check(p, hw, gemmini_auto(p, hw, grid="literal").mapping) == []
    except MappingInfeasible:
        pass


@settings(max_examples=120, deadline=None)
@given(
    st.integers(1, 4), st.integers(1, 1024), st.integers(1, 1024), st.integers(4, 120), st.sampled_from([1, 3, 5, 7]),
    st.sampled_from([1, 2]), st.sampled_from(GEMMINIS),
)
def test_conv_tiles_fit_are_maximal_and_legal(batch, cin, cout, size, k, stride, name):
    hw = get_hardware(name)
    s = find_shape(hw)
    layer = dict(op="conv2d", batch=batch, in_channels=cin, out_channels=cout, in_h=size, in_w=size,
                 kernel=min(k, size), stride=stride, padding=min(k, size) // 2)
    p = _problem(**layer)
    d = p.dims
    geom = ConvGeometry(stride=p.stride, downsample=d["R"] == 1 and p.stride == (2, 2))
    args = conv_tiles(d["N"], d["P"], d["Q"], d["K"], d["R"], d["S"], d["C"], geom, s.dim, s.spad_rows, s.acc_rows)
    limits = (s.spad_rows // 2, s.acc_rows // 2)
    rows = conv_rows(args, geom, s.dim)
    assert rows[0] <= limits[0] and rows[1] <= limits[1]
    full = (d["N"], d["P"], d["Q"], d["K"], d["R"], d["S"], d["C"])
    for i in range(7):  # the final grow loop leaves no +1 that fits
        assert 1 <= args[i] <= full[i]
        if args[i] < full[i]:
            cand = list(args)
            cand[i] += 1
            r = conv_rows(cand, geom, s.dim)
            assert r[0] > limits[0] or r[1] > limits[1]
    assert check(p, hw, gemmini_auto(p, hw).mapping) == []
    try:  # the literal grid may overflow by its padded weight channels; if it answers, it is legal
        assert check(p, hw, gemmini_auto(p, hw, grid="literal").mapping) == []
    except MappingInfeasible:
        pass
