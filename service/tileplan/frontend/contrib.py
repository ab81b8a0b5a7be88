# mypy: disable-error-code="valid-type"
# (TVMScript parameter annotations, T.Buffer((shape), dtype), are calls that TVM parses, not Python types)
"""onnxruntime's com.microsoft fusions that its optimizers save in a model (a user who ran
`onnxruntime.transformers.optimizer`, or saved a session's optimized graph, then quantized it):
SkipLayerNormalization / SkipSimplifiedLayerNormalization (Add + LayerNorm / RMSNorm of transformer blocks) and
FusedMatMul (MatMul with transposed operands and a scale: attention scores), FusedConv (Conv + activation,
unfused at import: `fused_conv_unfused`). onnx's shape inference does not know
them: `output_shapes` gives their outputs' shapes (`onnx_import.infer_shapes` adds them as hints); the converters
compute each as onnxruntime 1.32's CPU kernel does (`skip_layer_norm_call`, host_ops.matmul_call)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.errors import InputError

SKIP_NORMS = {"SkipLayerNormalization": False, "SkipSimplifiedLayerNormalization": True}  # op -> simplified
CONTRIB_OPS = {*SKIP_NORMS, "FusedMatMul", "EmbedLayerNormalization", "Attention"}
# outputs onnxruntime's CPU kernels compute (the others: an error naming the node where the model reads them)
COMPUTED_OUTPUTS = {"SkipLayerNormalization": (0, 3), "SkipSimplifiedLayerNormalization": (0, 3),
                    "EmbedLayerNormalization": (0, 1, 2), "Attention": (0,), "FusedMatMul": (0,)}
MASK_FILTER = -10000.0  # Attention's default mask_filter_value


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
    if node.op_type == "EmbedLayerNormalization":  # output, mask_index, embedding_sum
        if node.input[2] not in known:
            return None
        h = known[node.input[2]][0][-1]
        return [([*x_shape, h], 1), ([x_shape[0]], 6), ([*x_shape, h], 1)][:len(node.output)]
    if node.op_type == "Attention":  # output, present
        w_shape = known[node.input[1]][0]
        sizes = _attr(node, "qkv_hidden_sizes", None)
        hv = int(sizes[2]) if sizes else w_shape[-1] // 3
        return [([*x_shape[:-1], hv], x_type)] + [None] * (len(node.output) - 1)  # type: ignore[list-item]
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
    """A CONTRIB_OPS node whose output Tileplan does not compute (COMPUTED_OUTPUTS: a SkipLayerNormalization's
    mean or inverse standard deviation, an Attention's present state) is an error naming the node, where the
    model reads it."""
    g = model.graph
    read = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for n in g.node:
        if n.op_type not in CONTRIB_OPS:
            continue
        for k, o in enumerate(n.output):
            if o and o in read and k not in COMPUTED_OUTPUTS[n.op_type]:
                what = ("its mean / inverse standard deviation outputs are read (Tileplan computes the normalised "
                        "output and the input + skip sum)" if n.op_type in SKIP_NORMS
                        else f"its output {k} ({o!r}) is read (Tileplan computes outputs "
                             f"{', '.join(map(str, COMPUTED_OUTPUTS[n.op_type]))})")
                raise InputError(("model", n.name), f"{n.op_type} node {n.name!r}: {what}")


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
        from tvm.ir.expr import GenericConst

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
        packed_b = isinstance(b, GenericConst) and len(b.ty.shape) == 2  # onnxruntime prepacks a constant B
        a = swap(a) if trans_a else a
        b = swap(b) if int(attrs.get("transB", 0)) else b
        return matmul_call(bb, a, b, float(np.float32(attrs.get("alpha", 1.0))), trans_a, packed_b)
    if op_name == "EmbedLayerNormalization":
        return embed_layer_norm_call(bb, inputs, float(attrs.get("epsilon", 1e-12)))
    if op_name == "Attention":
        return attention_call(bb, inputs, attrs)
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


def embed_layer_norm_call(bb: Any, inputs: Any, eps: float) -> Any:
    """com.microsoft EmbedLayerNormalization (BERT's embeddings, fused by onnxruntime's transformer optimizer) as
    onnxruntime 1.32's CPU kernel computes it: per token, v = (word + position) (+ segment) embedding, each add
    rounded; mean = (the row summed in order) / H; m2 = the sum in order of (v - mean)^2, each square rounded;
    y = (v - mean) / sqrtf(m2 / H + eps) * gamma + beta (measured bit for bit against onnxruntime); mask_index
    [B] int32: the count of mask elements equal to 1 (0 without a mask); embedding_sum: v. Positions are
    0 .. S-1 unless position_ids are given."""
    from tvm import relax, te, tirx

    ids, seg, word, pos, seg_emb, gamma, beta = (inputs[k] if len(inputs) > k else None for k in range(7))
    ids_ty: Any = ids.ty if ids is not None else None
    word_ty: Any = word.ty if word is not None else None
    mask = inputs[7] if len(inputs) > 7 else None
    pos_ids = inputs[8] if len(inputs) > 8 else None
    if any(t is None for t in (ids, word, pos, gamma, beta)) or (seg is None) != (seg_emb is None):
        raise ValueError("an input it needs is missing (input_ids, word / position embeddings, gamma, beta; "
                         "segment ids with segment embeddings)")
    if any(str(t.ty.dtype) != "float32" for t in (word, pos, gamma, beta, *([seg_emb] if seg_emb is not None else []))):
        raise ValueError("embeddings or gamma / beta that are not float32")
    b_, s_ = (int(d) for d in ids_ty.shape)
    h = int(word_ty.shape[-1])
    f32 = "float32"
    pos_shape = [int(d) for d in pos_ids.ty.shape] if pos_ids is not None else None

    def compute(*args: Any) -> Any:
        it = iter(args)
        ids_t, word_t, pos_t, gamma_t, beta_t = next(it), next(it), next(it), next(it), next(it)
        seg_t, seg_emb_t = (next(it), next(it)) if seg is not None else (None, None)
        seg_pair: Any = (seg_t, seg_emb_t)
        pos_ids_t = next(it) if pos_ids is not None else None

        def value(b: Any, s: Any, i: Any) -> Any:
            p = s if pos_ids_t is None else pos_ids_t[b if pos_shape and pos_shape[0] > 1 else 0, s]
            v = word_t[ids_t[b, s], i] + pos_t[p, i]
            return v + seg_pair[1][seg_pair[0][b, s], i] if seg_t is not None else v

        v = te.compute((b_, s_, h), value, name="embed_sum")
        k1 = te.reduce_axis((0, h), name="k1")
        total = te.compute((b_, s_), lambda b, s: te.sum(v[b, s, k1], axis=k1), name="embed_total")
        n = tirx.const(float(h), f32)
        mean = te.compute((b_, s_), lambda b, s: total[b, s] / n, name="embed_mean")
        k2 = te.reduce_axis((0, h), name="k2")
        m2 = te.compute((b_, s_), lambda b, s: te.sum((v[b, s, k2] - mean[b, s]) * (v[b, s, k2] - mean[b, s]),
                                                      axis=k2), name="embed_m2")
        e = tirx.const(float(np.float32(eps)), f32)
        y = te.compute((b_, s_, h), lambda b, s, i: (v[b, s, i] - mean[b, s]) / tirx.sqrt(m2[b, s] / n + e)
                       * gamma_t[i] + beta_t[i], name="embed_norm")
        return [y, v]

    args = [ids, word, pos, gamma, beta, *([seg, seg_emb] if seg is not None else []),
            *([pos_ids] if pos_ids is not None else [])]
    both = bb.emit(bb.call_te(compute, *args, primfunc_name_hint="embed_layer_norm"))
    y, v = bb.emit(relax.TupleGetItem(both, 0)), bb.emit(relax.TupleGetItem(both, 1))
    if mask is None:
        mask_index = relax.const(np.zeros(b_, np.int32))
    else:
        ones = relax.op.astype(relax.op.equal(mask, relax.const(1, str(mask.ty.dtype))), "int32")
        mask_index = bb.normalize(relax.op.sum(bb.normalize(ones), axis=[1]))
    return relax.Tuple([y, mask_index, v])


def attention_call(bb: Any, inputs: Any, attrs: dict) -> Any:
    """com.microsoft Attention (BERT's self-attention, fused by onnxruntime's transformer optimizer) as
    onnxruntime 1.32's CPU kernel computes it (measured bit for bit against onnxruntime):

    1. Q, K, V per head: MLAS's SGEMM of the input by the head's columns of the constant weights (prepacked:
       slices of SGEMM_PACKED_STRIDE_K), each output starting from its bias (beta 1);
    2. scores = Q K^T with MLAS's alpha (scale, default 1 / sqrt(head size)), starting from the mask's value
       (0 where a key is kept, mask_filter_value where not: a 1-D mask_index [B] keeps keys before its end, a
       2-D mask [B, S] those whose mask is positive; no mask: scores = alpha * Q K^T);
    3. softmax over the keys (MLAS's, host_ops' Softmax legalization);
    4. probs V (MLAS's SGEMM, host_ops' MatMul legalization), heads concatenated.

    Refused (ValueError, named after the node by the import): past / present states, unidirectional (causal)
    attention, an attention bias, rotary embeddings, Q / K / V of different hidden sizes, weights computed at
    run time, other mask forms."""
    from tvm import relax, te, tirx
    from tvm.ir.expr import GenericConst

    from tileplan.frontend.host_ops import SGEMM_PACKED_STRIDE_K, _matmul_te, sgemm_stride_k

    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    mask = inputs[3] if len(inputs) > 3 else None
    if any(inputs[k] is not None for k in range(4, min(len(inputs), 7))):
        raise ValueError("past state, attention bias or past_sequence_length given (Tileplan computes "
                         "self-attention without them)")
    for a in ("unidirectional", "do_rotary", "past_present_share_buffer"):
        if int(attrs.get(a, 0)):
            raise ValueError(f"{a} set (Tileplan computes bidirectional self-attention without it)")
    if not isinstance(w, GenericConst):
        raise ValueError("its weights are computed at run time (Tileplan computes constant weights, which "
                         "onnxruntime prepacks)")
    nh = int(attrs["num_heads"])
    xs = [int(d) for d in x.ty.shape]
    ws = [int(d) for d in w.ty.shape]
    if len(xs) != 3 or len(ws) != 2 or ws[0] != xs[2] or ws[1] % 3:
        raise ValueError(f"an input of shape {xs} and weights of shape {ws}")
    sizes = attrs.get("qkv_hidden_sizes")
    if sizes and len({int(v) for v in sizes}) != 1:
        raise ValueError(f"qkv_hidden_sizes {list(sizes)} (Tileplan computes equal Q, K and V sizes)")
    b_, s_, hin = xs
    h = ws[1] // 3
    if h % nh:
        raise ValueError(f"a hidden size {h} that {nh} heads do not divide")
    hs = h // nh
    if any(str(t.ty.dtype) != "float32" for t in (x, w, *([bias] if bias is not None else []))):
        raise ValueError("an input, weights or bias that are not float32")
    ms = [int(d) for d in mask.ty.shape] if mask is not None else None
    if ms is not None and ms not in ([b_], [b_, s_]):
        raise ValueError(f"a mask of shape {ms} (Tileplan computes a 1-D mask_index [batch] of end positions "
                         "and a 2-D mask [batch, sequence])")
    scale = float(attrs.get("scale", 0.0)) or float(np.float32(1.0) / np.sqrt(np.float32(hs)))
    alpha = float(np.float32(scale))
    filt = float(np.float32(attrs.get("mask_filter_value", MASK_FILTER)))
    f32 = "float32"

    def qkv(xt: Any, wt: Any, *bt: Any) -> Any:
        return _matmul_te([b_, s_, 3 * h], hin, hs, lambda i, r: (xt[i[0], i[1], r], wt[r, i[2]]),
                          init=(lambda i: bt[0][i[2]]) if bt else None, stride=SGEMM_PACKED_STRIDE_K)

    proj = bb.emit(bb.call_te(qkv, x, w, *([bias] if bias is not None else []), primfunc_name_hint="attention_qkv"))
    heads = bb.emit(relax.op.permute_dims(relax.op.reshape(proj, (b_, s_, 3, nh, hs)), [2, 0, 3, 1, 4]))
    q, k, v = (bb.emit(relax.op.squeeze(relax.op.strided_slice(heads, [0], [j], [j + 1]), [0])) for j in range(3))

    def scores(qt: Any, kt: Any, *mt: Any) -> Any:
        def kept(i: Any) -> Any:  # i: (b, head, query, key)
            if not mt:
                return None
            m = mt[0]
            keep = (i[3] < m[i[0]]) if len(ms or []) == 1 else (m[i[0], i[3]] > tirx.const(0, str(m.dtype)))
            return te.if_then_else(keep, tirx.const(0.0, f32), tirx.const(filt, f32))

        init = (lambda i: kept(i)) if mt else None
        return _matmul_te([b_, nh, s_, s_], hs, s_, lambda i, r: (qt[i[0], i[1], i[2], r], kt[i[0], i[1], i[3], r]),
                          alpha, init=init, stride=sgemm_stride_k(s_, hs))

    sc = bb.emit(bb.call_te(scores, q, k, *([mask] if mask is not None else []), primfunc_name_hint="attention_scores"))
    probs = bb.emit(relax.op.nn.softmax(sc, axis=-1))
    out = bb.emit(relax.op.matmul(probs, v))
    y = bb.normalize(relax.op.reshape(relax.op.permute_dims(out, [0, 2, 1, 3]), (b_, s_, h)))
    return relax.Tuple([y, y])  # (present: never read, check_unread_outputs)


# FusedConv's activation -> (the ONNX op it is, its attributes from activation_params); onnxruntime's CPU kernel
# applies these through MLAS (MlasActivation), the same arithmetic as the ops' own kernels
FUSED_CONV_ACTIVATIONS: dict[str, Any] = {
    "Relu": lambda p: {},
    "Tanh": lambda p: {},
    "Sigmoid": lambda p: {},
    "LeakyRelu": lambda p: {"alpha": float(p[0])} if len(p) >= 1 else None,
    "HardSigmoid": lambda p: {"alpha": float(p[0]), "beta": float(p[1])} if len(p) >= 2 else None,
    "Clip": lambda p: {"min": float(p[0]), "max": float(p[1])} if len(p) >= 2 else None,
}
CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def fused_conv_unfused(model: Any) -> list[str]:
    """com.microsoft FusedConv (onnxruntime's ConvActivationFusion / ConvAddActivationFusion, saved in a model) as
    the ONNX operators it fuses, in place: Conv(X, W, B) then its activation, or with the Z input (a residual
    added in the kernel) Conv(X, W) + Z + B (onnxruntime's GEMM accumulates onto Z, its bias added after) then its
    activation. Runs after weight_bias_quantization: onnxruntime computes a FusedConv in float with its float
    weights (its WeightBiasQuantization and QDQ selectors take Conv only), and so the unfused Conv keeps them.
    Raises InputError naming the node for an activation onnxruntime's kernel does not define. Returns the names
    of the nodes rewritten."""
    from onnx import helper, numpy_helper

    if not any(n.op_type == "FusedConv" and n.domain == "com.microsoft" for n in model.graph.node):
        return []
    out: list[Any] = []
    done: list[str] = []
    for n in model.graph.node:
        if n.op_type != "FusedConv" or n.domain != "com.microsoft":
            out.append(n)
            continue
        act = _attr(n, "activation", b"")
        act = act.decode() if isinstance(act, bytes) else str(act)
        params = [float(v) for v in _attr(n, "activation_params", [])]
        make = FUSED_CONV_ACTIVATIONS.get(act)
        made = make(params) if make is not None else None
        if act and made is None:
            why = (f"activation {act!r}, which onnxruntime's FusedConv does not define (it takes "
                   f"{', '.join(FUSED_CONV_ACTIVATIONS)})" if make is None
                   else f"activation {act!r} with activation_params {params} (too few)")
            raise InputError(("model", n.name), f"FusedConv node {n.name!r}: {why}")
        act_attrs: dict[str, Any] = made or {}
        conv_attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute if a.name in CONV_ATTRS}
        x, w, b, z = (list(n.input) + ["", "", ""])[:4]
        y = n.output[0]
        stem = n.name or y
        cur = f"{stem}/unfused_conv"
        out.append(helper.make_node("Conv", [x, w, b] if b and not z else [x, w], [cur], name=stem, **conv_attrs))
        if z:
            out.append(helper.make_node("Add", [cur, z], [f"{stem}/unfused_sum"], name=f"{stem}/unfused_sum"))
            cur = f"{stem}/unfused_sum"
            if b:  # [C] -> [C, 1, ..., 1] over the spatial axes
                spatial = _spatial_rank(model, n, w)
                if spatial is None:
                    raise InputError(("model", n.name), f"FusedConv node {n.name!r}: a Z input with a bias, and its "
                                                        "kernel's rank unknown (no kernel_shape, a computed weight)")
                axes = f"{stem}/unfused_bias_axes"
                model.graph.initializer.append(numpy_helper.from_array(np.arange(1, spatial + 1, dtype=np.int64),
                                                                       axes))
                out.append(helper.make_node("Unsqueeze", [b, axes], [f"{stem}/unfused_bias"],
                                            name=f"{stem}/unfused_bias"))
                out.append(helper.make_node("Add", [cur, f"{stem}/unfused_bias"], [f"{stem}/unfused_biased"],
                                            name=f"{stem}/unfused_biased"))
                cur = f"{stem}/unfused_biased"
        if not act:
            out.append(helper.make_node("Identity", [cur], [y], name=f"{stem}/unfused_identity"))
        elif act == "Clip":
            lo, hi = f"{stem}/unfused_clip_min", f"{stem}/unfused_clip_max"
            model.graph.initializer.extend([numpy_helper.from_array(np.array(act_attrs["min"], np.float32), lo),
                                            numpy_helper.from_array(np.array(act_attrs["max"], np.float32), hi)])
            out.append(helper.make_node("Clip", [cur, lo, hi], [y], name=f"{stem}/unfused_clip"))
        else:
            out.append(helper.make_node(act, [cur], [y], name=f"{stem}/unfused_{act.lower()}", **act_attrs))
        done.append(n.name)
    del model.graph.node[:]
    model.graph.node.extend(out)
    return done


def _spatial_rank(model: Any, node: Any, w: str) -> int | None:
    """How many spatial axes a conv node's kernel has: its kernel_shape's length, or its weight initializer's
    rank - 2; None where neither is known."""
    ks = _attr(node, "kernel_shape", None)
    if ks:
        return len(ks)
    init = next((t for t in model.graph.initializer if t.name == w), None)
    return len(init.dims) - 2 if init is not None else None


NBITS = (4, 8)  # MatMulNBits code widths Tileplan unpacks


def _nbits_weight(b: np.ndarray, scales: np.ndarray, zp: np.ndarray | None, k: int, n: int, bits: int,
                  block: int) -> np.ndarray:
    """The float32 [K, N] weight a MatMulNBits' packed B [N, k_blocks, block * bits / 8] (codes packed from the
    low bits of each byte up), scales [N * k_blocks] and packed uint8 zero points ([N, ceil(k_blocks * bits / 8)],
    codes packed alike; default 2^(bits - 1)) stand for: (code - zero point) * scale, in float32 (exact
    difference, one rounding, as onnxruntime's dequantization)."""
    blocks = (k + block - 1) // block
    per = 8 // bits
    mask = (1 << bits) - 1
    raw = b.reshape(n, blocks, -1).astype(np.int32)
    codes = np.stack([(raw >> (bits * j)) & mask for j in range(per)], axis=-1).reshape(n, blocks, -1)[:, :, :block]
    if zp is None:
        zeros = np.full((n, blocks), 1 << (bits - 1), np.int32)
    else:
        zraw = zp.reshape(n, -1).astype(np.int32)
        zeros = np.stack([(zraw >> (bits * j)) & mask for j in range(per)], axis=-1).reshape(n, -1)[:, :blocks]
    diff = (codes - zeros[:, :, None]).astype(np.float32)
    w = diff * scales.reshape(n, blocks).astype(np.float32)[:, :, None]
    return np.ascontiguousarray(w.reshape(n, blocks * block)[:, :k].T)


def matmul_nbits_unfused(model: Any) -> list[str]:
    """com.microsoft MatMulNBits (blockwise 4- / 8-bit weights: onnxruntime's MatMul4BitsQuantizer / MatMulNBits
    quantizer, LLM exports) as the float MatMul (+ bias Add) it computes, in place: its constant packed weight
    dequantized once at import (`_nbits_weight`) into a float32 [K, N] initializer, the product computed on the host
    in float. Refused by name (InputError): other code widths, a g_idx input (act-order groups), B / scales / zero
    points that are not constants, zero points that are not packed uint8 codes (float ones), scales (so A: the
    same type) that are not float32, and accuracy_level 4 (onnxruntime then quantizes A to int8 per block: another product). Returns the
    names of the nodes rewritten."""
    from onnx import TensorProto, helper, numpy_helper

    if not any(n.op_type == "MatMulNBits" and n.domain == "com.microsoft" for n in model.graph.node):
        return []
    inits = {t.name: t for t in model.graph.initializer}
    out: list[Any] = []
    done: list[str] = []
    for n in model.graph.node:
        if n.op_type != "MatMulNBits" or n.domain != "com.microsoft":
            out.append(n)
            continue

        def refuse(why: str, node: Any = n) -> None:
            raise InputError(("model", node.name), f"MatMulNBits node {node.name!r}: {why}")

        k, nn = int(_attr(n, "K", 0)), int(_attr(n, "N", 0))
        bits, block = int(_attr(n, "bits", 4)), int(_attr(n, "block_size", 0))
        level = int(_attr(n, "accuracy_level", 0))
        a, b, scales, zp, g_idx, bias = (list(n.input) + [""] * 6)[:6]
        if bits not in NBITS:
            refuse(f"bits = {bits} (Tileplan unpacks {' and '.join(map(str, NBITS))}-bit codes)")
        if g_idx:
            refuse("a g_idx input (act-order groups: each row of K in its own block), which Tileplan does not read")
        if level == 4:
            refuse("accuracy_level 4 (onnxruntime quantizes A to int8 per block and multiplies integers: another "
                   "product than the float one Tileplan computes)")
        if k <= 0 or nn <= 0 or block < 16 or block & (block - 1):
            refuse(f"K = {k}, N = {nn}, block_size = {block} (K, N positive; block_size a power of 2, >= 16)")
        for what, name in (("B", b), ("scales", scales), ("zero_points", zp)):
            if name and name not in inits:
                refuse(f"its {what} is not a constant initializer (Tileplan dequantizes the weight at import)")
        if zp and inits[zp].data_type != TensorProto.UINT8:
            refuse("zero points of the scales' type (float), which Tileplan does not read; packed uint8 ones compile")
        if inits[scales].data_type != TensorProto.FLOAT:
            refuse("scales that are not float32")
        blocks = (k + block - 1) // block
        bv = numpy_helper.to_array(inits[b])
        sv = numpy_helper.to_array(inits[scales])
        zv = numpy_helper.to_array(inits[zp]) if zp else None
        if (bv.dtype != np.uint8 or bv.size != nn * blocks * block * bits // 8 or sv.size != nn * blocks
                or (zv is not None and zv.size != nn * ((blocks * bits + 7) // 8))):
            refuse(f"B {list(bv.shape)}, scales {list(sv.shape)}"
                   + (f", zero_points {list(zv.shape)}" if zv is not None else "")
                   + f" do not fit K = {k}, N = {nn}, bits = {bits}, block_size = {block}")
        w = _nbits_weight(bv, sv, zv, k, nn, bits, block)
        wname = f"{n.name or n.output[0]}/dequantized_weight"
        model.graph.initializer.append(numpy_helper.from_array(w, wname))
        y = n.output[0]
        if bias:
            out.append(helper.make_node("MatMul", [a, wname], [f"{y}/unbiased"], name=n.name))
            out.append(helper.make_node("Add", [f"{y}/unbiased", bias], [y], name=f"{n.name}/bias"))
        else:
            out.append(helper.make_node("MatMul", [a, wname], [y], name=n.name))
        done.append(n.name)
    del model.graph.node[:]
    model.graph.node.extend(out)
    return done
