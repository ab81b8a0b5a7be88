"""YAML from users, read with a bound on what its aliases expand to.

PyYAML's safe loader shares an anchored node wherever it is aliased, so a kilobyte of nested aliases (`b: [*a, *a,
...]`, `c: [*b, *b, ...]`) is a document of millions of values to anyone who walks it, and an anchor inside itself
(`&a [*a]`) is a cycle that recursion never leaves. `load` composes the node graph first, counts the values the
document expands to (each shared node counted once per place it appears, without expanding it) and refuses cycles
and documents over `max_nodes`, before anything is constructed.
"""

from __future__ import annotations

from typing import Any

import yaml

from tileplan.errors import InputError

MAX_NODES = 100_000  # values a user's YAML document may expand to (a descriptor has a few hundred)
MAX_DEPTH = 64


def load(text: str, loc: tuple[str | int, ...], what: str = "the document", max_nodes: int = MAX_NODES) -> Any:
    """The document in `text` (safe tags only), or InputError at `loc` when it is not valid YAML, refers to
    itself, nests deeper than MAX_DEPTH or expands to more than `max_nodes` values."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, loc, what, max_nodes)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise InputError(loc, f"{what} is not valid YAML{where}") from None
    finally:
        loader.dispose()


def _expanded_size(root: yaml.Node, loc: tuple[str | int, ...], what: str, max_nodes: int) -> int:
    """Values `root` expands to, memoised per node (so the count costs the distinct nodes, not the expansion)."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in on_path:
            mark = node.start_mark
            raise InputError(loc, f"{what} refers to itself (a recursive alias near line {mark.line + 1})",
                             "yaml_recursive")
        if depth > MAX_DEPTH:
            raise InputError(loc, f"{what} nests more than {MAX_DEPTH} levels deep", "yaml_too_deep")
        on_path.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child, depth + 1)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                total += size(k, depth + 1) + size(v, depth + 1)
        on_path.discard(key)
        if total > max_nodes:
            raise InputError(loc, f"{what} expands to more than {max_nodes} values (through its aliases)",
                             "yaml_too_large")
        sizes[key] = total
        return total

    return size(root, 0)
