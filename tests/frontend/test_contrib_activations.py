"""onnxruntime's fused activations (com.microsoft QuickGelu, Gelu, FastGelu, BiasGelu: what its optimizer saves
when asked to write the optimized model) between DequantizeLinear and QuantizeLinear. onnx's shape inference does
not know them, so the compile refused them ('the shape of its output ... cannot be inferred statically';
bench/op_coverage.py); their output has their input's shape. QuickGelu has no converter in TVM's importer:
x * sigmoid(alpha * x). Compared with onnxruntime after requantisation."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


@pytest.mark.parametrize("op,attrs", [("QuickGelu", {}), ("QuickGelu", {"alpha": 1.0}), ("Gelu", {}),
                                      ("FastGelu", {}), ("BiasGelu", {})])
def test_contrib_activation_within_one_lsb_of_onnxruntime(op: str, attrs: dict) -> None:
    from onnx import TensorProto, helper, numpy_helper

    consts = {"s": np.float32(0.04), "z": np.int8(0), "sy": np.float32(0.03), "zy": np.int8(-40),
              "bias": np.linspace(-1, 1, 16, dtype=np.float32)}
    ins = ["xd", "bias"] if op == "BiasGelu" else ["xd"]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node(op, ins, ["a"], domain="com.microsoft", name="act", **attrs),
             helper.make_node("QuantizeLinear", ["a", "sy", "zy"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    data = model.SerializeToString()
    res = compile_bytes(data)
    x = (np.arange(-128, 128, dtype=np.float32) * np.float32(0.04)).reshape(16, 16)  # every int8 code
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    lsb = np.abs(got - want) / np.float32(0.03)
    assert lsb.max() <= 1.0001 and np.mean(lsb < 1e-3) >= 0.99, (float(lsb.max()), float(np.mean(lsb < 1e-3)))
