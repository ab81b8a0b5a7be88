"""Whole models: the conv2d and matmul layers of an ONNX graph, as contract layers.

Tileplan plans loop nests, so only shapes matter: every convolution (Conv, ConvInteger, QLinearConv, and the
Conv of a QDQ graph whose inputs come through DequantizeLinear) and every matrix product (MatMul, MatMulInteger,
QLinearMatMul, Gemm) becomes one layer, in graph order, with its shapes from ONNX shape inference. Weight values
are never read, so a model whose initializers were stripped of their data plans the same. Everything else
(activations, pooling, requantisation, reshapes) runs outside the array and is skipped; the caller gets a note
per skipped kind of operator that does MACs (ConvTranspose, 3-D convolutions), so nothing disappears silently.

Conventions: a symbolic or unknown batch is 1; a float layer (no DequantizeLinear on an operand) is planned in the
hardware's words, as it would run once quantized, and a note names it; a 1-D convolution is a 2-D one of height 1;
asymmetric padding (TensorFlow's SAME) becomes the symmetric padding with the same output size; a batched matrix product whose
second operand is an activation (attention) is one matmul layer with `count` = the product of the batch dims;
a product with a 2-D weight folds the leading dims of the activation into M. A layer has a bias when the model
compiler's kernel loads one: a Conv's or Gemm's bias input, a MatMul's constant Add, or an input dequantized with a
non-zero zero point (folded into a bias), so `schedule --model` and `compile` plan the same layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from tileplan.errors import InputError
from tileplan.workload import Conv2dLayer, MatmulLayer

CONV_OPS = {"Conv": (0, 1), "ConvInteger": (0, 1), "QLinearConv": (0, 3)}  # op -> (input index, weight index)
MATMUL_OPS = {"MatMul": (0, 1), "MatMulInteger": (0, 1), "QLinearMatMul": (0, 3), "Gemm": (0, 1)}
UNPLANNED_MAC_OPS = {"ConvTranspose", "ConvTransposeInteger", "Einsum"}


@dataclass
class OnnxWorkload:
    name: str
    layers: list[Conv2dLayer | MatmulLayer]
    notes: list[str] = field(default_factory=list)


def _shape(info: Any) -> list[int | None] | None:
    t = info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]


def _attrs(node: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _symmetric_pad(size: int, begin: int, end: int, span: int, stride: int) -> int:
    """The symmetric padding whose output size equals that of the (possibly asymmetric) ONNX padding."""
    want = (size + begin + end - span) // stride + 1
    for p in sorted({(begin + end) // 2, -(-(begin + end) // 2), begin, end}):
        if (size + 2 * p - span) // stride + 1 == want:
            return p
    return max(begin, end)


def _auto_pad(mode: str, size: int, span: int, stride: int) -> tuple[int, int]:
    if mode in ("", "NOTSET", "VALID"):
        return 0, 0
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + span - size)
    return (total // 2, total - total // 2) if mode == "SAME_UPPER" else (total - total // 2, total // 2)


def _conv(node: Any, x: list[int | None], w: list[int | None], name: str) -> Conv2dLayer:
    a = _attrs(node)
    if len(x) == 3:  # 1-D convolution: height 1
        x = [x[0], x[1], 1, x[2]]
        w = [w[0], w[1], 1, w[2]]
        for key in ("strides", "dilations"):
            if key in a:
                a[key] = [1, *a[key]]
        if "pads" in a:
            a["pads"] = [0, a["pads"][0], 0, a["pads"][1]]
    if len(x) != 4 or len(w) != 4 or None in w[:4] or None in x[1:]:
        raise InputError(("model", name), f"{node.op_type} needs known 4-D input and weight shapes, got {x} and {w}")
    n, c, h, wd = (v or 1 for v in x)
    k, _, kh, kw = cast("list[int]", w)  # known: checked above
    group = int(a.get("group", 1))
    stride = [int(s) for s in a.get("strides", [1, 1])]
    dil = [int(d) for d in a.get("dilations", [1, 1])]
    span = [dil[i] * (kk - 1) + 1 for i, kk in enumerate((kh, kw))]
    mode = a.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("", "NOTSET"):
        pads = [*zip(*(_auto_pad(mode, size, span[i], stride[i]) for i, size in enumerate((h, wd))))]
        begin, end = list(pads[0]), list(pads[1])
    else:
        p = [int(v) for v in a.get("pads", [0, 0, 0, 0])]
        begin, end = p[:2], p[2:]
    ph, pw = (_symmetric_pad(size, begin[i], end[i], span[i], stride[i]) for i, size in enumerate((h, wd)))
    # the bias is Conv's 3rd input, QLinearConv's 9th (an empty name means absent)
    bias_at = 8 if node.op_type == "QLinearConv" else 2
    bias = len(node.input) > bias_at and bool(node.input[bias_at])
    return Conv2dLayer(
        name=name, batch=n, in_channels=c, out_channels=k, in_h=h, in_w=wd, kernel=(kh, kw),
        stride=(stride[0], stride[1]), padding=(ph, pw), dilation=(dil[0], dil[1]), groups=group, bias=bias,
    )


def _matmul(node: Any, a_shape: list[int | None], b_shape: list[int | None], weight_b: bool, name: str,
            bias_add: bool = False) -> MatmulLayer:
    at = _attrs(node)
    a_dims = [v or 1 for v in a_shape]
    b_dims = [v or 1 for v in b_shape]
    if node.op_type == "Gemm":
        if at.get("transA", 0):
            a_dims = a_dims[::-1]
        if at.get("transB", 0):
            b_dims = b_dims[::-1]
    if len(a_dims) < 1 or len(b_dims) < 1:
        raise InputError(("model", name), f"{node.op_type}: operands need shapes, got {a_shape} and {b_shape}")
    if len(a_dims) == 1:
        a_dims = [1, *a_dims]
    if len(b_dims) == 1:
        b_dims = [*b_dims, 1]
    k, n = b_dims[-2], b_dims[-1]
    if weight_b or len(b_dims) == 2:
        # y = x W: every leading dim of the activation is another row of A.
        # Gemm's C, or the constant Add PyTorch's exports put after a MatMul (nn.Linear on 3-D inputs): the
        # model compiler fuses that Add into the op as its bias, so its plan is costed with the bias load too
        bias = (node.op_type == "Gemm" and len(node.input) > 2 and bool(node.input[2])) or bias_add
        return MatmulLayer(name=name, M=math.prod(a_dims[:-1]), K=k, N=n, bias=bias)
    # Batched product of two activations (attention): one layer per batch element, broadcast like numpy.
    lead_a, lead_b = a_dims[:-2], b_dims[:-2]
    width = max(len(lead_a), len(lead_b))
    lead_a, lead_b = [1] * (width - len(lead_a)) + lead_a, [1] * (width - len(lead_b)) + lead_b
    batch = math.prod(max(x, y) for x, y in zip(lead_a, lead_b))
    return MatmulLayer(name=name, M=a_dims[-2], K=a_dims[-1], N=n, count=max(1, batch))


def load_onnx(data: bytes) -> OnnxWorkload:
    """The layers of an ONNX model given as bytes; errors name the model (loc ["model", ...])."""
    import onnx

    from tileplan.frontend.onnx_bytes import parse_model

    model = parse_model(data)
    if not model.graph.node:
        raise InputError(("model",), "not an ONNX model: the graph has no nodes")
    from tileplan.frontend.onnx_import import name_nodes

    name_nodes(model)  # layers are named as the model compiler names its ops (tileplan compile, POST /compile)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as exc:  # noqa: BLE001 - onnx raises InferenceError and plain exceptions from C++
        raise InputError(("model",), f"ONNX shape inference failed: {exc}") from None
    g = inferred.graph
    shapes: dict[str, list[int | None] | None] = {}
    for info in [*g.input, *g.value_info, *g.output]:
        shapes[info.name] = _shape(info)
    weights = {t.name for t in g.initializer}
    for t in g.initializer:
        shapes[t.name] = list(t.dims)
    # A QDQ graph feeds weights through DequantizeLinear: the dequantised tensor is still a weight.
    for node in g.node:
        if node.op_type == "DequantizeLinear" and node.input[0] in weights:
            weights.add(node.output[0])

    consumers: dict[str, list[Any]] = {}
    for node in g.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)

    # an activation dequantized with a non-zero zero point: the model compiler folds -z_x * sum(w) into a bias
    # the kernel loads, so the layer has one (as `tileplan compile` plans it)
    from onnx import numpy_helper

    init_values = {t.name: t for t in g.initializer}
    shifted = set()
    for node in g.node:
        if node.op_type == "DequantizeLinear" and node.input[0] not in weights and len(node.input) > 2 \
                and node.input[2] in init_values and numpy_helper.to_array(init_values[node.input[2]]).any():
            shifted.add(node.output[0])

    def adds_a_constant(out: str) -> bool:
        users = consumers.get(out, [])
        return len(users) == 1 and users[0].op_type == "Add" and any(
            i != out and i in weights for i in users[0].input)

    layers: list[Conv2dLayer | MatmulLayer] = []
    notes: list[str] = []
    skipped: dict[str, int] = {}
    floats: dict[str, list[str]] = {}  # element type -> float layers of it
    elem_types = {info.name: info.type.tensor_type.elem_type for info in [*g.input, *g.value_info, *g.output]}
    elem_types.update({t.name: t.data_type for t in g.initializer})
    dequantized = {node.output[0] for node in g.node if node.op_type == "DequantizeLinear"}
    for node in g.node:
        before = len(layers)
        with _layer_of(node):
            _add_layer(node, shapes, weights, shifted, adds_a_constant, layers, skipped)
        if len(layers) > before and node.op_type in ("Conv", "MatMul", "Gemm"):
            operands = [node.input[i] for i in (0, 1)]
            plain = [i for i in operands if i not in dequantized]
            if plain:  # an operand not through DequantizeLinear: the node computes in float
                elem = elem_types.get(plain[-1], 0)
                kind = onnx.helper.tensor_dtype_to_np_dtype(elem).name if elem else "float"
                floats.setdefault(kind, []).append(node.name)
    for op, n in sorted(skipped.items()):
        notes.append(f"{n} {op} node(s) not planned (no conv2d/matmul form)")
    if floats:
        # Planned all the same: the plan is what the layer costs once quantized to the hardware's words, which is
        # what a user sizing a float model asks; the note keeps a float model from passing for a quantized one.
        names = [n for group in floats.values() for n in group]
        shown = ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        notes.append(f"{len(names)} of {len(layers)} layer(s) are not quantized ({' / '.join(sorted(floats))} "
                     f"operands, no DequantizeLinear: {shown}): planned in the hardware's own words, as they would "
                     "run once quantized; `tileplan compile` computes such layers in float on the host")
    if not layers:
        raise InputError(("model",), "the model has no convolution or matrix product to plan")
    return OnnxWorkload(name=g.name or "model", layers=layers, notes=notes)


@contextmanager
def _layer_of(node: Any) -> Iterator[None]:
    """A node's attributes or shapes that make no layer (group 0, strides 0, negative dimensions: ONNX's checker
    refuses such models, this reading does not run it) are an InputError at the node, never another exception."""
    from pydantic import ValidationError

    where = ("model", node.name)
    try:
        yield
    except InputError as exc:
        if exc.loc[:1] == ("model",):
            raise
        raise InputError((*where, *exc.loc), f"{node.op_type} node {node.name!r}: {exc.msg}", exc.type) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ()))
        raise InputError(where, f"{node.op_type} node {node.name!r} makes no layer: {field}: {first.get('msg')}"
                         ) from None
    except (ZeroDivisionError, ValueError, OverflowError, TypeError, IndexError) as exc:
        raise InputError(where, f"{node.op_type} node {node.name!r} makes no layer: its attributes or shapes are "
                         f"not a valid {node.op_type} ({type(exc).__name__})") from None


def _add_layer(node: Any, shapes: dict[str, list[int | None] | None], weights: set[str], shifted: set[str],
               adds_a_constant: Callable[[str], bool], layers: list[Conv2dLayer | MatmulLayer],
               skipped: dict[str, int]) -> None:
    """The layer of a convolution or matrix product node appended to `layers` (other nodes: counted in `skipped`
    where they multiply but have no conv2d / matmul form)."""
    name = node.name
    if node.op_type in CONV_OPS:
        xi, wi = CONV_OPS[node.op_type]
        x, w = shapes.get(node.input[xi]), shapes.get(node.input[wi])
        if x is None or w is None:
            raise InputError(("model", name), f"{node.op_type}: the shape of {node.input[xi] if x is None else node.input[wi]} is unknown")
        if len(x) not in (3, 4):
            skipped[f"{len(x) - 2}-D {node.op_type}"] = skipped.get(f"{len(x) - 2}-D {node.op_type}", 0) + 1
            return
        layer = _conv(node, x, w, name)
        layers.append(layer.model_copy(update={"bias": True}) if node.input[xi] in shifted else layer)
    elif node.op_type in MATMUL_OPS:
        ai, bi = MATMUL_OPS[node.op_type]
        a, b = shapes.get(node.input[ai]), shapes.get(node.input[bi])
        if a is None or b is None:
            raise InputError(("model", name), f"{node.op_type}: the shape of {node.input[ai] if a is None else node.input[bi]} is unknown")
        weight_b = node.input[bi] in weights
        layers.append(_matmul(node, a, b, weight_b, name, (node.op_type == "MatMul" and adds_a_constant(
            node.output[0])) or (weight_b and node.input[ai] in shifted)))
    elif node.op_type in UNPLANNED_MAC_OPS:
        skipped[node.op_type] = skipped.get(node.op_type, 0) + 1
