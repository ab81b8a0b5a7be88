"""CumSum on the host (frontend/cumsum.py). timm's EdgeNeXt (held-out set 8) numbers its positions by the
cumulative sum of a mask of ones (PositionalEncodingFourier), which onnxruntime's quantizer puts between
QuantizeLinear / DequantizeLinear; HF models number positions by `attention_mask.cumsum(-1)` in int64. TVM's Relax
has no legalization of `relax.cumsum`: the program refused the model ("program: unsupported binding ...CumSum").
Now computed as onnxruntime does (a running sum in the output's type), every attribute: axis, exclusive, reverse."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes, onnxruntime_outputs

from tileplan.frontend.runner import run_artifact


def _model(shape, axis: int, exclusive: int, reverse: int, constant: bool) -> bytes:
    """x -> Q -> DQ -> Conv 1x1 -> Q -> DQ -> Add(CumSum(DQ(Q(t)), axis)) -> Q -> DQ -> y, where t is the
    conv's input (constant=False) or a Constant of ones (constant=True: EdgeNeXt's mask)."""
    from onnx import TensorProto, helper, numpy_helper

    c = shape[1]
    rng = np.random.default_rng(3)
    consts = {"s": np.float32(0.04), "z": np.int8(2), "sw": np.float32(0.01), "zw": np.int8(0),
              "w": rng.integers(-100, 100, (c, c, 1, 1)).astype(np.int8), "s2": np.float32(0.03), "z2": np.int8(-1),
              "sc": np.float32(0.05 if not constant else 1.0 / 127), "zc": np.int8(0),
              "sy": np.float32(0.09), "zy": np.int8(3), "axis": np.int64(axis)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["h"]),
             helper.make_node("QuantizeLinear", ["h", "s2", "z2"], ["hq"]),
             helper.make_node("DequantizeLinear", ["hq", "s2", "z2"], ["hd"])]
    if constant:
        nodes.append(helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(
            np.ones(shape, np.float32))))
    else:
        nodes.append(helper.make_node("Identity", ["xd"], ["t"]))
    nodes += [helper.make_node("QuantizeLinear", ["t", "sc", "zc"], ["tq"]),
              helper.make_node("DequantizeLinear", ["tq", "sc", "zc"], ["td"]),
              helper.make_node("CumSum", ["td", "axis"], ["cs"], exclusive=exclusive, reverse=reverse),
              helper.make_node("Add", ["hd", "cs"], ["a"]),
              helper.make_node("QuantizeLinear", ["a", "sy", "zy"], ["aq"]),
              helper.make_node("DequantizeLinear", ["aq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "cumsum", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("axis,exclusive,reverse,constant", [
    (2, 0, 0, True),    # EdgeNeXt: the running count of a mask of ones along H
    (3, 0, 0, False),
    (-1, 1, 0, False),
    (1, 0, 1, False),
    (2, 1, 1, False),
])
def test_cumsum_runs_on_the_host_as_onnxruntime(axis, exclusive, reverse, constant):
    data = _model([1, 8, 6, 7], axis, exclusive, reverse, constant)
    res = compile_bytes(data)
    rng = np.random.default_rng(5)
    for _ in range(2):
        feeds = {"x": rng.standard_normal((1, 8, 6, 7)).astype(np.float32) * 2}
        assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def test_int64_positions_from_a_mask():
    """position_ids = attention_mask.cumsum(-1) - 1 (HF's models without position ids): int64 in, int64 out."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.asarray(-1, np.int64), "axis"), numpy_helper.from_array(
        np.asarray(1, np.int64), "one"), numpy_helper.from_array(np.float32(0.02), "s"),
        numpy_helper.from_array(np.int8(0), "z")]
    nodes = [helper.make_node("CumSum", ["mask", "axis"], ["c"]),
             helper.make_node("Sub", ["c", "one"], ["pos"]),
             helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "positions", [helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 9]),
                                                   helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("pos", TensorProto.INT64, [2, 9]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    res = compile_bytes(data)
    mask = np.ones((2, 9), np.int64)
    mask[1, 6:] = 0
    feeds = {"mask": mask, "x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)}
    got = run_artifact(res.artifact, feeds).outputs
    np.testing.assert_array_equal(got["pos"], onnxruntime_outputs(data, feeds)["pos"])
