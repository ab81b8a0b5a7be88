"""Candidate groups: chains of offloaded ops in which each op's only consumer is the next op of the chain.

A link A -> B exists when B's input is A's quantized output (A's QuantizeLinear feeds B's DequantizeLinear) and
nothing else reads that tensor (no host op, no second accelerator op, not a model output): only then can the
intermediate stay on chip without also being written to memory.  A residual add is a host op here (Gemmini's
resadd has no zero points), so a group stops at it: the block's input and the add's operands are read from memory.
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
    output: str  # the quantized tensor its QuantizeLinear writes
    spec: Any  # frontend.partition.KernelSpec
    macs: int


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


def members(model: Any, qops: list[Any], specs: list[Any]) -> list[Member | None]:
    """A Member per offloaded op in program order (None where the composite's tensors cannot be told)."""
    nodes = {n.name: n for n in model.graph.node}
    out: list[Member | None] = []
    for q, s in zip(qops, specs):
        ends = _ends(q, nodes)
        out.append(None if ends is None else Member(q.name, ends[0], ends[1], s, int(q.macs)))
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
