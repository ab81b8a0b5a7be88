"""Test and benchmark models, written with `onnx.helper` and quantized by onnxruntime's static quantizer.

Every model is a float ONNX graph with random weights (seeded), quantized on random calibration data
(`onnxruntime.quantization.quantize_static`, int8 activations and weights, per-tensor scales) in either of
onnxruntime's two formats: QDQ (QuantizeLinear / DequantizeLinear around float operators) or QOperator
(QLinearConv, QLinearAdd, QGemm, ...).  Nothing is downloaded; the tests, the benchmark and the README example
all build their models here.

    data = zoo.build("resnet_block", "qdq")          # bytes of a quantized ONNX model
    x = zoo.sample_inputs(data, seed=1)              # {input name: array}, as the model declares them

Models (`MODELS`): small CNNs covering residual adds, depthwise and strided convolutions, global average pooling
and a final dense layer; an MLP; an attention block; and the two benchmark networks, a ResNet-18 topology and a
BERT-style encoder block (their size is a parameter: the tests use small ones).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

FORMATS = ("qdq", "qoperator", "float")


class _Graph:
    """A tiny builder over onnx.helper: named nodes, seeded random initializers."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}{self._n}"

    def const(self, array: Any, base: str = "c") -> str:
        from onnx import numpy_helper

        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name=name))
        return name

    def weight(self, shape: tuple[int, ...], fan_in: int, base: str = "w") -> str:
        w = self.rng.standard_normal(shape).astype(np.float32) * np.float32(math.sqrt(2.0 / fan_in))
        return self.const(w, base)

    def bias(self, n: int) -> str:
        return self.const((self.rng.standard_normal(n) * 0.1).astype(np.float32), "b")

    def op(self, op_type: str, inputs: list[str], name: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        name = name or self.name(op_type.lower())
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=name, **attrs))
        return out

    # -- layers ----------------------------------------------------------------------------------------------
    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, group: int = 1, relu: str = "relu",
             name: str | None = None) -> str:
        w = self.weight((cout, cin // group, k, k), fan_in=cin // group * k * k)
        pad = (k - 1) // 2
        y = self.op("Conv", [x, w, self.bias(cout)], name, kernel_shape=[k, k], pads=[pad] * 4,
                    strides=[stride, stride], group=group)
        if relu == "relu":
            y = self.op("Relu", [y])
        elif relu == "relu6":
            y = self.op("Clip", [y, self.const(np.float32(0.0)), self.const(np.float32(6.0))])
        return y

    def dense(self, x: str, k: int, n: int, gemm: bool = True, name: str | None = None) -> str:
        if gemm:  # Gemm with a [N, K] weight (transB), as PyTorch exports nn.Linear on a 2-D input
            return self.op("Gemm", [x, self.weight((n, k), k), self.bias(n)], name, transB=1)
        y = self.op("MatMul", [x, self.weight((k, n), k)], name)  # MatMul + Add, as on 3-D inputs
        return self.op("Add", [y, self.bias(n)])

    def model(self, name: str, inputs: dict[str, list[int]], output: str, out_shape: list[int] | None = None) -> Any:
        from onnx import TensorProto, helper

        ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()]
        outs = [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)]
        g = helper.make_graph(self.nodes, name, ins, outs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tileplan.zoo")
        m.ir_version = 8
        return m


# ------------------------------------------------------------------------------------------------------------------
# The models (float graphs)


def cnn_small(seed: int = 0, size: int = 16) -> Any:
    """conv 3x3 + ReLU, strided conv 3x3 + ReLU, max pool, global average pool, flatten, dense."""
    g = _Graph(seed)
    y = g.conv("input", 3, 8, name="conv1")
    y = g.conv(y, 8, 16, stride=2, name="conv2")
    y = g.op("MaxPool", [y], "pool", kernel_shape=[2, 2], strides=[2, 2])
    y = g.op("GlobalAveragePool", [y], "gap")
    y = g.op("Flatten", [y], "flatten")
    y = g.dense(y, 16, 10, name="fc")
    return g.model("cnn_small", {"input": [1, 3, size, size]}, y, [1, 10])


def resnet_block(seed: int = 0, size: int = 16) -> Any:
    """A stem, a basic residual block (identity shortcut), a strided block with a 1x1 projection shortcut, a
    depthwise conv, global average pooling and a dense layer."""
    g = _Graph(seed)
    x = g.conv("input", 3, 16, name="stem")
    y = g.conv(x, 16, 16, name="b1_conv1")
    y = g.conv(y, 16, 16, relu="", name="b1_conv2")
    x = g.op("Relu", [g.op("Add", [y, x], "b1_add")], "b1_relu")
    y = g.conv(x, 16, 32, stride=2, name="b2_conv1")
    y = g.conv(y, 32, 32, relu="", name="b2_conv2")
    s = g.conv(x, 16, 32, k=1, stride=2, relu="", name="b2_proj")
    x = g.op("Relu", [g.op("Add", [y, s], "b2_add")], "b2_relu")
    x = g.conv(x, 32, 32, group=32, name="dw")
    y = g.op("GlobalAveragePool", [x], "gap")
    y = g.op("Flatten", [y], "flatten")
    y = g.dense(y, 32, 10, name="fc")
    return g.model("resnet_block", {"input": [1, 3, size, size]}, y, [1, 10])


def mobilenet_block(seed: int = 0, size: int = 16) -> Any:
    """MobileNet-v2 style: expand 1x1, depthwise 3x3 strided, ReLU6 (Clip), project 1x1, residual add, dense."""
    g = _Graph(seed)
    x = g.conv("input", 3, 16, stride=2, relu="relu6", name="stem")
    y = g.conv(x, 16, 48, k=1, relu="relu6", name="expand")
    y = g.conv(y, 48, 48, group=48, relu="relu6", name="dw")
    y = g.conv(y, 48, 16, k=1, relu="", name="project")
    x = g.op("Add", [x, y], "add")
    x = g.conv(x, 16, 24, group=8, k=3, stride=2, name="grouped")
    y = g.op("GlobalAveragePool", [x], "gap")
    y = g.op("Flatten", [y], "flatten")
    y = g.dense(y, 24, 10, name="fc")
    return g.model("mobilenet_block", {"input": [1, 3, size, size]}, y, [1, 10])


def mlp(seed: int = 0, batch: int = 4) -> Any:
    """Three dense layers (Gemm) with ReLU between them, on a batch of rows."""
    g = _Graph(seed)
    y = g.op("Relu", [g.dense("input", 64, 128, name="fc1")])
    y = g.op("Relu", [g.dense(y, 128, 96, name="fc2")])
    y = g.dense(y, 96, 10, name="fc3")
    return g.model("mlp", {"input": [batch, 64]}, y, [batch, 10])


def _layer_norm(g: _Graph, x: str, d: int, name: str) -> str:
    scale = g.const((1.0 + 0.1 * g.rng.standard_normal(d)).astype(np.float32), "ln_g")
    shift = g.const((0.1 * g.rng.standard_normal(d)).astype(np.float32), "ln_b")
    return g.op("LayerNormalization", [x, scale, shift], name, axis=-1, epsilon=1e-5)


def _attention(g: _Graph, x: str, seq: int, d: int, heads: int, prefix: str) -> str:
    dh = d // heads

    def heads_of(t: str, name: str, perm: list[int]) -> str:
        t = g.op("Reshape", [t, g.const(np.array([1, seq, heads, dh], np.int64), "shape")], f"{prefix}{name}_split")
        return g.op("Transpose", [t], f"{prefix}{name}_heads", perm=perm)

    q = heads_of(g.dense(x, d, d, gemm=False, name=f"{prefix}q"), "q", [0, 2, 1, 3])      # [1, H, S, dh]
    k = heads_of(g.dense(x, d, d, gemm=False, name=f"{prefix}k"), "k", [0, 2, 3, 1])      # [1, H, dh, S]
    v = heads_of(g.dense(x, d, d, gemm=False, name=f"{prefix}v"), "v", [0, 2, 1, 3])      # [1, H, S, dh]
    s = g.op("MatMul", [q, k], f"{prefix}scores")
    s = g.op("Div", [s, g.const(np.float32(math.sqrt(dh)))], f"{prefix}scale")
    p = g.op("Softmax", [s], f"{prefix}softmax", axis=-1)
    c = g.op("MatMul", [p, v], f"{prefix}context")
    c = g.op("Transpose", [c], f"{prefix}merge", perm=[0, 2, 1, 3])
    c = g.op("Reshape", [c, g.const(np.array([1, seq, d], np.int64), "shape")], f"{prefix}merge_heads")
    o = g.dense(c, d, d, gemm=False, name=f"{prefix}out")
    return _layer_norm(g, g.op("Add", [o, x], f"{prefix}residual"), d, f"{prefix}ln")


def attention(seed: int = 0, seq: int = 8, d: int = 32, heads: int = 2) -> Any:
    """Multi-head self-attention: Q/K/V projections, scaled dot product, softmax, output projection, residual
    add and layer normalisation, then a dense head (so both quantisation formats end in a quantized tensor)."""
    g = _Graph(seed)
    y = _attention(g, "input", seq, d, heads, "attn_")
    y = g.dense(y, d, 16, gemm=False, name="head")
    return g.model("attention", {"input": [1, seq, d]}, y, [1, seq, 16])


def bert_encoder(seed: int = 0, seq: int = 128, d: int = 768, heads: int = 12, ffn: int = 3072) -> Any:
    """One BERT encoder layer: attention block, then the feed-forward block (dense, GELU as x/2 (1 + erf(x/v2)),
    dense, residual add, layer normalisation)."""
    g = _Graph(seed)
    x = _attention(g, "input", seq, d, heads, "attn_")
    h = g.dense(x, d, ffn, gemm=False, name="ffn_in")
    e = g.op("Erf", [g.op("Div", [h, g.const(np.float32(math.sqrt(2.0)))], "gelu_div")], "gelu_erf")
    e = g.op("Add", [e, g.const(np.float32(1.0))], "gelu_add")
    h = g.op("Mul", [g.op("Mul", [h, e], "gelu_mul"), g.const(np.float32(0.5))], "gelu_half")
    o = g.dense(h, ffn, d, gemm=False, name="ffn_out")
    y = _layer_norm(g, g.op("Add", [o, x], "ffn_residual"), d, "ffn_ln")
    return g.model("bert_encoder", {"input": [1, seq, d]}, y, [1, seq, d])


def resnet18(seed: int = 0, size: int = 224, classes: int = 1000, width: int = 64) -> Any:
    """ResNet-18's topology (He et al. 2016): 7x7/2 stem, 3x3/2 max pool, four stages of two basic blocks
    (64, 128, 256, 512 channels at width 64; strided 3x3 and 1x1 projection where the stage shrinks), global
    average pooling, dense."""
    g = _Graph(seed)
    x = g.conv("input", 3, width, k=7, stride=2, name="conv1")
    x = g.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = width
    for stage in range(4):
        cout = width * 2 ** stage
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            p = f"layer{stage + 1}.{block}."
            y = g.conv(x, cin, cout, stride=stride, name=p + "conv1")
            y = g.conv(y, cout, cout, relu="", name=p + "conv2")
            s = x if stride == 1 and cin == cout else g.conv(x, cin, cout, k=1, stride=stride, relu="",
                                                              name=p + "downsample")
            x = g.op("Relu", [g.op("Add", [y, s], p + "add")], p + "relu")
            cin = cout
    y = g.op("GlobalAveragePool", [x], "avgpool")
    y = g.op("Flatten", [y], "flatten")
    y = g.dense(y, cin, classes, name="fc")
    return g.model("resnet18", {"input": [1, 3, size, size]}, y, [1, classes])


MODELS: dict[str, Callable[..., Any]] = {
    "cnn_small": cnn_small, "resnet_block": resnet_block, "mobilenet_block": mobilenet_block, "mlp": mlp,
    "attention": attention, "resnet18": resnet18, "bert_encoder": bert_encoder,
}


# ------------------------------------------------------------------------------------------------------------------
# Quantisation


def random_calibration(model: Any, samples: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`samples` feeds of standard-normal float inputs shaped as the model declares (symbolic dims: 1)."""
    rng = np.random.default_rng(seed)
    shapes = {i.name: [d.dim_value if d.dim_value > 0 else 1 for d in i.type.tensor_type.shape.dim]
              for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}}
    return [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()} for _ in range(samples)]


def quantize(model: Any, fmt: str = "qdq", calibration: list[dict[str, np.ndarray]] | None = None,
             seed: int = 0, per_channel: bool = False, keep_activations: bool = False,
             symmetric: bool = False, activation_type: str = "QInt8", weight_type: str = "QInt8",
             extra: dict[str, Any] | None = None) -> bytes:
    """onnxruntime's static quantizer: int8 activations and weights, per-tensor (or per-channel weights), MinMax
    calibration on `calibration` feeds (default: 8 random ones).  `keep_activations`: keep Relu / Clip nodes
    the output quantisation makes redundant (QDQKeepRemovableActivations); `symmetric`: activations with zero
    points 0 (ActivationSymmetric); `activation_type` / `weight_type`: a QuantType name (QUInt8: uint8, the
    quantizer's old default); `extra`: more of its extra_options (e.g. AddQDQPairToWeight)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    if fmt not in ("qdq", "qoperator"):
        raise ValueError(f"unknown quantisation format {fmt!r}; use qdq or qoperator")
    feeds = calibration if calibration is not None else random_calibration(model, seed=seed)

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(feeds)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    import logging

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "quant.onnx"
        onnx.save(model, str(src))
        level = logging.getLogger().level
        logging.getLogger().setLevel(logging.ERROR)  # the quantizer's "consider pre-processing" advice
        try:
            quantize_static(str(src), str(dst), _Reader(),
                            quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                            activation_type=QuantType[activation_type], weight_type=QuantType[weight_type],
                            per_channel=per_channel,
                            extra_options={"QDQKeepRemovableActivations": keep_activations,
                                           "ActivationSymmetric": symmetric, **(extra or {})})
        finally:
            logging.getLogger().setLevel(level)
        return dst.read_bytes()


def build(name: str, fmt: str = "qdq", seed: int = 0, per_channel: bool = False, keep_activations: bool = False,
          symmetric: bool = False, activation_type: str = "QInt8", weight_type: str = "QInt8",
          extra: dict[str, Any] | None = None, **params: Any) -> bytes:
    """The model `name` (MODELS) with `params` (sizes), quantized in `fmt` ("float": not quantized)."""
    if name not in MODELS:
        raise KeyError(f"unknown zoo model {name!r}; one of {sorted(MODELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {FORMATS}")
    model = MODELS[name](seed=seed, **params)
    if fmt == "float":
        return bytes(model.SerializeToString())
    return quantize(model, fmt, seed=seed, per_channel=per_channel, keep_activations=keep_activations,
                    symmetric=symmetric, activation_type=activation_type, weight_type=weight_type, extra=extra)


def sample_inputs(data: bytes, seed: int = 1) -> dict[str, np.ndarray]:
    """Random inputs for a model, shaped and typed as its graph inputs declare (symbolic dims: 1): standard normal
    floats, 8- and 16-bit integers (codes) over their whole range, wider integers (token ids, masks, indices:
    their valid range is the model's business) 0 or 1 (the compile's own emulated run, compile._random_feeds,
    feeds every integer input 0 or 1)."""
    import onnx
    from onnx import helper

    model = onnx.load_model_from_string(data)
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if np.issubdtype(dtype, np.integer) and np.dtype(dtype).itemsize >= 4:
            out[i.name] = rng.integers(0, 2, size=shape, dtype=dtype)
        elif np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            out[i.name] = rng.integers(info.min, info.max + 1, size=shape, dtype=dtype)
        else:
            out[i.name] = rng.standard_normal(shape).astype(dtype)
    return out
