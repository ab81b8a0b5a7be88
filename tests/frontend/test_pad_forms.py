"""Padding as PyTorch writes it in users' nets (held-out set 5, bench/zoo_export.py `convs_zoo`), in small
onnx.helper models: a reflect / replicate Pad whose `pads` torch.onnx computes from constants (no Shape node), and
a Conv with auto_pad SAME_UPPER and an even kernel (`nn.Conv2d(..., 4, padding="same")`: pads 1 before, 2 after)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_offloaded_and_matching, compile_bytes

from tileplan.frontend import zoo


def _quantized(g: zoo._Graph, x_shape: list[int], out: str, out_shape: list[int], fmt: str) -> bytes:
    rng = np.random.default_rng(0)
    model = g.model("pads", {"x": x_shape}, out, out_shape)
    calib = [{"x": rng.standard_normal(x_shape).astype(np.float32)} for _ in range(8)]
    return zoo.quantize(model, fmt, calib)


def _op(res: object, name: str) -> dict:
    """The summary's entry of ONNX node `name` (a QOperator export's node is `<name>_quant`)."""
    return next(o for o in res.summary["ops"] if o["name"] in (name, f"{name}_quant"))  # type: ignore[attr-defined]


def _torch_pads(g: zoo._Graph, pads: list[int]) -> str:
    """`pads` as torch.onnx 2.x computes them for F.pad(x, (l, r, t, b), mode="reflect") at opset 17: the
    reversed (l, r, t, b) pairs padded with zeros (ConstantOfShape), reshaped, reversed by a Slice, transposed and
    flattened, then cast to int64."""
    torch_order = np.array(pads, np.int64)  # (l, r, t, b)
    zeros = g.op("ConstantOfShape", [g.const(np.array([4], np.int64))],
                 value=__import__("onnx").helper.make_tensor("v", 7, [1], [0]))
    both = g.op("Concat", [g.const(torch_order), zeros], axis=0)
    pairs = g.op("Reshape", [both, g.const(np.array([-1, 2], np.int64))])
    rev = g.op("Slice", [pairs, g.const(np.array([-1], np.int64)), g.const(np.array([-9223372036854775807], np.int64)),
                         g.const(np.array([0], np.int64)), g.const(np.array([-1], np.int64))])
    flat = g.op("Reshape", [g.op("Transpose", [rev], perm=[1, 0]), g.const(np.array([-1], np.int64))])
    return g.op("Cast", [flat], to=7)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_a_pad_with_computed_pads_folds_and_its_conv_is_offloaded(fmt, mode):
    g = zoo._Graph(seed=11)
    x = g.conv("x", 3, 16, name="stem")
    padded = g.op("Pad", [x, _torch_pads(g, [1, 1, 1, 1])], "pad", mode=mode)
    w = g.weight((16, 16, 3, 3), fan_in=144)
    y = g.op("Relu", [g.op("Conv", [padded, w, g.bias(16)], "padded_conv", kernel_shape=[3, 3], pads=[0] * 4)])
    out = g.dense(g.op("Flatten", [g.op("GlobalAveragePool", [y])]), 16, 5, name="fc")
    data = _quantized(g, [1, 3, 9, 7], out, [1, 5], fmt)
    res = compile_bytes(data)
    op = _op(res, "padded_conv")
    assert op["where"] == "accelerator", op["reason"]
    assert_offloaded_and_matching(data, res, note="computed shape operands")


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_same_upper_conv_with_an_even_kernel_is_offloaded(fmt):
    g = zoo._Graph(seed=12)
    x = g.conv("x", 3, 16, name="stem")
    w = g.weight((16, 16, 4, 4), fan_in=256)
    y = g.op("Relu", [g.op("Conv", [x, w, g.bias(16)], "same_conv", kernel_shape=[4, 4], auto_pad="SAME_UPPER")])
    w2 = g.weight((16, 16, 2, 2), fan_in=64)
    y = g.op("Relu", [g.op("Conv", [y, w2, g.bias(16)], "lower_conv", kernel_shape=[2, 2], pads=[0, 1, 1, 0])])
    out = g.dense(g.op("Flatten", [g.op("GlobalAveragePool", [y])]), 16, 5, name="fc")
    data = _quantized(g, [1, 3, 9, 7], out, [1, 5], fmt)
    res = compile_bytes(data)
    for name in ("same_conv", "lower_conv"):
        op = _op(res, name)
        assert op["where"] == "accelerator", op["reason"]
    assert_offloaded_and_matching(data, res)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_same_conv_with_an_odd_kernel_is_offloaded(fmt):
    """Held-out set 8 (timm's ConvMixer: `nn.Conv2d(dim, dim, 9, groups=dim, padding="same")`, which torch.onnx
    writes as auto_pad SAME_UPPER): padding 4 on every side, symmetric, so asymmetric_pads_on_host left it, and
    TVM's importer pads it with a separate pad op that no fusion pattern matches: every such conv ran in float on
    the host with the reason "not matched ... (more than one consumer or an op the pattern does not cover)", and
    ConvMixer's QOperator export was 45.1% equal to onnxruntime (its integer QLinearConv rounds apart from a float
    conv, and the differences grow through the residual blocks). Also stride 2 (SAME pads 1 / 2 on a 9-wide input:
    asymmetric, handled as before) and a dense 3x3."""
    g = zoo._Graph(seed=13)
    x = g.conv("x", 3, 16, name="stem")
    y = g.op("Relu", [g.op("Conv", [x, g.weight((16, 1, 9, 9), fan_in=81), g.bias(16)], "dw9", kernel_shape=[9, 9],
                           auto_pad="SAME_UPPER", group=16)])
    y = g.op("Relu", [g.op("Conv", [y, g.weight((16, 16, 3, 3), fan_in=144), g.bias(16)], "same3",
                           kernel_shape=[3, 3], auto_pad="SAME_LOWER")])
    y = g.op("Relu", [g.op("Conv", [y, g.weight((16, 16, 3, 3), fan_in=144), g.bias(16)], "valid3",
                           kernel_shape=[3, 3], auto_pad="VALID")])
    out = g.dense(g.op("Flatten", [g.op("GlobalAveragePool", [y])]), 16, 5, name="fc")
    data = _quantized(g, [1, 3, 11, 9], out, [1, 5], fmt)
    res = compile_bytes(data)
    for name in ("dw9", "same3", "valid3"):
        op = _op(res, name)
        assert op["where"] == "accelerator", (name, op["reason"])
    assert_offloaded_and_matching(data, res)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_same_conv1d_is_offloaded(fmt):
    """`nn.Conv1d(..., 5, padding="same")` (audio nets): auto_pad SAME_UPPER, pads 2 / 2."""
    g = zoo._Graph(seed=14)
    w = g.weight((24, 8, 5), fan_in=40)
    y = g.op("Relu", [g.op("Conv", ["x", w, g.bias(24)], "same1d", kernel_shape=[5], auto_pad="SAME_UPPER")])
    out = g.dense(g.op("Flatten", [g.op("GlobalAveragePool", [y])]), 24, 5, name="fc")
    data = _quantized(g, [1, 8, 40], out, [1, 5], fmt)
    res = compile_bytes(data)
    op = _op(res, "same1d")
    assert op["where"] == "accelerator", op["reason"]
    assert_offloaded_and_matching(data, res)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize("computed_pads", [False, True])
def test_a_constant_pad_with_a_quantized_value_compiles(fmt, computed_pads):
    """MIT EfficientViT's linear attention pads v with a row of ones (`F.pad(v, (0, 0, 0, 1), mode="constant",
    value=1)`: timm's efficientvit_b0, held-out set 9): onnxruntime's QDQ quantizer quantizes the Pad's
    constant_value (a Constant 1.0 -> QuantizeLinear -> DequantizeLinear), which TVM's importer cannot read as a
    constant; the QDQ export was refused ("'DataflowVar' object has no attribute 'value'")."""
    import onnx

    g = zoo._Graph(seed=12)
    x = g.conv("x", 3, 16, name="stem")
    one = g.op("Constant", [], value=onnx.helper.make_tensor("one", 1, [], [1.0]))
    pads = _torch_pads(g, [0, 0, 0, 1]) if computed_pads else g.const(np.array([0, 0, 0, 0, 0, 0, 1, 0], np.int64))
    padded = g.op("Pad", [x, pads, one], "pad_ones", mode="constant")
    w = g.weight((16, 16, 3, 3), fan_in=144)
    y = g.op("Relu", [g.op("Conv", [padded, w, g.bias(16)], "after_pad", kernel_shape=[3, 3], pads=[1] * 4)])
    out = g.dense(g.op("Flatten", [g.op("GlobalAveragePool", [y])]), 16, 5, name="fc")
    data = _quantized(g, [1, 3, 9, 7], out, [1, 5], fmt)
    res = compile_bytes(data)
    assert _op(res, "after_pad")["where"] == "accelerator"
    assert_offloaded_and_matching(data, res)
