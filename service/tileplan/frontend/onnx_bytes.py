"""ONNX bytes from a client -> a ModelProto, without the server ever opening a file.

ONNX lets a tensor keep its data outside the model (`data_location: EXTERNAL`, with a `location` relative to the
model's directory). A model that arrives as bytes has no directory: every reader down the line (ONNX's checker,
which stats the file; `numpy_helper.to_array`, onnxruntime, TVM's importer, which read it) resolves that location
against the server's working directory, which holds the server's own files and database. So a tensor with external
data anywhere in the model (initializers, sparse initializers, Constant attributes, subgraphs, functions and their
default attribute values, training graphs) is refused here, before any of those readers sees the model. Every path
that decodes a client's model (`onnx_import.decode`, `workload_onnx.load_onnx`) goes through `parse_model`.

The same pass bounds what a small model can make a reader allocate, before anything is allocated: the number of
nodes (every graph, subgraphs and functions included), the elements of every tensor the model declares (an
initializer, a Constant's value, a graph input's, output's or value_info's shape) and their bytes in all, and the
constants an operator makes from a shape that is itself a constant (ConstantOfShape, Expand, Range: a 13 KB model
asking for 5*10^8 elements grew a compile process to 4.3 GiB). Shapes only inference can tell are bounded after it
(`onnx_import.infer_shapes`, `check_inferred_sizes`); whatever is left is bounded by the worker's memory cap.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple

from tileplan.errors import InputError

MAX_NODES = 50_000  # ResNet-50: ~500 QDQ nodes; BERT-large: ~5,000
MAX_NODE_IO = 256  # inputs, or outputs, of one node (DenseNet's widest Concat: ~30); TVM lowers a Concat of n inputs
# to n nested selects, which the C emitter walks recursively: 500 overflowed it, 2000 ran a compile past 10 minutes
MAX_TENSOR_ELEMENTS = 1 << 27  # elements of any one tensor (settings.max_tensor_elements: the same default)
MAX_TENSOR_BYTES = 512 << 20  # every tensor the model declares, together
MAX_OPSETS = 64  # opset imports of a model (a zoo export has 1-3: ai.onnx, com.microsoft, ai.onnx.ml)
_max_elements = MAX_TENSOR_ELEMENTS


def set_max_tensor_elements(n: int) -> None:
    """This process's bound on one tensor's elements (the service sets `settings.max_tensor_elements` in every
    process that reads models)."""
    global _max_elements
    _max_elements = int(n)


def parse_model(data: bytes, loc: tuple[str, ...] = ("model",)) -> Any:
    """Bytes -> onnx.ModelProto; InputError at `loc` for bytes that are not ONNX or a model with external data."""
    import onnx
    from google.protobuf.message import DecodeError

    if not data:
        raise InputError(loc, "empty: expected the bytes of an ONNX model")
    try:
        model = onnx.load_model_from_string(bytes(data))
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise InputError(loc, f"not an ONNX model: {exc}") from None
    refuse_external_data(model, loc)
    check_opsets(model, loc)
    check_sizes(model, loc)
    check_stored_names(model, loc)
    return model


def check_opsets(model: Any, loc: tuple[str, ...] = ("model",)) -> None:
    """InputError at `opset_import` for a domain imported twice (the default domain at opset 17 and at 9: which
    one do its nodes mean? ONNX's checker takes either; an importer picks one) or more than MAX_OPSETS imports."""
    here = (*loc, "opset_import")
    if len(model.opset_import) > MAX_OPSETS:
        raise InputError(here, f"{len(model.opset_import)} opset imports, over this server's bound of {MAX_OPSETS}",
                         "too_large")
    seen: dict[str, int] = {}
    for imp in model.opset_import:
        domain = "" if imp.domain == "ai.onnx" else imp.domain
        if domain in seen:
            raise InputError(here, f"the domain {imp.domain or 'ai.onnx'!r} is imported twice (opset "
                             f"{seen[domain]} and {imp.version}): a model imports each domain once", "value_error")
        seen[domain] = imp.version


def check_stored_names(model: Any, loc: tuple[str, ...] = ("model",)) -> None:
    """InputError for a graph name, node name, graph input or output name that storage cannot hold (a NUL:
    PostgreSQL refuses it in text) or that holds a control character. They are stored and shown to every client:
    the graph's as a compile's model name (and in the server's log lines), a node's as its layer's and op's name,
    the inputs' and outputs' in the compile's summary and its program (a compile's row could not be written, a 503
    blaming the server's storage; a plan's write failed in the compile, a 500; ESC sequences reached terminals,
    a newline forged a log line)."""
    from tileplan.validation import control_reason, unstorable_reason

    def check(name: str, what: str) -> None:
        why = unstorable_reason(name)
        if why is not None:
            raise InputError(loc, f"{what} {name!r} {why}", "string_unstorable")
        why = control_reason(name)
        if why is not None:
            raise InputError(loc, f"{what} {name!r} {why}", "string_control")

    check(model.graph.name, "the graph name")
    for i, node in enumerate(model.graph.node):
        check(node.name, f"the name of node {i} ({node.op_type}),")
    for what, infos in (("input", model.graph.input), ("output", model.graph.output)):
        for info in infos:
            check(info.name, f"the graph {what}")


def _elements(dims: Any) -> int:
    return math.prod(max(int(d), 0) for d in dims)


def _too_large(loc: tuple[str, ...], what: str, elements: int, limit: int) -> InputError:
    return InputError(loc, f"{what} has {elements} elements, over this server's bound of {limit} per tensor "
                      "(max_tensor_elements: TILEPLAN_MAX_TENSOR_ELEMENTS raises it)",
                      "too_large")


def check_sizes(model: Any, loc: tuple[str, ...] = ("model",), max_elements: int | None = None, *,
                declared: bool = True) -> None:
    """InputError if the model has too many nodes or holds a tensor (or a constant an operator would make from
    constant inputs) over the bounds, before any reader allocates it; `declared`: the shapes of its inputs,
    outputs and values too (a model to compile and run: POST /schedule only plans them, up to max_layer_extent)."""
    from onnx import helper

    max_elements = max_elements or _max_elements

    nodes = _count_nodes(model, loc)
    if nodes > MAX_NODES:
        raise InputError(loc, f"{nodes} nodes{' once its model-local functions are inlined' if model.functions else ''}, "
                         f"over this server's bound of {MAX_NODES}", "too_large")
    for node in _all_nodes(model):
        for what, names in (("inputs", node.input), ("outputs", node.output)):
            if len(names) > MAX_NODE_IO:
                raise InputError((*loc, node.name) if node.name else loc,
                                 f"{node.op_type} node {node.name or '(unnamed)'!r} has {len(names)} {what}, over "
                                 f"this server's bound of {MAX_NODE_IO} per node", "too_large")
    total = 0
    for where, t in _tensors(model):
        n = _elements(t.dims)
        if n > max_elements:
            raise _too_large(loc, f"tensor {t.name or '(unnamed)'!r} ({where})", n, max_elements)
        width = _RAW_WIDTH.get(t.data_type)
        if t.raw_data and width is not None and len(t.raw_data) != n * width:
            raise InputError(loc, f"tensor {t.name or '(unnamed)'!r} ({where}) holds {len(t.raw_data)} bytes of "
                             f"raw_data; its dims and type take {n * width}")
        try:
            total += n * max(helper.tensor_dtype_to_np_dtype(t.data_type).itemsize, 1)
        except (KeyError, TypeError, ValueError):
            total += n * 8
        if total > MAX_TENSOR_BYTES:
            raise InputError(loc, f"its tensors hold over {MAX_TENSOR_BYTES} bytes, this server's bound",
                             "too_large")
    _check_constant_ops(model.graph, loc, max_elements)  # (first: the node that makes a tensor is the one to name)
    for info, where in _value_infos(model) if declared else ():
        dims = info.type.tensor_type.shape.dim
        n = _elements(d.dim_value for d in dims if d.HasField("dim_value"))
        if n > max_elements:
            raise _too_large(loc, f"{where} {info.name!r}'s declared shape", n, max_elements)


def static_sizes(inferred: Any, loc: tuple[str, ...] = ("model",), max_elements: int | None = None) -> int:
    """After shape inference: InputError naming the node whose output's static shape is over the bound (a constant
    that onnxruntime's folding or ONNX's data propagation would make: `Concat(c, c)` forty times is 2 KB and 2^40
    elements). Returns the elements of the rank-0 and rank-1 outputs: the values ONNX's data propagation would
    hold, each as a shape's dimension (~100-200 bytes)."""
    max_elements = max_elements or _max_elements
    g = inferred.graph
    infos = {i.name: i for i in [*g.value_info, *g.output]}
    small = 0
    for node in g.node:
        for out in node.output:
            info = infos.get(out)
            t = info.type.tensor_type if info is not None else None
            if t is None or not t.HasField("shape") or not all(d.HasField("dim_value") for d in t.shape.dim):
                continue
            n = _elements(d.dim_value for d in t.shape.dim)
            if n > max_elements:
                raise _too_large((*loc, node.name) if node.name else loc,
                                 f"{node.op_type} node {node.name or '(unnamed)'!r}'s output {out!r}", n, max_elements)
            if len(t.shape.dim) <= 1:
                small += n
    return small


def _walk(nodes: Any) -> Iterator[Any]:
    """These nodes and, after each, the nodes of its subgraphs (If / Loop / Scan bodies), recursively."""
    for n in nodes:
        yield n
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                yield from _walk(g.node)


def _all_nodes(model: Any) -> Iterator[Any]:
    """Every node: the graph's, its subgraphs' and the model-local functions'."""
    yield from _walk(model.graph.node)
    for fn in model.functions:
        yield from _walk(fn.node)


def _count_nodes(model: Any, loc: tuple[str, ...] = ("model",)) -> int:
    """The model's nodes as a reader sees them once every call of a model-local function is replaced by the
    function's body (onnxruntime and ONNX's shape inference inline them): 40 functions each calling the next twice
    are 4 KB and 2^40 nodes. Subgraphs' nodes count too. InputError for functions that call themselves."""
    def key(x: Any) -> tuple[str, str, str]:
        return (x.domain, x.op_type if hasattr(x, "op_type") else x.name, getattr(x, "overload", ""))

    fns = {key(fn): fn for fn in model.functions}

    def walk(nodes: Any) -> tuple[int, list[tuple[str, str, str]]]:
        """Nodes (subgraphs included) and the function calls among them."""
        every = list(_walk(nodes))
        return len(every), [key(n) for n in every if key(n) in fns]

    body = {k: walk(fn.node) for k, fn in fns.items()}
    size: dict[tuple[str, str, str], int] = {}
    for root in fns:  # expanded sizes, callees first (iteratively: a chain of functions may be long)
        stack, visiting = [(root, False)], set()
        while stack:
            k, ready = stack.pop()
            if ready:
                own, calls = body[k]
                size[k] = own + sum(size[c] - 1 for c in calls)  # (a call is replaced by its function's body)
                visiting.discard(k)
            elif k not in size:
                if k in visiting:
                    raise InputError(loc, f"model-local function {k[1]!r} (domain {k[0]!r}) calls itself (directly "
                                     "or through other functions)",
                                     "value_error")
                visiting.add(k)
                stack.append((k, True))
                stack.extend((c, False) for c in body[k][1] if c not in size)
    own, calls = walk(model.graph.node)
    return own + sum(size[c] - 1 for c in calls)


def _value_infos(model: Any) -> Iterator[tuple[Any, str]]:
    g = model.graph
    yield from ((i, "input") for i in g.input)
    yield from ((o, "output") for o in g.output)
    yield from ((v, "value") for v in g.value_info)


def _check_constant_ops(graph: Any, loc: tuple[str, ...], max_elements: int) -> None:
    """ConstantOfShape / Expand / Range whose shape (or bounds) is a constant of the graph: the elements they would
    make, counted from that constant (an initializer or a Constant node's value) without making them."""
    from onnx import numpy_helper

    consts: dict[str, Any] = {t.name: t for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.HasField("t") and node.output:
                    consts[node.output[0]] = a.t

    def values(name: str) -> list[float] | None:
        t = consts.get(name)
        if t is None or _elements(t.dims) > 64:  # a shape or a bound is a handful of numbers
            return None
        try:
            return [float(v) for v in numpy_helper.to_array(t).reshape(-1)]
        except (ValueError, TypeError):
            return None

    def finite(node: Any, vals: list[float] | None) -> list[float] | None:
        # (a Range to inf or by NaN, a shape of inf: no count of elements, and int() of one raised, a 500)
        if vals is not None and not all(math.isfinite(v) for v in vals):
            raise InputError((*loc, node.name) if node.name else loc,
                             f"{node.op_type} node {node.name or '(unnamed)'!r} takes a constant that is not finite "
                             f"({', '.join(sorted({str(v) for v in vals if not math.isfinite(v)}))}): its output "
                             "would have no size", "value_error")
        return vals

    for node in graph.node:
        n = None
        if node.op_type in ("ConstantOfShape", "Expand") and len(node.input) >= (1 if node.op_type ==
                                                                                  "ConstantOfShape" else 2):
            shape = finite(node, values(node.input[0] if node.op_type == "ConstantOfShape" else node.input[1]))
            n = math.prod(max(int(v), 0) for v in shape) if shape is not None else None
        elif node.op_type == "Range" and len(node.input) == 3:
            start, limit, delta = (finite(node, values(i)) for i in node.input)
            if start and limit and delta and delta[0] != 0:
                n = max(math.ceil((limit[0] - start[0]) / delta[0]), 0)
        if n is not None and n > max_elements:
            raise _too_large((*loc, node.name) if node.name else loc,
                             f"{node.op_type} node {node.name or '(unnamed)'!r}'s output", n, max_elements)


def refuse_external_data(model: Any, loc: tuple[str, ...] = ("model",)) -> None:
    """InputError naming the first tensor whose data is stored outside the model."""
    from onnx import TensorProto

    for where, tensor in _tensors(model):
        if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
            name = tensor.name or "(unnamed)"
            raise InputError(loc, f"tensor {name!r} ({where}) keeps its data outside the model (external data): "
                             "the server reads no files; send a model with every tensor's data inside it "
                             "(onnx.save_model(model, path, save_as_external_data=False))", "value_error")


_RAW_WIDTH = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
"""TensorProto data types -> bytes per element in raw_data (FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, BOOL,
FLOAT16, DOUBLE, UINT32, UINT64, BFLOAT16); packed and variable-width types are not checked here."""


class _Dense(NamedTuple):
    """A sparse tensor as the dense tensor a reader makes of it (its dims), for the size checks."""

    name: str
    dims: Any
    data_type: int
    raw_data: bytes = b""
    data_location: int = 0
    external_data: tuple[Any, ...] = ()


def _sparse(where: str, s: Any) -> Iterator[tuple[str, Any]]:
    yield f"sparse tensor, {where}", _Dense(s.values.name, s.dims, s.values.data_type)
    yield where, s.values
    yield where, s.indices


def _tensors(model: Any) -> Iterator[tuple[str, Any]]:
    yield from _graph_tensors(model.graph, "graph")
    for fn in model.functions:
        # (a function's default attribute values are tensors too: a node in it takes one by `ref_attr_name`)
        for a in fn.attribute_proto:
            yield from _attribute_tensors(a, f"default of attribute {a.name!r} of function {fn.name}")
        yield from _node_tensors(fn.node, f"function {fn.name}")
    for i, info in enumerate(model.training_info):
        yield from _graph_tensors(info.initialization, f"training_info[{i}].initialization")
        yield from _graph_tensors(info.algorithm, f"training_info[{i}].algorithm")


def _graph_tensors(graph: Any, where: str) -> Iterator[tuple[str, Any]]:
    for t in graph.initializer:
        yield f"initializer of {where}", t
    for s in graph.sparse_initializer:
        yield from _sparse(f"sparse initializer of {where}", s)
    yield from _node_tensors(graph.node, where)


def _node_tensors(nodes: Any, where: str) -> Iterator[tuple[str, Any]]:
    for node in nodes:
        for a in node.attribute:
            yield from _attribute_tensors(a, f"attribute of node {node.name or node.op_type!r} in {where}",
                                          f"subgraph {a.name} of node {node.name or node.op_type!r}")


def _attribute_tensors(a: Any, here: str, subgraph: str | None = None) -> Iterator[tuple[str, Any]]:
    """Every tensor an attribute holds: its tensor(s), sparse tensor(s) and those of its subgraph(s)."""
    if a.HasField("t"):
        yield here, a.t
    yield from ((here, t) for t in a.tensors)
    if a.HasField("sparse_tensor"):
        yield from _sparse(here, a.sparse_tensor)
    for s in a.sparse_tensors:
        yield from _sparse(here, s)
    if a.HasField("g"):
        yield from _graph_tensors(a.g, subgraph or f"subgraph of {here}")
    for g in a.graphs:
        yield from _graph_tensors(g, subgraph or f"subgraph of {here}")
