"""Reading an ONNX graph for the import's rewrites: a node's attribute, who makes and reads each tensor, and its
inferred element types and static shapes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def attr(node: Any, name: str, default: Any) -> Any:
    """The value of `node`'s attribute `name`, or `default` when the node has none."""
    from onnx import helper

    a = next((a for a in node.attribute if a.name == name), None)
    return default if a is None else helper.get_attribute_value(a)


@dataclass
class GraphIndex:
    """A graph's initializers by name, the node making each tensor, the nodes reading each tensor (in graph order)
    and its output names; taken once, before a rewrite changes the graph."""

    inits: dict[str, Any]
    producer: dict[str, Any]
    consumers: dict[str, list[Any]]
    outputs: set[str]


def index(g: Any) -> GraphIndex:
    consumers: dict[str, list[Any]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return GraphIndex({t.name: t for t in g.initializer}, {o: n for n in g.node for o in n.output}, consumers,
                      {o.name for o in g.output})


def types_and_shapes(model: Any) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """Every tensor's element type and every static shape, from one run of onnx's shape inference."""
    import onnx

    g = onnx.shape_inference.infer_shapes(model).graph
    dtypes = {t.name: t.data_type for t in g.initializer}
    shapes: dict[str, tuple[int, ...]] = {}
    for info in [*g.input, *g.value_info, *g.output]:
        t = info.type.tensor_type
        dtypes[info.name] = t.elem_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[info.name] = tuple(int(d.dim_value) for d in t.shape.dim)
    return dtypes, shapes
