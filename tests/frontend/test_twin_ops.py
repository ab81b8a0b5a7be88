"""Two layers with equal weights on the same input (nn.TransformerDecoder / Encoder deep-copy one layer, so an
untrained export's cross-attention key / value projections of the memory are equal in every layer: held-out set
7's tfm_decoder). TVM's FuseOpsByPattern makes one composite function of structurally equal matches and calls it
at each site; the summary listed the second op on the host ("not matched as dequantize -> MatMul ...") with its
MACs not offloaded, and modelled one call of the kernel where the program makes two."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact


def _twins(fmt: str) -> bytes:
    g = zoo._Graph(seed=4)
    w = (g.rng.standard_normal((32, 64)) / 6).astype(np.float32)
    b = (g.rng.standard_normal(64) / 10).astype(np.float32)
    t = g.op("Transpose", ["x"], "tr", perm=[1, 0, 2])
    ys = [g.op("Add", [g.op("MatMul", [t, g.const(w.copy(), "w")], f"mm{i}"), g.const(b.copy(), "b")])
          for i in range(2)]
    y = g.op("Mul", ys, "prod")
    model = g.model("twins", {"x": [1, 16, 32]}, y, [16, 1, 64])
    rng = np.random.default_rng(0)
    return zoo.quantize(model, fmt, [{"x": rng.standard_normal((1, 16, 32)).astype(np.float32)} for _ in range(8)])


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_equal_layers_on_one_input_are_both_offloaded(fmt):
    data = _twins(fmt)
    res = compile_bytes(data)
    mms = [o for o in res.summary["ops"] if o["onnx_op"] == "MatMul"]
    assert len(mms) == 2 and all(o["where"] == "accelerator" for o in mms), [(o["name"], o["reason"]) for o in mms]
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    kernel = next(o for o in mms if o.get("kernel"))
    twin = next(o for o in mms if o is not kernel)
    assert kernel["name"] in twin["reason"]
    # the kernel runs twice: its modelled cycles are both calls' (the emulated run counts both)
    assert abs(kernel["cycles_emulated"] / kernel["cycles_model"] - 1) < 0.15, kernel
    feeds = zoo.sample_inputs(data, seed=3)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)
