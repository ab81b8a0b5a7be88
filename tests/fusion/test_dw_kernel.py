"""The fused depthwise -> pointwise kernel (tileplan.fusion.dw_kernel) on the emulator: its output equals the
depthwise conv stored by mvout (scale, activation, saturation) and read back by the pointwise one, bit for bit."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tileplan.codegen.emulator import Emulator, TimingParams
from tileplan.fusion import dw_kernel
from tileplan.workload import Conv2dLayer


def _requant(acc: np.ndarray, scale: float, relu: bool) -> np.ndarray:
    y = np.rint(acc.astype(np.int32).astype(np.float32) * np.float32(scale))
    return np.clip(np.maximum(y, 0) if relu else y, -128, 127).astype(np.int8)


def _reference(x, w1, b1, w2, b2, stride, pad, s1, s2):  # type: ignore[no-untyped-def]
    n, c, h, w = x.shape
    r, s = w1.shape[1:]
    xp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), np.int64)
    xp[:, :, pad:pad + h, pad:pad + w] = x
    p, q = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - s) // stride + 1
    acc = np.zeros((n, c, p, q), np.int64) + b1[None, :, None, None]
    for i in range(r):
        for j in range(s):
            acc += xp[:, :, i:i + stride * (p - 1) + 1:stride, j:j + stride * (q - 1) + 1:stride] * \
                w1[:, i, j][None, :, None, None]
    mid = _requant(acc, s1, True)
    acc2 = np.einsum("ncpq,ck->nkpq", mid.astype(np.int64), w2.astype(np.int64)) + b2[None, :, None, None]
    return _requant(acc2, s2, False), mid


@pytest.mark.parametrize(("n", "c", "hw", "stride", "k2", "acc"), [
    (1, 24, 9, 1, 20, 1024),   # channel edge, one band
    (2, 40, 14, 2, 24, 1024),  # stride 2 (two phases), batch 2
    (1, 32, 20, 1, 16, 256),   # a small accumulator: several bands
])
def test_fused_depthwise_pointwise_equals_two_stored_layers(n: int, c: int, hw: int, stride: int, k2: int,
                                                             acc: int) -> None:
    rng = np.random.default_rng(c + hw)
    dw = Conv2dLayer(name="dw", in_channels=c, out_channels=c, groups=c, in_h=hw, in_w=hw, kernel=(3, 3),
                     padding=(1, 1), stride=(stride, stride), batch=n)
    pw = Conv2dLayer(name="pw", in_channels=c, out_channels=k2, in_h=dw.out_h, in_w=dw.out_w, kernel=(1, 1), batch=n)
    w1 = rng.integers(-128, 128, (c, 3, 3), dtype=np.int8)
    w2 = rng.integers(-128, 128, (c, k2), dtype=np.int8)
    b1, b2 = rng.integers(-2000, 2000, c, dtype=np.int32), rng.integers(-3000, 3000, k2, dtype=np.int32)
    abi = SimpleNamespace(layout="NCHW")
    s1 = SimpleNamespace(layer=dw, weights=w1.reshape(c, 3, 3, 1, 1), bias=b1, abi=abi)
    s2 = SimpleNamespace(layer=pw, weights=w2.reshape(1, 1, 1, c, k2), bias=b2, abi=abi)
    sh = dw_kernel.shape_of(s1, s2)
    assert sh is not None
    t = dw_kernel.choose_band(sh, 16, 16384, acc)
    assert t is not None
    w, b = dw_kernel.prelay(s1, s2, sh, 16)
    src = dw_kernel.generate("tpf_dw", sh, t, dim=16, spad_rows=16384, acc_rows=acc, max_bytes=64, scale1=0.004,
                             relu1=True, scale2=0.011, relu2=False, hw_name="test")
    x = rng.integers(-128, 128, (n, c, hw, hw), dtype=np.int8)
    out = np.zeros((n, k2, dw.out_h, dw.out_w), np.int8)
    ws = np.zeros(dw_kernel.workspace_bytes(sh, 16), np.uint8)
    e = Emulator(dim=16, spad_rows=16384, acc_rows=acc, timing=TimingParams.for_dim(16))
    r = e.run(src, {"I": x, "W": w, "B": b, "out": out, "ws": ws}, entry="tpf_dw_entry", readonly=("I", "W", "B"))
    want, mid = _reference(x, w1, b1, w2, b2, stride, 1, 0.004, 0.011)
    np.testing.assert_array_equal(r.buffers["out"], want)
    assert (mid == 0).any() and (mid == 127).any()
    assert r.dram_bytes_out == out.nbytes  # only the output is stored
