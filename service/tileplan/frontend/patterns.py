"""Relax patterns of the quantized operators an accelerator runs as one op, and their parameters.

One composite (`tvm.relax.dpl` pattern, grouped by `relax.transform.FuseOpsByPattern`) per quantized
convolution or matrix product, as onnxruntime's QDQ format (and qoperator.to_qdq) writes them:

    dequantize(x) , dequantize(const W)          [permute_dims(...) of W for a Gemm with transB]
      -> conv2d (NCHW / OIHW, grouped, depthwise, strided, dilated)  |  matmul (W a 2-D constant)
      -> [ + dequantize(const int32 bias) [reshape] ]
      -> [ relu | clip ]
      -> quantize

`QuantOp` carries what the accelerator needs of a match: the int8 weights, the int32 bias, every scale and zero
point, the activation and the convolution's attributes, and the ONNX nodes it covers (bindings are named after
them, onnx_import.to_relax).  Whether a QuantOp can run on the accelerator is partition.py's business.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

CONV, MATMUL, ACT_MATMUL = "tileplan.qconv2d", "tileplan.qmatmul", "tileplan.qmatmul_act"
FLOAT_MATMUL = "tileplan.qmatmul_float"
INT_CONV, INT_MATMUL = "tileplan.conv2d_int", "tileplan.matmul_int"


@dataclass
class QuantOp:
    """A quantized conv2d / matmul: q_y = quantize(act(dequant(x) (*) dequant(W) + dequant(bias)), s_y, z_y)."""

    kind: str  # "conv2d" | "matmul"
    name: str  # the ONNX node of the conv / matmul / gemm
    nodes: list[str]  # every ONNX node the composite covers
    x_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    x_dtype: str
    y_dtype: str
    x_scale: np.ndarray
    x_zp: np.ndarray
    w: np.ndarray  # integer weights: OIHW for a conv, [K, N] for a matmul (transposes applied)
    w_scale: np.ndarray
    w_zp: np.ndarray
    bias: np.ndarray | None  # int32 [K] / [N]
    bias_scale: np.ndarray | None
    bias_zp: np.ndarray | None
    y_scale: np.ndarray
    y_zp: np.ndarray
    act: tuple[str, float, float] | None = None  # ("relu", 0, inf) | ("clip", lo, hi), in real (float) units
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    layouts: tuple[str, str, str] = ("NCHW", "OIHW", "NCHW")
    notes: list[str] = field(default_factory=list)
    # a float result, not quantized (QGemm without an output scale): y = float(acc) * s_x * s_w; y_scale is
    # then 1 and y_zp 0, so that M = s_x * s_w / s_y is that product
    float_output: bool = False
    float_bias: np.ndarray | None = None  # float_output: a float bias added to float(acc) * M (an un-quantized one)
    # the activation operand when it is a constant of the model (Swin V2's position-bias MLP on its coordinate
    # table): FuseOpsByPattern binds constants into the composite, so the call has no argument for it and the
    # program passes this constant (a Relax GenericConst) instead (host_ops.offload)
    x_const: Any = None
    # the int32 product itself (MatMulInteger / ConvInteger of int8 operands without zero points, as
    # dynamic.split_integer_products leaves them): y = sum x * w, int32 out, no scaling; scales 1, zero points 0
    int_output: bool = False
    # accepted matches equal to this one but for their input (same weights, bias, shapes, scales: an untrained
    # nn.TransformerDecoder's deep-copied layers): FuseOpsByPattern makes one composite function of them, called
    # at each site (fuse)
    twins: list[QuantOp] = field(default_factory=list)

    @property
    def macs(self) -> int:
        if self.kind == "matmul":
            m = int(np.prod(self.x_shape[:-1]))
            return m * int(self.w.shape[0]) * int(self.w.shape[1])
        k, c, r, s = self.w.shape
        return int(np.prod(self.y_shape)) * c * r * s


@dataclass
class ActMatmul:
    """A quantized product of two activations (attention's Q K^T and P V), batched over leading dimensions:
    q_y = quantize(dequantize(a) @ dequantize(b), s_y, z_y), a [..., M, K], b [..., K, N] (numpy broadcasting of
    the leading dimensions).  Both operands are computed at run time; nothing is known about them but their
    shapes and quantisation parameters."""

    name: str  # the ONNX MatMul node
    nodes: list[str]  # every ONNX node the composite covers
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    a_dtype: str
    b_dtype: str
    y_dtype: str
    a_scale: np.ndarray
    a_zp: np.ndarray
    b_scale: np.ndarray
    b_zp: np.ndarray
    y_scale: np.ndarray
    y_zp: np.ndarray
    kind: str = "act_matmul"
    notes: list[str] = field(default_factory=list)
    # the composite function's parameters feeding a and b (its parameters come in the graph order of their
    # dequantize bindings, which may put b first: Swin-T's K^T is computed before its scaled Q)
    operands: tuple[int, int] = (0, 1)

    @property
    def macs(self) -> int:
        return int(np.prod(self.y_shape)) * int(self.a_shape[-1]) if self.a_shape else 0


def _const(e: Any) -> np.ndarray | None:
    """The value of a Relax constant (a tensor) or a scalar immediate (clip bounds), else None."""
    from tvm.ir.expr import GenericConst

    if isinstance(e, GenericConst):
        return np.asarray(e.value.numpy())
    value = getattr(e, "value", None)
    if isinstance(value, (int, float)) and type(e).__name__ in ("IntImm", "FloatImm"):
        return np.asarray(float(value))
    inner = getattr(value, "value", None)  # a PrimValue wrapping an immediate
    if isinstance(inner, (int, float)):
        return np.asarray(float(inner))
    return None


def _shape(e: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in e.ty.shape)


def build_act_pattern() -> tuple[Any, Any]:
    """dequantize(a), dequantize(b) -> matmul -> quantize, with annotations a, dqa, b, dqb, op, q (b is any
    expression: the check refuses a constant one, which the weight pattern covers)."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    a, b = wildcard(), wildcard()
    dqa = is_op("relax.dequantize")(a, is_const(), is_const())
    dqb = is_op("relax.dequantize")(b, is_const(), is_const())
    core = is_op("relax.matmul")(dqa, dqb)
    q = is_op("relax.quantize")(core, is_const(), is_const())
    return q, {"a": a, "dqa": dqa, "b": b, "dqb": dqb, "op": core, "q": q}


def _graph_order(names: list[str], onnx_nodes: dict[str, Any], rank: dict[str, int] | None) -> list[str]:
    """`names` in graph order (the importer's: `onnx_nodes`' order, or `rank`, its index made once by the caller;
    the match's is a hash order), names not in the graph last, by name."""
    rank = rank if rank is not None else {v: i for i, v in enumerate(onnx_nodes)}
    return sorted(names, key=lambda n: (rank.get(n, len(rank)), n))


def act_matmul(ann: dict[str, Any], names: list[str], onnx_nodes: dict[str, Any],
               rank: dict[str, int] | None = None) -> ActMatmul | None:
    """The ActMatmul of a match, or None when it is not one (a constant second operand: the weight pattern's;
    non-constant quantisation parameters)."""
    if _const(ann["b"]) is not None or _const(ann["a"]) is not None:
        return None
    dqa, dqb, q = ann["dqa"], ann["dqb"], ann["q"]
    consts = [_const(e) for e in (dqa.args[1], dqa.args[2], dqb.args[1], dqb.args[2], q.args[1], q.args[2])]
    if any(c is None for c in consts):
        return None
    sa, za, sb, zb, sy, zy = (np.asarray(c) for c in consts)
    names = _graph_order(names, onnx_nodes, rank)
    covered = [onnx_nodes[n].name for n in names if n in onnx_nodes]
    main = [onnx_nodes[n].name for n in names if n in onnx_nodes and onnx_nodes[n].op_type == "MatMul"]
    name = main[0] if main else (covered[0] if covered else "matmul")
    return ActMatmul(name=name, nodes=covered, a_shape=_shape(ann["a"]), b_shape=_shape(ann["b"]),
                     y_shape=_shape(q), a_dtype=str(ann["a"].ty.dtype), b_dtype=str(ann["b"].ty.dtype),
                     y_dtype=str(q.ty.dtype), a_scale=sa, a_zp=za, b_scale=sb, b_zp=zb, y_scale=sy, y_zp=zy)


def build_patterns() -> tuple[Any, Any]:
    """(conv pattern, matmul pattern) with annotations x, dqx, w, dqw, op, dqb, act, q."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    def dq(inner: Any) -> Any:
        return is_op("relax.dequantize")(inner, is_const(), is_const())

    def tail(core: Any, bias: Any) -> tuple[Any, Any, Any]:
        biased = is_op("relax.add")(core, bias)
        body = biased | core
        act = is_op("relax.nn.relu")(body) | is_op("relax.clip")(body, wildcard(), wildcard())
        q = is_op("relax.quantize")(act | body, is_const(), is_const())
        return act, q, body

    out = []
    for kind in ("conv", "matmul"):
        x, w, b = wildcard(), is_const(), is_const()
        dqx, dqw, dqb = dq(x), dq(w), dq(b)
        if kind == "conv":
            core = is_op("relax.nn.conv2d")(dqx, dqw) | is_op("relax.nn.conv1d")(dqx, dqw)
            bias = is_op("relax.reshape")(dqb, wildcard())
        else:
            perm = is_op("relax.permute_dims")(dqw)
            core = is_op("relax.matmul")(dqx, perm | dqw)
            bias = dqb
        act, q, _ = tail(core, bias)
        ann = {"x": x, "dqx": dqx, "w": w, "dqw": dqw, "op": core, "b": b, "dqb": dqb, "act": act, "q": q}
        if kind == "matmul":
            ann["perm"] = perm
        out.append((q, ann))
    return out[0], out[1]


def build_float_patterns() -> tuple[Any, Any]:
    """(with bias, without bias): dequantize(x), dequantize(const W) -> matmul [+ dequantize(const bias)] whose
    float result is not quantized (onnxruntime's QGemm without an output scale, qoperator.py), annotations x, dqx,
    w, dqw, perm, op, [b, dqb], out.  The check (fuse) refuses a result that a quantize, an activation or (for
    the one without bias) an add consumes: those are the quantized pattern's, or the biased one's."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    def dq(inner: Any) -> Any:
        return is_op("relax.dequantize")(inner, is_const(), is_const())

    out = []
    for biased in (True, False):
        x, w, b, fb = wildcard(), is_const(), is_const(), is_const()
        dqx, dqw, dqb = dq(x), dq(w), dq(b)
        perm = is_op("relax.permute_dims")(dqw)
        core = is_op("relax.matmul")(dqx, perm | dqw)
        # a bias is quantized (int32, dequantized) or a float constant (the quantizer left it float: ViT's)
        root = is_op("relax.add")(core, dqb | fb) if biased else core
        ann = {"x": x, "dqx": dqx, "w": w, "dqw": dqw, "perm": perm, "op": core, "out": root}
        if biased:
            ann.update(b=b, dqb=dqb, fb=fb)
        out.append((root, ann))
    return out[0], out[1]


def build_int_patterns() -> tuple[Any, Any]:
    """(conv, matmul): conv2d / conv1d / matmul of astype(x, int32) and astype(const W, int32) (or W already
    int32) with an int32 result: MatMulInteger / ConvInteger without zero points (onnx_import's converters).
    Annotations x, w, op."""
    from tvm.relax.dpl import is_const, is_op, wildcard

    out = []
    for kind in ("conv", "matmul"):
        x, w = wildcard(), is_const()
        xi, wi = is_op("relax.astype")(x), is_op("relax.astype")(w) | w
        core = (is_op("relax.nn.conv2d")(xi, wi) | is_op("relax.nn.conv1d")(xi, wi) if kind == "conv"
                else is_op("relax.matmul")(xi, wi))
        out.append((core, {"x": x, "w": w, "op": core}))
    return out[0], out[1]


def int_op(kind: str, ann: dict[str, Any], names: list[str], onnx_nodes: dict[str, Any],
           rank: dict[str, int] | None = None) -> QuantOp | None:
    """The QuantOp of an int32 product (build_int_patterns): int8 x, constant integer W, int32 result; None
    otherwise."""
    op, x = ann["op"], ann["x"]
    w = _const(ann["w"])
    if w is None or str(op.ty.dtype) != "int32" or not np.issubdtype(w.dtype, np.integer):
        return None
    if kind == "matmul" and w.ndim != 2:
        return None
    one, zero = np.asarray(1.0, np.float32), np.asarray(0, np.int8)
    names = _graph_order(names, onnx_nodes, rank)
    covered = [onnx_nodes[n].name for n in names if n in onnx_nodes]
    main = [onnx_nodes[n].name for n in names
            if n in onnx_nodes and onnx_nodes[n].op_type in ("ConvInteger", "MatMulInteger")]
    name = main[0] if main else (covered[0] if covered else (names[0] if names else "op"))
    qop = QuantOp(kind="conv2d" if kind == "conv" else "matmul", name=name, nodes=covered, x_shape=_shape(x),
                  y_shape=_shape(op), x_dtype=str(x.ty.dtype), y_dtype="int32", x_scale=one, x_zp=zero,
                  w=w if w.dtype == np.int8 or not np.all((w >= -128) & (w <= 127)) else w.astype(np.int8),
                  w_scale=one, w_zp=zero, bias=None, bias_scale=None, bias_zp=None, y_scale=one, y_zp=zero,
                  int_output=True)
    if kind == "conv":
        _conv_attrs(qop, op)
    return qop


def _conv_attrs(qop: QuantOp, op: Any) -> None:
    at = op.attrs
    qop.strides = tuple(int(v) for v in at.strides)  # type: ignore[assignment]
    qop.padding = tuple(int(v) for v in at.padding)  # type: ignore[assignment]
    qop.dilation = tuple(int(v) for v in at.dilation)  # type: ignore[assignment]
    qop.groups = int(at.groups)
    qop.layouts = (str(at.data_layout), str(at.kernel_layout), str(at.out_layout or at.data_layout))
    if op.op.name == "relax.nn.conv1d":
        _as_2d(qop)


def quant_op(kind: str, ann: dict[str, Any], names: list[str], onnx_nodes: dict[str, Any],
             rank: dict[str, int] | None = None) -> QuantOp | None:
    """The QuantOp of a match (annotated expressions; `names` are the matched bindings' names), or None when the
    match is not what it seems (non-constant quantisation parameters, a weight that is not 2-D for a matmul).
    A match without a quantize (build_float_patterns) is a float-output matmul: s_y = 1, z_y = 0."""
    dqx, dqw, op = ann["dqx"], ann["dqw"], ann["op"]
    q = ann.get("q")
    out_params = (q.args[1], q.args[2]) if q is not None else ()
    consts = [_const(a) for a in (dqx.args[1], dqx.args[2], dqw.args[1], dqw.args[2], *out_params)]
    if any(c is None for c in consts):
        return None
    if q is None:
        consts += [np.asarray(1.0, np.float32), np.asarray(0, np.int8)]
    sx, zx, sw, zw, sy, zy = (np.asarray(c) for c in consts)
    w = _const(ann["w"])
    assert w is not None
    if kind == "matmul":
        if "perm" in ann:
            axes = ann["perm"].attrs.axes
            w = np.transpose(w, [int(a) for a in axes] if axes is not None else None)
        if w.ndim != 2:
            return None
    bias = bscale = bzp = fbias = None
    if q is None and "fb" in ann and ann["out"].args[1].same_as(ann["fb"]):  # a float constant bias
        fbias = _const(ann["fb"])
        if fbias is None or fbias.dtype != np.float32:
            return None
    elif "dqb" in ann:
        dqb = ann["dqb"]
        bias, bscale, bzp = _const(ann["b"]), _const(dqb.args[1]), _const(dqb.args[2])
        if bscale is None or bzp is None:
            return None
    act = None
    if "act" in ann:
        a = ann["act"]
        if a.op.name == "relax.nn.relu":
            act = ("relu", 0.0, float("inf"))
        else:
            lo, hi = _const(a.args[1]), _const(a.args[2])
            if lo is None or hi is None:
                return None
            act = ("clip", float(lo), float(hi))
    names = _graph_order(names, onnx_nodes, rank)
    covered = [onnx_nodes[n].name for n in names if n in onnx_nodes]
    main = [onnx_nodes[n].name for n in names
            if n in onnx_nodes and onnx_nodes[n].op_type in ("Conv", "MatMul", "Gemm")]
    name = main[0] if main else (covered[0] if covered else (names[0] if names else "op"))
    result = q if q is not None else ann["out"]
    qop = QuantOp(
        kind="conv2d" if kind == "conv" else "matmul", name=name,
        nodes=covered, x_shape=_shape(ann["x"]), y_shape=_shape(result),
        x_dtype=str(ann["x"].ty.dtype), y_dtype=str(result.ty.dtype), x_scale=sx, x_zp=zx, w=w, w_scale=sw, w_zp=zw,
        bias=bias, bias_scale=bscale, bias_zp=bzp, y_scale=sy, y_zp=zy, act=act, float_output=q is None,
        float_bias=fbias)
    if kind == "conv":
        _conv_attrs(qop, op)
    return qop


def _as_2d(qop: QuantOp) -> None:
    """A 1-D convolution (NCW / OIW) as the 2-D one with H = 1 it is: same memory order of input, weights and
    output (NCW = NC1W), a 1 x k kernel, no padding, stride or dilation along H."""
    layouts_1d = {"NCW": "NCHW", "OIW": "OIHW"}
    if len(qop.x_shape) != 3 or len(qop.y_shape) != 3 or qop.w.ndim != 3:
        return  # left as it is: offload_reason says why
    if any(layout not in layouts_1d for layout in qop.layouts):
        return
    n, c, w = qop.x_shape
    qop.x_shape = (n, c, 1, w)
    qop.y_shape = (qop.y_shape[0], qop.y_shape[1], 1, qop.y_shape[2])
    qop.w = qop.w.reshape(qop.w.shape[0], qop.w.shape[1], 1, qop.w.shape[2])
    stride, dil = int(qop.strides[0]), int(qop.dilation[0])  # 1-D attributes: one stride, two pads
    left, right = int(qop.padding[0]), int(qop.padding[-1])
    qop.strides, qop.dilation, qop.padding = (1, stride), (1, dil), (0, left, 0, right)
    qop.layouts = (layouts_1d[qop.layouts[0]], layouts_1d[qop.layouts[1]], layouts_1d[qop.layouts[2]])
    qop.notes.append("1-D convolution run as a 2-D one with H = 1")


def fuse(mod: Any, onnx_nodes: dict[str, Any], decide: Callable[[Any], bool]
         ) -> tuple[Any, dict[str, QuantOp | ActMatmul]]:
    """Group every match into a composite function when `decide(op)` accepts it.  `onnx_nodes`: binding
    variable name -> ONNX node (onnx_import.to_relax).

    Returns (module, {composite function name: QuantOp or ActMatmul}); every match (accepted or not) is passed
    to `decide`, which records its own reasons."""
    from tvm import relax
    from tvm.ir.expr import GenericConst

    conv, matmul = build_patterns()
    act = build_act_pattern()
    fbias, fnobias = build_float_patterns()
    iconv, imatmul = build_int_patterns()
    seen: dict[str, QuantOp | ActMatmul] = {}
    users, consumers = _uses(mod)
    # a float result that these consume is not a float output: the quantized pattern's (or the biased one's)
    not_float = {"biased": ("relax.quantize", "relax.nn.relu", "relax.clip"),
                 "plain": ("relax.quantize", "relax.nn.relu", "relax.clip", "relax.add")}
    rank = {v: i for i, v in enumerate(onnx_nodes)}  # graph order, made once (not per match: ViT's 1,833 nodes)

    def make_check(kind: str) -> Callable[[Any], bool]:
        def check(ctx: Any) -> bool:
            names = [str(v.name) for v in ctx.matched_bindings.keys()]
            ann = dict(ctx.annotated_expr)
            if _escapes(names, consumers):
                return False
            if kind in not_float:
                root = [str(v.name) for v, e in ctx.matched_bindings.items() if e.same_as(ann["out"])]
                if not root or any(u in not_float[kind] for u in users.get(root[0], ())):
                    return False
            qop = (act_matmul(ann, names, onnx_nodes, rank) if kind == "act"
                   else int_op(kind[4:], ann, names, onnx_nodes, rank) if kind.startswith("int_")
                   else quant_op("matmul" if kind in not_float else kind, ann, names, onnx_nodes, rank))
            if qop is None:
                return False
            if isinstance(qop, QuantOp) and isinstance(ann["x"], GenericConst):
                qop.x_const = ann["x"]
            ok = bool(decide(qop))
            if ok:
                for n in names:  # the composite keeps the names of the model's nodes (unique; see below)
                    if n in onnx_nodes or kind.startswith("int_"):  # an int product's casts: the importer's lvN
                        seen[n] = qop
            return ok
        return check

    pats = [relax.transform.FusionPattern(CONV, conv[0], conv[1], make_check("conv")),
            relax.transform.FusionPattern(MATMUL, matmul[0], matmul[1], make_check("matmul")),
            relax.transform.FusionPattern(ACT_MATMUL, act[0], act[1], make_check("act")),
            relax.transform.FusionPattern(FLOAT_MATMUL, fbias[0], fbias[1], make_check("biased")),
            relax.transform.FusionPattern(FLOAT_MATMUL, fnobias[0], fnobias[1], make_check("plain")),
            relax.transform.FusionPattern(INT_CONV, iconv[0], iconv[1], make_check("int_conv")),
            relax.transform.FusionPattern(INT_MATMUL, imatmul[0], imatmul[1], make_check("int_matmul"))]
    fused = relax.transform.FuseOpsByPattern(pats, bind_constants=True, annotate_codegen=False)(mod)
    composites: dict[str, QuantOp | ActMatmul] = {}
    for gv, func in fused.functions.items():
        if isinstance(func, relax.Function) and func.attrs is not None and "Composite" in func.attrs:
            inner = _binding_names(func)
            match = list({id(seen[n]): seen[n] for n in inner if n in seen}.values())
            if len(match) != 1:
                raise RuntimeError(f"composite {gv.name_hint} covers {len(match)} accepted ops ({inner})")
            composites[gv.name_hint] = match[0]
            if isinstance(match[0], ActMatmul):
                match[0].operands = _act_operands(func)
    _attach_twins(seen, composites, _calls(fused))
    return fused, composites


def _calls(mod: Any) -> dict[str, int]:
    """How many times `main` calls each global function, by name."""
    from tvm import relax

    counts: dict[str, int] = {}
    for block in mod["main"].body.blocks:
        for b in block.bindings:
            v = b.value
            if isinstance(v, relax.Call) and isinstance(v.op, relax.GlobalVar):
                counts[v.op.name_hint] = counts.get(v.op.name_hint, 0) + 1
    return counts


def _attach_twins(seen: dict[str, QuantOp | ActMatmul], composites: dict[str, QuantOp | ActMatmul],
                  calls: dict[str, int] | None = None) -> None:
    """Accepted matches left without a composite of their own: FuseOpsByPattern (its BlockBuilder) gives
    structurally equal functions one global function, so an op whose weights, bias, shapes and scales equal
    another's (its input may be another tensor) is a second call of that op's composite. Each is recorded on the op
    it equals (QuantOp.twins). Where several composites hold ops equal to it (TVM kept apart two functions that
    `_same_op` finds equal: timm's EfficientViT-M0, whose zero-initialised depthwise convs are all alike), on one
    that `main` calls more times than it has ops: the program names each call's step after its composite's op,
    so its twins' modelled cycles are counted where their emulated cycles are (before, on the first such op:
    EfficientViT-M0's dw0 modelled at 3 calls and emulated at 1, its dw1 the other way round)."""
    kept = {id(q) for q in composites.values()}
    owners = [(name, q) for name, q in composites.items() if isinstance(q, QuantOp)]
    calls = calls or {}
    for q in {id(q): q for q in seen.values()}.values():
        if id(q) in kept or not isinstance(q, QuantOp):
            continue
        equal = [(name, o) for name, o in owners if _same_op(o, q)]
        free = [o for name, o in equal if calls.get(name, 1) > 1 + len(o.twins)]
        twin = free[0] if free else (equal[0][1] if equal else None)
        if twin is not None:
            twin.twins.append(q)


def _same_op(a: QuantOp, b: QuantOp) -> bool:
    skip = {"name", "nodes", "notes", "twins", "x_const"}
    for f in fields(QuantOp):
        if f.name in skip:
            continue
        u, v = getattr(a, f.name), getattr(b, f.name)
        if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
            if u is None or v is None or not np.array_equal(np.asarray(u), np.asarray(v)):
                return False
        elif u != v:
            return False
    return True


def _act_operands(func: Any) -> tuple[int, int]:
    """(index of the parameter dequantized into the matmul's first operand, ... its second) of an act
    composite function."""
    from tvm import relax

    values = {b.var.__chandle__(): b.value for block in func.body.blocks for b in block.bindings}
    params = [p.__chandle__() for p in func.params]
    for v in values.values():
        if isinstance(v, relax.Call) and getattr(v.op, "name", "") == "relax.matmul":
            srcs = []
            for arg in v.args[:2]:
                dq = values.get(arg.__chandle__()) if isinstance(arg, relax.Var) else None
                srcs.append((dq.args[0] if isinstance(dq, relax.Call) else arg).__chandle__())
            return params.index(srcs[0]), params.index(srcs[1])
    raise RuntimeError("act composite without a matmul")


def _uses(mod: Any) -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """In one walk over `main`'s bindings: (binding variable name -> the operators of the calls that take it as an
    argument; binding variable name -> the names of the bindings whose values use it, "" for main's result)."""
    from tvm import relax
    from tvm.ir import Op

    users: dict[str, list[str]] = {}
    used: dict[str, set[str]] = {}

    def uses(expr: Any, by: str) -> None:
        if isinstance(expr, relax.Var):
            used.setdefault(str(expr.name), set()).add(by)
        elif isinstance(expr, relax.Call):
            for a in expr.args:
                uses(a, by)
        elif isinstance(expr, relax.Tuple):
            for f in expr.fields:
                uses(f, by)
        elif isinstance(expr, relax.TupleGetItem):
            uses(expr.tuple_value, by)

    body = mod["main"].body
    for block in body.blocks:
        for b in block.bindings:
            value = b.value
            if isinstance(value, relax.Call) and isinstance(value.op, Op):
                for a in value.args:
                    if isinstance(a, relax.Var):
                        users.setdefault(str(a.name), []).append(str(value.op.name))
            uses(value, str(b.var.name))
    uses(body.body, "")
    return users, used


def _escapes(names: list[str], consumers: dict[str, set[str]]) -> bool:
    """Whether a match's intermediate value is used outside it: every matched binding but its result must be
    consumed inside the match. (A QAT export's conv result is quantized for the next layer and also added in
    float to a residual: one composite cannot give the accelerator's int8 result and the float value.)"""
    inside = set(names)
    results = [n for n in names if not consumers.get(n, set()) & inside]
    if len(results) != 1:
        return True
    return any(consumers.get(n, set()) - inside for n in names if n != results[0])


def _binding_names(func: Any) -> list[str]:
    names = []
    for block in func.body.blocks:
        for b in block.bindings:
            names.append(str(b.var.name))
    return names
