"""QOperator -> QDQ at the ONNX level: every integer operator becomes the float operator it stands for between
DequantizeLinear and QuantizeLinear nodes (what onnxruntime's QDQ format writes), so one importer and one set of
fusion patterns serve both formats.  TVM's ONNX importer has no converter for these operators; this module is
Tileplan's, not a patch of TVM.

    QLinearConv(x, sx, zx, w, sw, zw, sy, zy[, B])  ->  Q(Conv(DQ(x), DQ(w), DQ(B, sx*sw)), sy, zy)
    QLinearMatMul, QGemm (com.microsoft), QLinearAdd / QLinearMul / QLinearGlobalAveragePool /
    QLinearAveragePool / QLinearSoftmax / QLinearSigmoid / QLinearLeakyRelu / QLinearConcat / QLinearWhere
    (com.microsoft): likewise (QLinearWhere's tables requantize each input's codes to the output's parameters,
    which is Q(Where(c, DQ(x), DQ(y)))).  The float operator keeps the original node's name (decisions in the summary are named after the
    model's nodes); the DQ / Q nodes around it are named `<node>/dq_<input>` and `<node>/q`.

Numerics: the QDQ form means exactly what the integer operator computes up to the final rounding (an int32 bias
B dequantizes with scale sx*sw, as the operator's definition says), which is what Tileplan's accelerator ops and
host ops implement.  ConvInteger is not rewritten: onnx_import imports it as an int32 convolution (exact), and
dynamic.py splits the products of run-time quantized inputs for the accelerator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.errors import InputError

# op -> ((name, input index, scale index, zero-point index) of each quantized input, (scale, zp) of the output)
_UNARY = {"QLinearGlobalAveragePool": "GlobalAveragePool", "QLinearAveragePool": "AveragePool",
          "QLinearSoftmax": "Softmax", "QLinearSigmoid": "Sigmoid", "QLinearLeakyRelu": "LeakyRelu"}
_BINARY = {"QLinearAdd": "Add", "QLinearMul": "Mul"}
QOPERATORS = {"QLinearConv", "QLinearMatMul", "QGemm", "QLinearConcat", "QLinearWhere", *_UNARY, *_BINARY}


class _Rewriter:
    def __init__(self, model: Any) -> None:
        from onnx import numpy_helper

        self.model = model
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        for n in model.graph.node:
            if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
                self.consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
        self.new_inits: list[Any] = []
        self.out: list[Any] = []
        self.node: Any = None
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)

    def const(self, name: str) -> np.ndarray:
        if name not in self.consts:
            raise InputError(("model", self.node.name), f"{self.node.op_type} node {self.node.name!r}: "
                             f"{name!r} must be a constant (scales and zero points are initializers)")
        return self.consts[name]

    def add_init(self, base: str, array: Any) -> str:
        from onnx import numpy_helper

        name = f"{self.node.name}/{base}"
        self.new_inits.append(numpy_helper.from_array(np.asarray(array), name=name))
        self.consts[name] = np.asarray(array)
        return name

    def emit(self, op: str, inputs: list[str], outputs: list[str], name: str, domain: str = "", **attrs: Any) -> None:
        from onnx import helper

        self.out.append(helper.make_node(op, inputs, outputs, name=name, domain=domain, **attrs))

    def dq(self, x: str, scale: str, zp: str | None, tag: str, axis: int | None = None) -> str:
        """DequantizeLinear of input `x`; axis only for a per-channel (1-D, >1 element) scale."""
        out = f"{self.node.name}/dq_{tag}_out"
        inputs = [x, scale] + ([zp] if zp else [])
        attrs: dict[str, Any] = {}
        if axis is not None and self.const(scale).size > 1:
            if self.opset < 13:
                raise InputError(("model", self.node.name), f"{self.node.op_type} node {self.node.name!r}: "
                                 f"per-channel scales need ONNX opset >= 13, the model has {self.opset}")
            attrs["axis"] = axis
        self.emit("DequantizeLinear", inputs, [out], f"{self.node.name}/dq_{tag}", **attrs)
        return out

    def q(self, y: str, scale: str, zp: str | None, out: str) -> None:
        self.emit("QuantizeLinear", [y, scale] + ([zp] if zp else []), [out], f"{self.node.name}/q")

    def attrs(self, node: Any, drop: tuple[str, ...] = ()) -> dict[str, Any]:
        from onnx import helper

        return {a.name: helper.get_attribute_value(a) for a in node.attribute if a.name not in drop}

    def bias(self, b: str, sx: str, sw: str, alpha: float = 1.0) -> str:
        """An int32 bias dequantized with scale alpha * sx * sw (per output channel when sw is)."""
        prod = (np.float32(alpha) * self.const(sx).astype(np.float32) * self.const(sw).astype(np.float32))
        scale: Any = prod.astype(np.float32).reshape(-1) if prod.size > 1 else np.float32(prod.reshape(()))
        s = self.add_init("bias_scale", scale)
        return self.dq(b, s, None, "bias", axis=0)

    # -- converters -------------------------------------------------------------------------------------------
    def rewrite(self, node: Any) -> bool:
        self.node = node
        op, i, name = node.op_type, list(node.input), node.name
        opt = (lambda k: i[k] if len(i) > k and i[k] else None)  # noqa: E731
        if op == "QLinearConv":
            x = self.dq(i[0], i[1], i[2], "x")
            w = self.dq(i[3], i[4], i[5], "w", axis=0)
            ins = [x, w] + ([self.bias(i[8], i[1], i[4])] if opt(8) else [])
            self.emit("Conv", ins, [f"{name}_float"], name, **self.attrs(node))
            self.q(f"{name}_float", i[6], i[7], node.output[0])
        elif op == "QLinearMatMul":
            a = self.dq(i[0], i[1], i[2], "a")
            b = self.dq(i[3], i[4], i[5], "b", axis=1)
            self.emit("MatMul", [a, b], [f"{name}_float"], name)
            self.q(f"{name}_float", i[6], i[7], node.output[0])
        elif op == "QGemm":
            at = self.attrs(node)
            alpha = float(at.get("alpha", 1.0))
            a = self.dq(i[0], i[1], i[2], "a")
            b = self.dq(i[3], i[4], i[5], "b", axis=0 if at.get("transB", 0) else 1)
            ins = [a, b] + ([self.bias(i[6], i[1], i[4], alpha)] if opt(6) else [])
            gemm_attrs = {k: v for k, v in at.items() if k in ("transA", "transB", "alpha")}
            if opt(7):
                self.emit("Gemm", ins, [f"{name}_float"], name, **gemm_attrs)
                self.q(f"{name}_float", i[7], opt(8), node.output[0])
            else:  # no output scale: QGemm's output is float
                self.emit("Gemm", ins, [node.output[0]], name, **gemm_attrs)
        elif op in _BINARY:
            a = self.dq(i[0], i[1], opt(2), "a")
            b = self.dq(i[3], i[4], opt(5), "b")
            self.emit(_BINARY[op], [a, b], [f"{name}_float"], name)
            self.q(f"{name}_float", i[6], opt(7), node.output[0])
        elif op in _UNARY:
            at = self.attrs(node, drop=("channels_last", "opset"))
            nhwc_rank = None  # the input's rank where the op is channels-last
            if self.attrs(node).get("channels_last", 0):
                nhwc_rank = self._rank(i[0], infer=True)
                if (op not in ("QLinearGlobalAveragePool", "QLinearAveragePool") or nhwc_rank is None
                        or nhwc_rank < 3):
                    why = "" if nhwc_rank is None or nhwc_rank >= 3 else f" on a rank-{nhwc_rank} tensor"
                    raise InputError(("model", name), f"{op} node {name!r}: channels_last=1 is not supported{why}"
                                     + (" (its input's rank is unknown)" if nhwc_rank is None else ""))
            if op == "QLinearSoftmax" and int(self.attrs(node).get("opset", 13)) < 13:
                rank = self._rank(i[0])
                axis = int(at.get("axis", 1))
                if rank is None or axis % rank != rank - 1:
                    raise InputError(("model", name), f"{op} node {name!r}: opset<13 softmax over axes "
                                     f"{axis}.. of a rank-{rank} tensor is not supported (only the last axis)")
                at["axis"] = -1
            if op == "QLinearSoftmax" and not np.isfinite(self.const(i[1])).all():
                self._codes_of_infinite_softmax(i[0], opt(4), node.output[0])
                return True
            if nhwc_rank is None:
                x = self.dq(i[0], i[1], opt(2), "x")
                self.emit(_UNARY[op], [x], [f"{name}_float"], name, **at)
                self.q(f"{name}_float", i[3], opt(4), node.output[0])
            else:  # channels_last=1 (onnxruntime's transpose optimiser writes it): the same pool of the codes
                # transposed to channels-first, its result transposed back (exact: Transpose only moves codes)
                self.emit("Transpose", [i[0]], [f"{name}/nchw_in"], f"{name}/to_nchw",
                          perm=[0, nhwc_rank - 1, *range(1, nhwc_rank - 1)])
                x = self.dq(f"{name}/nchw_in", i[1], opt(2), "x")
                self.emit(_UNARY[op], [x], [f"{name}_float"], name, **at)
                self.q(f"{name}_float", i[3], opt(4), f"{name}/nchw_out")
                self.emit("Transpose", [f"{name}/nchw_out"], [node.output[0]], f"{name}/to_nhwc",
                          perm=[0, *range(2, nhwc_rank), 1])
        elif op == "QLinearWhere":  # condition, x, x_scale, x_zp, y, y_scale, y_zp, z_scale, z_zp
            x = self.dq(i[1], i[2], opt(3), "x")
            y = self.dq(i[4], i[5], opt(6), "y")
            self.emit("Where", [i[0], x, y], [f"{name}_float"], name)
            self.q(f"{name}_float", i[7], opt(8), node.output[0])
        elif op == "QLinearConcat":
            ins = []
            for k in range(2, len(i), 3):
                ins.append(self.dq(i[k], i[k + 1], i[k + 2] or None, f"x{(k - 2) // 3}"))
            self.emit("Concat", ins, [f"{name}_float"], name, **self.attrs(node))
            self.q(f"{name}_float", i[0], i[1], node.output[0])
        else:
            self.out.append(node)
            return False
        return True

    def _codes_of_infinite_softmax(self, x: str, y_zp: str | None, out: str) -> None:
        """A QLinearSoftmax whose input scale is +inf (onnxruntime's quantizer writes one for attention scores
        under a -inf causal mask): onnxruntime's kernel computes code 0 for every element, whatever the input,
        and the QDQ reading of the unit (the float definition: NaN, quantized to the type's minimum) does not.
        Its exp table's top entry, the one each row's maximum reads, is exp(0 x inf) = NaN, so every row sum and
        quotient is NaN, and its scalar conversion of a NaN double to the output type keeps the low byte of
        INT32_MIN. The file's own operator is stated as what it computes: zeros of the input's shape, in the
        output's type (the zero point's; uint8 when it has none, as the operator's default)."""
        from onnx import TensorProto, helper

        signed = y_zp is not None and self.const(y_zp).dtype == np.int8
        shape = f"{self.node.name}/shape_out"
        self.emit("Shape", [x], [shape], f"{self.node.name}/shape")
        zero = helper.make_tensor("value", TensorProto.INT8 if signed else TensorProto.UINT8, [1], [0])
        self.emit("ConstantOfShape", [shape], [out], self.node.name, value=zero)

    def _rank(self, tensor: str, infer: bool = False) -> int | None:
        """The rank the model declares for `tensor`; with `infer`, else the one onnx's shape inference finds."""
        for info in [*self.model.graph.input, *self.model.graph.value_info]:
            if info.name == tensor and info.type.tensor_type.HasField("shape"):
                return len(info.type.tensor_type.shape.dim)
        if infer:  # the nodes before this one, already rewritten into ONNX's own operators, which onnx infers
            import onnx
            from onnx import helper

            g = helper.make_graph(list(self.out), "rewritten", list(self.model.graph.input), [],
                                  initializer=[*self.model.graph.initializer, *self.new_inits])
            m = helper.make_model(g, opset_imports=list(self.model.opset_import))
            m.ir_version = self.model.ir_version
            inferred = onnx.shape_inference.infer_shapes(m)
            for info in inferred.graph.value_info:
                if info.name == tensor and info.type.tensor_type.HasField("shape"):
                    return len(info.type.tensor_type.shape.dim)
        return None


def to_qdq(model: Any) -> dict[str, int]:
    """Rewrite the QOperator nodes of `model` in place; returns {op type: count} of what was rewritten."""
    if not any(n.op_type in QOPERATORS for n in model.graph.node):
        return {}
    rw = _Rewriter(model)
    done: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in QOPERATORS and rw.rewrite(node):
            done[node.op_type] = done.get(node.op_type, 0) + 1
        elif node.op_type not in QOPERATORS:
            rw.out.append(node)
    del model.graph.node[:]
    model.graph.node.extend(rw.out)
    model.graph.initializer.extend(rw.new_inits)
    return done
