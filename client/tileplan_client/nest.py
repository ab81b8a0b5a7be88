"""A plan's loop nest as text, as the service's `tileplan.loopnest` prints it (the client cannot import the
service; tests hold the two to the same output): levels outermost first, each level's temporal loops outermost
first, then the loops unrolled across its fan-out (`par-for`), the compute innermost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DIM_MEANING = {
    "N": "batch", "G": "groups", "K": "output channels (matmul N)", "C": "input channels (matmul K)",
    "P": "output rows (matmul M)", "Q": "output columns", "R": "filter rows", "S": "filter columns",
}


def _factors(items: Any) -> list[tuple[str, int]]:
    return [(str(i[0]), int(i[1])) for i in items or [] if isinstance(i, (list, tuple)) and len(i) == 2]


def loop_nest_lines(mapping: Mapping[str, Any], keeps: Mapping[str, Sequence[str]] | None = None) -> list[str]:
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
        loops = [(d, f, "for") for d, f in reversed(_factors(lv.get("temporal"))) if f > 1]
        loops += [(d, f, "par-for") for d, f in _factors(lv.get("spatial")) if f > 1]
        for d, f, kind in loops:
            lines.append("  " * depth + f"| {kind} {d} in [0:{f})")
            depth += 1
    lines.append("  " * depth + "<< compute >>")
    padded = mapping.get("padded_dims") or {}
    if padded:
        lines.append("padded: " + ", ".join(f"{d} -> {v}" for d, v in padded.items()))
    return lines


def loop_nest_text(mapping: Mapping[str, Any], keeps: Mapping[str, Sequence[str]] | None = None) -> str:
    return "\n".join(loop_nest_lines(mapping, keeps))


def used_dims(*mappings: Mapping[str, Any]) -> list[str]:
    seen = {d for m in mappings for lv in m.get("levels") or []
            for d, f in _factors(lv.get("temporal")) + _factors(lv.get("spatial")) if f > 1}
    return [d for d in DIM_MEANING if d in seen]


def legend(dims: Sequence[str]) -> str:
    return ", ".join(f"{d} {DIM_MEANING[d]}" for d in dims if d in DIM_MEANING)


def side_by_side(left: Sequence[str], right: Sequence[str], titles: tuple[str, str], gap: int = 4) -> str:
    width = max([len(titles[0]), *map(len, left)]) + gap
    rows = [titles[0].ljust(width) + titles[1], "-" * len(titles[0]) + " " * (width - len(titles[0]))
            + "-" * len(titles[1])]
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        rows.append((a.ljust(width) + b).rstrip())
    return "\n".join(rows)
