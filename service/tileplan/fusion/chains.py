"""Candidate groups: chains of offloaded ops in which each op's only consumer is the next op of the chain.

A link A -> B exists when B's input is A's quantized output (A's QuantizeLinear feeds B's DequantizeLinear) and
nothing else reads that tensor (no host op, no second accelerator op, not a model output): only then can the
intermediate stay on chip without also being written to memory.  A residual add is a host op here (Gemmini's
resadd has no zero points), so a group stops at it: the block's input and the add's operands are read from memory.

With symmetric activations onnxruntime's quantizer keeps a Relu / Clip between two quantize / dequantize pairs of
the same scale and zero point 0: `quantize(relu(dequantize(q)))` is then `max(q, 0)`, the mvout's RELU, and a
Clip whose upper bound quantizes to 127 or more is that and the int8 saturation.  Such a host op is absorbed into
the producer's output (`Member.absorbed`); any other host op between two offloaded ops breaks the chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_MEMBERS = 3  # an inverted residual (expand -> depthwise -> project); a basic block's two convs are 2


@dataclass(frozen=True)
class Member:
    """One offloaded op of a group: its ONNX conv / matmul node, tensors and kernel spec."""

    name: str
    input: str  # the quantized tensor its DequantizeLinear reads
    output: str  # the quantized tensor its QuantizeLinear writes (after an absorbed Relu / Clip)
    spec: Any  # frontend.partition.KernelSpec
    macs: int
    absorbed: tuple[str, ...] = ()  # host Relu / Clip nodes its mvout would compute exactly


def _ends(qop: Any, nodes: dict[str, Any]) -> tuple[str, str] | None:
    """(input tensor, output tensor) of a composite: the quantized x its DequantizeLinear reads, the tensor its
    QuantizeLinear writes; None if the composite has no such pair."""
    own = [nodes[n] for n in qop.nodes if n in nodes]
    main = nodes.get(qop.name)
    if main is None:
        return None
    made = {o: n for n in own for o in n.output}
    dq = made.get(main.input[0])
    if dq is None or dq.op_type != "DequantizeLinear":
        return None
    read_inside = {i for n in own for i in n.input}
    outs = [o for n in own if n.op_type == "QuantizeLinear" for o in n.output if o not in read_inside]
    return (dq.input[0], outs[0]) if len(outs) == 1 else None


def _constants(model: Any) -> dict[str, Any]:
    """Initializers and Constant nodes' tensors (torch's exporter gives Clip its bounds as Constant nodes)."""
    from onnx import numpy_helper

    out = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Constant" and len(n.output) == 1:
            a = next((a for a in n.attribute if a.name == "value"), None)
            if a is not None and a.HasField("t"):
                out[n.output[0]] = numpy_helper.to_array(a.t)
    return out


def _qparams(node: Any, consts: dict[str, Any]) -> tuple[float, int] | None:
    """(scale, zero point) of a QuantizeLinear / DequantizeLinear with constant per-tensor parameters."""
    try:
        scale = consts[node.input[1]]
        zp = consts[node.input[2]] if len(node.input) > 2 and node.input[2] else 0
    except KeyError:
        return None
    if getattr(scale, "size", 1) != 1 or getattr(zp, "size", 1) != 1:
        return None
    return float(scale), int(zp)


def absorb(tensor: str, model: Any, readers: dict[str, list[str]], consts: dict[str, Any],
           index: tuple[dict[str, Any], dict[str, Any]] | None = None) -> tuple[str, tuple[str, ...]]:
    """Follow `tensor` (a QuantizeLinear's output) through DequantizeLinear -> Relu / Clip -> QuantizeLinear
    chains that are exact in int8 (see the module's docstring): the last quantized tensor and the absorbed
    activation nodes.  `index`: `graph_index(model)`, made once by a caller that asks for many tensors."""
    import numpy as np

    nodes, made = index if index is not None else graph_index(model)
    absorbed: list[str] = []

    def only_reader(t: str, kinds: tuple[str, ...]) -> Any:
        rs = readers.get(t, [])
        n = nodes.get(rs[0]) if len(rs) == 1 else None  # (a model output's reader is not a node)
        return n if n is not None and n.op_type in kinds else None

    while True:
        q0 = made.get(tensor)
        dq = only_reader(tensor, ("DequantizeLinear",))
        if q0 is None or q0.op_type != "QuantizeLinear" or dq is None:
            break
        act = only_reader(dq.output[0], ("Relu", "Clip"))
        q1 = only_reader(act.output[0], ("QuantizeLinear",)) if act is not None else None
        if act is None or q1 is None:
            break
        p0, p1 = _qparams(q0, consts), _qparams(q1, consts)
        if p0 is None or p0 != p1 or p0[1] != 0:
            break
        if act.op_type == "Clip":
            lo = consts.get(act.input[1]) if len(act.input) > 1 and act.input[1] else None
            hi = consts.get(act.input[2]) if len(act.input) > 2 and act.input[2] else None
            if lo is None or float(lo) != 0.0 or (hi is not None and
                                                   np.rint(np.float32(hi) / np.float32(p0[0])) < 127):
                break
        absorbed.append(act.name)
        tensor = q1.output[0]
    return tensor, tuple(absorbed)


def graph_index(model: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The graph's nodes by name and by the tensors they make."""
    return {n.name: n for n in model.graph.node}, {o: n for n in model.graph.node for o in n.output}


def members(model: Any, qops: list[Any], specs: list[Any]) -> list[Member | None]:
    """A Member per offloaded op in program order (None where the composite's tensors cannot be told)."""
    index = graph_index(model)
    nodes = index[0]
    readers, consts = consumers(model), _constants(model)
    out: list[Member | None] = []
    for q, s in zip(qops, specs):
        ends = _ends(q, nodes)
        if ends is None:
            out.append(None)
            continue
        output, absorbed = absorb(ends[1], model, readers, consts, index)
        out.append(Member(q.name, ends[0], output, s, int(q.macs), absorbed))
    return out


def consumers(model: Any) -> dict[str, list[str]]:
    """tensor -> the nodes reading it; a model output counts as a reader named '<output>'."""
    readers: dict[str, list[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.name)
    for o in model.graph.output:
        readers.setdefault(o.name, []).append("<output>")
    return readers


def link(a: Member, b: Member, model: Any, readers: dict[str, list[str]]) -> str | None:
    """None when b reads a's output and nothing else does, else why the two cannot be one group."""
    if b.input != a.output:
        return f"{b.name} does not read {a.name}'s output"
    dq_readers = readers.get(a.output, [])
    if len(dq_readers) != 1:
        return f"{a.name}'s output has {len(dq_readers)} readers (it must be written to memory anyway)"
    nodes = {n.name: n for n in model.graph.node}
    dq = nodes.get(dq_readers[0])
    if dq is None or any(len(readers.get(o, [])) != 1 for o in dq.output):
        return f"{a.name}'s dequantized output is read by more than {b.name}"
    return None


def chains(model: Any, ms: list[Member | None]) -> list[list[Member]]:
    """Maximal chains of linked members in program order, split into groups of at most MAX_MEMBERS (every
    member in at most one group; singletons are not groups)."""
    readers = consumers(model)
    by_input: dict[str, list[Member]] = {}
    for m in ms:
        if m is not None:
            by_input.setdefault(m.input, []).append(m)
    used: set[str] = set()
    groups: list[list[Member]] = []
    for m in ms:
        if m is None or m.name in used:
            continue
        chain = [m]
        while True:
            nxt = [b for b in by_input.get(chain[-1].output, []) if b.name not in used]
            if len(nxt) != 1 or link(chain[-1], nxt[0], model, readers) is not None:
                break
            chain.append(nxt[0])
        for part in _blocks(chain):
            if len(part) > 1:
                groups.append(part)
                used.update(p.name for p in part)
    return groups


def _expands(m: Member) -> bool:
    """A 1x1 conv (or matmul) that widens the channels: the start of an inverted residual."""
    d = m.spec.layer.dims()
    return d["R"] == d["S"] == 1 and d["G"] == 1 and d["K"] > d["C"]


def _blocks(chain: list[Member]) -> list[list[Member]]:
    """A chain cut before every expanding 1x1 conv (MobileNetV2's blocks without a residual feed the next
    block's expand directly: each group is then one block) and into pieces of at most MAX_MEMBERS."""
    parts: list[list[Member]] = [[]]
    for m in chain:
        if parts[-1] and (_expands(m) or len(parts[-1]) == MAX_MEMBERS):
            parts.append([])
        parts[-1].append(m)
    return parts


def blocked(model: Any, ms: list[Member | None], limit: int = 6) -> list[dict[str, Any]]:
    """Consecutive offloaded ops that are not linked because host ops sit between them (b reads a tensor
    computed from a's output by host nodes only, e.g. the Relu / Clip that onnxruntime's quantizer keeps between
    quantize / dequantize pairs when activations are symmetric): {from, to, host_ops}.  Branches (a residual
    add) are not followed: an Add joins two tensors; `limit` nodes at most along each path."""
    nodes = {n.name: n for n in model.graph.node}
    readers = consumers(model)
    by_input = {m.input: m for m in ms if m is not None}
    out: list[dict[str, Any]] = []
    for a in ms:
        if a is None:
            continue
        frontier: list[tuple[str, list[str]]] = [(a.output, [])]
        seen: set[str] = set()
        while frontier:
            tensor, path = frontier.pop()
            b = by_input.get(tensor)
            if b is not None and b.name != a.name and path:
                ops = [nodes[p].op_type for p in path if nodes[p].op_type not in ("QuantizeLinear",
                                                                                   "DequantizeLinear")]
                if ops:
                    out.append({"from": a.name, "to": b.name, "host_ops": ops})
                continue
            if len(path) >= limit:
                continue
            for r in readers.get(tensor, []):
                n = nodes.get(r)
                if n is None or r in seen:
                    continue
                if n.op_type in ("QuantizeLinear", "DequantizeLinear", "Relu", "Clip"):
                    seen.add(r)
                    frontier.extend((o, [*path, r]) for o in n.output)
    return out
