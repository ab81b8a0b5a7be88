"""bench/zoo_trace.py's choice of tensors: the outputs of com.microsoft ops, which onnx's shape inference leaves
untyped, are traced too (typed from an onnxruntime run), and so is what follows them (a QOperator Swin-V2-T's
QLinearSoftmax and every later tensor of its block were left out before)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


@pytest.fixture(scope="module")
def trace(load_bench):  # type: ignore[no-untyped-def]
    return load_bench("zoo_trace")


def test_contrib_op_outputs_are_traced(trace, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """x -> Q -> QLinearSoftmax (com.microsoft) -> QLinearMatMul -> DQ: both the softmax's output (untyped by
    onnx) and the MatMul's after it (typed only once its input is) are traced, with their int8 types and shapes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = {"s": np.float32(0.05), "z": np.int8(0), "ps": np.float32(1 / 256), "pz": np.int8(-128),
         "w": np.ones((8, 4), np.int8), "ws": np.float32(0.01), "wz": np.int8(0), "ys": np.float32(0.02)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("QLinearSoftmax", ["xq", "s", "z", "ps", "pz"], ["p"], name="softmax",
                              domain="com.microsoft", axis=-1, opset=13),
             helper.make_node("QLinearMatMul", ["p", "ps", "pz", "w", "ws", "wz", "ys", "z"], ["yq"], name="mm"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "z"], ["y"], name="dq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in c.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    traced_model, traced = trace.traced_model(path)
    assert [(t["node"], t["op"]) for t in traced] == [("q", "QuantizeLinear"), ("softmax", "QLinearSoftmax"),
                                                      ("mm", "QLinearMatMul")]
    outs = {o.name: o.type.tensor_type for o in traced_model.graph.output}
    assert outs["p"].elem_type == TensorProto.INT8 and [d.dim_value for d in outs["p"].shape.dim] == [2, 8]
    assert [d.dim_value for d in outs["yq"].shape.dim] == [2, 4]
