"""ScatterND as torch.onnx exports a slice assignment (`out[:, :-1, :fold] = x[:, 1:, :fold]`, the temporal shift
of TSM, held-out set 7's tsm_ghost): the host function TVM's TOPI makes for it declares its data and updates
buffers with a symbolic element offset, which the C emitter refused ("unbound variable elem_offset") and the
model did not compile. The program passes every tensor from its start: offset 0."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact


def _shift_model(fmt: str) -> bytes:
    g = zoo._Graph(seed=5)
    y = g.conv("x", 3, 8, name="c1")
    zeros = g.op("Mul", [y, g.const(np.float32(0.0))], "zeros")
    # rows 0..3 of channel 0..1 get rows 1..4 (a shift by one along H), as ScatterND with constant indices
    idx = np.array([[[0, c, h] for h in range(4)] for c in range(2)], np.int64)  # (2, 4, 3): N, C, H
    upd = g.op("Slice", [y, g.const(np.array([0, 1], np.int64)), g.const(np.array([2, 5], np.int64)),
                         g.const(np.array([1, 2], np.int64))], "upd")  # (1, 2, 4, 8)
    upd = g.op("Reshape", [upd, g.const(np.array([2, 4, 8], np.int64))], "upd_r")
    s = g.op("ScatterND", [zeros, g.const(idx), upd], "scatter")
    out = g.conv(s, 8, 8, name="c2")
    model = g.model("shift", {"x": [1, 3, 8, 8]}, out, [1, 8, 8, 8])
    rng = np.random.default_rng(0)
    return zoo.quantize(model, fmt, [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
                                     for _ in range(8)])


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_scatter_nd_compiles_and_equals_onnxruntime(fmt):
    data = _shift_model(fmt)
    res = compile_bytes(data)
    assert any(o["onnx_op"] == "ScatterND" and o["where"] == "host" for o in res.summary["ops"])
    feeds = zoo.sample_inputs(data, seed=2)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)
