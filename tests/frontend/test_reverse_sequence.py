"""ReverseSequence (TF exports of bidirectional RNNs reverse each sequence by its length) on the host: TVM's
importer has no converter, the compile refused it ('operator ReverseSequence ... is not supported';
bench/op_coverage.py). A gather: compared with onnxruntime exactly."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


@pytest.mark.parametrize("time_axis,batch_axis,lens", [(0, 1, [4, 3, 2, 1]), (1, 0, [1, 2, 3, 4]),
                                                         (0, 1, [4, 4, 0, 2])])
def test_reverse_sequence_equals_onnxruntime(time_axis: int, batch_axis: int, lens: list[int]) -> None:
    from onnx import TensorProto, helper, numpy_helper

    shape = [4, 4, 3]
    consts = {"s": np.float32(0.05), "z": np.int8(0), "lens": np.asarray(lens, np.int64)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("ReverseSequence", ["xd", "lens"], ["r"], time_axis=time_axis, batch_axis=batch_axis,
                              name="rev"),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "rev", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    res = compile_bytes(data)
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    assert np.array_equal(got, onnxruntime_outputs(data, {"x": x})["y"])
