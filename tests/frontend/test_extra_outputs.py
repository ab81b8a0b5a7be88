"""Operators' second outputs (bench/op_coverage.py found them wrong, not refused): TVM's importer gives a
LayerNormalization's Mean and InvStdDev as constants 0 (its converter computes Y only) and a Dropout's mask from
relax's dropout, which is not onnxruntime's (in inference, every element kept: a mask of ones); a model that read
them got wrong values. Now the Dropout mask is onnxruntime's, and a LayerNormalization whose Mean / InvStdDev a
model reads is refused, naming the node."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.errors import InputError
from tileplan.frontend.runner import run_artifact


def _model(op: str) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    consts = {"s": np.float32(0.03), "z": np.int8(0), "g": np.ones(16, np.float32), "b": np.zeros(16, np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])]
    if op == "Dropout":
        nodes.append(helper.make_node("Dropout", ["xd"], ["y", "mask"], name="drop"))
        outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16]),
                helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 16])]
    else:
        nodes.append(helper.make_node("LayerNormalization", ["xd", "g", "b"], ["y", "mean", "inv"], name="norm"))
        outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16]),
                helper.make_tensor_value_info("mean", TensorProto.FLOAT, [2, 1]),
                helper.make_tensor_value_info("inv", TensorProto.FLOAT, [2, 1])]
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])], outs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_a_dropout_mask_is_onnxruntimes() -> None:
    data = _model("Dropout")
    res = compile_bytes(data)
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    got = run_artifact(res.artifact, {"x": x}).outputs
    want = onnxruntime_outputs(data, {"x": x})
    for k in ("y", "mask"):
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k


def test_a_layer_norm_whose_mean_is_read_is_refused_naming_the_node() -> None:
    with pytest.raises(InputError, match="norm.*Mean"):
        compile_bytes(_model("LayerNormalization"))


@pytest.mark.parametrize("op", ["NonZero", "NonMaxSuppression"])
def test_an_op_whose_output_shape_depends_on_values_is_refused_naming_the_node(op: str) -> None:
    """bench/op_coverage.py: NonZero failed with 'program: unsupported binding', NonMaxSuppression with 'C emitter:
    unsupported call tirx.tvm_call_packed' (errors, not refusals); now an InputError naming the node."""
    from onnx import TensorProto, helper, numpy_helper

    if op == "NonZero":
        nodes = [helper.make_node("Greater", ["x", "zero"], ["m"]), helper.make_node("NonZero", ["m"], ["y"],
                                                                                     name="pick")]
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
        consts = [numpy_helper.from_array(np.zeros((), np.float32), "zero")]
        out_shape = [2, 3]
    else:
        nodes = [helper.make_node("NonMaxSuppression", ["boxes", "x", "k"], ["y"], name="pick")]
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6])]
        consts = [numpy_helper.from_array(np.random.default_rng(0).random((1, 6, 4), np.float32), "boxes"),
                  numpy_helper.from_array(np.asarray([3], np.int64), "k")]
        out_shape = [3, 3]
    graph = helper.make_graph(nodes, op, inputs, [helper.make_tensor_value_info("y", TensorProto.INT64, out_shape)],
                              consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(InputError, match="pick.*depends on its input's values"):
        compile_bytes(model.SerializeToString())


def test_an_opset_10_matmul_integer_of_uint8_compiles_and_equals_onnxruntime() -> None:
    """bench/op_coverage.py: a MatMulInteger of a uint8 input in an opset-10 model was refused ('shape inference
    failed ... dyn_shift_sub ... unsupported type: tensor(int16)'): the rewrite to int8 widened the input to
    int16 for a Sub, which ONNX's Sub takes only from opset 14. Below 14 it widens to int32."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    consts = [numpy_helper.from_array(rng.integers(0, 256, (16, 8)).astype(np.uint8), "b"),
              numpy_helper.from_array(np.uint8(12), "za"), numpy_helper.from_array(np.uint8(130), "zb")]
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"], name="mm")]
    graph = helper.make_graph(nodes, "mmi", [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 8])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    model.ir_version = 5
    data = model.SerializeToString()
    res = compile_bytes(data)
    a = rng.integers(0, 256, (4, 16)).astype(np.uint8)
    got = run_artifact(res.artifact, {"a": a}).outputs["y"]
    assert np.array_equal(got, onnxruntime_outputs(data, {"a": a})["y"])
