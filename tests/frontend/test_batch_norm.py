"""A BatchNormalization the exporter could not fold into a convolution (DenseNet's, after each Concat: BN -> ReLU
-> conv) runs on the host between DequantizeLinear and QuantizeLinear with onnxruntime's arithmetic: its CPU kernel
folds the statistics per channel first, inv_std = 1 / sqrt(var + eps), s = inv_std * scale, b' = B - mean * s, then
y = x * s + b' (a multiply and an add, no fused multiply-add). Computed as the definition reads, (x - mean) *
inv_std * scale + B, some outputs round to the other code (DenseNet-169: the first differing activation, 2 of
125,440 codes, grew to 27.9% equal outputs; bench/zoo_trace.py)."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import OPTIONS, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.reference import reference_outputs
from tileplan.frontend.runner import run_artifact

FAST = OPTIONS.model_copy(update={"emulate": False})


def _bn_relu(seed: int = 0, ch: int = 2048, size: int = 16) -> object:
    """BatchNormalization -> ReLU of the input, its quantized result the output. Each channel maps at most 256
    input codes, so the ties another arithmetic rounds the other way are found by many channels: 2,048 x 256
    positions."""
    g = zoo._Graph(seed)
    r = g.rng
    stats = [g.const((r.standard_normal(ch) * s + o).astype(np.float32), n)
             for s, o, n in ((0.5, 1.0, "gamma"), (0.3, 0.0, "beta"), (0.5, 0.0, "mean"))]
    var = g.const((r.random(ch) * 2 + 0.1).astype(np.float32), "var")
    y = g.op("BatchNormalization", ["input", *stats, var], "bn", epsilon=1e-5)
    y = g.op("Relu", [y], "relu")
    return g.model("bn_relu", {"input": [1, ch, size, size]}, y, [1, ch, size, size])


def test_batch_norm_equals_onnxruntime():
    data = zoo.quantize(_bn_relu(), "qdq")  # (a QOperator export leaves this model float: nothing to compile)
    res = compile_bytes(data, options=FAST)
    for seed in (1, 2, 3):
        feeds = zoo.sample_inputs(data, seed=seed)
        got = run_artifact(res.artifact, feeds).outputs
        want = reference_outputs(data, feeds, "ort-int8")
        for name, w in want.items():
            assert np.array_equal(got[name], w), (name, int(np.sum(got[name] != w)))


@pytest.mark.parametrize("dequantized_stats", [False, True])
def test_batch_norm_float_result_equals_onnxruntime_bit_for_bit(dequantized_stats):
    """The float result itself (a BatchNormalization of dequantized codes that is a graph output, not quantized
    again): equal to onnxruntime's bit for bit; (x - mean) / sqrt(var + eps) * scale + B, TVM's legalization,
    differs from it in the last bit for about half of the values. `dequantized_stats`: scale and B come from
    DequantizeLinear nodes (int8 / int32), as onnxruntime's QDQ quantizer writes DenseNet's, computed at run
    time."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    ch, size = 64, 16
    inits = [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.int8(3), "z")]
    for name, v in (("gamma", rng.standard_normal(ch) * 0.5 + 1.0), ("beta", rng.standard_normal(ch) * 0.3),
                    ("mean", rng.standard_normal(ch) * 0.5), ("var", rng.random(ch) * 2 + 0.1)):
        inits.append(numpy_helper.from_array(v.astype(np.float32), name))
    nodes = [helper.make_node("QuantizeLinear", ["input", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["x"], name="dq")]
    stats = ["gamma", "beta"]
    if dequantized_stats:
        arrays = {t.name: numpy_helper.to_array(t) for t in inits}
        gs = np.float32(np.abs(arrays["gamma"]).max() / 127)
        inits += [numpy_helper.from_array(np.rint(arrays["gamma"] / gs).astype(np.int8), "gamma_q"),
                  numpy_helper.from_array(gs, "gamma_s"), numpy_helper.from_array(np.int8(0), "gamma_z"),
                  numpy_helper.from_array(np.rint(arrays["beta"] / np.float32(1e-4)).astype(np.int32), "beta_q"),
                  numpy_helper.from_array(np.float32(1e-4), "beta_s")]
        nodes += [helper.make_node("DequantizeLinear", ["gamma_q", "gamma_s", "gamma_z"], ["gamma_dq"], name="g"),
                  helper.make_node("DequantizeLinear", ["beta_q", "beta_s"], ["beta_dq"], name="b")]
        stats = ["gamma_dq", "beta_dq"]
    nodes.append(helper.make_node("BatchNormalization", ["x", *stats, "mean", "var"], ["y"], name="bn",
                                  epsilon=1e-5))
    g = helper.make_graph(nodes, "bn_float", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                            [1, ch, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, ch, size, size])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    data = m.SerializeToString()
    res = compile_bytes(data, options=FAST)
    feeds = zoo.sample_inputs(data, seed=1)
    got = run_artifact(res.artifact, feeds).outputs["y"]
    want = reference_outputs(data, feeds, "ort-int8")["y"]
    assert np.array_equal(got, want), int(np.sum(got != want))
