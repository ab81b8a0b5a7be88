"""The quantizer's other forms (issue 24, other exports): onnxruntime's `quantize_static` with uint8 activations
(QuantType.QUInt8, its old default), uint8 weights, per-channel weights; each offloaded where the accelerator
computes it exactly, and matching onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import OPTIONS, assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact

FAST = OPTIONS.model_copy(update={"emulate": False})


def _matmul_ops(summary: dict) -> list[dict]:
    return [o for o in summary["ops"] if o["onnx_op"] in ("Conv", "Gemm", "MatMul", "QLinearConv", "QGemm",
                                                             "QLinearMatMul")]


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize("model", ["resnet_block", "mobilenet_block"])
def test_uint8_activations_run_on_the_accelerator_and_match_onnxruntime(model, fmt):
    """uint8 x is int8 x - 128 with its zero point moved by -128 too: (x - z_x) and every requantized value are
    unchanged, so the int8 datapath computes the uint8 model exactly."""
    data = zoo.build(model, fmt, activation_type="QUInt8")
    res = compile_bytes(data)
    ops = _matmul_ops(res.summary)
    assert ops
    for o in ops:
        assert o["where"] == "accelerator", (o["name"], o["reason"])
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    assert any("uint8 activations" in n for n in res.summary["notes"]), res.summary["notes"]
    for seed in (1, 2):
        feeds = zoo.sample_inputs(data, seed=seed)
        assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_uint8_per_channel_weights_run_on_the_accelerator(fmt):
    data = zoo.build("mobilenet_block", fmt, activation_type="QUInt8", per_channel=True)
    res = compile_bytes(data, options=FAST)
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    feeds = zoo.sample_inputs(data, seed=3)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_uint8_weights_with_a_zero_point_stay_on_the_host_with_the_reason_and_match(fmt):
    """uint8 weights (QUInt8, asymmetric: a zero point per tensor that is not 128) would need the input's window
    sums times z_w: they stay on the host, saying so, and still match onnxruntime."""
    data = zoo.build("cnn_small", fmt, activation_type="QUInt8", weight_type="QUInt8")
    res = compile_bytes(data, options=FAST)
    ops = _matmul_ops(res.summary)
    assert ops
    for o in ops:
        assert o["where"] == "host" and "weight zero point" in o["reason"], (o["name"], o["reason"])
    feeds = zoo.sample_inputs(data, seed=4)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def test_a_uint8_tensor_the_rewrite_cannot_follow_keeps_the_model_as_it_is():
    """A uint8 graph output (the model hands back its quantized codes): the rewrite to int8 would change what the
    caller gets, so nothing is rewritten and the model compiles as before (its uint8 ops on the host)."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.load_model_from_string(zoo.build("cnn_small", "qdq", activation_type="QUInt8"))
    q = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "input")
    m.graph.output.append(helper.make_tensor_value_info(q.output[0], TensorProto.UINT8, [1, 3, 16, 16]))
    data = m.SerializeToString()
    res = compile_bytes(data, options=FAST)
    assert not any("uint8 activations" in n for n in res.summary["notes"])
    feeds = zoo.sample_inputs(data, seed=5)
    got = run_artifact(res.artifact, feeds).outputs
    assert got[q.output[0]].dtype == np.uint8
    assert_matches_onnxruntime(data, got, feeds)


def test_the_uint8_rewrite_computes_the_same_reals_with_and_without_zero_points():
    """onnx_import.uint8_to_int8 on a hand-written graph: a QuantizeLinear without a zero point (uint8's 0), one
    with, a MaxPool and a Concat on the uint8 values, a uint8 constant: onnxruntime gives the same floats for the
    rewritten graph, whose tensors are all int8."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tileplan.frontend.onnx_import import uint8_to_int8
    from tileplan.frontend.reference import session

    inits = [numpy_helper.from_array(np.float32(0.02), "s"), numpy_helper.from_array(np.uint8(131), "z"),
             numpy_helper.from_array(np.arange(0, 250, 10, dtype=np.uint8).reshape(1, 1, 5, 5), "k")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s"], ["q0"]),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q1"]),
             helper.make_node("MaxPool", ["q1"], ["p1"], kernel_shape=[2, 2], pads=[0, 1, 0, 1], strides=[1, 1]),
             helper.make_node("Concat", ["q1", "k"], ["c1"], axis=1),
             helper.make_node("DequantizeLinear", ["q0", "s"], ["y0"]),
             helper.make_node("DequantizeLinear", ["p1", "s", "z"], ["y1"]),
             helper.make_node("DequantizeLinear", ["c1", "s", "z"], ["y2"])]
    g = helper.make_graph(nodes, "u8", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 5])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, shape) for y, shape in
                           (("y0", [1, 1, 5, 5]), ("y1", [1, 1, 4, 6]), ("y2", [1, 2, 5, 5]))],
                          inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    before = model.SerializeToString()
    note = uint8_to_int8(model)
    assert note and "4 tensors" in note, note
    onnx.checker.check_model(model)
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info}
    assert {types[t] for t in ("q0", "q1", "p1", "c1")} == {TensorProto.INT8}
    x = {"x": (np.random.default_rng(0).standard_normal((1, 1, 5, 5)) * 3).astype(np.float32)}  # both clamps hit
    want = session(before, "ort-noopt").run(None, x)
    got = session(model.SerializeToString(), "ort-noopt").run(None, x)
    for w, v in zip(want, got):
        np.testing.assert_array_equal(w, v)
