"""Helpers shared by mappers to assemble contract Mappings from per-level factors."""

from __future__ import annotations

import collections.abc as abc
from typing import Any, TypeVar

from pydantic import BaseModel

from tileplan.dims import DIMS, RELEVANT
from tileplan.hardware import Architecture
from tileplan.mapping import LevelMapping, Mapping

M = TypeVar("M", bound=BaseModel)


def build_mapping(
    arch: Architecture,
    temporal: list[list[tuple[str, int]]],
    spatial: list[list[tuple[str, int]]],
    padded_dims: dict[str, int] | None = None,
    double_buffered: abc.Mapping[str, abc.Sequence[str]] | None = None,
    validate: bool = True,
) -> Mapping:
    """A Mapping over `arch`'s levels; factors of 1 are dropped. `validate=False` skips pydantic's validation, for
    searches that build thousands of candidates from factors that are valid by construction (positive, of known
    dimensions) and validate the one they keep."""
    levels = [
        _make(
            LevelMapping,
            validate,
            name=lv.name,
            temporal=[(d, f) for d, f in temporal[i] if f > 1],
            spatial=[(d, f) for d, f in spatial[i] if f > 1],
        )
        for i, lv in enumerate(arch.levels)
    ]
    return _make(
        Mapping,
        validate,
        levels=levels,
        padded_dims=dict(padded_dims or {}),
        double_buffered={k: list(v) for k, v in (double_buffered or {}).items() if v},
        dataflow=arch.dataflow,
    )


def _make(cls: type[M], validate: bool, **fields: Any) -> M:
    return cls(**fields) if validate else cls.model_construct(**fields)


def max_double_buffering(arch: Architecture) -> dict[str, list[str]]:
    """Double buffer every kept tensor at every level that has two buffers."""
    return {
        lv.name: sorted(lv.keeps) for lv in arch.levels if lv.buffer_count == 2 and not lv.is_backing_store
    }


def stationary_order(factors: dict[str, int], tensor: str | None) -> list[tuple[str, int]]:
    """Loops of one level, innermost first: those that do not index `tensor` first, so it stays put."""
    items = [(d, f) for d, f in factors.items() if f > 1]
    if tensor is None:
        return sorted(items, key=lambda x: DIMS.index(x[0]))
    return sorted(items, key=lambda x: (x[0] in RELEVANT[tensor], DIMS.index(x[0])))
