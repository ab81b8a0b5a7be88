"""Einsums that are matrix products, rewritten as MatMul so that the accelerator runs them (issue 24).

onnxruntime's quantizer does not quantize Einsum: it leaves it in float between the DequantizeLinear of its
operands and the QuantizeLinear of its result, often with data movement on either side (a LLaMA block's
grouped-query attention: `einsum("bhqd,bhkd->bhqk", q, repeat(k))`, divided by sqrt(d), then quantized;
`einsum("bhqk,bhkd->bhqd", p, repeat(v))`, transposed and reshaped, then quantized). Such an einsum is a
batched matrix product of two int8 activations: letters in both operands and the output are batch dimensions,
letters in one operand and the output its rows (M) or columns (N), letters in both operands but not the output
the reduction (K). `einsum_as_matmul` rewrites it, in place, as

    Transpose / Reshape of the int8 operands to [batch..., M, K] and [batch..., K, N] -> DequantizeLinear ->
    MatMul -> QuantizeLinear -> Reshape / Transpose of the int8 result to the einsum's output order

which the accelerator runs as any product of two activations (patterns.ActMatmul). Every step it moves is exact:
data movement (Reshape, Transpose, Tile, Expand, Unsqueeze, Squeeze, Flatten, Identity, Slice, Gather, Split:
MaxViT's q / k / v sliced from one projection) commutes with a
per-tensor DequantizeLinear / QuantizeLinear, and a division (multiplication) by a positive scalar constant
between the einsum and its QuantizeLinear becomes the QuantizeLinear's scale times (over) it. The judges compute
the einsum in float (onnxruntime has no integer Einsum): the accelerator's exact integer product then rounds
apart from their float sum where a result lies within float32 rounding of a quantisation boundary, a few results
in 10,000, and through a deep net those differences grow (MaxViT-T's 44 window / grid attention einsums
offloaded: the first code apart an einsum's, 9 of 100,352 by 1, the model's output 20.9% equal to `ort-int8`).
So the rewrite is the compile's option (CompileOptions.einsum "accelerator", `tileplan compile --einsum
accelerator`); by default such an einsum stays in float on the host, bit for bit as onnxruntime computes it, and
says so (HOST_REASON).

An einsum left as it is keeps a specific reason (`refused`): a float constant operand (the quantizer left the
weight in float; an int8 product would first round it, which neither judge does), an operand or a result that is
not quantized per tensor, or an equation that is not one matrix product."""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.frontend import onnx_graph

# ops that only move or select the values of their first input (the others: shapes, permutations, repeats,
# indices); Split has several outputs (one of them on an operand's path)
MOVES = {"Reshape", "Transpose", "Tile", "Expand", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Slice", "Gather",
         "Split"}


HOST_REASON = (
    "Einsum '{eq}' of two int8 activations is one (batched) matrix product with a quantized result, which the "
    "accelerator can run as a MatMul (tileplan compile --einsum accelerator), but onnxruntime has no integer Einsum: "
    "both judges compute it in float (MLAS's SGEMM), and the accelerator's exact integer sums round apart from "
    "their float ones at a few results in 10,000 (those within float rounding of a quantisation boundary); through "
    "a deep net the differences grow (MaxViT-T: 20.9% of its outputs equal to ort-int8 offloaded, 100% on the "
    "host), so by default it is computed in float on the host, as onnxruntime computes it")


def matmul_form(equation: str, ranks: tuple[int, int]) -> tuple[str, str, str, str, str, str, str] | None:
    """(a, b, out, batch, m, k, n) letters of a two-operand einsum that is one batched matrix product, else None:
    an explicit output, no ellipsis, no letter repeated within a term, every letter of a or b in the output or in
    both operands, at least one reduced letter. batch, m, n in the output's order; k in a's order."""
    eq = equation.replace(" ", "")
    if "..." in eq or "->" not in eq:
        return None
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        return None
    a, b = terms
    if (len(a), len(b)) != ranks or any(len(set(t)) != len(t) for t in (a, b, out)):
        return None
    if not all(c.isalpha() for c in a + b + out) or any(c not in a + b for c in out):
        return None
    batch = "".join(c for c in out if c in a and c in b)
    m = "".join(c for c in out if c in a and c not in b)
    n = "".join(c for c in out if c in b and c not in a)
    k = "".join(c for c in a if c in b and c not in out)
    if len(batch) + len(m) + len(n) != len(out) or len(batch) + len(m) + len(k) != len(a) \
            or len(batch) + len(n) + len(k) != len(b) or not k:
        return None  # a letter summed in one operand only, or no reduction
    return a, b, out, batch, m, k, n


def _per_tensor(node: Any, inits: dict[str, Any]) -> bool:
    """A QuantizeLinear / DequantizeLinear whose scale and zero point are one-element int8 / float constants."""
    from onnx import TensorProto, numpy_helper

    if len(node.input) < 3 or node.input[1] not in inits or node.input[2] not in inits:
        return False
    if inits[node.input[2]].data_type != TensorProto.INT8:
        return False
    s = numpy_helper.to_array(inits[node.input[1]])
    return s.size == 1 and numpy_helper.to_array(inits[node.input[2]]).size == 1 and bool(np.isfinite(s).all()) \
        and float(s.reshape(-1)[0]) > 0


def _operand(name: str, ix: onnx_graph.GraphIndex) -> tuple[Any, list[tuple[Any, int]]] | str:
    """(the DequantizeLinear, the data-movement nodes from its output to `name` in graph order, each with the index
    of its output on the path) of an einsum operand, or why the operand is not one the accelerator can take."""
    chain: list[tuple[Any, int]] = []
    while True:
        if name in ix.inits:
            return ("a float constant operand (onnxruntime's quantizer does not quantize Einsum, so the weight stays "
                    "float; an int8 product would first round it, which neither judge does)")
        p = ix.producer.get(name)
        if p is None:
            return "a float graph input as an operand (no int8 operand for the accelerator)"
        if p.op_type == "DequantizeLinear":
            if p.input[0] in ix.inits:
                return "a quantized constant operand (an int8 weight of an einsum: the accelerator's weight path " \
                       "takes MatMul / Gemm / Conv weights)"
            if not _per_tensor(p, ix.inits):
                return "an operand dequantized per axis or from another type than int8 (the accelerator takes one " \
                       "int8 scale and zero point per activation)"
            return p, chain[::-1]
        if p.op_type not in MOVES:
            return (f"an operand computed in float by a {p.op_type} (not DequantizeLinear of int8, nor data "
                    "movement of one)")
        chain.append((p, list(p.output).index(name)))
        name = p.input[0]


def _result(node: Any, ix: onnx_graph.GraphIndex) -> tuple[list[Any], float, Any] | str:
    """(the data-movement nodes after the einsum, the positive factor its result is multiplied by, the
    QuantizeLinear that ends the chain) or why its result is not quantized per tensor."""
    from onnx import numpy_helper

    name, factor, post = node.output[0], 1.0, list[Any]()
    while True:
        if name in ix.outputs:
            return "its float result is a graph output (not quantized: no int8 result for the accelerator)"
        users = ix.consumers.get(name, [])
        if len(users) != 1:
            return f"its float result is read by {len(users)} nodes (not only one QuantizeLinear)"
        c = users[0]
        if c.op_type == "QuantizeLinear":
            if not _per_tensor(c, ix.inits):
                return "its result is quantized per axis or to another type than int8"
            return post, factor, c
        other = [i for i in c.input if i != name]
        if c.op_type in ("Mul", "Div") and len(other) == 1 and other[0] in ix.inits \
                and (c.op_type == "Mul" or c.input[0] == name):
            v = numpy_helper.to_array(ix.inits[other[0]]).astype(np.float64)
            if v.size == 1 and np.isfinite(v).all() and float(v.reshape(-1)[0]) > 0:
                f = float(v.reshape(-1)[0])
                factor = factor * f if c.op_type == "Mul" else factor / f
                post.append(c)
                name = c.output[0]
                continue
        if c.op_type in MOVES and c.input[0] == name and len(c.output) == 1:
            post.append(c)
            name = c.output[0]
            continue
        return (f"its float result goes to a {c.op_type} before any QuantizeLinear (no int8 result for the "
                "accelerator to write)")


def einsum_as_matmul(model: Any, refused: dict[str, str] | None = None,
                     notes: dict[str, str] | None = None, rewrite: bool = True) -> list[str] | None:
    """Rewrite every Einsum of two int8 activations that is one batched matrix product and whose result is
    quantized per tensor (after data movement and scaling by a positive constant) as the MatMul above, in
    place. The MatMul keeps the Einsum's name. `refused` gets why each other two-operand Einsum is left as it is,
    `notes` what was done to each rewritten one. `rewrite` False (the compile's default, einsum="host"): none
    is rewritten; those that could be say why they stay in float. Returns the rewritten Einsums' names (None:
    none)."""

    g = model.graph
    if not any(n.op_type == "Einsum" for n in g.node):
        return None
    _, shapes = onnx_graph.types_and_shapes(model)
    shapes = {**{t.name: tuple(int(d) for d in t.dims) for t in g.initializer}, **shapes}
    done: list[str] = []
    for einsum_name in [n.name for n in g.node if n.op_type == "Einsum"]:
        ix = onnx_graph.index(g)
        node = next(n for n in g.node if n.name == einsum_name)
        eq = onnx_graph.attr(node, "equation", b"")
        eq = eq.decode() if isinstance(eq, bytes) else str(eq)
        if len(node.input) != 2 or any(i not in shapes for i in node.input):
            continue  # the generic Einsum reason
        sa, sb = shapes[node.input[0]], shapes[node.input[1]]
        form = matmul_form(eq, (len(sa), len(sb)))
        why: str | None = None
        if form is None:
            why = (f"equation '{eq}' is not one matrix product (each letter in the output and one operand, or in "
                   "both operands and summed)")
        ops = [_operand(i, ix) for i in node.input]
        res = _result(node, ix)
        a, b, out, batch, m, k, n = form or ("",) * 7
        size = {**dict(zip(a, sa)), **dict(zip(b, sb))}
        if why is None and any(dict(zip(a, sa))[c] != dict(zip(b, sb))[c] for c in batch + k):
            why = "its operands' shared dimensions differ in size (a broadcast einsum)"
        why = why or next((f"{r}" for r in ops if isinstance(r, str)), None) or (res if isinstance(res, str) else None)
        if why is not None:
            if refused is not None:
                refused[node.name] = (f"Einsum left in float on the host as onnxruntime computes it (it has no "
                                      f"integer Einsum): {why}")
            continue
        assert not isinstance(res, str) and not isinstance(ops[0], str) and not isinstance(ops[1], str)
        if not rewrite:
            if refused is not None:
                refused[node.name] = HOST_REASON.format(eq=eq)
            continue
        note = _rewrite(g, node, (a, b, out, batch, m, k, n), size, (ops[0], ops[1]), res, ix)
        done.append(node.name)
        if notes is not None:
            notes[node.name] = f"Einsum '{eq}' {note}"
    return done or None


def _rewrite(g: Any, node: Any, form: tuple[str, ...], size: dict[str, int],
             ops: tuple[tuple[Any, list[tuple[Any, int]]], tuple[Any, list[tuple[Any, int]]]],
             res: tuple[list[Any], float, Any],
             ix: onnx_graph.GraphIndex) -> str:
    """Replace `node` (an einsum of `form`'s letters, `size` each) in `g` by the MatMul of the module docstring;
    returns what was done, for the op's note."""
    from onnx import helper, numpy_helper

    a, b, out, batch, m, k, n = form
    post, factor, q = res
    pre: list[Any] = []
    inits: list[Any] = []
    tag = node.name

    def moved(src: str, chain: list[tuple[Any, int]], which: str) -> str:
        cur = src
        for j, (c, at) in enumerate(chain):
            outs = [f"{tag}/{which}_int8_{j}_{o}" for o in range(len(c.output))]
            copy = helper.make_node(c.op_type, [cur, *c.input[1:]], outs, name=f"{c.name}/int8_for_{tag}")
            copy.attribute.extend(c.attribute)
            pre.append(copy)
            cur = outs[at]
        return cur

    def to_matrix(cur: str, term: str, order: str, dims: tuple[int, ...], which: str) -> str:
        perm = [term.index(c) for c in order]
        if perm != list(range(len(perm))):
            pre.append(helper.make_node("Transpose", [cur], [f"{tag}/{which}_t"], name=f"{tag}/{which}_transpose",
                                        perm=perm))
            cur = f"{tag}/{which}_t"
        if list(dims) != [size[c] for c in order]:
            inits.append(numpy_helper.from_array(np.asarray(dims, np.int64), f"{tag}/{which}_shape"))
            pre.append(helper.make_node("Reshape", [cur, f"{tag}/{which}_shape"], [f"{tag}/{which}_r"],
                                        name=f"{tag}/{which}_reshape"))
            cur = f"{tag}/{which}_r"
        return cur

    def prod(letters: str) -> int:
        return int(np.prod([size[c] for c in letters])) if letters else 1

    bdims = tuple(size[c] for c in batch)
    mats = []
    for which, (dq, chain), term, order, dims in (
            ("a", ops[0], a, batch + m + k, (*bdims, prod(m), prod(k))),
            ("b", ops[1], b, batch + k + n, (*bdims, prod(k), prod(n)))):
        cur = to_matrix(moved(dq.input[0], chain, which), term, order, dims, which)
        new_dq = helper.make_node("DequantizeLinear", [cur, *dq.input[1:]], [f"{tag}/{which}_dq"],
                                  name=f"{dq.name}/for_{tag}")
        new_dq.attribute.extend(dq.attribute)
        pre.append(new_dq)
        mats.append(f"{tag}/{which}_dq")
    pre.append(helper.make_node("MatMul", mats, [f"{tag}/y"], name=node.name))
    scale = q.input[1]
    if factor != 1.0:
        s = numpy_helper.to_array(ix.inits[q.input[1]])
        inits.append(numpy_helper.from_array((s.astype(np.float64) / factor).astype(np.float32), f"{tag}/y_scale"))
        scale = f"{tag}/y_scale"
    tail: list[Any] = []
    qy = f"{tag}/y_q"
    pre.append(helper.make_node("QuantizeLinear", [f"{tag}/y", scale, *q.input[2:]], [qy], name=f"{q.name}/mm"))
    pre[-1].attribute.extend(q.attribute)
    cur = qy
    if len(m) != 1 or len(n) != 1:
        inits.append(numpy_helper.from_array(np.asarray([size[c] for c in batch + m + n], np.int64),
                                             f"{tag}/y_shape"))
        tail.append(helper.make_node("Reshape", [cur, f"{tag}/y_shape"], [f"{tag}/y_r"], name=f"{tag}/y_reshape"))
        cur = f"{tag}/y_r"
    perm = [(batch + m + n).index(c) for c in out]
    if perm != list(range(len(perm))):
        tail.append(helper.make_node("Transpose", [cur], [f"{tag}/y_t"], name=f"{tag}/y_transpose", perm=perm))
        cur = f"{tag}/y_t"
    moves = [c for c in post if c.op_type in MOVES]
    for j, c in enumerate(moves):
        copy = helper.make_node(c.op_type, [cur, *c.input[1:]], [f"{tag}/y_int8_{j}"],
                                name=f"{c.name}/int8_for_{tag}")
        copy.attribute.extend(c.attribute)
        tail.append(copy)
        cur = f"{tag}/y_int8_{j}"
    if tail:
        tail[-1].output[0] = q.output[0]
    else:
        pre[-1].output[0] = q.output[0]
    # the operand side where the einsum was, the result side where its QuantizeLinear was (a Reshape's shape
    # computed between the two stays before its use)
    removed = {x.name for x in (node, q, *post)}
    nodes: list[Any] = []
    for x in g.node:
        if x.name == node.name:
            nodes += pre
        elif x.name == q.name:
            nodes += tail
        if x.name not in removed:
            nodes.append(x)
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.extend(inits)
    _drop_dead(g, {x.name for _, chain in ops for x, _ in chain} | {dq.name for dq, _ in ops})
    scaled = (f", its {' / '.join(c.op_type for c in post if c.op_type not in MOVES)} by a constant folded into the "
              "result's scale" if factor != 1.0 else "")
    lead = f"{', '.join(map(str, bdims))}, " if bdims else ""
    return (f"computed as a MatMul of two int8 activations ([{lead}{prod(m)}, {prod(k)}] x [{lead}{prod(k)}, "
            f"{prod(n)}]), its int8 operands and result moved by host Transpose / Reshape{scaled}")


def _drop_dead(g: Any, candidates: set[str]) -> None:
    """Remove the candidate nodes (by name) none of whose outputs is read any more (repeatedly: a chain dies from
    its end)."""
    outputs = {o.name for o in g.output}
    while True:
        read = {i for x in g.node for i in x.input} | outputs
        gone = {x.name for x in g.node if x.name in candidates and not any(o in read for o in x.output)}
        if not gone:
            return
        keep = [x for x in g.node if x.name not in gone]
        del g.node[:]
        g.node.extend(keep)

