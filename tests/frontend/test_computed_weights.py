"""Convolutions whose weights the graph computes from constants at every run: timm's normalizer-free nets
(NF-RegNet, NFNet, NF-ResNet: ScaledStdConv2d standardises each conv's weight with F.batch_norm in training
mode, exported as a BatchNormalization with training_mode=1 on the reshaped weight, then a gain) and any weight
scaled in forward. onnxruntime's quantizer quantizes that arithmetic like activations (QuantizeLinear /
DequantizeLinear between its steps), and onnxruntime never folds a DequantizeLinear, so the weight reaches the
conv as int8 codes computed from constants; its QOperator form runs a QLinearConv on them. Found by the ninth
held-out zoo set (timm_nf_regnet_b0: 10.6% of its MACs offloaded, 54 of its 86 convs on the host as "Conv of two
activations", their weight standardisation's BatchNormalization said to be "in inference mode, with its stored
statistics" and its input "a graph input")."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from frontend_helpers import assert_matches_onnxruntime, assert_offloaded_and_matching, compile_bytes, ort_quantize

from tileplan.frontend import zoo
from tileplan.frontend.runner import run_artifact

C_IN, C_OUT, SIDE = 4, 8, 10


def _float_model() -> Any:
    """x [1, C_IN, SIDE, SIDE] -> Conv(x, W1) -> Relu -> Conv(., W2) -> y, where W1 = Reshape(BatchNormalization
    (W0 [1, C_OUT, C_IN * 9], gain, 0, 0, 1, training_mode=1)) (timm's ScaledStdConv2d as torch.onnx exports it)
    and W2 = W2base * g2 (a weight scaled in forward)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    consts = {"w0": rng.normal(0, 0.3, (1, C_OUT, C_IN * 9)).astype(np.float32),
              "gain": rng.uniform(0.05, 0.2, C_OUT).astype(np.float32),
              "zero": np.zeros(C_OUT, np.float32), "one": np.ones(C_OUT, np.float32),
              "wshape": np.array([C_OUT, C_IN, 3, 3], np.int64),
              "b1": rng.normal(0, 0.1, C_OUT).astype(np.float32),
              "w2base": rng.normal(0, 0.3, (C_OUT, C_OUT, 1, 1)).astype(np.float32),
              "g2": rng.uniform(0.2, 0.6, (C_OUT, 1, 1, 1)).astype(np.float32)}
    nodes = [
        helper.make_node("BatchNormalization", ["w0", "gain", "zero", "zero", "one"], ["wstd", "rmean", "rvar"], epsilon=1e-5,
                         momentum=0.0, training_mode=1, name="std/BatchNormalization"),
        helper.make_node("Reshape", ["wstd", "wshape"], ["w1"], name="std/Reshape"),
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Mul", ["w2base", "g2"], ["w2"], name="scale/Mul"),
        helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2"),
    ]
    graph = helper.make_graph(nodes, "computed_weights",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, SIDE, SIDE])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C_OUT, SIDE, SIDE])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_a_weight_computed_from_constants_is_evaluated_and_offloaded(fmt: str) -> None:
    data = ort_quantize(_float_model(), fmt)
    res = compile_bytes(data)
    assert_offloaded_and_matching(data, res, note="weight(s) computed from constants")
    convs = [o for o in res.summary["ops"] if o["macs"]]
    assert len(convs) == 2 and all(o["where"] == "accelerator" for o in convs), convs


def test_a_training_mode_batch_norm_says_so() -> None:
    """A BatchNormalization with training_mode=1 on an activation (a model exported in training mode) normalises
    by its input's own statistics: its reason must not claim stored statistics."""
    from onnx import TensorProto, helper, numpy_helper

    consts = {"g": np.ones(C_IN, np.float32), "b": np.zeros(C_IN, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("BatchNormalization", ["c", "g", "b", "b", "g"], ["y", "rmean", "rvar"], training_mode=1,
                              name="bn_train")]
    consts["w"] = np.random.default_rng(0).normal(0, 0.3, (C_IN, C_IN, 1, 1)).astype(np.float32)
    graph = helper.make_graph(nodes, "bn_train",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C_IN, SIDE, SIDE])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C_IN, SIDE, SIDE])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = ort_quantize(model, "qdq")
    res = compile_bytes(data)
    bn = next(o for o in res.summary["ops"] if o["onnx_op"] == "BatchNormalization")
    assert "training mode" in bn["reason"] and "stored statistics" not in bn["reason"], bn["reason"]
    feeds = zoo.sample_inputs(data, seed=1)  # computed as onnxruntime's kernel computes it
    assert_matches_onnxruntime(data, run_artifact(res.artifact, feeds).outputs, feeds)


def test_a_batched_matmul_operand_computed_from_constants_stays_an_activation() -> None:
    """DeBERTa-v2's relative-position keys: a MatMul's second operand [1, heads, K, N] computed from constants (its
    embeddings through a projection, tiled over the heads) and quantized. A weight is a matrix: evaluated into a
    batched constant it matched no pattern and ran on the host (held-out set 9's hf_deberta_v2 before this
    test); left computed it runs on the accelerator as a product of two int8 activations."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    heads, m, k, n = 4, 8, 16, 8
    consts = {"e": rng.integers(-100, 100, (1, 1, k, n)).astype(np.int8), "es": np.float32(0.02),
              "z": np.int8(0), "g": rng.integers(-100, 100, (1, heads, 1, 1)).astype(np.int8),
              "gs": np.float32(0.01), "bs": np.float32(0.004), "xs": np.float32(0.05), "ys": np.float32(0.03),
              "yz": np.int8(3)}
    nodes = [helper.make_node("DequantizeLinear", ["e", "es", "z"], ["ed"]),
             helper.make_node("DequantizeLinear", ["g", "gs", "z"], ["gd"]),
             helper.make_node("Mul", ["ed", "gd"], ["b"], name="tile_heads"),
             helper.make_node("QuantizeLinear", ["b", "bs", "z"], ["bq"]),
             helper.make_node("DequantizeLinear", ["bq", "bs", "z"], ["bd"]),
             helper.make_node("QuantizeLinear", ["x", "xs", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "z"], ["xd"]),
             helper.make_node("MatMul", ["xd", "bd"], ["p"], name="c2p"),
             helper.make_node("QuantizeLinear", ["p", "ys", "yz"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "batched_constant_b",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, heads, m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, heads, m, n])],
                              [numpy_helper.from_array(np.asarray(v), name) for name, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    res = compile_bytes(data)
    op = next(o for o in res.summary["ops"] if o["name"] == "c2p")
    assert op["where"] == "accelerator", op["reason"]
    assert_offloaded_and_matching(data, res)
