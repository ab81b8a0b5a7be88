"""A float InstanceNormalization between int8 dequantize and quantize (held-out set 6: Hugging Face Wav2Vec2's
feature encoder, whose first conv's GroupNorm with one channel per group torch.onnx writes as Reshape ->
InstanceNormalization -> Reshape -> Mul -> Add), computed with onnxruntime's arithmetic bit for bit.

onnxruntime 1.32's CPU kernel (core/providers/cpu/nn/instance_norm.cc) sums each (n, c) row with Eigen, which
vectorises the sum over four float lanes from the first 16-byte aligned element, takes the squared norm of the
deviations the same way, and writes y = x * (scale / sqrt(var + eps)) + (B - mean * that), all in float
(`host_ops.instance_norm_call` describes it step by step). Tileplan's host InstanceNorm was TVM's importer's
(mean, variance, (x - mean) / sqrt(var + eps) * scale + B): Wav2Vec2's first GroupNorm quantized 4 of 51,168
codes 1 LSB apart, and the difference compounded to 76.8% equal at the model's output (bench/zoo_trace.py)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs, qdq_norm_model

from tileplan.frontend.runner import run_artifact


def _model(shape: list[int], eps: float, quantized_output: bool, seed: int) -> bytes:
    """x -> Q -> DQ -> InstanceNormalization [-> Q -> DQ] -> y, with a random scale and bias per channel."""
    return qdq_norm_model("InstanceNormalization", shape, shape[1], eps, quantized_output, seed)


def _input(shape: list[int], seed: int) -> np.ndarray:
    """Channels with their own offset and spread, within int8's range of the input's scale."""
    rng = np.random.default_rng(seed)
    lead = (*shape[:2], *([1] * (len(shape) - 2)))
    x = rng.normal(0.0, 1.5, lead) + rng.normal(0.5, 1.0, lead) * rng.normal(0.0, 1.0, shape)
    return np.clip(x, -6.0, 6.0).astype(np.float32)


@pytest.mark.parametrize("shape, eps", [
    ([1, 32, 1600], 1e-5),     # Wav2Vec2's first GroupNorm (32 groups of 32 channels, 8000 samples / 5)
    ([1, 8, 1599], 1e-5),      # rows that start off the 16-byte alignment: a scalar head, lanes, a tail
    ([2, 5, 13, 3], 1e-6),     # 4-D, batch 2, 39 elements a row
    ([1, 6, 9], 1e-5),         # one packet pair and a leftover packet
    ([1, 4, 3], 1e-5),         # rows shorter than a packet: a scalar sum
])
def test_float_instance_norm_equals_onnxruntime_bit_for_bit(shape, eps):
    data = _model(shape, eps, quantized_output=False, seed=shape[-1])
    res = compile_bytes(data)
    for seed in range(2):
        x = _input(shape, seed)
        got = run_artifact(res.artifact, {"x": x}).outputs["y"]
        np.testing.assert_array_equal(got, onnxruntime_outputs(data, {"x": x})["y"])


def test_quantized_instance_norm_equals_onnxruntime():
    shape = [1, 32, 1600]
    data = _model(shape, 1e-5, quantized_output=True, seed=3)
    res = compile_bytes(data)
    x = _input(shape, 3)
    np.testing.assert_array_equal(run_artifact(res.artifact, {"x": x}).outputs["y"],
                                  onnxruntime_outputs(data, {"x": x})["y"])
