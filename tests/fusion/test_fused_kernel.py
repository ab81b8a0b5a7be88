"""The fused pointwise-chain kernel (tileplan.fusion.kernel) on the emulator: its output equals two layers each
stored by mvout (scale, activation, saturation) and read back, bit for bit."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tileplan.codegen.emulator import Emulator, TimingParams
from tileplan.fusion import kernel
from tileplan.workload import MatmulLayer


def _layer_ref(x: np.ndarray, w: np.ndarray, b: np.ndarray, scale: float, relu: bool) -> np.ndarray:
    acc = (x.astype(np.int64) @ w.astype(np.int64) + b).astype(np.int32)
    y = np.rint(acc.astype(np.float32) * np.float32(scale))
    if relu:
        y = np.maximum(y, 0)
    return np.clip(y, -128, 127).astype(np.int8)


def _spec(m: int, c: int, k: int, rng: np.random.Generator) -> SimpleNamespace:
    return SimpleNamespace(layer=MatmulLayer(name="l", M=m, K=c, N=k),
                           weights=rng.integers(-128, 128, (1, 1, 1, c, k), dtype=np.int8),
                           bias=rng.integers(-3000, 3000, k, dtype=np.int32), abi=SimpleNamespace(layout="NHWC"))


@pytest.mark.parametrize(("m", "c1", "k1", "k2", "spad", "acc"), [
    (40, 24, 56, 20, 16384, 1024),   # edges in every dimension, one band
    (200, 64, 96, 40, 16384, 1024),  # several bands: both slots in use
    (100, 16, 32, 16, 16384, 200),   # a small accumulator forces short bands
    (196, 64, 256, 64, 16384, 1024),  # a wide intermediate: 16 blocks through the two alternating regions
])
def test_fused_pointwise_chain_equals_two_stored_layers(m: int, c1: int, k1: int, k2: int, spad: int, acc: int
                                                         ) -> None:
    rng = np.random.default_rng(m + c1)
    s1, s2 = _spec(m, c1, k1, rng), _spec(m, k1, k2, rng)
    sh = kernel.shape_of(s1, s2)
    assert sh is not None and not sh.nchw
    t = kernel.choose_band(sh, 16, spad, acc)
    assert t is not None
    w, b = kernel.prelay(s1, s2, sh, 16)
    src = kernel.generate("tpf_test", sh, t, dim=16, spad_rows=spad, acc_rows=acc, max_bytes=64, scale1=0.0071,
                          relu1=True, scale2=0.013, relu2=False, hw_name="test")
    x = rng.integers(-128, 128, (m, c1), dtype=np.int8)
    out = np.zeros((m, k2), np.int8)
    ws = np.zeros(kernel.workspace_bytes(sh, 16), np.uint8)
    e = Emulator(dim=16, spad_rows=spad, acc_rows=acc, timing=TimingParams.for_dim(16))
    r = e.run(src, {"I": x, "W": w, "B": b, "out": out, "ws": ws}, entry="tpf_test_entry", readonly=("I", "W", "B"))
    mid = _layer_ref(x, s1.weights.reshape(c1, k1), s1.bias, 0.0071, True)
    want = _layer_ref(mid, s2.weights.reshape(k1, k2), s2.bias, 0.013, False)
    np.testing.assert_array_equal(r.buffers["out"], want)
    assert (mid == 0).any() and (mid == 127).any()  # the intermediate's ReLU and saturation are exercised
    # only the output is stored; loads: the input, the weights, the bias (and its broadcast rows, one per
    # output row and channel block): the intermediate is neither stored nor loaded
    assert r.dram_bytes_out == m * k2
    assert r.dram_bytes_in <= x.nbytes + w.nbytes + b.nbytes + m * (-(-k1 // 16) + -(-k2 // 16)) * 64


def test_the_fused_kernel_compiles_for_riscv_into_gemmini_instructions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """riscv64-linux-gnu-gcc -c -O2 -Wall -Werror against the stand-in header (Gemmini's macros and encodings):
    RoCC custom-3 words for config (with config_ex's acc_scale), loads, preload, both computes and mvout, and the
    kernel's only external symbols are its entry points."""
    import subprocess

    from tileplan.codegen.emulator import GemminiConfig
    from tileplan.codegen.emulator.build import compile_object, cross_compile_object, rocc_words

    rng = np.random.default_rng(1)
    s1, s2 = _spec(70, 24, 40, rng), _spec(70, 40, 20, rng)
    sh = kernel.shape_of(s1, s2)
    assert sh is not None
    t = kernel.choose_band(sh, 16, 16384, 1024)
    assert t is not None
    src = kernel.generate("tpf_rv", sh, t, dim=16, spad_rows=16384, acc_rows=1024, max_bytes=64, scale1=0.02,
                          relu1=False, scale2=0.03, relu2=True, hw_name="gemmini-16x16")
    cfg = GemminiConfig()
    words = rocc_words(cross_compile_object(src, tmp_path, cfg))
    assert words and all((w >> 12) & 7 == 0b011 and (w >> 7) & 0x1F == 0 for w in words)
    assert {0, 1, 2, 3, 4, 5, 6, 14} <= {w >> 25 for w in words}
    obj = compile_object(src, tmp_path, config=cfg)
    syms = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert {line.split()[-1] for line in syms if " T " in line} == {"tpf_rv", "tpf_rv_entry"}
