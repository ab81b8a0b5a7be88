"""The quantizer's other forms (issue 24, other exports): onnxruntime's `quantize_static` with uint8 activations
(QuantType.QUInt8, its old default), uint8 weights, per-channel weights; each offloaded where the accelerator
computes it exactly, and matching onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import OPTIONS, assert_matches_onnxruntime, compile_bytes, ort_quantize

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact
from tileplan.workload import Conv2dLayer

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
@pytest.mark.parametrize("model,per_channel", [("cnn_small", False), ("resnet_block", False),
                                               ("mobilenet_block", False), ("mlp", False), ("attention", False)])
def test_uint8_weights_with_a_zero_point_run_on_the_accelerator_and_match(model, per_channel, fmt):
    """uint8 weights (QUInt8, asymmetric: a zero point that is not 128): w - z_w is split as
    clip(w - z_w, -128, 127) + the rest, the rest on a few extra input channels / rows that repeat the input's
    (onnx_import.split_weight_zero_points): all int8 products into the one int32 accumulator, exact, so every
    conv / matmul runs on the accelerator (grouped and depthwise ones) and the
    outputs are onnxruntime's. The extra reduction is counted in the MACs."""
    data = zoo.build(model, fmt, activation_type="QUInt8", weight_type="QUInt8", per_channel=per_channel)
    res = compile_bytes(data, options=FAST)
    ops = _matmul_ops(res.summary)
    assert ops
    for o in ops:
        assert o["where"] == "accelerator", (o["name"], o["reason"])
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    assert any("weights with a zero point" in n and "extra MACs" in n for n in res.summary["notes"]), res.summary["notes"]
    assert any("extra" in o["reason"] for o in ops), [o["reason"] for o in ops]
    # the MACs are the extended layer's: out elements x (C + extra) x R x S
    for o in ops:
        lay = o["layer"]
        if "in_channels" in lay:
            conv = Conv2dLayer.model_validate(lay)
            k, c = lay["out_channels"], lay["in_channels"] // lay["groups"]
            r, s = lay["kernel"]
            assert o["macs"] == lay["batch"] * k * conv.out_h * conv.out_w * c * r * s, o
        elif o["op"] != "matmul_act":  # a product of two activations: one call per batch element
            assert o["macs"] == lay["M"] * lay["K"] * lay["N"], o
    for seed in (4, 5):
        feeds = zoo.sample_inputs(data, seed=seed)
        assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def _split_model(per_channel_zw: bool) -> bytes:
    """QDQ: a 3x3 conv of 6 -> 4 channels and a depthwise 3x3 conv, int8 weights with zero point -9 (uint8's
    119; per output channel [-9, 5, 0, -20] for the conv when `per_channel_zw`), whose codes leave int8 after
    - z_w only in input channels 1 and 4 of the conv and channel 4 of the depthwise one; outputs quantized."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.integers(-100, 100, (4, 6, 3, 3)).astype(np.int8)
    w[0, 1, 0, 0], w[3, 4, 2, 1], w[2, 4, 1, 1] = 127, 125, 119  # - (-9): 136, 134, 128 (per channel: 136, 145, 119)
    w[1, 1, 2, 2] = -128  # - (-9): -119, in range (per channel, - 5: -133)
    dw = rng.integers(-100, 100, (6, 1, 3, 3)).astype(np.int8)
    dw[4, 0, 1, 2] = 126
    zw = np.asarray([-9, 5, 0, -20], np.int8) if per_channel_zw else np.int8(-9)
    sw = np.asarray([0.01, 0.02, 0.015, 0.01], np.float32) if per_channel_zw else np.float32(0.01)
    inits = [numpy_helper.from_array(np.float32(0.05), "sx"), numpy_helper.from_array(np.int8(3), "zx"),
             numpy_helper.from_array(sw, "sw"), numpy_helper.from_array(zw, "zw"),
             numpy_helper.from_array(np.float32(0.01), "sd"), numpy_helper.from_array(np.int8(-9), "zd"),
             numpy_helper.from_array(np.float32(0.3), "sy"), numpy_helper.from_array(np.int8(-2), "zy"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(dw, "dw")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"], name="dqx"),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], name="dqw", axis=0),
             helper.make_node("Conv", ["xf", "wf"], ["yf"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf2"], name="dqx2"),
             helper.make_node("DequantizeLinear", ["dw", "sd", "zd"], ["dwf"], name="dqdw"),
             helper.make_node("Conv", ["xf2", "dwf"], ["y2f"], pads=[1, 1, 1, 1], group=6, name="dwconv")]
    for y in ("y", "y2"):
        nodes += [helper.make_node("QuantizeLinear", [f"{y}f", "sy", "zy"], [f"{y}q"], name=f"q{y}"),
                  helper.make_node("DequantizeLinear", [f"{y}q", "sy", "zy"], [y], name=f"dq{y}")]
    g = helper.make_graph(nodes, "split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 5, 5]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 6, 5, 5])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("per_channel_zw", [False, True])
def test_the_weight_split_is_exact_and_adds_only_the_channels_it_needs(per_channel_zw):
    """split_weight_zero_points on hand-made weights (_split_model): the conv reads 2 more input channels (its
    codes beyond int8 are in channels 1 and 4), the depthwise one becomes a conv of 2 input channels per group,
    their zero points become 0, and onnxruntime computes the same floats before and after; compiled, both run
    on the accelerator and match onnxruntime."""
    import onnx
    from onnx import numpy_helper

    from tileplan.frontend.onnx_import import split_weight_zero_points
    from tileplan.frontend.reference import session

    before = _split_model(per_channel_zw)
    model = onnx.load_model_from_string(before)
    splits = split_weight_zero_points(model)
    onnx.checker.check_model(model)
    assert set(splits) == {"conv", "dwconv"}, splits
    assert splits["conv"].extra_macs * 6 == splits["conv"].macs * 2, splits["conv"]
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    by_name = {n.name: n for n in model.graph.node}
    wdq = {n.output[0]: n for n in model.graph.node if n.op_type == "DequantizeLinear"}
    w2 = inits[wdq[by_name["conv"].input[1]].input[0]]
    assert w2.shape == (4, 8, 3, 3) and w2.dtype == np.int8
    assert not inits[wdq[by_name["conv"].input[1]].input[2]].any()
    assert inits[wdq[by_name["dwconv"].input[1]].input[0]].shape == (6, 2, 3, 3)
    x = {"x": np.random.default_rng(1).standard_normal((1, 6, 5, 5)).astype(np.float32) * 2}
    want = session(before, "ort-noopt").run(None, x)
    got = session(model.SerializeToString(), "ort-noopt").run(None, x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    res = compile_bytes(before, options=FAST)
    ops = _matmul_ops(res.summary)
    assert {o["name"]: o["where"] for o in ops} == {"conv": "accelerator", "dwconv": "accelerator"}, ops
    assert res.summary["total"]["macs"] == 4 * 25 * 8 * 9 + 6 * 25 * 2 * 9
    for seed in (1, 2):
        feeds = {"x": np.random.default_rng(seed).standard_normal((1, 6, 5, 5)).astype(np.float32) * 2}
        assert_matches_onnxruntime(before, run_artifact(res.artifact, feeds).outputs, feeds)


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


def test_residual_add_tables_of_a_uint8_model_are_onnxruntime_uint8_kernels():
    """onnxruntime's QLinearAdd rounds a uint8 add and the same add shifted to int8 (codes and zero points - 128,
    the same reals) apart in a few pairs: ResNet-18's u8u8 export (bench/zoo_export.py --variant u8u8), its
    layer1.1 add, 1 of 65,536 pairs, which moved 18% of the outputs by 1 LSB. A model whose activations were
    uint8 looks its adds up in the table onnxruntime computes in uint8, indexed by the stored int8 code."""
    from onnx import TensorProto, helper, numpy_helper

    from tileplan.frontend.host_ops import add_table
    from tileplan.frontend.reference import session

    a, b, y = (0.040882959961891174, 135), (0.030743911862373352, 0), (0.03880210965871811, 0)
    nodes = [helper.make_node("DequantizeLinear", ["a", "as", "az"], ["ad"]),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"]),
             helper.make_node("Add", ["ad", "bd"], ["f"]),
             helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["y"])]
    consts = [numpy_helper.from_array(np.asarray(v, np.float32 if isinstance(v, float) else np.uint8), n)
              for n, v in {"as": a[0], "az": a[1], "bs": b[0], "bz": b[1], "ys": y[0], "yz": y[1]}.items()]
    g = helper.make_graph(nodes, "add", [helper.make_tensor_value_info(k, TensorProto.UINT8, [65536]) for k in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [65536])], consts)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    codes = np.arange(256, dtype=np.uint8)
    for judge in ("ort", "ort-int8"):
        want = session(model.SerializeToString(), judge).run(
            None, {"a": np.repeat(codes, 256), "b": np.tile(codes, 256)})[0].astype(np.int16) - 128
        shifted = [(s, z - 128) for s, z in (a, b, y)]
        got = add_table(*shifted, relu=False, uint8=True).astype(np.int16)
        assert (got == want).all(), judge
        assert (add_table(*shifted, relu=False).astype(np.int16) != want).sum() == 1  # the int8 kernel's table


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_nearest_resize_of_uint8_codes_keeps_the_uint8_model_on_the_accelerator(fmt):
    """A YOLO-style neck (held-out set 10's yolo_tiny@uint8): conv -> nearest Resize x2 -> conv. onnxruntime's
    QOperator export resizes the uint8 codes themselves (no DequantizeLinear around the Resize); nearest sampling
    only selects codes, so it commutes with x -> x - 128 like MaxPool. The uint8 rewrite refused the model at
    that Resize, and every conv of it ran on the host (0% of MACs offloaded)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32) * 0.3, "w1"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "b1"),
             numpy_helper.from_array(rng.standard_normal((4, 8, 1, 1)).astype(np.float32) * 0.3, "w2"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Resize", ["r", "", "scales"], ["u"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             helper.make_node("Conv", ["u", "w2"], ["y"])]
    g = helper.make_graph(nodes, "up", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = ort_quantize(model, fmt, activation="uint8")
    res = compile_bytes(data)
    assert any("uint8 activations" in n for n in res.summary["notes"]), res.summary["notes"]
    assert res.summary["total"]["accelerator_mac_share"] == 1.0, [
        (o["name"], o["reason"]) for o in res.summary["ops"] if o["where"] == "host" and o["macs"]]
    for seed in (1, 2):
        feeds = zoo.sample_inputs(data, seed=seed)
        assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)
