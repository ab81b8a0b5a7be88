"""LpNormalization on the host as onnxruntime computes it (TVM's importer has no converter: the compile refused it,
'operator LpNormalization ... is not supported'; bench/op_coverage.py). onnxruntime's kernel divides each row by
its largest magnitude first, then by the norm of that, summed in order: the host does the same, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


def _model(shape: list[int], axis: int, p: int) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    consts = {"s": np.float32(0.03), "z": np.int8(0)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Mul", ["xd", "xd"], ["sq"]),
             helper.make_node("Sub", ["sq", "xd"], ["v"]),  # float values off the code grid
             helper.make_node("LpNormalization", ["v"], ["y"], axis=axis, p=p, name="norm")]
    graph = helper.make_graph(nodes, "lp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("shape,axis,p", [([2, 3, 37], -1, 2), ([2, 5, 4], 1, 2), ([3, 16], -1, 1), ([4, 3], 0, 1)])
def test_lp_normalization_is_onnxruntimes_bit_for_bit(shape, axis, p) -> None:
    data = _model(shape, axis, p)
    res = compile_bytes(data)
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32) * 2
    x.reshape(-1)[:3] = 0  # zeros in a row
    if axis == 0:
        x[:, 0] = 0  # a row of zeros along the axis: zeros out
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    differ = got.view(np.int32) != want.view(np.int32)
    assert not differ.any(), f"{int(differ.sum())} of {differ.size} differ, largest {float(np.abs(got - want).max())}"
