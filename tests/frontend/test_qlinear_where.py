"""com.microsoft QLinearWhere (onnxruntime's quantizer's QOperator form of Where, e.g. a masked fill of int8
scores): the compile refused it ('operator com.microsoft.QLinearWhere ... is not supported'; bench/op_coverage.py).
Rewritten as Where between DequantizeLinear and QuantizeLinear, which is what onnxruntime's kernel computes (its
tables: each input code dequantized and requantized to the output's scale and zero point): every code of both
inputs compared with onnxruntime's, exactly."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


@pytest.mark.parametrize("same_scale", [False, True])
def test_qlinear_where_equals_onnxruntime_on_every_code(same_scale: bool) -> None:
    from onnx import TensorProto, helper, numpy_helper

    consts = {"xs": np.float32(0.031), "xz": np.int8(3), "ys": np.float32(0.05), "yz": np.int8(-7),
              "zs": np.float32(0.031 if same_scale else 0.043), "zz": np.int8(3 if same_scale else -2),
              "y": np.arange(127, -129, -1, dtype=np.int8).reshape(16, 16)}
    node = helper.make_node("QLinearWhere", ["c", "x", "xs", "xz", "y", "ys", "yz", "zs", "zz"], ["z"],
                            domain="com.microsoft", name="where")
    graph = helper.make_graph([node], "qwhere", [helper.make_tensor_value_info("c", TensorProto.BOOL, [16, 16]),
                                                 helper.make_tensor_value_info("x", TensorProto.INT8, [16, 16])],
                              [helper.make_tensor_value_info("z", TensorProto.INT8, [16, 16])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    data = model.SerializeToString()
    res = compile_bytes(data)
    x = np.arange(-128, 128, dtype=np.int32).astype(np.int8).reshape(16, 16)  # every code
    for c in (np.ones((16, 16), bool), np.zeros((16, 16), bool), np.random.default_rng(0).random((16, 16)) < 0.5):
        feeds = {"c": c, "x": x}
        got = run_artifact(res.artifact, feeds).outputs["z"]
        want = onnxruntime_outputs(data, feeds)["z"]
        assert (got == want).all(), int((got != want).sum())
