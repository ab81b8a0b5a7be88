"""BitShift and the Bitwise* operators on the host (bench/op_coverage.py found them failing: TVM lowers them to
TIR's shift and bitwise-not nodes, which the C emitter did not know: "CodegenError: C emitter: unsupported
expression RShift", an error that is not a refusal). Integer operators as they appear in graphs (packed
weights' unpacking, hashing of token ids): compared with onnxruntime exactly."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact

_TYPES = {"uint8": 2, "uint16": 4, "uint32": 12, "uint64": 13, "int8": 3, "int32": 6, "int64": 7}


def _model(op: str, dtype: str, attrs: dict) -> bytes:
    from onnx import helper, numpy_helper

    t = _TYPES[dtype]
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    if op == "BitShift":
        b = rng.integers(0, info.bits - 1, (3, 8)).astype(dtype)
    else:
        b = rng.integers(info.min, info.max, (3, 8), endpoint=True, dtype=dtype)
    unary = op == "BitwiseNot"
    nodes = [helper.make_node(op, ["x"] if unary else ["x", "b"], ["y"], name="op", **attrs)]
    graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info("x", t, [3, 8])],
                              [helper.make_tensor_value_info("y", t, [3, 8])],
                              [] if unary else [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("op,dtype,attrs", [
    ("BitShift", "uint8", {"direction": "RIGHT"}), ("BitShift", "uint8", {"direction": "LEFT"}),
    ("BitShift", "uint32", {"direction": "LEFT"}), ("BitShift", "uint64", {"direction": "RIGHT"}),
    ("BitwiseNot", "uint8", {}), ("BitwiseNot", "int32", {}), ("BitwiseAnd", "int8", {}),
    ("BitwiseOr", "uint16", {}), ("BitwiseXor", "int64", {}),
])
def test_bitwise_operators_equal_onnxruntimes(op: str, dtype: str, attrs: dict) -> None:
    data = _model(op, dtype, attrs)
    res = compile_bytes(data)
    info = np.iinfo(dtype)
    x = np.random.default_rng(2).integers(info.min, info.max, (3, 8), endpoint=True, dtype=dtype)
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    assert got.dtype == want.dtype and np.array_equal(got, want), (got, want)
