"""TopK on the host (held-out set 5: `logits.softmax(-1).topk(3)` in bench/zoo_export.py's `wide_batch3`): the
compile failed with "program: unsupported binding /TopK = Call" (TVM has relax.topk but no legalization). Its
values and int64 indices must be onnxruntime's, ties (an int8 model's dequantized scores tie often) by the lower
index first."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact


def topk_head(fmt: str, k: int, largest: int, axis: int) -> bytes:
    from onnx import TensorProto, helper

    g = zoo._Graph(seed=21)
    x = g.conv("x", 3, 16, name="stem")
    flat = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    logits = g.dense(flat, 16, 40, name="fc")
    scores = g.op("Reshape", [logits, g.const(np.array([3, 5, 8], np.int64))])  # [batch, 5, 8]
    node = helper.make_node("TopK", [scores, g.const(np.array([k], np.int64))], ["top_values", "top_indices"],
                            name="topk", axis=axis, largest=largest)
    g.nodes.append(node)
    k_shape = [3, 5, 8]
    k_shape[axis] = k
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3, 6, 6])]
    outs = [helper.make_tensor_value_info("top_values", TensorProto.FLOAT, k_shape),
            helper.make_tensor_value_info("top_indices", TensorProto.INT64, k_shape)]
    model = helper.make_model(helper.make_graph(g.nodes, "topk", ins, outs, g.inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    rng = np.random.default_rng(0)
    calib = [{"x": rng.standard_normal((3, 3, 6, 6)).astype(np.float32)} for _ in range(8)]
    return zoo.quantize(model, fmt, calib)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize(("k", "largest", "axis"), [(3, 1, -1), (4, 0, 1), (8, 1, 2)])
def test_topk_values_and_indices_are_onnxruntimes(fmt, k, largest, axis):
    data = topk_head(fmt, k, largest, axis)
    res = compile_bytes(data)
    assert any(o["onnx_op"] == "TopK" and o["where"] == "host" for o in res.summary["ops"])
    for seed in (1, 2, 3):
        feeds = zoo.sample_inputs(data, seed=seed)
        got = run_artifact(res.artifact, feeds).outputs
        want = onnxruntime_outputs(data, feeds)
        np.testing.assert_array_equal(got["top_values"], want["top_values"])
        np.testing.assert_array_equal(got["top_indices"], want["top_indices"])
        assert got["top_indices"].dtype == np.int64
