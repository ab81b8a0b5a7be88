"""onnxruntime's quantize_dynamic (DynamicQuantizeLinear on activations at run time, MatMulInteger / ConvInteger
with int8 or uint8 weights, then Cast and Mul by the scales in float): the integer products run on the
accelerator (int8 x int8, int32 accumulators read at full width), the run-time zero point's terms on the host
(tileplan.frontend.dynamic), and the outputs are onnxruntime's bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from frontend_helpers import OPTIONS, compile_bytes, onnxruntime_outputs

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact

FAST = OPTIONS.model_copy(update={"emulate": False})
PRODUCTS = ("ConvInteger", "MatMulInteger", "Conv", "MatMul", "Gemm")


def _dynamic(model: Any, tmp_path: Any, **kw: Any) -> bytes:
    import onnx
    from onnxruntime.quantization import quantize_dynamic

    src, dst = tmp_path / "float.onnx", tmp_path / "dynamic.onnx"
    onnx.save(model if not isinstance(model, str) else onnx.load_model_from_string(zoo.build(model, "float")),
              str(src))
    quantize_dynamic(str(src), str(dst), **kw)
    return dst.read_bytes()


def _with_activations(data: bytes) -> bytes:
    """The model with every Relu's output an output too: the products' dequantized, biased, activated results."""
    import onnx

    m = onnx.load_model_from_string(data)
    info = {v.name: v for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(info[n.output[0]] for n in m.graph.node
                          if n.op_type == "Relu" and n.output[0] not in have and n.output[0] in info)
    return m.SerializeToString()


def _assert_equal_to_onnxruntime(data: bytes, artifact: bytes, seeds: tuple[int, ...] = (1, 2),
                                 after_pool: tuple[str, ...] = ()) -> None:
    """Every output equal to onnxruntime's default session bit for bit, except `after_pool` (outputs computed
    from a float GlobalAveragePool, whose float sum the host adds in another order than onnxruntime's MLAS:
    within 2e-6 relative, unrelated to the products)."""
    for seed in seeds:
        feeds = zoo.sample_inputs(data, seed=seed)
        got, want = run_artifact(artifact, feeds).outputs, onnxruntime_outputs(data, feeds)
        for k, w in want.items():
            assert got[k].dtype == w.dtype and got[k].shape == w.shape, k
            if k in after_pool:
                np.testing.assert_allclose(got[k], w, rtol=2e-6, atol=1e-6)
            else:
                assert np.array_equal(got[k], w), (k, float(np.abs(got[k] - w).max()))


@pytest.mark.parametrize("model", ["cnn_small", "mlp", "resnet_block", "mobilenet_block"])
def test_dynamic_products_run_on_the_accelerator_and_match_onnxruntime_exactly(model, tmp_path):
    data = _with_activations(_dynamic(model, tmp_path))
    res = compile_bytes(data, options=FAST)
    products = [o for o in res.summary["ops"] if o["onnx_op"] in PRODUCTS]
    assert products
    for o in products:
        assert o["where"] == "accelerator", (o["name"], o["reason"])
        assert "int32 accumulators read at full width" in o["reason"], o["reason"]
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    assert any("run time" in n and "split" in n for n in res.summary["notes"]), res.summary["notes"]
    for o in res.summary["ops"]:
        if o["where"] == "host":
            assert "no accelerator op for" not in o["reason"], (o["name"], o["reason"])
    _assert_equal_to_onnxruntime(data, res.artifact, after_pool=("fc_out",) if model.endswith("block") else ())


def test_uint8_weights_with_zero_points_take_the_row_sum_term_and_match(tmp_path):
    """uint8 weights (QUInt8, asymmetric): a MatMulInteger's z_w term is z_w * rowsum(x), computed on the host;
    the product still runs on the accelerator and the outputs are onnxruntime's."""
    from onnxruntime.quantization import QuantType

    data = _dynamic("mlp", tmp_path, weight_type=QuantType.QUInt8)
    res = compile_bytes(data, options=FAST)
    products = [o for o in res.summary["ops"] if o["onnx_op"] == "MatMulInteger"]
    assert products and all(o["where"] == "accelerator" for o in products), products
    rowsums = [o for o in res.summary["ops"] if o["name"].endswith("/dyn_rowsum")]
    assert rowsums and all("rowsum" in o["reason"] for o in rowsums)
    _assert_equal_to_onnxruntime(data, res.artifact)


@pytest.mark.parametrize("model", ["cnn_small", "mobilenet_block"])
def test_conv_with_a_uint8_weight_zero_point_adds_window_sums_and_matches(model, tmp_path):
    """uint8 weights (QUInt8, asymmetric): a ConvInteger's z_w term is z_w * each window's input sum, an all-ones
    conv (one output per group: depthwise too) that runs on the accelerator as well; the outputs are
    onnxruntime's."""
    from onnxruntime.quantization import QuantType

    data = _with_activations(_dynamic(model, tmp_path, weight_type=QuantType.QUInt8))
    res = compile_bytes(data, options=FAST)
    convs = [o for o in res.summary["ops"] if o["onnx_op"] == "ConvInteger"]
    assert convs and all(o["where"] == "accelerator" for o in convs), [(o["name"], o["reason"]) for o in convs]
    assert any(o["name"].endswith("/dyn_winsum") for o in convs)
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    _assert_equal_to_onnxruntime(data, res.artifact, after_pool=("fc_out",) if model.endswith("block") else ())


def test_every_node_the_split_adds_is_used(tmp_path):
    """No dead node: every output of a node the split adds is read by another node or is a graph output."""
    import onnx

    from tileplan.frontend.dynamic import split_integer_products

    for model in ("cnn_small", "mlp"):
        (tmp_path / model).mkdir()
        m = onnx.load_model_from_string(_dynamic(model, tmp_path / model))
        assert split_integer_products(m)
        read = {i for n in m.graph.node for i in n.input} | {o.name for o in m.graph.output}
        dead = [n.name for n in m.graph.node if "/dyn_" in n.name and not any(o in read for o in n.output)]
        assert not dead, dead


def test_the_host_build_computes_integer_products_exactly(tmp_path):
    """offload false: every product on the host; ConvInteger is an int32 convolution there (a float one would
    round sums past 2^24), so the reference build is onnxruntime's too."""
    data = _dynamic("cnn_small", tmp_path)
    res = compile_bytes(data, options=FAST.model_copy(update={"offload": False}))
    assert res.summary["total"]["accelerator_mac_share"] == 0.0
    _assert_equal_to_onnxruntime(data, res.artifact, seeds=(3,))


def _conv_model(pads: list[int], strides: list[int], group: int, seed: int) -> Any:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    cin, cout = 4 * group, 2 * group
    w = numpy_helper.from_array(rng.standard_normal((cout, cin // group, 3, 3)).astype(np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=pads, strides=strides, group=group)
    g = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 9, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("weight_type", ["QInt8", "QUInt8"])
def test_the_split_computes_the_same_int32_values_in_onnxruntime(weight_type, tmp_path):
    """dynamic.split_integer_products on its own, judged by onnxruntime (no Tileplan code generation): the
    rewritten graphs (asymmetric and strided padding, groups, inputs whose every value is >= 0 so the zero point
    is 0, uint8 weights) give the same outputs bit for bit."""
    import onnx
    from onnxruntime.quantization import QuantType

    from tileplan.frontend.dynamic import split_integer_products
    from tileplan.frontend.reference import session

    cases = [("mlp", None), ("conv_a", ([1, 0, 2, 1], [1, 1], 1)), ("conv_b", ([1, 1, 1, 1], [2, 2], 2))]
    for i, (name, conv) in enumerate(cases):
        float_model = name if conv is None else _conv_model(*conv, seed=i)
        (tmp_path / name).mkdir()
        data = _dynamic(float_model, tmp_path / name, weight_type=getattr(QuantType, weight_type))
        m = onnx.load_model_from_string(data)
        note = split_integer_products(m)
        products = [n for n in onnx.load_model_from_string(data).graph.node
                    if n.op_type in ("MatMulInteger", "ConvInteger")]
        assert note and str(len(products)) in note, note
        onnx.checker.check_model(m)
        before, after = session(data, "ort-noopt"), session(m.SerializeToString(), "ort-noopt")
        inp = before.get_inputs()[0]
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        rng = np.random.default_rng(i)
        for x in (rng.standard_normal(shape).astype(np.float32), np.abs(rng.standard_normal(shape)).astype(np.float32)):
            for p, q in zip(before.run(None, {inp.name: x}), after.run(None, {inp.name: x})):
                assert np.array_equal(p, q), name


def _two_heads() -> Any:
    """x -> MatMul(W1), MatMul(W2) -> Add: one quantized input shared by two products (onnxruntime's optimizer
    then fuses each into MatMulIntegerToFloat)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(rng.standard_normal((24, 16)).astype(np.float32), w) for w in ("w1", "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"]), helper.make_node("MatMul", ["x", "w2"], ["h2"]),
             helper.make_node("Add", ["h1", "h2"], ["y"])]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("model", ["mlp", "two_heads"])
def test_onnxruntimes_fused_forms_are_unfused_offloaded_and_match(model, tmp_path):
    """A model onnxruntime's optimizer saved (com.microsoft DynamicQuantizeMatMul, MatMulIntegerToFloat): the
    import rewrites them as the operators they fuse, the products run on the accelerator, and the outputs are
    onnxruntime's (on the saved file and on the file it was optimised from) bit for bit."""
    import onnxruntime as ort

    data = _dynamic(model if model == "mlp" else _two_heads(), tmp_path)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(tmp_path / "fused.onnx")
    ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    fused = (tmp_path / "fused.onnx").read_bytes()
    import onnx

    ops = {n.op_type for n in onnx.load_model_from_string(fused).graph.node}
    assert ops & {"DynamicQuantizeMatMul", "MatMulIntegerToFloat"}, ops
    res = compile_bytes(fused, options=FAST)
    products = [o for o in res.summary["ops"] if o["onnx_op"] == "MatMulInteger"]
    assert products and all(o["where"] == "accelerator" for o in products), products
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    assert any("fused dynamic products" in n for n in res.summary["notes"]), res.summary["notes"]
    _assert_equal_to_onnxruntime(fused, res.artifact)
    _assert_equal_to_onnxruntime(data, res.artifact, seeds=(3,))
