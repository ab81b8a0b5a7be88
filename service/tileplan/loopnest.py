"""A mapping's loop nest as text, the way Timeloop prints one: levels outermost first, each level's temporal
loops outermost first, then the loops unrolled across its fan-out (`par-for`), the compute innermost.

Works on the contract form (a Mapping's JSON), so the CLI, the browser view and anything holding a Plan
document print the same nest. `side_by_side` puts a plan's nest next to its baseline's.
"""

from __future__ import annotations

from collections.abc import Mapping as MappingABC
from collections.abc import Sequence
from typing import Any

from tileplan.dims import DIM_MEANING


def factors(items: Any) -> list[tuple[str, int]]:
    """[(dim, factor)] from a level's `temporal` / `spatial` list (malformed entries skipped)."""
    out = []
    for item in items or []:
        if isinstance(item, (list, tuple)) and len(item) == 2:
            out.append((str(item[0]), int(item[1])))
    return out


def loop_nest_lines(mapping: MappingABC[str, Any], keeps: MappingABC[str, Sequence[str]] | None = None) -> list[str]:
    """The nest, one line per level header or loop. `keeps`: the tensors each level keeps (shown with it)."""
    keeps = keeps or {}
    buffered = mapping.get("double_buffered") or {}
    lines: list[str] = []
    depth = 0
    for lv in reversed(mapping.get("levels") or []):
        name = str(lv.get("name", "?"))
        tags = []
        if name in keeps:
            tags.append("keeps " + (" ".join(keeps[name]) or "nothing"))
        if buffered.get(name):
            tags.append("double-buffered " + " ".join(buffered[name]))
        lines.append("  " * depth + name + (f"  [{'; '.join(tags)}]" if tags else ""))
        loops = [(d, f, "for") for d, f in reversed(factors(lv.get("temporal"))) if f > 1]
        loops += [(d, f, "par-for") for d, f in factors(lv.get("spatial")) if f > 1]
        for d, f, kind in loops:
            lines.append("  " * depth + f"| {kind} {d} in [0:{f})")
            depth += 1
    lines.append("  " * depth + "<< compute >>")
    padded = mapping.get("padded_dims") or {}
    if padded:
        lines.append("padded: " + ", ".join(f"{d} -> {v}" for d, v in padded.items()))
    return lines


def loop_nest_text(mapping: MappingABC[str, Any], keeps: MappingABC[str, Sequence[str]] | None = None) -> str:
    return "\n".join(loop_nest_lines(mapping, keeps))


def used_dims(*mappings: MappingABC[str, Any]) -> list[str]:
    """The dimensions with a factor > 1 in any of `mappings`, in canonical order."""
    seen = {d for m in mappings for lv in m.get("levels") or []
            for d, f in factors(lv.get("temporal")) + factors(lv.get("spatial")) if f > 1}
    return [d for d in DIM_MEANING if d in seen]


def legend(dims: Sequence[str]) -> str:
    """`N batch, K output channels (matmul N), ...` for the dimensions a nest uses."""
    return ", ".join(f"{d} {DIM_MEANING[d]}" for d in dims if d in DIM_MEANING)


def side_by_side(left: Sequence[str], right: Sequence[str], titles: tuple[str, str], gap: int = 4) -> str:
    """Two blocks of lines in two columns under their titles."""
    width = max([len(titles[0]), *map(len, left)]) + gap
    rows = [titles[0].ljust(width) + titles[1], "-" * len(titles[0]) + " " * (width - len(titles[0]))
            + "-" * len(titles[1])]
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        rows.append((a.ljust(width) + b).rstrip())
    return "\n".join(rows)

