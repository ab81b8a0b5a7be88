"""What an offloaded op computes (zero points, activations that survived quantisation, per-channel scales, the
int8 and the int32-out epilogues) and why others stay on the host; each case against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact


def _qdq_conv(act: str, zy: int, zx: int = 5, seed: int = 0, int8_bias: bool = False) -> bytes:
    """x -> Q/DQ -> Conv(int8 W, int32 bias) -> act -> Q(zy)/DQ, written by hand (no quantizer), so the
    activation sits between the conv and its QuantizeLinear.  `int8_bias`: the bias is an int8 tensor with its
    own scale and a zero point (what onnxruntime's QDQ quantizer writes for a bias that reaches the conv through
    an Identity: it quantizes it as an activation)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    sx, sw, sy = np.float32(0.03), np.float32(0.004), np.float32(0.02)
    w = rng.integers(-127, 128, (12, 6, 3, 3)).astype(np.int8)
    b = rng.integers(-3000, 3000, 12).astype(np.int32)
    sb, zb = np.float32(sx * sw), np.int32(0)
    if int8_bias:
        b, sb, zb = rng.integers(-128, 128, 12).astype(np.int8), np.float32(sx * sw * 23.7), np.int8(4)
    init = [numpy_helper.from_array(v, n) for v, n in [
        (sx, "sx"), (np.int8(zx), "zx"), (w, "w"), (sw, "sw"), (np.int8(0), "zw"), (b, "b"),
        (sb, "sb"), (zb, "zb"), (sy, "sy"), (np.int8(zy), "zy"),
        (np.float32(-0.4), "lo"), (np.float32(1.1), "hi")]]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"], name="dq_in"),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], name="dq_w"),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["bf"], name="dq_b"),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    last = "c"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["a"], name="relu"))
        last = "a"
    elif act == "clip":
        nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["a"], name="clip"))
        last = "a"
    nodes += [helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"], name="q_out"),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"], name="dq_out")]
    g = helper.make_graph(nodes, "conv_act", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 12, 7, 7])], init)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("act,zy,expect", [
    ("relu", -20, "relu in the requantisation (clamp to [-20, 127])"),
    ("clip", 3, "clip in the requantisation (clamp to [-17, 58])"),
    ("relu", 0, "relu in the mvout"),          # z_y = 0: Gemmini's mvout does it all (int8 out)
    ("clip", 0, "clip as a host clamp to [-20, 55]"),
    ("none", 0, "mvout requantizes"),
])
def test_activation_and_zero_points(act, zy, expect):
    data = _qdq_conv(act, zy)
    res = compile_bytes(data)
    conv = next(o for o in res.summary["ops"] if o["name"] == "conv")
    assert conv["where"] == "accelerator" and expect in conv["reason"], conv["reason"]
    assert "input zero point 5 folded into the bias and the padding" in conv["reason"]
    if act != "none":  # the activation node is fused, listed as such
        a = next(o for o in res.summary["ops"] if o["name"] == act)
        assert a["where"] == "accelerator" and a["reason"] == "fused into conv"
    x = np.random.default_rng(1).standard_normal((1, 6, 7, 7)).astype(np.float32) * 2
    got = run_artifact(res.artifact, {"x": x}).outputs
    assert_matches_onnxruntime(data, got, {"x": x})
    # and exactly the integer definition (onnxruntime computes a conv followed by an activation in float)
    np.testing.assert_array_equal(got["y"], _integer_reference(data, x, act))


def _integer_reference(data: bytes, x: np.ndarray, act: str) -> np.ndarray:
    """int32 accumulation of the quantized conv, then QLinearConv's requantisation, then the activation clamp."""
    import onnx
    from onnx import numpy_helper

    c = {t.name: numpy_helper.to_array(t) for t in onnx.load_model_from_string(data).graph.initializer}
    sx, zx, sy, zy = c["sx"], int(c["zx"]), c["sy"], int(c["zy"])
    xq = np.clip(np.rint(x / sx) + zx, -128, 127).astype(np.int64) - zx
    xp = np.pad(xq, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((1, 12, 7, 7), np.int64)
    for r in range(3):
        for s in range(3):
            acc += np.einsum("nchw,kc->nkhw", xp[:, :, r:r + 7, s:s + 7], c["w"][:, :, r, s].astype(np.int64))
    acc += c["b"][None, :, None, None]
    m = np.float32(np.float32(sx) * np.float32(c["sw"])) / np.float32(sy)
    q = np.clip(np.rint(acc.astype(np.float32) * m) + zy, -128, 127)
    if act == "relu":
        q = np.maximum(q, zy)
    elif act == "clip":
        q = np.clip(q, np.clip(np.rint(np.float32(c["lo"]) / sy) + zy, -128, 127),
                    np.clip(np.rint(np.float32(c["hi"]) / sy) + zy, -128, 127))
    return ((q - zy) * sy).astype(np.float32)


def test_an_int8_bias_with_a_zero_point_runs_on_the_accelerator():
    """ConvNeXt's QDQ export: 14 depthwise convs whose bias onnxruntime quantized as an int8 activation (scale,
    zero point) were left on the host ("int8 bias"); the bias is a constant, so it is requantized into
    accumulator units at compile time (at most half an accumulator step off, as for a shared bias)."""
    data = _qdq_conv("relu", 0, int8_bias=True)
    res = compile_bytes(data)
    conv = next(o for o in res.summary["ops"] if o["name"] == "conv")
    assert conv["where"] == "accelerator", conv["reason"]
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 6, 7, 7)).astype(np.float32)}
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def test_per_channel_weights_run_on_the_accelerator():
    data = zoo.build("mobilenet_block", "qdq", per_channel=True)
    res = compile_bytes(data)
    convs = [o for o in res.summary["ops"] if o["onnx_op"] in ("Conv", "Gemm")]
    assert convs and all(o["where"] == "accelerator" for o in convs)
    assert all("per-channel scales" in o["reason"] for o in convs)
    feeds = zoo.sample_inputs(data, seed=4)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def test_uint8_activations_run_on_the_accelerator_as_int8():
    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    model = zoo.cnn_small(seed=2)
    feeds = zoo.random_calibration(model, 4)

    class Reader:
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        src, dst = Path(d) / "f.onnx", Path(d) / "q.onnx"
        onnx.save(model, str(src))
        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        data = dst.read_bytes()
    res = compile_bytes(data)
    conv1 = next(o for o in res.summary["ops"] if o["name"] == "conv1")
    assert conv1["where"] == "accelerator", conv1["reason"]  # uint8 stored as int8 (onnx_import.uint8_to_int8)
    assert any("uint8 activations stored as int8" in n for n in res.summary["notes"])
    x = {"input": feeds[1]["input"]}
    assert_matches_onnxruntime(data, run_artifact(res.artifact, x).outputs, x)


def test_bias_absorbs_the_input_zero_point():
    """kernel_spec: bias' = b - z_x * sum_{c,r,s} w[k]; weights laid out [G, R, S, C, K]."""
    from tileplan.frontend.partition import kernel_spec
    from tileplan.frontend.patterns import QuantOp

    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (8, 2, 3, 3)).astype(np.int8)  # 2 groups of 4 in -> 4 out each
    b = rng.integers(-100, 100, 8).astype(np.int32)
    op = QuantOp(kind="conv2d", name="c", nodes=["c"], x_shape=(1, 4, 5, 5), y_shape=(1, 8, 5, 5),
                 x_dtype="int8", y_dtype="int8", x_scale=np.float32(0.1), x_zp=np.int8(-7), w=w,
                 w_scale=np.float32(0.01), w_zp=np.int8(0), bias=b, bias_scale=np.float32(0.001),
                 bias_zp=np.int32(0), y_scale=np.float32(0.05), y_zp=np.int8(0), padding=(1, 1, 1, 1), groups=2)
    spec = kernel_spec(op)
    np.testing.assert_array_equal(spec.bias, b.astype(np.int64) + 7 * w.astype(np.int64).reshape(8, -1).sum(1))
    assert spec.weights.shape == (2, 3, 3, 2, 4)
    np.testing.assert_array_equal(spec.weights[1, 2, 0, 1, 3], w[4 + 3, 1, 2, 0])
    assert spec.abi.pad_value == -7 and spec.requant is None


def test_hardware_without_a_code_generator_runs_everything_on_the_host():
    from tileplan.frontend.compile import CompileOptions, compile_model
    from tileplan.hardware.catalog import get_hardware

    data = zoo.build("cnn_small", "qdq")
    res = compile_model(data, get_hardware("simba"), CompileOptions(time_limit_s=2.0))
    convs = [o for o in res.summary["ops"] if o["onnx_op"] in ("Conv", "Gemm")]
    assert convs and all(o["where"] == "host" and "no code generator for simba" in o["reason"] for o in convs)
    feeds = zoo.sample_inputs(data, seed=2)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


@pytest.mark.parametrize("hw_name", ["gemmini-8x8", "gemmini-chip"])
def test_other_gemmini_configurations(hw_name):
    """Another array size / memory configuration: its own gemmini_params.h, plans and kernels, same outputs."""
    from frontend_helpers import OPTIONS, planner

    from tileplan.frontend.compile import compile_model
    from tileplan.frontend.runner import read_artifact
    from tileplan.hardware.catalog import get_hardware

    hw = get_hardware(hw_name)
    data = zoo.build("resnet_block", "qdq", size=8)
    res = compile_model(data, hw, OPTIONS, planner=planner)
    assert res.summary["total"]["accelerator_ops"] == 8
    params = read_artifact(res.artifact)["gemmini_params.h"].decode()
    assert f"#define DIM {hw.pe_array.rows}\n" in params
    feeds = zoo.sample_inputs(data, seed=6)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)
