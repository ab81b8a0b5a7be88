"""Gemmini-like arrays of any shape and size (issue 13): never faster than the ideal, never above 100% use.

A 32x8 descriptor once predicted 224% utilisation (the model blocked output channels by the rows) and an 8x32 one
the same as an 8x8 array; a mapping on 4 of 256 PEs predicted near the ideal. The property test draws
descriptors (rows != cols, odd sizes, buffers of any size), layers and legal mappings with any spatial factors,
and checks both executors."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tileplan.check import check
from tileplan.cost import evaluate_mapping
from tileplan.execution import array_extent, occupied_array
from tileplan.hardware import HardwareDescriptor
from tileplan.hardware.catalog import get_hardware
from tileplan.mapping import LevelMapping, Mapping
from tileplan.problem import Problem, divisors
from tileplan.workload import Conv2dLayer, MatmulLayer


def gemmini_like(rows: int, cols: int, spad_kib: int, acc_kib: int) -> HardwareDescriptor:
    """A Gemmini-shaped descriptor: registers, one accumulator slice per column (its fan-out spans the rows, C),
    one scratchpad (its fan-out spans the columns, K), DRAM."""
    return HardwareDescriptor.model_validate({
        "name": f"gemmini-like-{rows}x{cols}",
        "pe_array": {"rows": rows, "cols": cols, "dataflows": [{"name": "weight_stationary", "levels": {
            "Accumulator": {"spatial_dims": ["C"]}, "Scratchpad": {"spatial_dims": ["K"]}}}]},
        "memory_levels": [
            {"name": "Registers", "capacity": rows * cols * 4, "word_bits": 32, "instances": rows * cols, "keeps": ["W"]},
            {"name": "Accumulator", "capacity": acc_kib * 1024 * cols, "word_bits": 32, "instances": cols,
             "keeps": ["O"], "buffer_count": 2},
            {"name": "Scratchpad", "capacity": spad_kib * 1024, "instances": 1, "keeps": ["I", "W"], "buffer_count": 2},
            {"name": "DRAM", "keeps": ["W", "I", "O"], "bandwidth": 8},
        ],
    })


@st.composite
def cases(draw):  # type: ignore[no-untyped-def]
    rows = draw(st.integers(1, 40))
    cols = draw(st.integers(1, 40))
    hw = gemmini_like(rows, cols, draw(st.sampled_from([4, 64, 1024, 16384])), draw(st.sampled_from([4, 64, 4096])))
    if draw(st.booleans()):
        layer: Conv2dLayer | MatmulLayer = MatmulLayer(M=draw(st.integers(1, 200)), K=draw(st.integers(1, 300)),
                                                       N=draw(st.integers(1, 300)), bias=draw(st.booleans()))
    else:
        k = draw(st.sampled_from([1, 3, 5]))
        size = draw(st.integers(k, 30))
        layer = Conv2dLayer(in_channels=draw(st.integers(1, 96)), out_channels=draw(st.integers(1, 96)), in_h=size,
                            in_w=draw(st.integers(k, 30)), kernel=k, stride=draw(st.sampled_from([1, 2])),
                            padding=draw(st.sampled_from([0, k // 2])), bias=draw(st.booleans()))
    problem = Problem.from_layer(layer)
    d = problem.dims
    # spatial factors: divisors of C (rows side) and K (columns side) within the array
    sc = draw(st.sampled_from([x for x in divisors(d["C"]) if x <= rows]))
    sk = draw(st.sampled_from([x for x in divisors(d["K"]) if x <= cols]))
    below, dram = [], []
    for name in ("N", "G", "K", "C", "P", "Q", "R", "S"):
        rest = d[name] // (sc if name == "C" else sk if name == "K" else 1)
        t = draw(st.sampled_from(divisors(rest)))
        below.append((name, t))
        dram.append((name, rest // t))
    db = draw(st.booleans())
    mapping = Mapping(
        levels=[
            LevelMapping(name="Registers"),
            LevelMapping(name="Accumulator", temporal=[(n, f) for n, f in below if f > 1], spatial=[("C", sc)] if sc > 1 else []),
            LevelMapping(name="Scratchpad", spatial=[("K", sk)] if sk > 1 else []),
            LevelMapping(name="DRAM", temporal=[(n, f) for n, f in draw(st.permutations(dram)) if f > 1]),
        ],
        double_buffered={"Scratchpad": ["I", "W"], "Accumulator": ["O"]} if db else {},
        dataflow="weight_stationary",
    )
    return hw, problem, mapping


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(cases())
def test_never_below_ideal_never_above_full_use(case) -> None:  # type: ignore[no-untyped-def]
    hw, problem, mapping = case
    assume(check(problem, hw, mapping) == [])
    arch = hw.resolve("weight_stationary")
    rows, cols = array_extent(arch)
    assert rows * cols == hw.pe_array.macs
    _, used_r, used_c = occupied_array(arch, mapping)
    assert used_r <= rows and used_c <= cols
    for executor in ("library", "tileplan"):
        m = evaluate_mapping(problem, arch, mapping, executor)
        assert m.model == "gemmini"
        assert m.cycles >= m.ideal_cycles, (executor, m.cycles, m.ideal_cycles)
        assert 0 < m.utilization <= 1.0
        if executor == "library":  # nor faster than the ideal of the part of the array the mapping occupies
            assert m.cycles >= problem.macs / (used_r * used_c)
        lo, hi = m.cycles_interval or (0, 0)
        assert lo <= m.cycles <= hi and math.isfinite(hi)
        if rows != cols:
            assert any("not square" in n for n in m.notes)


def test_the_issue_examples() -> None:
    """conv 64->64 3x3 at 56x56: on a 32x8 array at least the ideal 451,584 cycles, and an 8x32 array is not
    costed like an 8x8 one with four times fewer PEs; a plan on 4x4 of 16x16 PEs is far from the ideal."""
    layer = Problem.from_layer(Conv2dLayer(in_channels=64, out_channels=64, in_h=56, in_w=56, kernel=3, padding=1))

    def full(rows: int, cols: int, sc: int, sk: int) -> tuple[HardwareDescriptor, Mapping]:
        hw = gemmini_like(rows, cols, 256, 64)
        m = Mapping(levels=[
            LevelMapping(name="Registers"),
            LevelMapping(name="Accumulator", temporal=[("Q", 14), ("P", 4), ("R", 3), ("S", 3), ("C", 64 // sc)],
                         spatial=[("C", sc)]),
            LevelMapping(name="Scratchpad", temporal=[("K", 16 // sk)], spatial=[("K", sk)]),
            LevelMapping(name="DRAM", temporal=[("Q", 4), ("P", 14), ("K", 4)]),
        ], dataflow="weight_stationary")
        assert check(layer, hw, m) == []
        return hw, m

    got = {}
    for rows, cols, sc, sk in ((32, 8, 32, 8), (8, 32, 8, 16), (8, 8, 8, 8), (16, 16, 16, 16), (16, 16, 4, 4)):
        hw, m = full(rows, cols, sc, sk)
        met = evaluate_mapping(layer, hw.resolve(), m)
        assert met.cycles >= met.ideal_cycles and met.utilization <= 1
        got[(rows, cols, sc, sk)] = met.cycles
    assert got[(32, 8, 32, 8)] >= 64 * 64 * 9 * 56 * 56 / 256
    assert got[(8, 32, 8, 16)] < 0.75 * got[(8, 8, 8, 8)]
    assert got[(16, 16, 4, 4)] > 8 * got[(16, 16, 16, 16)]
    assert get_hardware("gemmini-16x16").pe_array.macs == 256


def test_hardware_validate_says_what_is_extrapolated(tmp_path, capsys) -> None:
    import yaml

    from tileplan import cli

    f = tmp_path / "g32x8.yaml"
    f.write_text(yaml.safe_dump(gemmini_like(32, 8, 256, 64).model_dump(mode="json")))
    assert cli.main(["hardware", "validate", str(f)]) == 0
    out = capsys.readouterr().out
    assert "32 rows of input channels x 8 columns of output channels" in out
    assert "extrapolated: a 32x8 array is not square" in out
    square = tmp_path / "g16.yaml"
    square.write_text(yaml.safe_dump(get_hardware("gemmini-16x16").model_dump(mode="json")))
    assert cli.main(["hardware", "validate", str(square)]) == 0
    assert "extrapolated" not in capsys.readouterr().out
