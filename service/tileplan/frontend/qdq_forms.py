"""Other forms onnxruntime's quantizer writes a QDQ model in, rewritten at import into the form the patterns read
(dequantize of a constant int8 weight), each as onnxruntime's own session computes it:

- `fold_constant_quantize`: a weight kept in float and quantized in the graph (`AddQDQPairToWeight`: initializer
  -> QuantizeLinear -> DequantizeLinear). onnxruntime's constant folding computes that QuantizeLinear once when
  the session is made, before its QDQ fusion reads the weight, so the integer kernels see int8 constants.
- `contrib_to_onnx`: `UseQDQContribOps` writes every QuantizeLinear / DequantizeLinear in onnxruntime's
  com.microsoft domain, whose 8-bit (and int32 bias) forms define exactly what ONNX's do (same inputs, same
  `axis`); onnxruntime's QDQ selectors accept either domain.
- `scalar_qparams`: torch.onnx writes a fake-quantized (QAT) model's per-tensor scale and zero point as
  1-element 1-D tensors, equal ones shared through Identity nodes; onnxruntime reads a 1-element scale as per
  tensor, and so does Tileplan once it is a scalar.
- `widen_4bit_weights`: 4-bit weights (`weight_type=QInt4` / `QUInt4`: a DequantizeLinear of an int4 / uint4
  initializer, com.microsoft's below opset 21) stored as int8 with the same values and zero point: every
  dequantized weight is unchanged, and the int8 datapath multiplies them exactly.
- `sixteen_bit_node`: 16-bit codes (`activation_type=QInt16` / `QUInt16`, 16-bit weights) are refused:
  the array multiplies 8-bit operands, and onnxruntime computes those units in float (it has no 16-bit integer
  kernel), which the host's float kernels (another summation order than MLAS's) do not reproduce to a 16-bit step
  (ResNet-18 with int16 activations all on the host, before the refusal: 81.6% of its outputs within 1 LSB
  of `ort-int8`, max 4, as measured with bench/zoo.py for commit d8dcca7; bench/results/zoo_exports.md keeps only
  the refusal's row).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.frontend.onnx_graph import attr as _attr

# the integer element types of QuantizeLinear's output (onnx.TensorProto), their range and numpy type
_QTYPES = {2: (np.uint8, 0, 255), 3: (np.int8, -128, 127), 4: (np.uint16, 0, 65535), 5: (np.int16, -32768, 32767)}


def fold_constant_quantize(model: Any) -> list[str]:
    """Replace every QuantizeLinear whose input, scale and zero point are initializers (or Identity nodes of them)
    by the initializer it computes: saturate(round_half_even(x / scale) + zero_point), per tensor or along `axis`
    (ONNX's definition, and onnxruntime's CPU kernel: a float32 division, rounded to nearest even). Returns the folded nodes' names; a
    blocked or 4-bit / float8 QuantizeLinear is left as it is."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    identity = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Identity" and n.input[0] in inits}
    outputs = {o.name for o in g.output}
    dequantized = _dequantized_constants(model, inits)
    folded: list[str] = []
    for node in list(g.node):
        if node.op_type != "QuantizeLinear" or node.domain not in ("", "ai.onnx"):
            continue
        ins = [identity.get(i, i) for i in node.input if i]  # (torch.onnx shares equal tensors through Identity)
        if len(ins) < 2 or any(i not in inits for i in ins[1:]) or node.output[0] in outputs:
            continue
        if ins[0] not in dequantized and (ins[0] not in inits or inits[ins[0]].data_type != 1):
            continue
        if _attr(node, "block_size", 0):
            continue
        zp_type = inits[ins[2]].data_type if len(ins) > 2 else _attr(node, "output_dtype", 0) or 2
        if zp_type not in _QTYPES:
            continue
        dtype, lo, hi = _QTYPES[zp_type]
        x = dequantized[ins[0]] if ins[0] in dequantized else numpy_helper.to_array(inits[ins[0]]).astype(np.float32)
        scale = numpy_helper.to_array(inits[ins[1]]).astype(np.float32)
        zp = numpy_helper.to_array(inits[ins[2]]).astype(np.float64) if len(ins) > 2 else np.zeros(scale.shape)
        if scale.size > 1:  # per channel: along `axis`
            axis = _attr(node, "axis", 1) % x.ndim
            shape = [1] * x.ndim
            shape[axis] = scale.size
            scale, zp = scale.reshape(shape), zp.reshape(shape)
        q = np.clip(np.rint(x / scale).astype(np.float64) + zp, lo, hi).astype(dtype)
        g.initializer.append(numpy_helper.from_array(q, node.output[0]))
        g.node.remove(node)
        folded.append(node.name)
    return folded


def _dequantized_constants(model: Any, inits: dict[str, Any]) -> dict[str, np.ndarray]:
    """The float values of DequantizeLinear(initializers) outputs that a QuantizeLinear reads, directly or
    through an Identity: torch.onnx shares a parameter equal to another through an Identity (nn.TransformerDecoder's
    deep-copied layers before training; the Identity may be optimised away on import), and onnxruntime's QDQ
    quantizer quantizes the first as a weight and the shared tensor again, at its own scale. The value is a
    constant: (w_q - zero point) * scale in float32, as ONNX defines DequantizeLinear and onnxruntime computes
    it. Keyed by the name the QuantizeLinear reads."""
    from onnx import numpy_helper

    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    found: dict[str, np.ndarray] = {}
    for qnode in g.node:
        if qnode.op_type != "QuantizeLinear" or not qnode.input or qnode.input[0] in inits:
            continue
        dq = producer.get(qnode.input[0])
        if dq is not None and dq.op_type == "Identity":
            dq = producer.get(dq.input[0])
        if dq is None or dq.op_type != "DequantizeLinear" or dq.domain not in ("", "ai.onnx"):
            continue
        ins = [i for i in dq.input if i]
        if len(ins) < 2 or any(i not in inits for i in ins) or _attr(dq, "block_size", 0):
            continue
        if inits[ins[0]].data_type not in _QTYPES:
            continue
        q = numpy_helper.to_array(inits[ins[0]]).astype(np.int32)
        scale = numpy_helper.to_array(inits[ins[1]]).astype(np.float32)
        zp = numpy_helper.to_array(inits[ins[2]]).astype(np.int32) if len(ins) > 2 else np.zeros(scale.shape, np.int32)
        if scale.size > 1:
            if q.ndim == 0:
                continue
            shape = [1] * q.ndim
            shape[_attr(dq, "axis", 1) % q.ndim] = scale.size
            scale, zp = scale.reshape(shape), zp.reshape(shape)
        found[qnode.input[0]] = ((q - zp).astype(np.float32) * scale).astype(np.float32)
    return found


# element types (onnx.TensorProto) whose com.microsoft Q/DQ ONNX's own QuantizeLinear / DequantizeLinear define
# alike at every opset Tileplan reads: uint8, int8 and (DequantizeLinear of a bias) int32
_ONNX_Q_TYPES = {2, 3}
_ONNX_DQ_TYPES = {2, 3, 6}


def contrib_to_onnx(model: Any) -> list[str]:
    """Move com.microsoft QuantizeLinear / DequantizeLinear of 8-bit codes (DequantizeLinear also of an int32
    bias) into the ONNX domain. The element type is read from the zero point (or, for a DequantizeLinear, its
    input) where it is an initializer; a node of another type (16-bit, 4-bit: their ONNX forms need opset 21) or
    whose type is not known is left as it is. Returns the moved nodes' names."""
    g = model.graph
    types = {t.name: t.data_type for t in g.initializer}
    for vi in [*g.value_info, *g.input, *g.output]:
        if vi.type.tensor_type.elem_type:
            types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    moved: list[str] = []
    for node in g.node:
        if node.domain != "com.microsoft" or node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        quantize = node.op_type == "QuantizeLinear"
        code = node.input[2] if len(node.input) > 2 and node.input[2] else ("" if quantize else node.input[0])
        if types.get(code) not in (_ONNX_Q_TYPES if quantize else _ONNX_DQ_TYPES):
            continue
        node.domain = ""
        moved.append(node.name)
    if moved and not any(n.domain == "com.microsoft" for n in g.node):
        kept = [o for o in model.opset_import if o.domain != "com.microsoft"]
        del model.opset_import[:]
        model.opset_import.extend(kept)
    return moved


def scalar_qparams(model: Any) -> int:
    """Give every QuantizeLinear / DequantizeLinear whose scale and zero point are 1-element initializers (directly
    or through an Identity) scalar copies of them: one value along any axis is that value for the whole tensor,
    which is how ONNX broadcasts it and how onnxruntime's QDQ selectors read it. Returns the nodes changed."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    identity = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Identity" and n.input[0] in inits}
    made: dict[str, str] = {}
    changed = 0
    for node in g.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        params = [k for k in (1, 2) if len(node.input) > k and node.input[k]]
        sources = [identity.get(node.input[k], node.input[k]) for k in params]
        if any(s not in inits or int(np.prod(inits[s].dims)) != 1 for s in sources):
            continue
        if all(len(inits[s].dims) == 0 and s == node.input[k] for s, k in zip(sources, params)):
            continue
        for k, src in zip(params, sources):
            if len(inits[src].dims) == 0:
                node.input[k] = src
                continue
            if src not in made:
                made[src] = f"{src}/scalar"
                g.initializer.append(numpy_helper.from_array(numpy_helper.to_array(inits[src]).reshape(()),
                                                             made[src]))
            node.input[k] = made[src]
        for a in [a for a in node.attribute if a.name == "axis"]:
            node.attribute.remove(a)
        changed += 1
    return changed


_INT4, _UINT4 = 22, 21  # onnx.TensorProto.INT4, UINT4


def widen_4bit_weights(model: Any) -> list[str]:
    """Store the 4-bit weights of every DequantizeLinear (per tensor or per axis, not blocked) whose codes and
    zero point are initializers as int8 (int4 -8..7 and uint4 0..15 are int8 values), the node in the ONNX
    domain. Returns the changed nodes' names."""
    from onnx import numpy_helper

    g = model.graph
    inits = {t.name: t for t in g.initializer}
    widened: dict[str, str] = {}
    changed: list[str] = []
    for node in g.node:
        if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx", "com.microsoft"):
            continue
        codes = [i for k, i in enumerate(node.input) if i and k != 1]  # x and its zero point
        if not codes or any(c not in inits or inits[c].data_type not in (_INT4, _UINT4) for c in codes):
            continue
        if _attr(node, "block_size", 0):
            continue
        for c in codes:
            if c not in widened:
                widened[c] = f"{c}/int8"
                g.initializer.append(numpy_helper.from_array(numpy_helper.to_array(inits[c]).astype(np.int8),
                                                             widened[c]))
        node.input[0] = widened[node.input[0]]
        if len(node.input) > 2 and node.input[2]:
            node.input[2] = widened[node.input[2]]
        node.domain = ""
        changed.append(node.name)
    used = {i for n in g.node for i in n.input}
    for c in widened:  # (TVM's importer cannot read a packed 4-bit initializer, used or not)
        if c not in used:
            g.initializer.remove(inits[c])
    return changed


_SIXTEEN = {4: "uint16", 5: "int16"}  # onnx.TensorProto.UINT16, INT16


def sixteen_bit_node(model: Any) -> tuple[str, str, str] | None:
    """The first QuantizeLinear / DequantizeLinear (either domain) with 16-bit codes: (node name, op, type), the
    type read from its zero point, or a DequantizeLinear's constant input; None when there is none."""
    inits = {t.name: t.data_type for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        zp = node.input[2] if len(node.input) > 2 else ""
        kind = _SIXTEEN.get(inits.get(zp, 0)) or (_SIXTEEN.get(inits.get(node.input[0], 0))
                                                  if node.op_type == "DequantizeLinear" else None)
        if kind:
            return node.name, node.op_type, kind
    return None
