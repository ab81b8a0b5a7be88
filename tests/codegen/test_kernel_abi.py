"""The whole-model kernel ABI (KernelABI): NCHW external layout, a non-zero input padding value, prelaid weights.
Bit-exact against NumPy on the emulator, for convolutions (padded, strided, grouped, depthwise, the folded
small-channel stream) and a matmul."""

from __future__ import annotations

import numpy as np
import pytest

from tileplan.codegen.pipeline import Epilogue, emulator_for, generate
from tileplan.codegen.targets.gemmini import KernelABI, pack_weights
from tileplan.hardware.catalog import get_hardware
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.workload import parse_layer

HW = get_hardware("gemmini-16x16")


def _reference_nchw(I, W, bias, stride, pad, pad_value, groups, scale):
    """int64 grouped convolution of NCHW I with OIHW W, padding value `pad_value`, then Gemmini's requantize."""
    n, cin, h, w = I.shape
    k, c, r, s = W.shape
    x = np.pad(I.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=pad_value)
    p = (h + 2 * pad - r) // stride + 1
    q = (w + 2 * pad - s) // stride + 1
    acc = np.zeros((n, k, p, q), np.int64)
    kg = k // groups
    for g in range(groups):
        xs = x[:, g * c:(g + 1) * c]
        for dr in range(r):
            for ds in range(s):
                win = xs[:, :, dr:dr + stride * (p - 1) + 1:stride, ds:ds + stride * (q - 1) + 1:stride]
                acc[:, g * kg:(g + 1) * kg] += np.einsum("nchw,kc->nkhw", win,
                                                         W[g * kg:(g + 1) * kg, :, dr, ds].astype(np.int64))
    acc += bias.astype(np.int64)[None, :, None, None]
    y = np.rint(acc.astype(np.int32).astype(np.float32) * np.float32(scale))
    return np.clip(y, -128, 127).astype(np.int8)


def _prelay(art, W_gkcrs_to_grsck, bias):
    """W_p / bias_p as the kernel reads them (groups packed as the plan packs them: block-diagonal weights)."""
    pd = art.layout.padded
    Wp = np.zeros((pd["G"], pd["R"], pd["S"], pd["C"], pd["K"]), np.int8)
    W_gkcrs_to_grsck = pack_weights(W_gkcrs_to_grsck, art.geometry.pack)
    g, r, s, c, k = W_gkcrs_to_grsck.shape
    Wp[:g, :r, :s, :c, :k] = W_gkcrs_to_grsck
    bp = np.zeros((pd["G"], pd["K"]), np.int32)
    bp[:g, :k] = bias.reshape(g, k)
    return Wp, bp


def _run(art, bufs):
    bufs = {**bufs, "workspace": np.zeros(max(64, art.workspace_bytes), np.uint8)}
    return emulator_for(art).run(art.c_source, bufs, entry=art.entry, readonly=("I", "W_p", "bias_p"))


@pytest.mark.parametrize("cin,cout,size,k,stride,pad,groups,pad_value", [
    (8, 20, 9, 3, 2, 1, 1, 7),     # strided, padded, non-zero padding value
    (3, 16, 10, 3, 1, 1, 1, -5),   # few input channels: the folded stream
    (16, 16, 8, 3, 1, 1, 16, 3),   # depthwise
    (16, 32, 7, 1, 2, 0, 1, 0),    # strided 1x1 (host-side subsampling)
])
def test_conv_nchw_pad_value_prelaid(cin, cout, size, k, stride, pad, groups, pad_value):
    layer = parse_layer(dict(op="conv2d", in_channels=cin, out_channels=cout, in_h=size, in_w=size, kernel=k,
                             padding=pad, stride=stride, groups=groups))
    plan = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5))
    art = generate(layer, HW, plan.mapping, Epilogue(scale=0.004), name="k",
                   abi=KernelABI("NCHW", pad_value=pad_value, prelaid=True))
    assert "W_p" in art.c_source and "Layouts: I NCHW" in art.c_source
    rng = np.random.default_rng(cin * 100 + cout)
    I = rng.integers(-128, 128, (1, cin, size, size), dtype=np.int8)
    W = rng.integers(-128, 128, (cout, cin // groups, k, k), dtype=np.int8)
    bias = rng.integers(-3000, 3000, cout).astype(np.int32)
    Wg = W.reshape(groups, cout // groups, cin // groups, k, k).transpose(0, 3, 4, 2, 1)
    Wp, bp = _prelay(art, Wg, bias)
    p = (size + 2 * pad - k) // stride + 1
    res = _run(art, {"I": I, "W_p": Wp, "bias_p": bp, "out": np.zeros((1, cout, p, p), np.int8)})
    want = _reference_nchw(I, W, bias, stride, pad, pad_value, groups, 0.004)
    np.testing.assert_array_equal(res.buffers["out"], want)


def test_matmul_prelaid_row_major():
    layer = parse_layer(dict(op="matmul", M=24, K=40, N=36))
    plan = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5))
    art = generate(layer, HW, plan.mapping, Epilogue(scale=0.01), name="mm",
                   abi=KernelABI("NCHW", prelaid=True))  # a matmul stays row-major whatever the layout
    rng = np.random.default_rng(3)
    A = rng.integers(-128, 128, (24, 40), dtype=np.int8)
    B = rng.integers(-128, 128, (40, 36), dtype=np.int8)
    bias = rng.integers(-3000, 3000, 36).astype(np.int32)
    Wp, bp = _prelay(art, B.reshape(1, 1, 1, 40, 36), bias)
    res = _run(art, {"I": A, "W_p": Wp, "bias_p": bp, "out": np.zeros((24, 36), np.int8)})
    acc = A.astype(np.int64) @ B.astype(np.int64) + bias
    want = np.clip(np.rint(acc.astype(np.float32) * np.float32(0.01)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(res.buffers["out"], want)


@pytest.mark.parametrize("kind", ["conv", "matmul"])
def test_acc_output_stores_int32_accumulators(kind):
    """acc_output: the kernel hands back acc + bias as int32 (mvout read-full), whatever the epilogue's scale."""
    rng = np.random.default_rng(7)
    if kind == "conv":
        layer = parse_layer(dict(op="conv2d", in_channels=24, out_channels=20, in_h=7, in_w=7, kernel=3, padding=1))
        I = rng.integers(-128, 128, (1, 24, 7, 7), dtype=np.int8)
        W = rng.integers(-128, 128, (20, 24, 3, 3), dtype=np.int8)
        Wg = W.reshape(1, 20, 24, 3, 3).transpose(0, 3, 4, 2, 1)
        out = np.zeros((1, 20, 7, 7), np.int32)
    else:
        layer = parse_layer(dict(op="matmul", M=20, K=40, N=20))
        I = rng.integers(-128, 128, (20, 40), dtype=np.int8)
        B = rng.integers(-128, 128, (40, 20), dtype=np.int8)
        Wg = B.reshape(1, 1, 1, 40, 20)
        out = np.zeros((20, 20), np.int32)
    bias = rng.integers(-100000, 100000, 20).astype(np.int32)
    plan = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5))
    art = generate(layer, HW, plan.mapping, Epilogue(scale=0.004), name="k",
                   abi=KernelABI("NCHW", pad_value=-3, prelaid=True, acc_output=True))
    assert "int32_t *out" in art.c_source
    Wp, bp = _prelay(art, Wg, bias)
    res = _run(art, {"I": I, "W_p": Wp, "bias_p": bp, "out": out})
    if kind == "conv":
        x = np.pad(I.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-3)
        want = np.zeros((1, 20, 7, 7), np.int64)
        for dr in range(3):
            for ds in range(3):
                want += np.einsum("nchw,kc->nkhw", x[:, :, dr:dr + 7, ds:ds + 7], W[:, :, dr, ds].astype(np.int64))
        want += bias[None, :, None, None]
    else:
        want = I.astype(np.int64) @ B.astype(np.int64) + bias
    np.testing.assert_array_equal(res.buffers["out"], want.astype(np.int32))


def test_default_abi_unchanged():
    """Without an ABI the kernel keeps the per-layer signature (I, W, bias, out, workspace)."""
    layer = parse_layer(dict(op="conv2d", in_channels=4, out_channels=8, in_h=5, in_w=5, kernel=3, padding=1))
    plan = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5))
    art = generate(layer, HW, plan.mapping, name="k")
    assert "void k(const int8_t *I, const int8_t *W, const int32_t *bias, int8_t *out, uint8_t *workspace)" \
        in art.c_source
    with pytest.raises(ValueError):
        KernelABI("NHCW")


def test_model_cycles_count_the_int32_stores():
    """acc_output kernels store four bytes per output element: the cost model's cycles for the code (the compile
    summary's `cycles_model`) charge them (an output-heavy 1x1 convolution: before, 0.55x of the emulated cycles)."""
    layer = parse_layer(dict(op="conv2d", in_channels=16, out_channels=96, in_h=28, in_w=28, kernel=1))
    plan = make_plan(layer, HW, ScheduleOptions(baseline=False, time_limit_s=5))
    arts, cycles = [], []
    for acc in (False, True):
        art = generate(layer, HW, plan.mapping, Epilogue(scale=0.01), name="k",
                       abi=KernelABI("NCHW", prelaid=True, acc_output=acc))
        pd = art.layout.padded
        I = np.random.default_rng(0).integers(-128, 128, (1, 16, 28, 28), dtype=np.int8)
        res = _run(art, {"I": I, "W_p": np.zeros((pd["G"], pd["R"], pd["S"], pd["C"], pd["K"]), np.int8),
                         "bias_p": np.zeros((pd["G"], pd["K"]), np.int32),
                         "out": np.zeros((1, 96, 28, 28), np.int32 if acc else np.int8)})
        arts.append(art)
        cycles.append(res.cycles)
    assert cycles[1] > 1.5 * cycles[0]  # the stores are most of this layer's work
    for art, c in zip(arts, cycles):
        assert 0.8 < art.model_cycles / c < 1.25


@pytest.mark.parametrize("m,k,n", [(13, 24, 13), (37, 70, 50), (197, 64, 197)])
@pytest.mark.parametrize("which", ["plan", "library"])
def test_matmul_reads_b_in_place(m, k, n, which):
    """b_in_place: W_p is the caller's unpadded row-major B [K, N] (exactly its bytes: the emulator traps a load
    outside them), read with row stride N by the loads; the results equal NumPy's for the plan's tiling and the
    library's (other tile edges)."""
    layer = parse_layer(dict(op="matmul", M=m, K=k, N=n)).model_copy(update={"bias": False})
    plan = make_plan(layer, HW, ScheduleOptions(time_limit_s=3))
    mapping = plan.mapping if which == "plan" else plan.baseline.mapping
    art = generate(layer, HW, mapping, Epilogue(scale=1.0, bias=False), name="mmb",
                   abi=KernelABI("NHWC", prelaid=True, acc_output=True, b_in_place=True))
    assert f"gemmini_extended4_config_ld({n}, MVIN_SCALE_IDENTITY, false" in art.c_source
    rng = np.random.default_rng(m)
    A = rng.integers(-128, 128, (m, k), dtype=np.int8)
    B = rng.integers(-128, 128, (k, n), dtype=np.int8)
    bp = np.zeros((art.layout.padded["G"], art.layout.padded["K"]), np.int32)
    res = _run(art, {"I": A, "W_p": B, "bias_p": bp, "out": np.zeros((m, n), np.int32)})
    np.testing.assert_array_equal(res.buffers["out"], A.astype(np.int64) @ B.astype(np.int64))


def test_b_in_place_needs_prelaid_parameters():
    with pytest.raises(ValueError, match="prelaid"):
        KernelABI("NHWC", b_in_place=True)
