"""Helpers shared by mappers to assemble contract Mappings from per-level factors."""

from __future__ import annotations

import collections.abc as abc

from tileplan.hardware import Architecture
from tileplan.mapping import LevelMapping, Mapping


def build_mapping(
    arch: Architecture,
    temporal: list[list[tuple[str, int]]],
    spatial: list[list[tuple[str, int]]],
    padded_dims: dict[str, int] | None = None,
    double_buffered: abc.Mapping[str, abc.Sequence[str]] | None = None,
) -> Mapping:
    """A Mapping over `arch`'s levels; factors of 1 are dropped."""
    return Mapping(
        levels=[
            LevelMapping(
                name=lv.name,
                temporal=[(d, f) for d, f in temporal[i] if f > 1],  # type: ignore[misc]
                spatial=[(d, f) for d, f in spatial[i] if f > 1],  # type: ignore[misc]
            )
            for i, lv in enumerate(arch.levels)
        ],
        padded_dims=dict(padded_dims or {}),  # type: ignore[arg-type]
        double_buffered={k: list(v) for k, v in (double_buffered or {}).items() if v},  # type: ignore[arg-type]
        dataflow=arch.dataflow,
    )


def max_double_buffering(arch: Architecture) -> dict[str, list[str]]:
    """Double buffer every kept tensor at every level that has two buffers."""
    return {
        lv.name: sorted(lv.keeps) for lv in arch.levels if lv.buffer_count == 2 and not lv.is_backing_store
    }
