"""The Mapping contract (contracts.md): per level, innermost first, the temporal loops (innermost loop
first) and the spatial factors across that level's fan-out; plus padded bounds, double-buffered
tensors and the dataflow."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tileplan.dims import DIMS, Dim, Tensor
from tileplan.errors import from_validation_error

Factor = tuple[Dim, int]


class LevelMapping(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    temporal: list[Factor] = Field(default_factory=list, description="Loop order at this level, innermost first.")
    spatial: list[Factor] = Field(default_factory=list, description="Factors unrolled across this level's fan-out.")

    @field_validator("temporal", "spatial")
    @classmethod
    def _positive(cls, v: list[Factor]) -> list[Factor]:
        for d, f in v:
            if f < 1:
                raise ValueError(f"factor of {d} must be positive, got {f}")
        return v

    def temporal_factor(self, dim: str) -> int:
        return math.prod(f for d, f in self.temporal if d == dim)

    def spatial_factor(self, dim: str) -> int:
        return math.prod(f for d, f in self.spatial if d == dim)

    @property
    def spatial_total(self) -> int:
        return math.prod(f for _, f in self.spatial)


class Mapping(BaseModel):
    model_config = ConfigDict(extra="forbid")

    levels: list[LevelMapping]
    padded_dims: dict[Dim, int] = Field(
        default_factory=dict, description="Dimensions whose factors multiply to a padded bound, with that bound."
    )
    double_buffered: dict[str, list[Tensor]] = Field(default_factory=dict)
    dataflow: str | None = None
    executor: Literal["tileplan", "library", "library-auto"] | None = Field(
        default=None,
        description=(
            "Hardware run by a software library (Gemmini): who runs the calls. 'tileplan' = Tileplan's generated "
            "code (keeps tiles consecutive calls share, folds kernel columns for few-channel convolutions: what "
            "Tileplan's plans run as); 'library' or absent = the hardware's own library (Gemmini's tiled_conv / "
            "tiled_matmul, the way its measurements and the hand-written baseline run); 'library-auto' = the same "
            "calls through tiled_conv_auto / tiled_matmul_auto, whose tile (this mapping's) the library searches for "
            "on the host at run time, a cost the run pays."
        ),
    )

    group_pack: int | None = Field(
        default=None, ge=1,
        description=(
            "Groups packed into one (grouped and depthwise convolutions): the factors describe the layer with "
            "G / group_pack groups of group_pack x C input and group_pack x K output channels, whose weight tiles "
            "are block-diagonal, so several groups share the array at once; the zeros off the diagonal are "
            "multiplied and moved like any weight. Unset or 1: the layer's own groups."),
    )

    def bounds(self) -> dict[str, int]:
        """Product of every dimension's factors over all levels."""
        tiles = self.level_tiles()
        return dict(tiles[-1]) if tiles else dict.fromkeys(DIMS, 1)

    def level_tiles(self) -> list[dict[str, int]]:
        """Per level, innermost first: the tile it spans per dimension (the product of every temporal and spatial
        factor at and below it). The checker, the cost model and the mappers ask this of every candidate."""
        running = dict.fromkeys(DIMS, 1)
        out = []
        for lv in self.levels:
            for d, f in lv.temporal:
                running[d] *= f
            for d, f in lv.spatial:
                running[d] *= f
            out.append(dict(running))
        return out

    def canonical(self) -> Mapping:
        """Drop factors of 1 so equal mappings compare and hash equal."""
        return Mapping(
            levels=[
                LevelMapping(
                    name=lv.name,
                    temporal=[(d, f) for d, f in lv.temporal if f > 1],
                    spatial=sorted((d, f) for d, f in lv.spatial if f > 1),
                )
                for lv in self.levels
            ],
            padded_dims=dict(sorted(self.padded_dims.items())),
            double_buffered={k: sorted(v) for k, v in sorted(self.double_buffered.items()) if v},
            dataflow=self.dataflow,
            executor=self.executor,
            group_pack=self.group_pack if self.group_pack != 1 else None,
        )

    def describe(self) -> str:
        """One line per level, outermost first, in the style of the FireSim data set."""
        rows = []
        for lv in reversed(self.levels):
            loops = " ".join(f"{d}{f}" for d, f in reversed(lv.temporal))
            sp = " ".join(f"{d}{f}X" for d, f in lv.spatial)
            rows.append(f"{lv.name}: {loops} {sp}".rstrip())
        packed = f" ({self.group_pack} groups packed per block)" if self.group_pack and self.group_pack > 1 else ""
        return " | ".join(rows) + packed


def parse_mapping(data: Any, loc: tuple[str | int, ...] = ("mapping",)) -> Mapping:
    if isinstance(data, Mapping):
        return data
    try:
        return Mapping.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(exc, loc) from None

