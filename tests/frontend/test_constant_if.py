"""ONNX If whose condition is a constant (torch.onnx exports write them for Python branches on shapes or flags,
and onnxruntime's constant folding leaves some): the compile refused every If ('operator If ... is not
supported'). One whose condition is a constant is its taken branch, inlined at import; one whose condition is
computed at run time is refused with that reason."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.errors import InputError
from tileplan.frontend.runner import run_artifact


def _model(cond: bool | None) -> bytes:
    """x -> Q -> DQ -> If(cond) { then: Relu(xd) * 2 (a branch initializer); else: Neg(xd) } -> Q -> DQ -> y;
    cond None: a graph input."""
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    then = helper.make_graph([helper.make_node("Relu", ["xd"], ["r"]), helper.make_node("Mul", ["r", "two"], ["t"])],
                             "then", [], [helper.make_tensor_value_info("t", f, [4, 8])],
                             [numpy_helper.from_array(np.float32(2.0), "two")])
    other = helper.make_graph([helper.make_node("Neg", ["xd"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", f, [4, 8])])
    consts = {"s": np.float32(0.05), "z": np.int8(0), "sy": np.float32(0.08), "zy": np.int8(-3)}
    if cond is not None:
        consts["cond"] = np.asarray(cond)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("If", ["cond"], ["b"], then_branch=then, else_branch=other, name="branch"),
             helper.make_node("QuantizeLinear", ["b", "sy", "zy"], ["bq"]),
             helper.make_node("DequantizeLinear", ["bq", "sy", "zy"], ["y"])]
    ins = [helper.make_tensor_value_info("x", f, [4, 8])]
    if cond is None:
        ins.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    graph = helper.make_graph(nodes, "if", ins, [helper.make_tensor_value_info("y", f, [4, 8])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("cond", [True, False])
def test_constant_if_is_its_branch(cond: bool) -> None:
    data = _model(cond)
    res = compile_bytes(data)
    x = np.linspace(-6, 6, 32, dtype=np.float32).reshape(4, 8)
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    assert (got == want).all(), (got, want)


def test_run_time_condition_is_refused() -> None:
    with pytest.raises(InputError) as err:
        compile_bytes(_model(None))
    assert err.value.loc[-1] == "branch" and "condition" in str(err.value), str(err.value)
