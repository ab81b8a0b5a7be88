"""Resize in linear mode (a UNet's or an FPN's bilinear upsampling, nn.Upsample(mode="bilinear")) on the host,
with onnxruntime's arithmetic: its CPU kernel (UpsampleBilinear) weighs the four neighbours with float32
coefficients and sums them in a fixed order, dx2 * dy2 * X11 + dx1 * dy2 * X21 + dx2 * dy1 * X12 + dx1 * dy1 * X22.
A 2x upsampling of dequantized codes lands on multiples of 1/16 of a step, an exact tie for one value in 16
before the quantize: another summation order rounds some of those the other way (TVM's legalization: 2,378 of
the 524,288 codes of unet_small's bilinear Resize, 1 code each, bench/zoo_trace.py)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import OPTIONS, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact

FAST = OPTIONS.model_copy(update={"emulate": False})


def _upsample(mode: str, size: int, scale: float, ch: int = 16, seed: int = 0) -> object:
    """conv 3x3 (4 -> ch) + ReLU, Resize linear by `scale` (coordinate_transformation_mode `mode`)."""
    g = zoo._Graph(seed)
    y = g.conv("input", 4, ch, name="conv1")
    scales = g.const(np.array([1, 1, scale, scale], np.float32), "scales")
    y = g.op("Resize", [y, "", scales], "up", mode="linear", coordinate_transformation_mode=mode)
    out = int(size * scale)
    return g.model("upsample", {"input": [1, 4, size, size]}, y, [1, ch, out, out])


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize(("mode", "size", "scale"), [("half_pixel", 16, 2.0), ("pytorch_half_pixel", 8, 4.0),
                                                     ("align_corners", 12, 2.0), ("asymmetric", 10, 3.0)])
def test_bilinear_resize_equals_onnxruntime(fmt, mode, size, scale):
    data = zoo.quantize(_upsample(mode, size, scale), fmt)
    res = compile_bytes(data, options=FAST)
    for seed in (1, 2):
        feeds = zoo.sample_inputs(data, seed=seed)
        got = run_artifact(res.artifact, feeds).outputs
        want = reference_outputs(data, feeds, "ort-int8" if fmt == "qdq" else "ort")
        for name, w in want.items():
            g = got[name]
            assert g.shape == w.shape
            diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
            assert float(np.mean(diff == 0)) == 1.0, (name, int(np.sum(diff != 0)), float(diff.max()))


def _resize_first(mode: str, size: int, scale: float, seed: int = 0) -> object:
    """Resize linear of the (quantized) input, then conv 3x3 (4 -> 8): no QLinearConv before the Resize, so
    onnxruntime keeps it channels-first (its float-weight kernel) in a QOperator export."""
    g = zoo._Graph(seed)
    scales = g.const(np.array([1, 1, scale, scale], np.float32), "scales")
    y = g.op("Resize", ["input", "", scales], "up", mode="linear", coordinate_transformation_mode=mode)
    y = g.conv(y, 4, 8, relu="", name="conv1")
    out = int(size * scale)
    return g.model("upsample_first", {"input": [1, 4, size, size]}, y, [1, 8, out, out])


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize(("mode", "size", "scale"), [("align_corners", 12, 2.0), ("asymmetric", 10, 3.0)])
def test_bilinear_resize_of_the_input_equals_onnxruntime(fmt, mode, size, scale):
    import onnx

    from tileplan.frontend.onnx_import import onnxruntime_nhwc_resizes

    data = zoo.quantize(_resize_first(mode, size, scale), fmt)
    assert not onnxruntime_nhwc_resizes(onnx.load_model_from_string(data))
    res = compile_bytes(data, options=FAST)
    feeds = zoo.sample_inputs(data, seed=1)
    got = run_artifact(res.artifact, feeds).outputs
    want = reference_outputs(data, feeds, "ort-int8" if fmt == "qdq" else "ort")
    for name, w in want.items():
        assert np.array_equal(got[name], w), (name, int(np.sum(got[name] != w)))
