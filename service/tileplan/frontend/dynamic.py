"""Integer products of inputs quantized at run time (onnxruntime's `quantize_dynamic`) as accelerator products
plus the host's zero-point terms.

`quantize_dynamic` writes DynamicQuantizeLinear(x) -> (x_q uint8, s_x, z_x), both computed when the model runs,
then MatMulInteger(x_q, W, z_x, z_w) / ConvInteger(x_q, W, z_x, z_w) -> int32 = sum (x_q - z_x)(W - z_w), then
Cast and Mul by s_x * s_w in float.  The int32 product is exact integer arithmetic, so it can be split into what
the accelerator computes (int8 x int8, zero points 0, accumulators read at full width) and terms the host adds:

    x8 = x_q - 128 (int8), z8 = z_x - 128, w8 = W (int8) or W - 128 (uint8), zw8 likewise
    sum (x_q - z_x)(W - z_w) = sum (x8 - z8)(w8 - zw8)
                             = acc + z8 * c[n] - zw8[n] * rowsum(x8),   acc = sum x8 * w8,
                               c[n] = K * zw8[n] - colsum(w8)[n]

A ConvInteger pads its input with z_x (its (x - z_x) with 0): the input is padded on the host with z8
(Pad with 0, then Where on the border) and the accelerator's conv has no padding, so every tap of every window
holds x8 - z8 and the z8 term is per output channel.  A conv's rowsum(x8) is each window's input sum (over its
group's channels): a conv of the padded input with all-ones weights (one output per group), a second integer
product.

The rewritten graph computes the same int32 values exactly (everything in int32, bounded: K * 2^16 < 2^31), so
the model's outputs are unchanged whether the product then runs on the accelerator or on the host.  The nodes
it adds are named `<node>/dyn_<what>`; `host_reason` says why each runs on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.frontend import onnx_graph

# the rewrite's int32 terms stay exact while |acc| + |z8 * c| + |zw8 * rowsum| < 2^31: 3 * 128 * 256 * K
MAX_REDUCTION = 2**31 // (3 * 128 * 256)

_REASONS = {
    "shift": "stores the uint8 input quantized at run time (DynamicQuantizeLinear) as int8 (x - 128) for the "
             "accelerator's int8 multiply: an elementwise integer shift, no matrix product",
    "zp": "the input zero point of an integer product (computed by DynamicQuantizeLinear when the model runs) as "
          "int32, shifted by -128 with its input: scalar integer arithmetic for the host's correction term",
    "pad": "pads a ConvInteger's input with its run-time zero point (ConvInteger pads with z_x, known only when the "
           "model runs; the accelerator's conv then has no padding): a copy, no matrix product",
    "corr": "adds the run-time zero point's terms to an integer product's int32 accumulators (sum (x - z_x)(w - z_w) = "
            "sum x w + z_x * (K z_w - colsum(w)) - z_w * rowsum(x), z_x known only when the model runs): "
            "elementwise int32 arithmetic, O(outputs) against the product's O(outputs * K) on the accelerator",
    "winsum": "window sums of a ConvInteger's run-time int8 input (an all-ones conv) for its weight zero "
              "point's term (z_w * the window's input sum)",
    "rowsum": "row sums of an integer product's run-time int8 input for its weight zero point's term (z_w * rowsum(x)): a "
              "reduction, O(inputs), no matrix product",
}


def _product_of(name: str, producers: dict[str, Any]) -> str | None:
    """The integer product (MatMulInteger / ConvInteger node) whose int32 result `name` is, if it is one."""
    p = producers.get(name)
    if p is None:
        return None
    if p.op_type in ("MatMulInteger", "ConvInteger"):
        return str(p.name)
    if "/dyn_corr_" in p.name:
        return str(p.name.rpartition("/dyn_")[0])
    return None


def _epilogue_reason(node: Any, producers: dict[str, Any]) -> str | None:
    """quantize_dynamic's own host nodes around a product: DynamicQuantizeLinear, the Cast of the int32 result,
    the scale products and the float bias."""
    op = node.op_type
    if op == "DynamicQuantizeLinear":
        return ("quantizes its input with a scale and zero point computed when the model runs (the tensor's "
                "minimum and maximum, a division, rounding): reductions and elementwise arithmetic, no matrix "
                "product (the int8 products that read it run on the accelerator)")
    if op == "Cast" and node.input:
        prod = _product_of(node.input[0], producers)
        if prod:
            return ("converts an integer product's exact int32 result to float for quantize_dynamic's scaling by "
                    "s_x * s_w (s_x known only at run time): elementwise, as onnxruntime does")
    if op == "Mul":
        srcs = [producers.get(i) for i in node.input]
        if any(p is not None and p.op_type == "DynamicQuantizeLinear" for p in srcs):
            return ("s_x * s_w: the input scale DynamicQuantizeLinear computes at run time times the weight "
                    "scale (one float multiplication per scale)")
        for p in srcs:
            prod = _product_of(p.input[0], producers) if p is not None and p.op_type == "Cast" else None
            if prod:
                return ("scales an integer product's int32 result (as float) by s_x * s_w, s_x known only at run time: "
                        "quantize_dynamic's dequantisation, elementwise in float as onnxruntime computes it")
    if op == "Add":
        for i in node.input:
            p = producers.get(i)
            cast = producers.get(p.input[0]) if p is not None and p.op_type == "Mul" else None
            for c in [producers.get(x) for x in (p.input if p is not None and p.op_type == "Mul" else [])]:
                if c is not None and c.op_type == "Cast" and _product_of(c.input[0], producers):
                    cast = c
            if cast is not None and cast.op_type == "Cast" and _product_of(cast.input[0], producers):
                return ("adds the float bias after an integer product's run-time scaling "
                        "(quantize_dynamic leaves biases in float, after the product's dequantisation): "
                        "elementwise in float, as onnxruntime does")
    return None


def host_reason(node: Any, producers: dict[str, Any] | None = None) -> str | None:
    """Why a node this rewrite added, or one of quantize_dynamic's nodes around a product, runs on the host
    (None for any other node).  `producers`: tensor -> the node making it."""
    name = node.name
    if producers is not None and "/dyn_" not in name:
        return _epilogue_reason(node, producers)
    if "/dyn_" not in name:
        return None
    what = name.rpartition("/dyn_")[2]
    kind = what.split("_")[0]
    if kind not in _REASONS:
        return None
    return _REASONS[kind]


class _Rewrite:
    def __init__(self, model: Any) -> None:
        from onnx import numpy_helper

        g = model.graph
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for n in g.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.dtypes, self.shapes = onnx_graph.types_and_shapes(model)
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        self.inits: list[Any] = []
        self.shifted: dict[str, str] = {}  # uint8 tensor -> its int8 copy (one per tensor, shared by consumers)
        self.zps: dict[str, str] = {}  # zero point tensor -> int32 z8
        self.narrow: dict[str, str] = {}  # int32 z8 -> its int8 copy
        self.refused: dict[str, str] = {}  # node -> why it was left as it is (then computed on the host)

    def refuse(self, n: Any, why: str) -> bool:
        self.refused[n.name] = (f"{n.op_type} of an input quantized at run time (DynamicQuantizeLinear: onnxruntime's "
                                f"quantize_dynamic) {why}; computed on the host in int32, exactly as onnxruntime does")
        return False

    def init(self, name: str, array: Any) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    @staticmethod
    def node(op: str, ins: list[str], outs: list[str], name: str, **attrs: Any) -> Any:
        from onnx import helper

        return helper.make_node(op, ins, outs, name=name, **attrs)

    def int8_input(self, x: str, owner: str, out: list[Any]) -> str | None:
        """x as int8 (x - 128 for uint8); None when its type is neither."""
        from onnx import TensorProto

        t = self.dtypes.get(x)
        if t == TensorProto.INT8:
            return x
        if t != TensorProto.UINT8:
            return None
        if x not in self.shifted:
            # widened to int16 where ONNX's Sub takes it (opset 14), else int32 (an opset-10 MatMulInteger's model)
            wide, wide_t = (np.int16, TensorProto.INT16) if self.opset >= 14 else (np.int32, TensorProto.INT32)
            c = self.init(f"{owner}/dyn_shift_128", wide(128))
            out += [self.node("Cast", [x], [f"{x}/dyn_i16"], f"{owner}/dyn_shift_widen", to=wide_t),
                    self.node("Sub", [f"{x}/dyn_i16", c], [f"{x}/dyn_m128"], f"{owner}/dyn_shift_sub"),
                    self.node("Cast", [f"{x}/dyn_m128"], [f"{x}/dyn_s8"], f"{owner}/dyn_shift_narrow",
                              to=TensorProto.INT8)]
            self.shifted[x] = f"{x}/dyn_s8"
        return self.shifted[x]

    def zero_point(self, zp: str | None, x: str, owner: str, out: list[Any]) -> str | None:
        """The int32 z8 of the input's zero point (absent: uint8's 0 or int8's 0); None unless it is a scalar."""
        from onnx import TensorProto

        unsigned = self.dtypes.get(x) == TensorProto.UINT8
        if not zp:
            return self.init(f"{owner}/dyn_zp_i32", np.int32(-128 if unsigned else 0))
        if zp in self.zps:
            return self.zps[zp]
        shape = self.shapes.get(zp, np.shape(self.consts[zp]) if zp in self.consts else None)
        if shape is None or int(np.prod(shape)) != 1:
            return None
        out.append(self.node("Cast", [zp], [f"{zp}/dyn_i32"], f"{owner}/dyn_zp_widen", to=TensorProto.INT32))
        z32 = f"{zp}/dyn_i32"
        if unsigned:
            c = self.init(f"{owner}/dyn_zp_128", np.int32(128))
            out.append(self.node("Sub", [z32, c], [f"{zp}/dyn_z8_i32"], f"{owner}/dyn_zp_sub"))
            z32 = f"{zp}/dyn_z8_i32"
        self.zps[zp] = z32
        return z32

    def zero_point_int8(self, z32: str, owner: str, out: list[Any]) -> str:
        """z8 as int8 (the padding value), made once per zero point."""
        from onnx import TensorProto

        if z32 not in self.narrow:
            self.narrow[z32] = f"{z32}/dyn_i8"
            out.append(self.node("Cast", [z32], [self.narrow[z32]], f"{owner}/dyn_zp_narrow", to=TensorProto.INT8))
        return self.narrow[z32]

    def weights(self, w: str, zw: str | None) -> tuple[np.ndarray, np.ndarray] | None:
        """(int8 weights, their int64 zero point) shifted into int8 when uint8; None when not constant."""
        if w not in self.consts or (zw and zw not in self.consts):
            return None
        wv = self.consts[w]
        z = self.consts[zw] if zw else np.zeros((), wv.dtype)
        if wv.dtype == np.uint8:
            return (wv.astype(np.int16) - 128).astype(np.int8), z.astype(np.int64) - 128
        if wv.dtype == np.int8:
            return wv, z.astype(np.int64)
        return None

    def split_weights(self, n: Any, w: str, zw: str, ndim: int, operand: str, per: str,
                      why_ndim: str) -> tuple[np.ndarray, np.ndarray] | None:
        """`weights` of MatMulInteger's / ConvInteger's constant operand, checked: `ndim` dimensions, one zero
        point or one per `per` (its first axis for a conv, its last for a matmul); None after refusing `n`
        (`operand`: what the refusal says of an operand that is not such a constant)."""
        got = self.weights(w, zw)
        if got is None:
            self.refuse(n, f"whose {operand}: Tileplan splits integer products with constant weights only")
            return None
        w8, zw8 = got
        if w8.ndim != ndim:
            self.refuse(n, f"with {w8.ndim}-D weights: {why_ndim}")
            return None
        count = w8.shape[-1] if ndim == 2 else w8.shape[0]
        if zw8.size not in (1, count):
            self.refuse(n, f"with {zw8.size} weight zero points for {count} {per}")
            return None
        return w8, zw8

    def matmul(self, n: Any, out: list[Any]) -> bool:
        """MatMulInteger(A, B const[, z_a scalar][, z_b]) -> MatMulInteger(A8, B8) + terms."""
        from onnx import TensorProto

        a, b, za, zb = (list(n.input) + [""] * 4)[:4]
        got = self.split_weights(n, b, zb, 2, "second operand is computed at run time too (or is not int8 / uint8)",
                                 "columns", "the accelerator's matmul takes a 2-D constant")
        if got is None:
            return False
        w8, zw8 = got
        k, cols = w8.shape
        if k > MAX_REDUCTION:
            return self.refuse(n, f"with K = {k}: the split's int32 terms could overflow (K <= {MAX_REDUCTION})")
        pre: list[Any] = []
        a8 = self.int8_input(a, n.name, pre)
        if a8 is None:
            return self.refuse(n, "whose input is neither uint8 nor int8")
        z = self.zero_point(za or None, a, n.name, pre)
        if z is None:
            return self.refuse(n, "with an input zero point per row: the split takes one per tensor")
        zw = np.broadcast_to(zw8.reshape(-1), (cols,)).astype(np.int64)
        c = k * zw - w8.astype(np.int64).sum(axis=0)
        out += pre
        raw = f"{n.output[0]}/dyn_acc"
        out.append(self.node("MatMulInteger", [a8, self.init(f"{n.name}/dyn_w8", w8)], [raw], n.name))
        term = f"{n.output[0]}/dyn_zx_term"
        out.append(self.node("Mul", [z, self.init(f"{n.name}/dyn_c", c.astype(np.int32))], [term],
                             f"{n.name}/dyn_corr_zx"))
        if not np.any(zw):
            out.append(self.node("Add", [raw, term], [n.output[0]], f"{n.name}/dyn_corr_add"))
            return True
        summed = f"{n.output[0]}/dyn_rowsum"
        out.append(self.node("Cast", [a8], [f"{summed}_i32"], f"{n.name}/dyn_rowsum_widen", to=TensorProto.INT32))
        if self.opset >= 13:
            axes = self.init(f"{n.name}/dyn_rowsum_axes", np.asarray([-1], np.int64))
            out.append(self.node("ReduceSum", [f"{summed}_i32", axes], [summed], f"{n.name}/dyn_rowsum",
                                 keepdims=1))
        else:
            out.append(self.node("ReduceSum", [f"{summed}_i32"], [summed], f"{n.name}/dyn_rowsum", axes=[-1],
                                 keepdims=1))
        zw_term = f"{n.output[0]}/dyn_zw_term"
        out += [self.node("Mul", [summed, self.init(f"{n.name}/dyn_zw", zw.astype(np.int32))], [zw_term],
                          f"{n.name}/dyn_corr_zw"),
                self.node("Add", [raw, term], [f"{raw}_zx"], f"{n.name}/dyn_corr_add"),
                self.node("Sub", [f"{raw}_zx", zw_term], [n.output[0]], f"{n.name}/dyn_corr_sub")]
        return True

    def conv(self, n: Any, out: list[Any]) -> bool:
        """ConvInteger(x, W const[, z_x scalar][, z_w]) with z_w 0 after the shift -> Where(border, z8,
        Pad(x8)), ConvInteger(.., W8) without padding, + z8 * (-sum W8[k])."""
        from onnx import helper

        x, w, zx, zw = (list(n.input) + [""] * 4)[:4]
        got = self.split_weights(n, w, zw, 4, "weights are computed at run time (or are not int8 / uint8)",
                                  "output channels", "the split takes 2-D convolutions")
        if got is None:
            return False
        w8, zw8 = got
        if n.output[0] not in self.shapes:
            return self.refuse(n, "whose output shape is not known")
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
        if auto_pad not in ("NOTSET", ""):
            return self.refuse(n, f"with auto_pad {auto_pad}: the split takes explicit pads")
        if int(np.prod(w8.shape[1:])) > MAX_REDUCTION:
            return self.refuse(n, f"with C * R * S = {int(np.prod(w8.shape[1:]))}: the split's int32 terms could "
                                  f"overflow (<= {MAX_REDUCTION})")
        if x not in self.shapes or len(self.shapes[x]) != 4:
            return self.refuse(n, "whose input shape is not a known 4-D one")
        pads = [int(p) for p in attrs.get("pads", [0, 0, 0, 0])]
        pre: list[Any] = []
        x8 = self.int8_input(x, n.name, pre)
        if x8 is None:
            return self.refuse(n, "whose input is neither uint8 nor int8")
        z = self.zero_point(zx or None, x, n.name, pre)
        if z is None:
            return self.refuse(n, "with an input zero point that is not one scalar")
        out += pre
        src = x8
        if any(pads):
            top, left, bottom, right = pads
            h, wd = self.shapes[x][2:]
            padded = f"{n.output[0]}/dyn_padded0"
            pads_t = self.init(f"{n.name}/dyn_pads", np.asarray([0, 0, top, left, 0, 0, bottom, right], np.int64))
            out.append(self.node("Pad", [x8, pads_t], [padded], f"{n.name}/dyn_pad_zero", mode="constant"))
            border = np.ones((1, 1, h + top + bottom, wd + left + right), bool)
            border[:, :, top:top + h, left:left + wd] = False
            src = f"{n.output[0]}/dyn_padded"
            z8 = self.zero_point_int8(z, n.name, out)
            out.append(self.node("Where", [self.init(f"{n.name}/dyn_border", border), z8, padded], [src],
                                 f"{n.name}/dyn_pad_zx"))
        conv_attrs = {k: v for k, v in attrs.items() if k in ("dilations", "group", "kernel_shape", "strides")}
        raw = f"{n.output[0]}/dyn_acc"
        out.append(self.node("ConvInteger", [src, self.init(f"{n.name}/dyn_w8", w8)], [raw], n.name, **conv_attrs))
        kout, cg, r, s = w8.shape
        zw = np.broadcast_to(zw8.reshape(-1), (kout,)).astype(np.int64)
        c = cg * r * s * zw - w8.astype(np.int64).reshape(kout, -1).sum(axis=1)
        term = f"{n.output[0]}/dyn_zx_term"
        out += [self.node("Mul", [z, self.init(f"{n.name}/dyn_c", c.astype(np.int32).reshape(1, -1, 1, 1))],
                          [term], f"{n.name}/dyn_corr_zx")]
        if not np.any(zw):
            out.append(self.node("Add", [raw, term], [n.output[0]], f"{n.name}/dyn_corr_add"))
            return True
        # z_w's term: z_w[k] * (the sum of the padded input over k's window and group), an all-ones conv (G outputs)
        g = int(attrs.get("group", 1))
        nb, _, oh, ow = self.shapes[n.output[0]]
        wins = f"{n.output[0]}/dyn_winsum"
        out.append(self.node("ConvInteger", [src, self.init(f"{n.name}/dyn_ones", np.ones((g, cg, r, s), np.int8))],
                             [wins], f"{n.name}/dyn_winsum", **conv_attrs))
        zw_term = f"{n.output[0]}/dyn_zw_term"
        if g == 1:
            out.append(self.node("Mul", [wins, self.init(f"{n.name}/dyn_zw", zw.astype(np.int32).reshape(1, -1, 1, 1))],
                                 [zw_term], f"{n.name}/dyn_corr_zw"))
        else:
            shape5 = self.init(f"{n.name}/dyn_shape5", np.asarray([nb, g, 1, oh, ow], np.int64))
            shape4 = self.init(f"{n.name}/dyn_shape4", np.asarray([nb, kout, oh, ow], np.int64))
            zw5 = self.init(f"{n.name}/dyn_zw", zw.astype(np.int32).reshape(1, g, kout // g, 1, 1))
            out += [self.node("Reshape", [wins, shape5], [f"{wins}5"], f"{n.name}/dyn_corr_groups"),
                    self.node("Mul", [f"{wins}5", zw5], [f"{zw_term}5"], f"{n.name}/dyn_corr_zw"),
                    self.node("Reshape", [f"{zw_term}5", shape4], [zw_term], f"{n.name}/dyn_corr_channels")]
        out += [self.node("Add", [raw, term], [f"{raw}_zx"], f"{n.name}/dyn_corr_add"),
                self.node("Sub", [f"{raw}_zx", zw_term], [n.output[0]], f"{n.name}/dyn_corr_sub")]
        return True


def split_integer_products(model: Any, refused: dict[str, str] | None = None) -> str | None:
    """Rewrite `model`'s MatMulInteger / ConvInteger nodes with constant weights (in place) as above; returns the
    import's note, None when nothing was rewritten.  `refused` (when given) gets, for each such node left as it
    is, why."""
    ops = [n for n in model.graph.node if n.op_type in ("MatMulInteger", "ConvInteger")]
    if not ops:
        return None
    rw = _Rewrite(model)
    out: list[Any] = []
    done = {"MatMulInteger": 0, "ConvInteger": 0}
    for n in model.graph.node:
        if n.op_type == "MatMulInteger" and rw.matmul(n, out) or n.op_type == "ConvInteger" and rw.conv(n, out):
            done[n.op_type] += 1
        else:
            out.append(n)
    if refused is not None:
        refused.update(rw.refused)
    if not any(done.values()):
        return None
    del model.graph.node[:]
    model.graph.node.extend(out)
    model.graph.initializer.extend(rw.inits)
    what = ", ".join(f"{v} {k}" for k, v in done.items() if v)
    return (f"integer products of inputs quantized at run time ({what}) split into an int8 x int8 product with "
            "zero points 0 (the accelerator's, int32 accumulators read at full width) and the run-time zero "
            "point's terms added on the host in int32 (exact: the same int32 values)")


CONTRIB = ("DynamicQuantizeMatMul", "MatMulIntegerToFloat")


def unfuse_contrib(model: Any) -> dict[str, int]:
    """onnxruntime's fused forms of quantize_dynamic's products (com.microsoft, what its optimizer saves) as the
    operators they fuse, in place, so that split_integer_products sees them:

        DynamicQuantizeMatMul(A, B, s_b, z_b, [bias]) -> DynamicQuantizeLinear(A) -> (a, s_a, z_a), then below
        MatMulIntegerToFloat(a, B, s_a, s_b, z_a, z_b, [bias]) -> Cast(MatMulInteger(a, B, z_a, z_b), float)
                                                                  * (s_a * s_b) [+ bias]

    (the float scaling and bias in the order quantize_dynamic writes them and onnxruntime's kernels compute
    them).  The MatMulInteger keeps the fused node's name.  Returns {op type: count}."""
    from onnx import TensorProto, helper

    if not any(n.op_type in CONTRIB and n.domain == "com.microsoft" for n in model.graph.node):
        return {}
    out: list[Any] = []
    done: dict[str, int] = {}
    for n in model.graph.node:
        if n.domain != "com.microsoft" or n.op_type not in CONTRIB:
            out.append(n)
            continue
        ins = list(n.input) + [""] * 7
        name, y = n.name, n.output[0]

        def node(op: str, i: list[str], o: list[str], what: str, base: str = name, **attrs: Any) -> None:
            out.append(helper.make_node(op, i, o, name=f"{base}/unfused_{what}" if what else base, **attrs))

        if n.op_type == "DynamicQuantizeMatMul":
            a, b, sb, zb, bias = ins[:5]
            qa, sa, za = f"{name}/unfused_a", f"{name}/unfused_a_scale", f"{name}/unfused_a_zero_point"
            node("DynamicQuantizeLinear", [a], [qa, sa, za], "quantize")
        else:
            qa, b, sa, sb, za, zb, bias = ins[:7]
        scale, acc, acc_f = f"{name}/unfused_scale", f"{name}/unfused_acc", f"{name}/unfused_acc_float"
        node("Mul", [sa, sb], [scale], "scales_mul")
        mm_in = [qa, b, za, zb]
        while mm_in and not mm_in[-1]:
            mm_in.pop()
        node("MatMulInteger", mm_in, [acc], "")
        node("Cast", [acc], [acc_f], "cast", to=TensorProto.FLOAT)
        if bias:
            node("Mul", [acc_f, scale], [f"{name}/unfused_scaled"], "scale")
            node("Add", [f"{name}/unfused_scaled", bias], [y], "bias")
        else:
            node("Mul", [acc_f, scale], [y], "scale")
        done[n.op_type] = done.get(n.op_type, 0) + 1
    del model.graph.node[:]
    model.graph.node.extend(out)
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("", 11))
    return done
