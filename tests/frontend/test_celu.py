"""Celu between DequantizeLinear and QuantizeLinear (TVM's importer has no converter: the compile refused it,
'operator Celu ... is not supported'; bench/op_coverage.py). Now ONNX's definition in float32 on the host;
onnxruntime's exp is Eigen's vectorised one, so the bar is a quantised output within 1 LSB, nearly all equal."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5])
def test_celu_within_one_lsb_of_onnxruntime(alpha: float) -> None:
    from onnx import TensorProto, helper, numpy_helper

    consts = {"s": np.float32(0.04), "z": np.int8(0), "sy": np.float32(0.03), "zy": np.int8(20)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Celu", ["xd"], ["c"], alpha=alpha, name="act"),
             helper.make_node("QuantizeLinear", ["c", "sy", "zy"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "celu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    res = compile_bytes(data)
    x = (np.arange(-128, 128, dtype=np.float32) * np.float32(0.04)).reshape(1, 256)  # every int8 code
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    lsb = np.abs(got - want) / np.float32(0.03)
    assert lsb.max() <= 1.0001 and np.mean(lsb < 1e-3) >= 0.99, (float(lsb.max()), float(np.mean(lsb < 1e-3)))
