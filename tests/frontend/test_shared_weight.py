"""A weight torch.onnx shares with an equal one through an Identity (an untrained nn.TransformerDecoder's
deep-copied layers: held-out set 7's tfm_decoder): onnxruntime's QDQ quantizer quantizes the first as a weight
and the Identity's output again as a tensor of its own, so the second layer's weight reads
DequantizeLinear(QuantizeLinear(Identity(DequantizeLinear(w_q)))). onnxruntime (ort-int8) makes that layer an
integer QGemm; Tileplan called it a "Gemm of two activations" and computed it in float on the host. The constant
chain is now folded (as the QuantizeLinear of a constant is), and the layer runs on the accelerator."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact


def _shared_weight_model(identity: bool = True) -> bytes:
    g = zoo._Graph(seed=6)
    w = g.weight((16, 16), 16)
    shared = g.op("Identity", [w], "shared")
    h = g.op("Relu", [g.op("Gemm", ["x", w, g.bias(16)], "fc1", transB=1)])
    y = g.op("Gemm", [h, shared, g.bias(16)], "fc2", transB=1)
    model = g.model("shared_w", {"x": [2, 16]}, y, [2, 16])
    rng = np.random.default_rng(0)
    data = zoo.quantize(model, "qdq", [{"x": rng.standard_normal((2, 16)).astype(np.float32)} for _ in range(8)])
    if identity:
        return data
    import onnx  # the Identity optimised away (as the import's shape folding does): QuantizeLinear(DequantizeLinear)

    m = onnx.load_model_from_string(data)
    node = next(n for n in m.graph.node if n.op_type == "Identity")
    for n in m.graph.node:
        n.input[:] = [node.input[0] if i == node.output[0] else i for i in n.input]
    m.graph.node.remove(node)
    return m.SerializeToString()


@pytest.mark.parametrize("identity", [True, False])
def test_a_weight_requantized_from_a_shared_one_is_offloaded(identity):
    data = _shared_weight_model(identity)
    res = compile_bytes(data)
    gemms = {o["name"]: o for o in res.summary["ops"] if o["onnx_op"] == "Gemm"}
    assert gemms["fc2"]["where"] == "accelerator", gemms["fc2"]["reason"]
    assert res.summary["total"]["accelerator_mac_share"] == 1.0
    feeds = zoo.sample_inputs(data, seed=2)
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)
