"""A float LayerNormalization between int8 dequantize and quantize (ConvNeXt-T's and Swin-T's norms: the last axis,
widths 96-768), computed with onnxruntime's arithmetic bit for bit.

onnxruntime 1.32 on an x86-64 CPU with AVX2 and FMA runs LayerNormalization rows of 8 or more elements through
MLAS's AVX2 kernel: a centred two-pass variance with the mean summed in double precision over four lanes,
the squared deviations accumulated with fused multiply-adds over eight float lanes, a reciprocal of the
standard deviation and a fused multiply-add with the bias (`host_ops._layer_norm_te` describes it step by step).
Tileplan's host LayerNorm was TVM's legalization (sequential sums, a division), which rounds differently at a
few elements in a thousand: ConvNeXt-T's first LayerNorm quantized 2 of 301,056 codes 1 LSB apart, and the
difference compounded to 92.1% equal at the model's output (bench/zoo_trace.py)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs, qdq_norm_model

from tileplan.frontend.runner import run_artifact

XS, XZ = 0.05, 3


def _model(shape: list[int], eps: float, quantized_output: bool, seed: int, bias: bool = True,
           y_scale: float = 0.02) -> bytes:
    """x -> Q -> DQ -> LayerNormalization(last axis) [-> Q -> DQ] -> y, with random scale and bias."""
    return qdq_norm_model("LayerNormalization", shape, shape[-1], eps, quantized_output, seed, bias=bias,
                          y_scale=y_scale, x_scale=XS, x_zero=XZ, axis=-1)


def _input(shape: list[int], seed: int) -> np.ndarray:
    """Rows with their own offset and spread (a LayerNorm's input after a residual add), within int8's range."""
    rng = np.random.default_rng(seed)
    rows = rng.normal(0.0, 1.5, (*shape[:-1], 1)) + rng.normal(0.0, 1.0, (*shape[:-1], 1)) * rng.normal(
        0.0, 1.0, shape)
    return np.clip(rows, -6.0, 6.0).astype(np.float32)


@pytest.mark.parametrize("shape, eps", [
    ([1, 16, 16, 96], 1e-6),   # ConvNeXt-T's stage-1 norms (LayerNorm2d: NHWC, eps 1e-6)
    ([1, 8, 8, 192], 1e-5),    # Swin-T's (eps 1e-5)
    ([1, 64, 384], 1e-5),
    ([1, 16, 768], 1e-5),
    ([1, 64, 100], 1e-5),      # a width not a multiple of 8: the kernel's scalar tail (4 + 0 elements)
    ([1, 64, 13], 1e-5),       # 8 + 5: the tail's vectorised four and its last, fused, element
])
def test_float_layer_norm_equals_onnxruntime_bit_for_bit(shape, eps):
    data = _model(shape, eps, quantized_output=False, seed=shape[-1])
    for seed in range(3):
        x = _input(shape, seed)
        got = run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"]
        want = onnxruntime_outputs(data, {"x": x})["y"]
        np.testing.assert_array_equal(got, want)


def test_layer_norm_without_bias_equals_onnxruntime_bit_for_bit():
    shape = [1, 32, 96]
    data = _model(shape, 1e-5, quantized_output=False, seed=7, bias=False)
    x = _input(shape, 7)
    got = run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"]
    np.testing.assert_array_equal(got, onnxruntime_outputs(data, {"x": x})["y"])


def test_quantized_layer_norm_equals_onnxruntime_on_convnext_sized_input():
    """ConvNeXt-T's first LayerNorm's size (56 x 56 x 96 = 301,056 codes): every code equal to onnxruntime's
    (TVM's legalization: 126 codes 1 LSB apart on this input)."""
    shape = [1, 56, 56, 96]
    data = _model(shape, 1e-6, quantized_output=True, seed=1, y_scale=0.01)
    x = _input(shape, 1)
    got = run_artifact(compile_bytes(data).artifact, {"x": x}).outputs["y"]
    np.testing.assert_array_equal(got, onnxruntime_outputs(data, {"x": x})["y"])
