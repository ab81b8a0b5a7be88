"""The fused kernels built with TILEPLAN_STAGE_ACC_READS (tileplan.fusion.staging: the consumer's accumulator read
replaced by mvout + mvin, for Spike + libgemmini) compute the same bytes as the fused kernels, and do stage: the
intermediate is stored to DRAM (without the define, only the output is)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tileplan.codegen.emulator import Emulator, TimingParams
from tileplan.codegen.emulator.build import BuildError
from tileplan.fusion import dw_kernel, ir_kernel, kernel, staging
from tileplan.workload import Conv2dLayer, MatmulLayer

STAGED = "#define TILEPLAN_STAGE_ACC_READS 1\n"


def _run(src: str, bufs: dict[str, np.ndarray], entry: str, acc: int, spad: int = 16384) -> object:
    e = Emulator(dim=16, spad_rows=spad, acc_rows=acc, timing=TimingParams.for_dim(16))
    return e.run(src, bufs, entry=entry, readonly=("I", "W", "B"))


def _plan(mod: object, s1: object, s2: object, acc: int) -> tuple:
    """A pair kernel's (kernel.py or dw_kernel.py) shape, band and prelaid weights and bias for specs s1 -> s2 on
    16x16 with 16,384 scratchpad rows and `acc` accumulator rows; every step must succeed."""
    sh = mod.shape_of(s1, s2)  # type: ignore[attr-defined]
    assert sh is not None
    t = mod.choose_band(sh, 16, 16384, acc)  # type: ignore[attr-defined]
    assert t is not None
    return (sh, t, *mod.prelay(s1, s2, sh, 16))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("m", "c1", "k1", "k2", "acc"), [
    (40, 24, 56, 20, 1024),   # edges in every dimension, one band
    (100, 16, 32, 16, 200),   # several bands through both input slots
])
def test_staged_pointwise_chain_equals_the_fused_kernel(m: int, c1: int, k1: int, k2: int, acc: int) -> None:
    rng = np.random.default_rng(m + k1)

    def spec(c: int, k: int) -> SimpleNamespace:
        return SimpleNamespace(layer=MatmulLayer(name="l", M=m, K=c, N=k),
                               weights=rng.integers(-128, 128, (1, 1, 1, c, k), dtype=np.int8),
                               bias=rng.integers(-3000, 3000, k, dtype=np.int32), abi=SimpleNamespace(layout="NHWC"))

    s1, s2 = spec(c1, k1), spec(k1, k2)
    sh, t, w, b = _plan(kernel, s1, s2, acc)
    src = kernel.generate("tpf_st", sh, t, dim=16, spad_rows=16384, acc_rows=acc, max_bytes=64, scale1=0.0071,
                          relu1=True, scale2=0.013, relu2=False, hw_name="test")
    bufs = {"I": rng.integers(-128, 128, (m, c1), dtype=np.int8), "W": w, "B": b,
            "out": np.zeros((m, k2), np.int8), "ws": np.zeros(kernel.workspace_bytes(sh, 16), np.uint8)}
    fused = _run(src, bufs, "tpf_st_entry", acc)
    staged = _run(STAGED + src, bufs, "tpf_st_entry", acc)
    np.testing.assert_array_equal(staged.buffers["out"], fused.buffers["out"])  # type: ignore[attr-defined]
    assert fused.dram_bytes_out == m * k2  # type: ignore[attr-defined]
    # staged: every block of the intermediate is stored once more (its real columns, every row)
    assert staged.dram_bytes_out == m * k2 + m * k1  # type: ignore[attr-defined]


@pytest.mark.parametrize(("n", "c", "hw", "stride", "k2", "acc"), [
    (1, 24, 9, 1, 20, 1024),   # channel edge, one band
    (2, 40, 14, 2, 24, 1024),  # stride 2, batch 2: several bands
])
def test_staged_depthwise_pointwise_equals_the_fused_kernel(n: int, c: int, hw: int, stride: int, k2: int,
                                                             acc: int) -> None:
    rng = np.random.default_rng(c + hw)
    dw = Conv2dLayer(name="dw", in_channels=c, out_channels=c, groups=c, in_h=hw, in_w=hw, kernel=(3, 3),
                     padding=(1, 1), stride=(stride, stride), batch=n)
    pw = Conv2dLayer(name="pw", in_channels=c, out_channels=k2, in_h=dw.out_h, in_w=dw.out_w, kernel=(1, 1), batch=n)
    abi = SimpleNamespace(layout="NCHW")
    s1 = SimpleNamespace(layer=dw, weights=rng.integers(-128, 128, (c, 3, 3, 1, 1), dtype=np.int8),
                         bias=rng.integers(-2000, 2000, c, dtype=np.int32), abi=abi)
    s2 = SimpleNamespace(layer=pw, weights=rng.integers(-128, 128, (1, 1, 1, c, k2), dtype=np.int8),
                         bias=rng.integers(-3000, 3000, k2, dtype=np.int32), abi=abi)
    sh, t, w, b = _plan(dw_kernel, s1, s2, acc)
    src = dw_kernel.generate("tpf_dwst", sh, t, dim=16, spad_rows=16384, acc_rows=acc, max_bytes=64, scale1=0.004,
                             relu1=True, scale2=0.011, relu2=False, hw_name="test")
    out = np.zeros((n, k2, dw.out_h, dw.out_w), np.int8)
    bufs = {"I": rng.integers(-128, 128, (n, c, hw, hw), dtype=np.int8), "W": w, "B": b, "out": out,
            "ws": np.zeros(dw_kernel.workspace_bytes(sh, 16), np.uint8)}
    fused = _run(src, bufs, "tpf_dwst_entry", acc)
    staged = _run(STAGED + src, bufs, "tpf_dwst_entry", acc)
    np.testing.assert_array_equal(staged.buffers["out"], fused.buffers["out"])  # type: ignore[attr-defined]
    assert fused.dram_bytes_out == out.nbytes  # type: ignore[attr-defined]
    assert staged.dram_bytes_out == out.nbytes + n * dw.out_h * dw.out_w * c  # type: ignore[attr-defined]


@pytest.mark.parametrize(("n", "c1", "c", "hw", "stride", "k2", "acc", "spad", "bp"), [
    (1, 24, 40, 9, 1, 20, 1024, 16384, 4),   # channel edges, bands of 4, 4 and 1 output rows
    (2, 16, 48, 15, 2, 24, 1024, 16384, 3),  # stride 2, odd size, batch 2
    (1, 8, 24, 10, 1, 8, 200, 16384, 5),     # a small accumulator: one project region
    (1, 24, 40, 9, 1, 20, 1024, 768, 4),     # a small scratchpad: weights loaded per band and block (mvin2 restored)
])
def test_staged_inverted_residual_equals_the_fused_kernel(n: int, c1: int, c: int, hw: int, stride: int, k2: int,
                                                          acc: int, spad: int, bp: int) -> None:
    """ir_kernel's two accumulator reads (the depthwise's windows over the expand's rows, halo rows and padding
    rows included; the project's over the depthwise's) both staged: the same bytes, and every expand row of every
    band and block (hin x padded width, recomputed halos included) and every depthwise row stored once more."""
    rng = np.random.default_rng(c + hw + acc)
    ex = Conv2dLayer(name="ex", in_channels=c1, out_channels=c, in_h=hw, in_w=hw, kernel=(1, 1), batch=n)
    dw = Conv2dLayer(name="dw", in_channels=c, out_channels=c, groups=c, in_h=hw, in_w=hw, kernel=(3, 3),
                     padding=(1, 1), stride=(stride, stride), batch=n)
    pw = Conv2dLayer(name="pw", in_channels=c, out_channels=k2, in_h=dw.out_h, in_w=dw.out_w, kernel=(1, 1), batch=n)
    abi = SimpleNamespace(layout="NCHW")
    s1 = SimpleNamespace(layer=ex, weights=rng.integers(-128, 128, (1, 1, 1, c1, c), dtype=np.int8),
                         bias=rng.integers(-3000, 3000, c, dtype=np.int32), abi=abi)
    s2 = SimpleNamespace(layer=dw, weights=rng.integers(-128, 128, (c, 3, 3, 1, 1), dtype=np.int8),
                         bias=rng.integers(-2000, 2000, c, dtype=np.int32), abi=abi)
    s3 = SimpleNamespace(layer=pw, weights=rng.integers(-128, 128, (1, 1, 1, c, k2), dtype=np.int8),
                         bias=rng.integers(-3000, 3000, k2, dtype=np.int32), abi=abi)
    sh = ir_kernel.shape_of(s1, s2, s3)
    assert sh is not None
    (t,) = [x for x in ir_kernel.candidates(sh, 16, spad, acc) if x.band == bp]
    assert t.out_slots == (1 if acc < 1024 else 2) and t.resident == (spad == 16384)
    w, b = ir_kernel.prelay(s1, s2, s3, sh, 16)
    src = ir_kernel.generate("tpf_irst", sh, t, dim=16, spad_rows=spad, acc_rows=acc, max_bytes=64, scale1=0.003,
                             relu1=True, scale2=0.009, relu2=True, scale3=0.012, relu3=False, hw_name="test")
    out = np.zeros((n, k2, dw.out_h, dw.out_w), np.int8)
    bufs = {"I": rng.integers(-128, 128, (n, c1, hw, hw), dtype=np.int8), "W": w, "B": b, "out": out,
            "ws": np.zeros(ir_kernel.workspace_bytes(sh, 16, t), np.uint8)}
    fused = _run(src, bufs, "tpf_irst_entry", acc, spad)
    staged = _run(STAGED + src, bufs, "tpf_irst_entry", acc, spad)
    np.testing.assert_array_equal(staged.buffers["out"], fused.buffers["out"])  # type: ignore[attr-defined]
    assert np.any(fused.buffers["out"] != 0)  # type: ignore[attr-defined]
    assert fused.dram_bytes_out == out.nbytes  # type: ignore[attr-defined]
    bands = [(min(t.band, sh.P - p0) - 1) * stride + 3 for p0 in range(0, sh.P, t.band)]
    expand_rows = n * sum(bands) * sh.Wp
    assert staged.dram_bytes_out == out.nbytes + (expand_rows + n * sh.P * sh.Q) * c  # type: ignore[attr-defined]


def test_a_kernel_without_room_to_stage_refuses_the_staged_build() -> None:
    """The staged build needs `band` free scratchpad rows; a kernel with fewer stops at compile time (#error), and
    the same kernel without the define builds."""
    snippet = staging.stage_acc_reads(dim=16, band=64, act1="RELU", scale1=0.5, st_stride=16, act2="NO_ACTIVATION",
                                      scale2=0.25, free_rows=48)
    src = ('#include <stdint.h>\n#include "gemmini.h"\n#define TP_ACC_ADDR 0x80000000u\n'
           "static inline int32_t tp_min(int32_t a, int32_t b) { return a < b ? a : b; }\n" + snippet +
           "void kernel_entry(void **args) { (void)tp_acc_operand(0, 0, (int8_t *)args[0], 16, 16); }\n")
    e = Emulator(dim=16, spad_rows=16384, acc_rows=1024, timing=TimingParams.for_dim(16))
    e.run(src, {"ws": np.zeros(256, np.int8)})
    with pytest.raises(BuildError, match="48 free scratchpad rows for a band of 64"):
        e.run(STAGED + src, {"ws": np.zeros(256, np.int8)})
