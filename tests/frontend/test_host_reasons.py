"""Host ops' reasons as the Hugging Face models of held-out set 6 have them (bench/results/zoo_heldout.md): each
says what the op is, truly. Before, SegFormer's bilinear Resize read "moves or selects values without
arithmetic", a BERT / GPT-2 attention mask's And and T5's bucket Min (int64) read "computed in float between
dequantize and quantize", and ConvNeXt V2's ReduceL2 and the masks' IsNaN had the catch-all "no accelerator op"."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from tileplan.frontend import compile as c
from tileplan.frontend import onnx_graph


def _reason(nodes: list, op_name: str, inits: dict[str, np.ndarray] | None = None) -> str:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    node = next(n for n in graph.node if n.name == op_name)
    return c._host_reason(node, onnx_graph.index(graph), {}, {})


QDQ = {"s": np.float32(0.1), "z": np.int8(0)}


def _dq_in() -> list:
    return [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
            helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq")]


def test_a_linear_resize_interpolates():
    nodes = [*_dq_in(), helper.make_node("Resize", ["xd", "", "scales"], ["r"], name="resize", mode="linear"),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["y"], name="q2")]
    reason = _reason(nodes, "resize", {**QDQ, "scales": np.array([1, 1, 2, 2], np.float32)})
    assert "without arithmetic" not in reason and "weighted sum" in reason, reason


def test_a_nearest_resize_copies():
    nodes = [*_dq_in(), helper.make_node("Resize", ["xd", "", "scales"], ["y"], name="resize", mode="nearest")]
    assert "moves or selects values" in _reason(nodes, "resize", {**QDQ, "scales": np.array([1, 1, 2, 2],
                                                                                            np.float32)})


def test_mask_logic_is_not_called_float_arithmetic():
    nodes = [helper.make_node("Greater", ["x", "zero"], ["g1"], name="gt"),
             helper.make_node("Less", ["x", "one"], ["g2"], name="lt"),
             helper.make_node("And", ["g1", "g2"], ["a"], name="and"),
             helper.make_node("IsNaN", ["x"], ["nan"], name="isnan"),
             helper.make_node("Or", ["a", "nan"], ["y"], name="or")]
    inits = {"zero": np.float32(0), "one": np.float32(1)}
    for name in ("and", "isnan", "or", "gt"):
        reason = _reason(nodes, name, inits)
        assert "between dequantize and quantize" not in reason and "no accelerator op" not in reason, reason
        assert "boolean" in reason, reason


def test_index_arithmetic_is_not_called_float_between_dequantize_and_quantize():
    # T5's relative position buckets: min(large, num_buckets - 1) on int64
    nodes = [helper.make_node("Cast", ["x"], ["i"], name="cast", to=TensorProto.INT64),
             helper.make_node("Min", ["i", "top"], ["y"], name="min")]
    reason = _reason(nodes, "min", {"top": np.int64(15)})
    assert "between dequantize and quantize" not in reason and "elementwise Min" in reason, reason


def test_float_arithmetic_between_dequantize_and_quantize_says_so():
    nodes = [*_dq_in(), helper.make_node("Mul", ["xd", "xd"], ["m"], name="mul"),
             helper.make_node("QuantizeLinear", ["m", "s", "z"], ["y"], name="q2")]
    assert "float between dequantize and quantize" in _reason(nodes, "mul", QDQ)


def test_a_reduce_l2_is_a_norm():
    nodes = [*_dq_in(), helper.make_node("ReduceL2", ["xd"], ["y"], name="l2", axes=[2, 3], keepdims=1)]
    reason = _reason(nodes, "l2", QDQ)
    assert "no accelerator op" not in reason and "without multiplying" not in reason and "norm" in reason, reason


def test_an_unfolded_batch_norm_is_a_per_channel_scale_and_shift():
    # PointNet's Linear -> BatchNorm1d (held-out set 7): torch folds BatchNorm into convs only, so the inference
    # BatchNormalization stays; it computes no statistics (they are stored constants), it scales and shifts
    stats = {k: np.ones(4, np.float32) for k in ("gamma", "beta", "mean", "var")}
    nodes = [*_dq_in(), helper.make_node("BatchNormalization", ["xd", "gamma", "beta", "mean", "var"], ["b"],
                                         name="bn"),
             helper.make_node("QuantizeLinear", ["b", "s", "z"], ["y"], name="q2")]
    reason = _reason(nodes, "bn", {**QDQ, **stats})
    assert "statistics, exponentials" not in reason, reason
    assert "stored" in reason and "per-channel scale and shift" in reason, reason


def test_a_spatial_transformers_grid_ops_say_what_they_compute():
    # held-out set 7's stn_net (opset 20): F.affine_grid -> AffineGrid, F.grid_sample -> GridSample; both had the
    # catch-all "no accelerator op for ..."
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="affine"),
             helper.make_node("GridSample", ["x", "grid"], ["y"], name="sample")]
    inits = {"theta": np.zeros((1, 2, 3), np.float32), "size": np.array([1, 4, 8, 8], np.int64)}
    affine, sample = _reason(nodes, "affine", inits), _reason(nodes, "sample", inits)
    for reason in (affine, sample):
        assert "no accelerator op" not in reason, reason
    assert "sampling grid" in affine and "theta" in affine, affine
    assert "positions computed at run time" in sample, sample


def test_a_matmul_with_the_weight_on_the_left_says_so():
    """Mamba's `dt_proj.weight @ x` (held-out set 9's hf_mamba, dynamo export): a MatMul whose first operand is the
    dequantized constant and whose second is an activation, its result quantized once. Its reason read "of two
    activations ... its result goes through more than one consumer", neither of which is true."""
    w = np.random.default_rng(0).integers(-100, 100, (4, 8)).astype(np.int8)
    nodes = [*_dq_in(), helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"], name="wdq"),
             helper.make_node("Reshape", ["xd", "shape"], ["x2"], name="flat"),
             helper.make_node("QuantizeLinear", ["x2", "s", "z"], ["x2q"], name="q1"),
             helper.make_node("DequantizeLinear", ["x2q", "s", "z"], ["x2d"], name="dq1"),
             helper.make_node("MatMul", ["wd", "x2d"], ["m"], name="w_at_x"),
             helper.make_node("QuantizeLinear", ["m", "s", "z"], ["y"], name="q2")]
    reason = _reason(nodes, "w_at_x", {**QDQ, "w": w, "shape": np.array([8, 32], np.int64)})
    assert "two activations" not in reason and "more than one consumer" not in reason, reason
    assert "first operand" in reason, reason
