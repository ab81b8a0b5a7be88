"""ONNX Loop and Scan unrolled at import: Tileplan compiles static shapes, and a Scan over a static input, or a
Loop with a constant trip count whose condition stays true, runs a known number of iterations of its body.
Each iteration's body nodes join the graph under names of their own (`<node>/<iteration>/<name>`), the state
variables threaded from one iteration to the next, the scan outputs stacked (Unsqueeze + Concat) along their
axis; the unrolled nodes are ordinary nodes (a quantized body's products get the accelerator's patterns). A Loop
whose trip count or termination depends on values computed at run time is refused, naming the node."""

from __future__ import annotations

from typing import Any

import numpy as np

from tileplan.errors import InputError

CONTROL_FLOW = ("Loop", "Scan")
# the most body nodes unrolling one Loop / Scan may write (iterations x body nodes)
MAX_UNROLLED_NODES = 20000


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _graph_defs(g: Any) -> set[str]:
    """The names a (sub)graph defines itself: its inputs, initializers and node outputs."""
    return ({i.name for i in g.input} | {t.name for t in g.initializer}
            | {o for n in g.node for o in n.output if o})


def _rename_refs(g: Any, mapping: dict[str, str]) -> None:
    """Rename, in nested subgraph `g` (a copy), the references to the enclosing scope's names in `mapping` (a
    name `g` defines itself shadows the outer one)."""
    outer = {k: v for k, v in mapping.items() if k not in _graph_defs(g)}
    if not outer:
        return
    for n in g.node:
        _rename_node(n, outer)
    for o in g.output:
        if o.name in outer:
            o.name = outer[o.name]


def _rename_node(n: Any, mapping: dict[str, str]) -> None:
    import onnx

    for k, i in enumerate(n.input):
        if i in mapping:
            n.input[k] = mapping[i]
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            _rename_refs(a.g, mapping)
        elif a.type == onnx.AttributeProto.GRAPHS:
            for sg in a.graphs:
                _rename_refs(sg, mapping)


def _outer_refs(g: Any) -> set[str]:
    """The names subgraph `g` (its own subgraphs too) reads from enclosing scopes."""
    import onnx

    refs = {i for n in g.node for i in n.input if i} | {o.name for o in g.output}
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                refs |= _outer_refs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sg in a.graphs:
                    refs |= _outer_refs(sg)
    return refs - _graph_defs(g)


class _Writer:
    """The nodes and initializers replacing one Loop / Scan node, with names unique in the graph."""

    def __init__(self, model: Any, node: Any) -> None:
        g = model.graph
        self.taken = _graph_defs(g) | {n.name for n in g.node}
        self.node = node
        self.opset = _opset(model)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.shared: dict[str, str] = {}  # body initializer -> its one copy in the graph (`iteration`)

    def fresh(self, name: str) -> str:
        out = name
        while out in self.taken:
            out += "_"
        self.taken.add(out)
        return out

    def const(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        n = self.fresh(f"{self.node.name}/{name}")
        self.inits.append(numpy_helper.from_array(value, n))
        return n

    def add(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        from onnx import helper

        out = self.fresh(f"{self.node.name}/{name}")
        self.nodes.append(helper.make_node(op, inputs, [out], name=self.fresh(out), **attrs))
        return out

    def iteration(self, body: Any, i: int, bound: dict[str, str]) -> list[str]:
        """Body `body`'s nodes for iteration `i`, its inputs bound to the names of `bound`; returns the names of its
        outputs' values in that iteration."""
        import onnx

        mapping = dict(bound)
        for t in body.initializer:  # shared by every iteration: written once
            if t.name not in self.shared:
                c = onnx.TensorProto()
                c.CopyFrom(t)
                c.name = self.fresh(f"{self.node.name}/{t.name}")
                self.inits.append(c)
                self.shared[t.name] = c.name
        mapping.update(self.shared)
        for n in body.node:
            for o in n.output:
                if o:
                    mapping[o] = self.fresh(f"{self.node.name}/{i}/{o}")
        for k, n in enumerate(body.node):
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = self.fresh(f"{self.node.name}/{i}/{n.name or f'{n.op_type}_{k}'}")
            for j, o in enumerate(c.output):
                if o:
                    c.output[j] = mapping[o]
            _rename_node(c, mapping)
            self.nodes.append(c)
        return [mapping.get(o.name, o.name) for o in body.output]

    def stack(self, values: list[str], axis: int, out: str) -> None:
        """`out` = the values stacked along a new axis `axis` (Unsqueeze each, Concat)."""
        from onnx import helper

        parts = []
        for k, v in enumerate(values):
            if self.opset >= 13:
                parts.append(self.add("Unsqueeze", [v, self.const(f"axes_{axis}", np.asarray([axis], np.int64))],
                                      f"{out}/unsqueeze_{k}"))
            else:
                parts.append(self.add("Unsqueeze", [v], f"{out}/unsqueeze_{k}", axes=[axis]))
        self.nodes.append(helper.make_node("Concat", parts, [out], name=self.fresh(f"{self.node.name}/{out}/stack"),
                                           axis=axis))

    def splice(self, model: Any) -> None:
        g = model.graph
        at = list(g.node).index(self.node)
        g.node.remove(self.node)
        for k, c in enumerate(self.nodes):
            g.node.insert(at + k, c)
        read = {i for n in self.nodes for i in n.input}  # (and nested subgraphs' outer references)
        read |= {i for n in self.nodes for a in n.attribute for sg in ([a.g] if a.HasField('g') else list(a.graphs))
                 for i in _outer_refs(sg)}
        g.initializer.extend(t for t in self.inits if t.name in read)


def _constants(g: Any) -> dict[str, np.ndarray]:
    from onnx import numpy_helper

    consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = numpy_helper.to_array(n.attribute[0].t)
    return consts


def _always_true(body: Any) -> bool:
    """The Loop body's condition output is its condition input (through Identity nodes) or a constant true."""
    consts = _constants(body)
    made = {o: n for n in body.node for o in n.output}
    c = body.output[0].name
    for _ in range(len(body.node) + 1):
        if c == body.input[1].name:
            return True
        if c in consts:
            v = consts[c]
            return v.size == 1 and bool(v.reshape(()))
        if c in made and made[c].op_type == "Identity":
            c = made[c].input[0]
            continue
        return False
    return False


def _refuse(node: Any, why: str) -> InputError:
    return InputError(("model", node.name), f"{node.op_type} node {node.name!r}: {why}; Tileplan compiles static "
                      "shapes only: it unrolls a Scan over inputs of static shapes and a Loop whose trip count is a "
                      "constant and whose condition stays true")


def _nodes(g: Any) -> int:
    """The nodes of graph `g`, its nodes' subgraphs' counted."""
    import onnx

    return sum(1 + sum(_nodes(a.g) if a.type == onnx.AttributeProto.GRAPH else
                       sum(_nodes(x) for x in a.graphs) if a.type == onnx.AttributeProto.GRAPHS else 0
                       for a in n.attribute) for n in g.node)


def _check_size(model: Any, node: Any, iterations: int, body: Any) -> None:
    """Unrolling writes at most MAX_UNROLLED_NODES nodes for one node, and leaves the graph (subgraphs counted:
    nested Loops unroll later) within onnx_bytes.MAX_NODES, the bound a model is parsed under."""
    from tileplan.frontend.onnx_bytes import MAX_NODES

    written = iterations * max(_nodes(body), 1)
    if written > MAX_UNROLLED_NODES:
        raise _refuse(node, f"{iterations} iterations of a body of {_nodes(body)} nodes are more than the "
                            f"{MAX_UNROLLED_NODES} nodes unrolling may write")
    if _nodes(model.graph) + written > MAX_NODES:
        raise _refuse(node, f"unrolling its {iterations} iterations would make the model more than {MAX_NODES} "
                            "nodes, the bound a model is read under")


def _body(node: Any) -> Any:
    from onnx import helper

    return next(helper.get_attribute_value(a) for a in node.attribute if a.name == "body")


def _unroll_loop(model: Any, node: Any) -> None:
    body = _body(node)
    consts = _constants(model.graph)
    m = node.input[0] if node.input else ""
    if not m:
        raise _refuse(node, "it has no trip count: it ends when its condition, computed at run time, is false")
    if m not in consts or consts[m].size != 1:
        raise _refuse(node, f"its trip count {m!r} is computed at run time")
    cond = node.input[1] if len(node.input) > 1 else ""
    if cond and (cond not in consts or consts[cond].size != 1):
        raise _refuse(node, f"its initial condition {cond!r} is computed at run time")
    if cond and not bool(consts[cond].reshape(())):
        raise _refuse(node, f"its initial condition {cond!r} is false: it runs no iteration, and its scan outputs "
                            "have no static shape")
    if not _always_true(body):
        raise _refuse(node, f"its body's condition output {body.output[0].name!r} is computed at run time (the "
                            "iterations it runs depend on values)")
    trips = int(consts[m].reshape(()))
    if trips <= 0:
        raise _refuse(node, f"its trip count is {trips}: no iteration, its scan outputs have no static shape")
    _check_size(model, node, trips, body)
    carried = list(node.input[2:])
    n_carried = len(carried)
    w = _Writer(model, node)
    true = w.const("cond", np.asarray(True))
    state = carried
    scans: list[list[str]] = [[] for _ in body.output[1 + n_carried:]]
    for i in range(trips):
        bound = {body.input[0].name: w.const(f"{i}/iteration", np.asarray(i, np.int64)),
                 body.input[1].name: true}
        bound.update({b.name: s for b, s in zip(body.input[2:], state)})
        outs = w.iteration(body, i, bound)
        state = outs[1:1 + n_carried]
        for k, v in enumerate(outs[1 + n_carried:]):
            scans[k].append(v)
    _write_outputs(w, state, [(vals, 0) for vals in scans])
    w.splice(model)


def _write_outputs(w: _Writer, state: list[str], stacked: list[tuple[list[str], int]]) -> None:
    """The node's outputs, in ONNX's order for Loop and Scan: the final loop-carried values, then each scan
    output's per-iteration values stacked on its axis (an output the model leaves unnamed is not written)."""
    from onnx import helper

    for k, o in enumerate(w.node.output):
        if not o:
            continue
        if k < len(state):
            w.nodes.append(helper.make_node("Identity", [state[k]], [o], name=w.fresh(f"{w.node.name}/{o}")))
        else:
            vals, axis = stacked[k - len(state)]
            w.stack(vals, axis, o)


def _ints(node: Any, name: str, n: int) -> list[int]:
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return list(helper.get_attribute_value(a))
    return [0] * n


def _unroll_scan(model: Any, node: Any, shapes: dict[str, list[int | None] | None]) -> None:
    from onnx import helper

    if _opset(model) < 9:
        raise _refuse(node, "it is opset 8's Scan (a batch axis and sequence lengths given at run time)")
    body = _body(node)
    n_scan = next(helper.get_attribute_value(a) for a in node.attribute if a.name == "num_scan_inputs")
    n_state = len(node.input) - n_scan
    n_out = len(body.output) - n_state
    in_axes = _ints(node, "scan_input_axes", n_scan)
    in_dirs = _ints(node, "scan_input_directions", n_scan)
    out_axes = _ints(node, "scan_output_axes", n_out)
    out_dirs = _ints(node, "scan_output_directions", n_out)
    length = None
    axes = []
    for x, a in zip(node.input[n_state:], in_axes):
        shape = shapes.get(x)
        if shape is None or any(d is None for d in shape):
            raise _refuse(node, f"the shape of its scan input {x!r} is not static")
        a = a + len(shape) if a < 0 else a
        axes.append(a)
        if length is not None and shape[a] != length:
            raise _refuse(node, f"its scan inputs have different lengths ({length} and {shape[a]})")
        length = shape[a]
    if not length:
        raise _refuse(node, "its scan length is 0: no iteration, its scan outputs have no static shape")
    _check_size(model, node, length, body)
    out_ranks = []
    for o, a in zip(body.output[n_state:], out_axes):
        if a < 0:
            t = o.type.tensor_type
            if not t.HasField("shape"):
                raise _refuse(node, f"its scan output axis {a} is negative and the rank of body output "
                                    f"{o.name!r} is not known")
            a += len(t.shape.dim) + 1
        out_ranks.append(a)
    w = _Writer(model, node)
    state = list(node.input[:n_state])
    scans: list[list[str]] = [[] for _ in range(n_out)]
    for i in range(length):
        bound = {b.name: s for b, s in zip(body.input[:n_state], state)}
        for k, (x, a, d) in enumerate(zip(node.input[n_state:], axes, in_dirs)):
            at = length - 1 - i if d else i
            idx = w.const(f"{i}/index_{at}", np.asarray(at, np.int64))
            bound[body.input[n_state + k].name] = w.add("Gather", [x, idx], f"{i}/scan_in_{k}", axis=a)
        outs = w.iteration(body, i, bound)
        state = outs[:n_state]
        for k, v in enumerate(outs[n_state:]):
            scans[k].append(v)
    _write_outputs(w, state, [(vals[::-1] if d else vals, a) for vals, d, a in zip(scans, out_dirs, out_ranks)])
    w.splice(model)


def _shapes(model: Any) -> dict[str, list[int | None] | None]:
    from tileplan.frontend.onnx_import import static_shapes

    inferred = static_shapes(model)
    out: dict[str, list[int | None] | None] = {}
    for t in model.graph.initializer:
        out[t.name] = list(t.dims)
    if inferred is None:
        return out
    g = inferred.graph
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return out


def unroll_control_flow(model: Any, strict: bool = True) -> list[str]:
    """Every Loop / Scan of the main graph unrolled (nested ones and those in constant Ifs' branches too, one level
    per pass); a Loop whose trip count or termination depends on run-time values, or a Scan over an input of a
    shape not static, is an InputError naming the node (not strict: left as it is, for a later pass once shapes
    are folded). Changes `model` in place; returns the unrolled nodes' names."""
    from tileplan.frontend.onnx_import import inline_constant_ifs, name_nodes

    done: list[str] = []
    left: set[str] = set()
    for _ in range(1000):
        inline_constant_ifs(model)
        target = next((n for n in model.graph.node if n.op_type in CONTROL_FLOW and n.domain in ("", "ai.onnx")
                       and n.name not in left), None)
        if target is None:
            return done
        try:
            if target.op_type == "Loop":
                _unroll_loop(model, target)
            else:
                _unroll_scan(model, target, _shapes(model))
        except InputError:
            if strict:
                raise
            left.add(target.name)
            continue
        done.append(target.name)
        name_nodes(model)
    return done
