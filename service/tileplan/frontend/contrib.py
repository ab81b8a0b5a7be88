# mypy: disable-error-code="valid-type"
# (TVMScript parameter annotations, T.Buffer((shape), dtype), are calls that TVM parses, not Python types)
"""onnxruntime's com.microsoft fusions that its optimizers save in a model (a user who ran
`onnxruntime.transformers.optimizer`, or saved a session's optimized graph, then quantized it):
SkipLayerNormalization / SkipSimplifiedLayerNormalization (Add + LayerNorm / RMSNorm of transformer blocks) and
FusedMatMul (MatMul with transposed operands and a scale: attention scores). onnx's shape inference does not know
them: `output_shapes` gives their outputs' shapes (`onnx_import.infer_shapes` adds them as hints); the converters
compute each as onnxruntime 1.32's CPU kernel does (`skip_layer_norm_call`, host_ops.matmul_call)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.errors import InputError

SKIP_NORMS = {"SkipLayerNormalization": False, "SkipSimplifiedLayerNormalization": True}  # op -> simplified
CONTRIB_OPS = {*SKIP_NORMS, "FusedMatMul"}


def _attr(node: Any, name: str, default: Any) -> Any:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def output_shapes(node: Any, known: dict[str, tuple[list[int], int]]) -> list[tuple[list[int], int]] | None:
    """(shape, element type) of each output of a CONTRIB_OPS node from its inputs' (`known`: name -> static shape
    and type), None where an input's is not known yet."""
    if any(i and i not in known for i in node.input[:2]):
        return None
    x_shape, x_type = known[node.input[0]]
    if node.op_type in SKIP_NORMS:  # output, mean, inverse standard deviation, input + skip (+ bias)
        stats = [*x_shape[:-1], 1]
        return [(x_shape, x_type), (stats, 1), (stats, 1), (x_shape, x_type)][:len(node.output)]
    if node.op_type == "FusedMatMul":
        b_shape, _ = known[node.input[1]]
        if len(x_shape) < 2 or len(b_shape) < 2:
            return None
        a2 = x_shape[-2:][::-1] if _attr(node, "transA", 0) else x_shape[-2:]
        b2 = b_shape[-2:][::-1] if _attr(node, "transB", 0) else b_shape[-2:]
        try:
            batch = list(np.broadcast_shapes(tuple(x_shape[:-2]), tuple(b_shape[:-2])))
        except ValueError:
            return None
        return [([*batch, a2[0], b2[1]], x_type)]
    return None


def check_unread_outputs(model: Any) -> None:
    """A SkipLayerNormalization whose mean or inverse-standard-deviation output the model reads is an error naming
    the node: onnxruntime's CPU kernel never writes them (only the output and the input + skip sum)."""
    g = model.graph
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for n in g.node:
        if n.op_type in SKIP_NORMS and any(o and o in read for o in n.output[1:3]):
            raise InputError(("model", n.name), f"{n.op_type} node {n.name!r}: its mean / inverse standard "
                             "deviation outputs are read, which onnxruntime's CPU kernel does not compute (it "
                             "writes the normalised output and the input + skip sum only)")


def convert(bb: Any, op_name: str, inputs: Any, attrs: dict) -> Any:
    """A CONTRIB_OPS node as Relax (ValueError: why it cannot be, which the import reports naming the node)."""
    from tvm import relax

    from tileplan.frontend.host_ops import matmul_call

    if op_name in SKIP_NORMS:
        simplified = SKIP_NORMS[op_name]
        x, skip, gamma = inputs[0], inputs[1], inputs[2]
        # SkipLayerNormalization: input, skip, gamma, beta, bias; the simplified form has no beta
        rest = [None, *inputs[3:4]] if simplified else list(inputs[3:5])
        beta, bias = (rest + [None, None])[:2]
        if any(t is not None and str(t.ty.dtype) != "float32" for t in (x, skip, gamma, beta, bias)):
            raise ValueError("a tensor that is not float32 (Tileplan computes the float32 kernel)")
        h = int(x.ty.shape[-1])
        for what, t in (("gamma", gamma), ("beta", beta), ("bias", bias)):
            if t is not None and [int(d) for d in t.ty.shape] != [h]:
                raise ValueError(f"its {what} is not a vector of the hidden size {h}")
        s_shape = [int(d) for d in skip.ty.shape]
        x_shape = [int(d) for d in x.ty.shape]
        if s_shape[-1] != h or int(np.prod(x_shape)) % int(np.prod(s_shape)):
            raise ValueError(f"a skip of shape {s_shape} for an input of shape {x_shape}")
        y, total = skip_layer_norm_call(bb, x, skip, gamma, beta, bias, float(attrs.get("epsilon", 1e-12)),
                                        simplified)
        return relax.Tuple([y, y, y, total])  # (mean and inverse deviation: never read, check_unread_outputs)
    if op_name == "FusedMatMul":
        a, b = inputs[0], inputs[1]
        if int(attrs.get("transBatchA", 0)) or int(attrs.get("transBatchB", 0)):
            raise ValueError("transBatchA / transBatchB set (Tileplan computes FusedMatMul without them)")
        if str(a.ty.dtype) != "float32" or str(b.ty.dtype) != "float32":
            raise ValueError("operands that are not float32")
        if len(a.ty.shape) < 2 or len(b.ty.shape) < 2:
            raise ValueError("an operand of fewer than 2 dimensions")

        def swap(t: Any) -> Any:
            n = len(t.ty.shape)
            return bb.normalize(relax.op.permute_dims(t, [*range(n - 2), n - 1, n - 2]))

        trans_a = bool(int(attrs.get("transA", 0)))
        a = swap(a) if trans_a else a
        b = swap(b) if int(attrs.get("transB", 0)) else b
        return matmul_call(bb, a, b, float(np.float32(attrs.get("alpha", 1.0))), trans_a)
    raise ValueError(f"{op_name} is not one of {sorted(CONTRIB_OPS)}")


def _row_stats_func(rows: int, h: int, eps: float, simplified: bool) -> Any:
    """[rows, 2] (mean, deviation) of each row of float32 v [rows, h] as onnxruntime 1.32's SkipLayerNorm kernel
    computes them (its x86-64 build, read from the machine code: Welford's update in float32, element after
    element): delta = v - mean; mean += delta / (i + 1); m2 += (v - mean) * delta; deviation =
    sqrtf(m2 / h + eps). The simplified (RMS) form: m2 += v * v, mean 0."""
    from tvm.script import tirx as T

    R, H = rows, h  # the kernel's letters
    e = float(np.float32(eps))

    @T.prim_func(private=True)
    def welford(v: T.Buffer((R, H), "float32"), stats: T.Buffer((R, 2), "float32")) -> None:
        T.func_attr({"op_pattern": 8})
        acc = T.alloc_buffer((3,), "float32")  # mean, m2, delta
        for r in range(R):
            acc[0] = T.float32(0)
            acc[1] = T.float32(0)
            for i in range(H):
                acc[2] = v[r, i] - acc[0]
                acc[0] = acc[0] + acc[2] / T.Cast("float32", i + 1)
                acc[1] = acc[1] + (v[r, i] - acc[0]) * acc[2]
            stats[r, 0] = acc[0]
            stats[r, 1] = T.sqrt(acc[1] / T.float32(H) + T.float32(e))

    @T.prim_func(private=True)
    def squares(v: T.Buffer((R, H), "float32"), stats: T.Buffer((R, 2), "float32")) -> None:
        T.func_attr({"op_pattern": 8})
        acc = T.alloc_buffer((1,), "float32")
        for r in range(R):
            acc[0] = T.float32(0)
            for i in range(H):
                acc[0] = acc[0] + v[r, i] * v[r, i]
            stats[r, 0] = T.float32(0)
            stats[r, 1] = T.sqrt(acc[0] / T.float32(H) + T.float32(e))

    return squares if simplified else welford


def skip_layer_norm_call(bb: Any, x: Any, skip: Any, gamma: Any, beta: Any | None, bias: Any | None, eps: float,
                         simplified: bool) -> tuple[Any, Any]:
    """(output, input + skip [+ bias]) of SkipLayerNormalization (`simplified`: SkipSimplifiedLayerNormalization)
    of float32 `x` [..., H] with onnxruntime 1.32's CPU arithmetic, one row of H elements at a time (the skip's
    rows repeat when it has fewer): v = x + skip (+ bias), each add rounded; the row's mean and deviation
    (`_row_stats_func`); y = (v - mean) / deviation * gamma + beta (simplified: v / deviation * gamma), each
    operation rounded, no fused multiply-add."""
    from tvm import relax, te, tirx

    shape = [int(d) for d in x.ty.shape]
    h = shape[-1]
    rows = int(np.prod(shape[:-1]))
    skip_rows = int(np.prod([int(d) for d in skip.ty.shape])) // h
    f32 = "float32"

    def summed(xv: Any, sv: Any, *c: Any) -> Any:
        def value(r: Any, i: Any) -> Any:
            v = xv[r, i] + sv[tirx.floormod(r, skip_rows) if skip_rows < rows else r, i]
            return v + c[0][i] if c else v

        return te.compute((rows, h), value, name="skip_sum")

    flat_x = bb.normalize(relax.op.reshape(x, (rows, h)))
    flat_skip = bb.normalize(relax.op.reshape(skip, (skip_rows, h)))
    v = bb.emit(bb.call_te(summed, flat_x, flat_skip, *([bias] if bias is not None else []),
                           primfunc_name_hint="skip_sum"))
    stats_fn = bb.add_func(_row_stats_func(rows, h, eps, simplified), "skip_norm_stats")
    stats = bb.emit(relax.call_tir(stats_fn, relax.Tuple([v]), relax.TensorType((rows, 2), f32)))

    def normalised(vv: Any, st: Any, g: Any, *b: Any) -> Any:
        def out(r: Any, i: Any) -> Any:
            if simplified:
                return vv[r, i] / st[r, 1] * g[i]
            y = (vv[r, i] - st[r, 0]) / st[r, 1] * g[i]
            return y + b[0][i] if b else y

        return te.compute((rows, h), out, name="skip_norm")

    y = bb.emit(bb.call_te(normalised, v, stats, gamma, *([beta] if beta is not None else []),
                           primfunc_name_hint="skip_layer_norm"))
    return bb.normalize(relax.op.reshape(y, shape)), bb.normalize(relax.op.reshape(v, shape))
