"""onnxruntime's optimizer fusions saved in a model (com.microsoft SkipLayerNormalization,
SkipSimplifiedLayerNormalization, FusedMatMul: what `onnxruntime.transformers.optimizer` and a session asked to
save its optimized graph write), between DequantizeLinear and QuantizeLinear as onnxruntime's quantizer leaves
them. onnx's shape inference does not know them, so the compile refused them ('the shape of its output ...
cannot be inferred statically'; bench/op_coverage.py). The host computes each as onnxruntime's CPU kernel does:
compared with onnxruntime's float results bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import compile_bytes, onnxruntime_outputs

from tileplan.errors import InputError
from tileplan.frontend.runner import run_artifact

MS = "com.microsoft"


def _model(nodes: list, inputs: dict[str, list[int]], outputs: dict[str, list[int]],
           consts: dict[str, np.ndarray]) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(nodes, "fusion", [helper.make_tensor_value_info(k, TensorProto.FLOAT, s)
                                                for k, s in inputs.items()],
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in outputs.items()],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model.SerializeToString()


def _qdq(name: str, scale: float, zero: int) -> tuple[list, dict[str, np.ndarray]]:
    """x -> QuantizeLinear -> DequantizeLinear -> x_d, then x_d * x_d (values off the quantisation grid, so the
    sums round), as `name`_v."""
    from onnx import helper

    nodes = [helper.make_node("QuantizeLinear", [name, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
             helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_d"]),
             helper.make_node("Mul", [f"{name}_d", f"{name}_d"], [f"{name}_sq"]),
             helper.make_node("Sub", [f"{name}_sq", f"{name}_d"], [f"{name}_v"])]
    return nodes, {f"{name}_s": np.float32(scale), f"{name}_z": np.int8(zero)}


def _bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    differ = got.view(np.uint32) != want.view(np.uint32)
    assert not differ.any(), f"{int(differ.sum())} of {differ.size} differ, e.g. {got[differ][:4]} vs {want[differ][:4]}"


@pytest.mark.parametrize("op,shape,skip_shape,beta,bias,sum_out", [
    ("SkipLayerNormalization", [2, 5, 64], [2, 5, 64], True, True, True),      # BERT's, with the sum (pre-LN)
    ("SkipLayerNormalization", [1, 7, 37], [7, 37], False, False, False),     # skip broadcast over the batch
    ("SkipSimplifiedLayerNormalization", [1, 6, 48], [1, 6, 48], False, True, True),  # T5 / LLaMA's RMS form
])
def test_skip_layer_norm_is_onnxruntimes_bit_for_bit(op, shape, skip_shape, beta, bias, sum_out) -> None:
    from onnx import helper

    rng = np.random.default_rng(3)
    h = shape[-1]
    nodes, consts = _qdq("x", 0.05, 3)
    ins = ["x_v", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    if op == "SkipSimplifiedLayerNormalization":  # input, skip, gamma, bias
        ins = ins[:3] + ins[4:]
    outs = ["y", "", "", "sum"] if sum_out else ["y"]
    nodes.append(helper.make_node(op, ins, outs, epsilon=1e-12 if beta else 1e-6, domain=MS, name="sln"))
    consts.update(gamma=rng.standard_normal(h).astype(np.float32), beta=rng.standard_normal(h).astype(np.float32),
                  bias=rng.standard_normal(h).astype(np.float32))
    outputs = {"y": shape, **({"sum": shape} if sum_out else {})}
    data = _model(nodes, {"x": shape, "skip": skip_shape}, outputs, consts)
    res = compile_bytes(data)
    for seed in range(3):
        r = np.random.default_rng(seed)
        feeds = {"x": (r.standard_normal(shape) * 2).astype(np.float32),
                 "skip": (r.standard_normal(skip_shape) * 3).astype(np.float32)}
        got = run_artifact(res.artifact, feeds).outputs
        want = onnxruntime_outputs(data, feeds)
        for k in outputs:
            _bits_equal(got[k], want[k])


def test_skip_layer_norm_mean_output_is_refused() -> None:
    """onnxruntime's CPU kernel never writes the mean / inverse standard deviation outputs: a model reading one is
    refused, naming the node."""
    from onnx import helper

    nodes, consts = _qdq("x", 0.05, 3)
    nodes.append(helper.make_node("SkipLayerNormalization", ["x_v", "skip", "gamma"], ["y", "mean"], domain=MS,
                                  name="sln"))
    consts["gamma"] = np.ones(16, np.float32)
    data = _model(nodes, {"x": [1, 4, 16], "skip": [1, 4, 16]}, {"y": [1, 4, 16], "mean": [1, 4, 1]}, consts)
    with pytest.raises(InputError) as err:
        compile_bytes(data)
    assert err.value.loc[-1] == "sln" and "mean" in str(err.value), str(err.value)


@pytest.mark.parametrize("a_shape,b_shape,attrs,b_const", [
    ([2, 4, 16, 64], [2, 4, 16, 64], {"alpha": 0.125, "transB": 1}, False),   # attention scores q k^T / sqrt(d)
    ([3, 300, 40], [300, 24], {"alpha": 0.37, "transA": 1}, False),           # K = 300: three MLAS slices
    ([5, 12], [20, 12], {"transB": 1}, True),                                 # alpha 1, a constant weight
    ([6, 140], [140, 150], {"alpha": -1.5}, False),                           # N >= K: two slices
    ([200, 3], [200, 50], {"transA": 1}, False),      # transA: MLAS's slices of 128 (A as given: 256)
    ([1, 64], [64, 32], {"alpha": 0.5}, False),       # M = 1 with a scale: MLAS's SGEMM kernel, not its GEMV
    ([6, 200], [200, 300], {"alpha": 0.5}, True),     # a constant B, prepacked: slices of 256 (else 128)
    ([6, 200], [300, 200], {"transB": 1}, True),      # the same, alpha 1
])
def test_fused_matmul_is_onnxruntimes_bit_for_bit(a_shape, b_shape, attrs, b_const) -> None:
    from onnx import helper

    rng = np.random.default_rng(7)
    nodes, consts = _qdq("a", 0.03, -2)
    more, c2 = _qdq("b", 0.02, 1)
    if not b_const:
        nodes += more
        consts.update(c2)
    else:
        consts["b_v"] = rng.standard_normal(b_shape).astype(np.float32)
    nodes.append(helper.make_node("FusedMatMul", ["a_v", "b_v"], ["y"], domain=MS, name="fmm", **attrs))
    a2 = a_shape[-2:][::-1] if attrs.get("transA") else a_shape[-2:]
    b2 = b_shape[-2:][::-1] if attrs.get("transB") else b_shape[-2:]
    batch = list(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2])))
    out = [*batch, a2[0], b2[1]]
    ins = {"a": a_shape, **({} if b_const else {"b": b_shape})}
    data = _model(nodes, ins, {"y": out}, consts)
    res = compile_bytes(data)
    for seed in range(2):
        r = np.random.default_rng(seed)
        feeds = {k: (r.standard_normal(s) * 2).astype(np.float32) for k, s in ins.items()}
        got = run_artifact(res.artifact, feeds).outputs["y"]
        _bits_equal(got, onnxruntime_outputs(data, feeds)["y"])


def _int_model(nodes: list, inputs: dict[str, tuple[int, list[int]]], outputs: dict[str, tuple[int, list[int]]],
               consts: dict[str, np.ndarray]) -> bytes:
    from onnx import helper, numpy_helper

    graph = helper.make_graph(nodes, "fusion", [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
                              [helper.make_tensor_value_info(k, t, s) for k, (t, s) in outputs.items()],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.mark.parametrize("segments,mask,positions", [(True, True, False), (False, False, True)])
def test_embed_layer_norm_is_onnxruntimes_bit_for_bit(segments: bool, mask: bool, positions: bool) -> None:
    """BERT's embeddings as onnxruntime's transformer optimizer fuses them: word + position (+ segment)
    embeddings, LayerNorm (its kernel's two-pass statistics), and the mask's count of ones per sequence."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(11)
    b, s, h, vocab = 2, 7, 37, 50
    consts = {"word": rng.standard_normal((vocab, h)).astype(np.float32),
              "pos": rng.standard_normal((16, h)).astype(np.float32),
              "seg": rng.standard_normal((2, h)).astype(np.float32),
              "gamma": rng.standard_normal(h).astype(np.float32), "beta": rng.standard_normal(h).astype(np.float32),
              "pos_ids": np.asarray([[3, 1, 4, 1, 5, 9, 2]], np.int32)}
    i32 = TensorProto.INT32
    ins = {"ids": (i32, [b, s]), **({"segs": (i32, [b, s])} if segments else {}),
           **({"mask": (i32, [b, s])} if mask else {})}
    node = helper.make_node("EmbedLayerNormalization", ["ids", "segs" if segments else "", "word", "pos",
                                                        "seg" if segments else "", "gamma", "beta",
                                                        "mask" if mask else "", "pos_ids" if positions else ""],
                            ["y", "mask_index", "sum"], epsilon=1e-12, domain=MS, name="emb")
    outs = {"y": (TensorProto.FLOAT, [b, s, h]), "mask_index": (i32, [b]), "sum": (TensorProto.FLOAT, [b, s, h])}
    data = _int_model([node], ins, outs, consts)
    res = compile_bytes(data)
    feeds = {"ids": rng.integers(0, vocab, (b, s)).astype(np.int32), "segs": rng.integers(0, 2, (b, s)).astype(np.int32),
             "mask": np.asarray([[1, 0, 1, 1, 0, 1, 1], [2, 1, 1, 0, 0, 0, 0]], np.int32)}
    feeds = {k: v for k, v in feeds.items() if k in ins}
    got = run_artifact(res.artifact, feeds).outputs
    want = onnxruntime_outputs(data, feeds)
    for k in outs:
        if k == "mask_index":
            assert (got[k] == want[k]).all(), (got[k], want[k])
        else:
            _bits_equal(got[k], want[k])


@pytest.mark.parametrize("b,s,hin,h,heads,mask,bias", [
    (1, 5, 32, 16, 2, None, True),
    (2, 6, 64, 32, 4, "1d", True),      # the optimizer's BERT: mask_index from EmbedLayerNormalization
    (2, 6, 300, 24, 3, "2d", False),    # a raw attention mask; hidden 300: two prepacked K slices
])
def test_attention_is_onnxruntimes_bit_for_bit(b, s, hin, h, heads, mask, bias) -> None:
    from onnx import TensorProto, helper

    rng = np.random.default_rng(13)
    nodes, consts = _qdq("x", 0.04, -1)
    consts.update(w=(rng.standard_normal((hin, 3 * h)) * 0.2).astype(np.float32),
                  bias=rng.standard_normal(3 * h).astype(np.float32))
    ins = {"x": (TensorProto.FLOAT, [b, s, hin])}
    if mask == "1d":
        ins["mask"] = (TensorProto.INT32, [b])
    elif mask == "2d":
        ins["mask"] = (TensorProto.INT32, [b, s])
    nodes.append(helper.make_node("Attention", ["x_v", "w", "bias" if bias else "", "mask" if mask else ""], ["y"],
                                  num_heads=heads, domain=MS, name="attn"))
    data = _int_model(nodes, ins, {"y": (TensorProto.FLOAT, [b, s, h])}, consts)
    res = compile_bytes(data)
    for seed in range(2):
        r = np.random.default_rng(seed)
        feeds = {"x": r.standard_normal((b, s, hin)).astype(np.float32)}
        if mask == "1d":
            feeds["mask"] = np.asarray([s, s - 2][:b], np.int32)
        elif mask == "2d":
            feeds["mask"] = r.integers(0, 2, (b, s)).astype(np.int32)
        got = run_artifact(res.artifact, feeds).outputs["y"]
        _bits_equal(got, onnxruntime_outputs(data, feeds)["y"])


def _fused_conv_model(activation: str | None, params: list[float], z: bool, bias: bool = True,
                      out: str = "q") -> bytes:
    """x -> Q -> DQ -> FusedConv (3x3, pads 1, stride 1; 8 -> 6 channels; float weights, as onnxruntime's quantizer
    leaves an op it has no quantized form of) [+ Z: a second DQ'd input] -> Q -> DQ -> y (`out` "q"), or y the
    FusedConv's float output (`out` "float")."""
    from onnx import helper

    rng = np.random.default_rng(4)
    consts = {"s": np.float32(0.05), "zp": np.int8(3), "w": (rng.standard_normal((6, 8, 3, 3)) * 0.2).astype(np.float32),
              "ys": np.float32(0.04), "yz": np.int8(-10)}
    if bias:
        consts["b"] = rng.standard_normal(6).astype(np.float32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"])]
    ins = ["xd", "w", "b" if bias else ""]
    if z:
        nodes += [helper.make_node("QuantizeLinear", ["r", "s", "zp"], ["rq"]),
                  helper.make_node("DequantizeLinear", ["rq", "s", "zp"], ["rd"])]
        ins.append("rd")
    attrs: dict = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    if activation:
        attrs["activation"] = activation
    if params:
        attrs["activation_params"] = params
    y = "y" if out == "float" else "t"
    nodes.append(helper.make_node("FusedConv", ins, [y], domain=MS, name="fconv", **attrs))
    if out != "float":
        nodes += [helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
                  helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"])]
    inputs = {"x": [1, 8, 7, 9], **({"r": [1, 6, 7, 9]} if z else {})}
    return _model(nodes, inputs, {"y": [1, 6, 7, 9]}, consts)


@pytest.mark.parametrize("activation, params, z, bias", [
    ("Relu", [], False, True), ("Tanh", [], False, True), ("Sigmoid", [], False, True),
    ("LeakyRelu", [0.1], False, True), ("HardSigmoid", [0.3, 0.4], False, True), ("Clip", [-0.5, 0.8], False, True),
    (None, [], False, False), ("Relu", [], True, True), ("Relu", [], True, False),
])
def test_fused_conv_matches_onnxruntime(activation, params, z, bias) -> None:
    """A FusedConv (onnxruntime's Conv + activation fusion, saved in a model, then quantized: float between DQ and Q)
    is the Conv and activation it fuses, computed in float with its float weights as onnxruntime's FusedConv does
    (its WeightBiasQuantization takes Conv only): within 1 LSB of onnxruntime on every output, most equal. It was
    refused ('the shape of its output ... cannot be inferred statically')."""
    from frontend_helpers import lsb_errors

    data = _fused_conv_model(activation, params, z, bias)
    rng = np.random.default_rng(8)
    feeds = {"x": (rng.standard_normal((1, 8, 7, 9)) * 2).astype(np.float32)}
    if z:
        feeds["r"] = (rng.standard_normal((1, 6, 7, 9)) * 2).astype(np.float32)
    res = compile_bytes(data)
    got = run_artifact(res.artifact, feeds).outputs
    want = onnxruntime_outputs(data, feeds)
    err = lsb_errors(data, got, want)
    assert err.max() <= 1.0 + 1e-4 and (err == 0).mean() >= 0.99, (err.max(), (err == 0).mean())
    assert any("FusedConv" in n for n in res.summary.get("notes", [])), res.summary.get("notes")


def test_fused_conv_float_output_is_onnxruntimes() -> None:
    """A FusedConv whose float result is the model's output: onnxruntime's value within a few float32 ulps (the
    host's float conv sums in another order than MLAS's)."""
    data = _fused_conv_model("LeakyRelu", [0.2], False, out="float")
    feeds = {"x": (np.random.default_rng(9).standard_normal((1, 8, 7, 9)) * 2).astype(np.float32)}
    got = run_artifact(compile_bytes(data).artifact, feeds).outputs["y"]
    want = onnxruntime_outputs(data, feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_fused_conv_unknown_activation_is_refused() -> None:
    with pytest.raises(InputError, match="FusedConv node 'fconv': activation 'Gelu'"):
        compile_bytes(_fused_conv_model("Gelu", [], False))
