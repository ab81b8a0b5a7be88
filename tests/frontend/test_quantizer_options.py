"""The quantizer's options users set that change the graph's form (issue 24, other exports: bench/zoo_export.py
VARIANTS): each such model offloaded where the accelerator computes it exactly, and matching onnxruntime."""

from __future__ import annotations

import pytest
from frontend_helpers import OPTIONS, assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact

FAST = OPTIONS.model_copy(update={"emulate": False})


@pytest.mark.parametrize("model", ["resnet_block", "mlp"])
def test_float_weights_behind_a_quantize_dequantize_pair_run_on_the_accelerator(model):
    """AddQDQPairToWeight keeps each weight in float and quantizes it in the graph (QuantizeLinear of the
    initializer, then DequantizeLinear). onnxruntime folds that constant QuantizeLinear into int8 weights before
    its QDQ fusion; Tileplan folds it the same way, so the product is the usual dequantize(const int8 W)."""
    data = zoo.build(model, "qdq", extra={"AddQDQPairToWeight": True})
    res = compile_bytes(data, options=FAST)
    assert res.summary["total"]["accelerator_mac_share"] == 1.0, [
        (o["name"], o["reason"]) for o in res.summary["ops"] if o["where"] == "host" and o["macs"]]
    assert any("QuantizeLinear of constant" in n for n in res.summary["notes"]), res.summary["notes"]
    for seed in (1, 2):
        feeds = zoo.sample_inputs(data, seed=seed)
        assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


@pytest.mark.parametrize("model", ["resnet_block", "attention"])
def test_contrib_domain_quantize_dequantize_are_read_as_onnx_ones(model):
    """UseQDQContribOps writes every QuantizeLinear / DequantizeLinear in onnxruntime's com.microsoft domain; for
    8-bit codes (and an int32 bias) they define what ONNX's define, so the model is the usual QDQ model."""
    data = zoo.build(model, "qdq", extra={"UseQDQContribOps": True})
    res = compile_bytes(data, options=FAST)
    assert res.summary["total"]["accelerator_mac_share"] == 1.0, [
        (o["name"], o["reason"]) for o in res.summary["ops"] if o["where"] == "host" and o["macs"]]
    assert any("com.microsoft" in n for n in res.summary["notes"]), res.summary["notes"]
    for seed in (1, 2):
        feeds = zoo.sample_inputs(data, seed=seed)
        assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)
