"""Every kind of host op, checked against onnxruntime.  A few float models with many branches, each branch's
result a graph output, quantized by onnxruntime (QDQ and QOperator) and compiled with every op on the host
(offload=False, so convolutions and matrix products are host ops too); each output must match onnxruntime's
default session within the issue's bar (quantized outputs in LSB; outputs left in float within float32 noise)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs, output_lsb

from tileplan.frontend import zoo
from tileplan.frontend.compile import CompileOptions
from tileplan.frontend.runner import run_artifact


def _graph(build):
    from onnx import TensorProto, helper

    g = zoo._Graph(seed=3)
    outs, shapes = build(g)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6]),
           helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])]
    graph = helper.make_graph(g.nodes, "host_ops", ins,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, s) for o, s in zip(outs, shapes)],
                              g.inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def elementwise(g):
    outs = [g.op("Add", ["x", "y"], "add"), g.op("Sub", ["x", "y"], "sub"), g.op("Mul", ["x", "y"], "mul"),
            g.op("Div", ["x", g.const(np.float32(3.0))], "div"), g.op("Relu", ["x"], "relu"),
            g.op("Clip", ["y", g.const(np.float32(-0.5)), g.const(np.float32(1.5))], "clip"),
            g.op("LeakyRelu", ["x"], "leaky", alpha=0.1), g.op("Sigmoid", ["y"], "sigmoid"),
            g.op("Tanh", ["x"], "tanh"), g.op("Erf", ["y"], "erf"), g.op("Abs", ["x"], "abs"),
            g.op("Max", ["x", "y"], "max"), g.op("Exp", [g.op("Mul", ["x", g.const(np.float32(0.3))], "pre")],
                                                   "exp"),
            g.op("Sqrt", [g.op("Abs", ["y"], "absy")], "sqrt")]
    return outs, [[1, 8, 6, 6]] * len(outs)


def pooling(g):
    outs = [g.op("MaxPool", ["x"], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
            g.op("AveragePool", ["y"], "avgpool", kernel_shape=[2, 2], strides=[2, 2]),
            g.op("GlobalAveragePool", ["x"], "gap"), g.op("GlobalMaxPool", ["y"], "gmp"),
            g.op("ReduceMean", ["x"], "reducemean", axes=[2, 3], keepdims=1),
            g.op("Pad", ["y", g.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], "pad")]
    return outs, [[1, 8, 3, 3], [1, 8, 3, 3], [1, 8, 1, 1], [1, 8, 1, 1], [1, 8, 1, 1], [1, 8, 8, 8]]


def tensor_ops(g):
    r = g.op("Reshape", ["x", g.const(np.array([1, 8, 36], np.int64))], "reshape")
    t = g.op("Transpose", [r], "transpose", perm=[0, 2, 1])                       # [1, 36, 8]
    s = g.op("Softmax", [g.op("Mul", [t, g.const(np.float32(2.0))], "logits")], "softmax", axis=-1)
    ry = g.op("Reshape", ["y", g.const(np.array([1, 8, 36], np.int64))], "reshape_y")
    mm = g.op("MatMul", [t, ry], "matmul_act")                                    # [1, 36, 36] activations
    ln = g.op("LayerNormalization", [t, g.const(np.linspace(0.5, 1.5, 8, dtype=np.float32)),
                                     g.const(np.linspace(-0.2, 0.2, 8, dtype=np.float32))], "layernorm", axis=-1)
    cat = g.op("Concat", ["x", "y"], "concat", axis=1)
    conv = g.conv("x", 8, 4, name="conv_host")
    fl = g.op("Flatten", ["y"], "flatten")
    gemm = g.dense(fl, 288, 5, name="gemm_host")
    from onnx import helper

    g.nodes.append(helper.make_node("Split", ["x", g.const(np.array([3, 5], np.int64))], ["split_a", "split_b"],
                                    name="split", axis=1))  # two outputs: a host function with two results
    sl = g.op("Slice", ["y", g.const(np.array([1, 2], np.int64)), g.const(np.array([5, 6], np.int64)),
                        g.const(np.array([1, 3], np.int64))], "slice")
    outs = [s, mm, ln, cat, conv, gemm, "split_a", "split_b", sl]
    return outs, [[1, 36, 8], [1, 36, 36], [1, 36, 8], [1, 16, 6, 6], [1, 4, 6, 6], [1, 5], [1, 3, 6, 6],
                  [1, 5, 6, 6], [1, 4, 6, 4]]


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize("build", [elementwise, pooling, tensor_ops], ids=lambda f: f.__name__)
def test_host_ops_match_onnxruntime(build, fmt):
    import onnx

    model = _graph(build)
    rng = np.random.default_rng(0)
    calib = [{"x": rng.standard_normal((1, 8, 6, 6)).astype(np.float32),
              "y": rng.standard_normal((1, 8, 6, 6)).astype(np.float32)} for _ in range(8)]
    data = zoo.quantize(model, fmt, calib)
    res = compile_bytes(data, options=CompileOptions(offload=False))
    assert all(o["where"] == "host" for o in res.summary["ops"])
    feeds = {k: v for k, v in calib[3].items()}
    got = run_artifact(res.artifact, feeds).outputs
    want = onnxruntime_outputs(data, feeds)
    qmodel = onnx.load_model_from_string(data)
    producers = {o: n.op_type for n in qmodel.graph.node for o in n.output}
    checked = 0
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape, name
        if producers[name] == "DequantizeLinear":
            err = np.abs(g.astype(np.float64) - w) / output_lsb(data, name)
            assert err.max() <= 1.0 + 1e-4, f"{name}: {err.max():.3f} LSB"  # host ops: at most one step
        else:  # left in float by the quantizer: the same float math up to float32 rounding
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(w).max())),
                                       err_msg=name)
        checked += 1
    assert checked == len(qmodel.graph.output) and not math.isnan(checked)
