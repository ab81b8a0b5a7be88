"""Every test model (QDQ and QOperator), compiled into one program and run on the emulator, matches its named
judge (frontend_helpers.assert_matches_onnxruntime: a QOperator export onnxruntime's default session, every
element within 1 LSB and >= 99.9% equal; a QDQ export `ort-int8`, >= 99.9% within 1 LSB, none further than 2).
And the summary accounts for every node of the model."""

from __future__ import annotations

import pytest
from frontend_helpers import assert_matches_onnxruntime, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact

CASES = [
    ("cnn_small", {}), ("resnet_block", {}), ("mobilenet_block", {}), ("mlp", {}), ("attention", {}),
    ("resnet18", {"size": 32, "width": 8, "classes": 10}),
]
QDQ_NODES = {"QuantizeLinear", "DequantizeLinear"}


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize("name,params", CASES, ids=[c[0] for c in CASES])
def test_model_matches_onnxruntime(name, params, fmt):
    import onnx

    data = zoo.build(name, fmt, **params)
    res = compile_bytes(data)
    feeds = zoo.sample_inputs(data, seed=11)
    run = run_artifact(res.artifact, feeds)
    assert_matches_onnxruntime(data, run.outputs, feeds)

    s = res.summary
    ops = s["ops"]
    # every computing node of the (QDQ-rewritten) model is listed once, with where it runs and why
    names = [o["name"] for o in ops]
    assert len(names) == len(set(names))
    assert all(o["where"] in ("accelerator", "host") and o["reason"] for o in ops)
    accel = [o for o in ops if o.get("kernel")]
    assert accel, "nothing offloaded"
    for o in accel:
        assert o["plan_key"] and o["cycles_emulated"] > 0 and o["cycles_model"] > 0
        assert o["dram_bytes_emulated"] > 0 and o["scratchpad_bytes"] > 0 and o["accumulator_bytes"] > 0
    assert s["total"]["cycles_emulated"] == sum(o["cycles_emulated"] for o in accel)
    assert s["total"]["dram_bytes_emulated"] == pytest.approx(sum(o["dram_bytes_emulated"] for o in accel),
                                                              abs=len(accel))
    if name == "mobilenet_block":  # the depthwise and the grouped convolution run several groups per pass
        assert sorted((o["op"], o["group_pack"]) for o in accel if o["group_pack"]) == [
            ("conv2d", 4), ("depthwise_conv2d", 16)]
    assert sum(c for c, st in zip(run.cycles, run.steps) if st["kind"] == "accel") == pytest.approx(
        s["total"]["cycles_emulated"], abs=len(accel))
    # convolutions and matrix products with constant weights run on the accelerator in these models
    model = onnx.load_model_from_string(data)
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm", "QLinearConv", "QGemm"):
            assert node.name in {o["name"] for o in accel}, node.name
    assert s["total"]["accelerator_macs"] <= s["total"]["macs"]
