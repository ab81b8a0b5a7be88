"""Acosh, Asinh and Atanh on the host (bench/op_coverage.py found them: TVM lowers them to tirx.acosh / asinh /
atanh, which the C emitter did not know: "CodegenError: C emitter: unsupported call tirx.acosh", an error that
is not a refusal). Now the C library's acoshf / asinhf / atanhf, which onnxruntime's kernels call too (std::acosh
of a float)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


def _model(op: str) -> bytes:
    """x [1, 256] -> Q -> DQ -> op -> y (float): every int8 code once, the op's float result itself."""
    from onnx import TensorProto, helper, numpy_helper

    scale = {"Acosh": 0.25, "Asinh": 0.05, "Atanh": 1 / 127}[op]
    zp = {"Acosh": -128, "Asinh": 0, "Atanh": 0}[op]  # Acosh's codes from 1 up (its domain), Atanh's in [-1, 1]
    consts = {"s": np.float32(scale), "z": np.int8(zp)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node(op, ["xd"], ["y"], name="op")]
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("op", ["Acosh", "Asinh", "Atanh"])
def test_inverse_hyperbolic_functions_compile_and_match_onnxruntime(op: str) -> None:
    data = _model(op)
    res = compile_bytes(data)
    scale = {"Acosh": 0.25, "Asinh": 0.05, "Atanh": 1 / 127}[op]
    zp = {"Acosh": -128, "Asinh": 0, "Atanh": 0}[op]
    x = ((np.arange(-128, 128) - zp) * np.float32(scale)).astype(np.float32).reshape(1, 256)
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{int((~same).sum())} of 256 differ: {got[~same][:4]} for {want[~same][:4]}"
