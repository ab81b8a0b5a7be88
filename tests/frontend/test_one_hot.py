"""OneHot as onnxruntime computes it. TVM's converter failed on a float depth (ONNX's own tests, exporters that
compute the depth in float: 'Expected int but got float'; bench/op_coverage.py), and with an integer depth it made
the output in float64 (its on / off values as Python floats) that the program read as float32: wrong values,
silently. onnxruntime reads the depth as an integer (a cast, which truncates); negative indices count from the
depth."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


@pytest.mark.parametrize("depth,axis,vtype", [(np.float32(10.0), -1, np.float32), (np.float32(7.9), 1, np.float32),
                                              (np.int64(6), 0, np.float32), (np.int64(5), -1, np.int64)])
def test_one_hot_equals_onnxruntime(depth: np.ndarray, axis: int, vtype: type) -> None:
    from onnx import TensorProto, helper, numpy_helper

    d = int(depth)
    shape = [2, 3]
    out = list(shape)
    out.insert(axis % (len(shape) + 1), d)
    consts = {"depth": np.asarray(depth), "values": np.asarray([-2.5, 4.0]).astype(vtype)}
    node = helper.make_node("OneHot", ["idx", "depth", "values"], ["y"], axis=axis, name="onehot")
    graph = helper.make_graph([node], "onehot", [helper.make_tensor_value_info("idx", TensorProto.INT64, shape)],
                              [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(vtype)), out)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    res = compile_bytes(data)
    idx = np.asarray([[0, 1, d - 1], [-1, -d, 2]], np.int64)
    got = run_artifact(res.artifact, {"idx": idx}).outputs["y"]
    want = onnxruntime_outputs(data, {"idx": idx})["y"]
    assert got.shape == want.shape and (got == want).all(), (got, want)


def test_float_indices_are_cast_as_onnxruntime_casts_them() -> None:
    """ONNX allows float indices (its own test_onehot_with_axis); onnxruntime casts them to integers (truncating),
    and TVM's converter refused them ('requires the input indices to have integer dtype')."""
    from onnx import TensorProto, helper, numpy_helper

    consts = {"depth": np.asarray(np.float32(10.0)), "values": np.asarray([1.0, 3.0], np.float32)}
    node = helper.make_node("OneHot", ["idx", "depth", "values"], ["y"], axis=1, name="onehot")
    graph = helper.make_graph([node], "onehot", [helper.make_tensor_value_info("idx", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10, 3])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    idx = np.asarray([[0.0, 7.0, 8.9], [-1.0, -9.5, 2.2]], np.float32)
    got = run_artifact(compile_bytes(data).artifact, {"idx": idx}).outputs["y"]
    want = onnxruntime_outputs(data, {"idx": idx})["y"]
    assert got.shape == want.shape and (got == want).all(), (got, want)
