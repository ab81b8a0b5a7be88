"""Reading an ONNX graph for the import's rewrites: a node's attribute, and who makes and reads each tensor."""

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
