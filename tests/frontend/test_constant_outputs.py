"""A model output that is a constant once the input's shape is known (a ConstantOfShape of the input's Shape,
folded at import): the program writes it like any other output. It used to stop the compile with a KeyError
(program.py looked a single constant output up among the computed tensors)."""

from __future__ import annotations

import numpy as np
from frontend_helpers import compile_bytes

from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact


def _model(two_outputs: bool) -> bytes:
    from onnx import TensorProto, helper

    fill = helper.make_tensor("value", TensorProto.INT8, [1], [7])
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"], value=fill)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.INT8, [2, 5])]
    if two_outputs:
        nodes.append(helper.make_node("Identity", ["x"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.INT8, [2, 5]))
    graph = helper.make_graph(nodes, "const_out", [helper.make_tensor_value_info("x", TensorProto.INT8, [2, 5])],
                              outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_single_constant_output_runs():
    x = np.arange(10, dtype=np.int8).reshape(2, 5)
    data = _model(False)
    want = reference_outputs(data, {"x": x}, "ort")
    got = run_artifact(compile_bytes(data).artifact, {"x": x}).outputs
    np.testing.assert_array_equal(got["y"], want["y"])
    assert (got["y"] == 7).all()


def test_constant_beside_a_computed_output_runs():
    x = np.arange(10, dtype=np.int8).reshape(2, 5)
    data = _model(True)
    got = run_artifact(compile_bytes(data).artifact, {"x": x}).outputs
    np.testing.assert_array_equal(got["y"], np.full((2, 5), 7, np.int8))
    np.testing.assert_array_equal(got["z"], x)
