"""GroupNormalization as torch's dynamo exporter writes GroupNorm (opset 18+, between DequantizeLinear and
QuantizeLinear): onnx's shape inference gives its output no shape (a function without an inference of its own), so
the compile refused it ('the shape of its output ... cannot be inferred statically'; bench/op_coverage.py). Its
output has its input's shape: now compiled, compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


def _model(opset: int, groups: int, c: int) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    per = c  # scale / bias per channel (opset 21; onnx deprecates the per-group form of 18)
    consts = {"s": np.float32(0.03), "z": np.int8(0), "g": rng.standard_normal(per).astype(np.float32),
              "b": rng.standard_normal(per).astype(np.float32), "sy": np.float32(0.05), "zy": np.int8(1)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("GroupNormalization", ["xd", "g", "b"], ["n"], num_groups=groups, epsilon=1e-5,
                              name="gn"),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "sy", "zy"], ["y"])]
    shape = [1, c, 6, 5]
    graph = helper.make_graph(nodes, "gn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8 if opset < 21 else 10
    return model.SerializeToString()


@pytest.mark.parametrize("opset,groups,c", [(21, 2, 8), (21, 4, 8), (21, 1, 6)])
def test_group_norm_compiles_and_matches_onnxruntime(opset: int, groups: int, c: int) -> None:
    data = _model(opset, groups, c)
    res = compile_bytes(data)
    x = np.random.default_rng(4).standard_normal((1, c, 6, 5)).astype(np.float32) * 2
    got = run_artifact(res.artifact, {"x": x}).outputs["y"]
    want = onnxruntime_outputs(data, {"x": x})["y"]
    lsb = np.abs(got - want) / np.float32(0.05)
    assert lsb.max() <= 1 and np.mean(lsb < 1e-3) >= 0.99, (float(lsb.max()), float(np.mean(lsb < 1e-3)))
