"""What a mapping does, read off its loop nest: tile extents per level, and how many elements of each
tensor move between each pair of adjacent levels that keep it.

The rules (Timeloop's, for a buffer that holds one tile at a time):
- The tile a level holds, per instance, spans every temporal and spatial factor at and below it.
- A tile is refetched each time a loop above it advances, except while only loops that do not index
  the tensor have run innermost (those reuse the tile in place); the MAC array holds no state, so
  operands reach it on every iteration.
- A spatial factor that does not index a tensor multicasts it (inputs, weights) or reduces it
  (outputs) across the fan-out: one transfer serves all children.
- An output tile that leaves before its reduction is complete comes back as a partial sum.
Halo-exact input tiles come from Problem.tile_elements. Sliding-window reuse between consecutive
input tiles is not credited (a conservative choice shared with CoSA).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tileplan.dims import RELEVANT, TENSORS
from tileplan.hardware import Architecture
from tileplan.mapping import Mapping
from tileplan.problem import Problem


@dataclass
class Transfer:
    """Elements of one tensor moved between a level (`upper`) and the next inner level keeping it."""

    tensor: str
    upper: int  # level index of the source of fills / target of updates
    lower: int  # level index (-1: the MAC array)
    fills: float = 0.0  # elements read from upper and delivered down (W, I; O partial-sum read-backs)
    updates: float = 0.0  # elements written up into upper (O only)
    final_updates: float = 0.0  # of those, final results (no further accumulation)
    lower_copies: float = 0.0  # elements written into the lower level's instances (after multicast)


@dataclass
class NestAnalysis:
    problem: Problem
    arch: Architecture
    mapping: Mapping
    bounds: dict[str, int]  # padded loop bounds
    tiles: list[dict[str, int]]  # per level: tile extent per dimension (per instance)
    tile_elems: list[dict[str, int]]  # per level: elements per kept tensor (per instance)
    transfers: list[Transfer] = field(default_factory=list)

    @property
    def padded_macs(self) -> int:
        return math.prod(self.bounds.values())

    @property
    def temporal_iterations(self) -> int:
        return math.prod(f for lv in self.mapping.levels for _, f in lv.temporal)

    @property
    def spatial_used(self) -> int:
        used = 1
        for lv in self.mapping.levels:
            for _, f in lv.spatial:
                used *= f
        return used

    def level_transfers(self, level: int) -> list[Transfer]:
        return [t for t in self.transfers if t.upper == level or t.lower == level]


def analyse(problem: Problem, arch: Architecture, mapping: Mapping) -> NestAnalysis:
    """Tiles and transfers of a mapping whose level names match `arch` (check.py verifies that first)."""
    problem = problem.for_hardware(arch.hardware.input_tiles)
    levels = mapping.levels
    n = len(levels)
    tiles = mapping.level_tiles()
    bounds = dict(tiles[-1]) if tiles else mapping.bounds()  # (bounds: the outermost level's tile)
    tile_elems = [
        {t: problem.tile_elements(t, tiles[i]) for t in TENSORS if t in arch.levels[i].keeps} for i in range(n)
    ]
    out = NestAnalysis(problem, arch, mapping, bounds, tiles, tile_elems)

    # Loops above each level, innermost first: level i+1's temporal loops, then level i+2's, ...
    temporal = [[(d, f) for d, f in lv.temporal if f > 1] for lv in levels]
    spatial = [lv.spatial for lv in levels]
    spatial_total = [math.prod(f for _, f in sp) for sp in spatial]
    for t in TENSORS:
        chain = [-1] + [i for i in range(n) if t in arch.levels[i].keeps]
        rel = RELEVANT[t]
        for lower, upper in zip(chain, chain[1:]):
            loops = [loop for j in range(lower + 1, n) for loop in temporal[j]]
            if lower == -1:
                refills = math.prod(f for _, f in loops)  # the MAC array keeps nothing between iterations
            else:
                refills, seen_relevant = 1, False
                for d, f in loops:
                    seen_relevant = seen_relevant or d in rel
                    if seen_relevant:
                        refills *= f
            distinct = math.prod(f for d, f in loops if d in rel)
            tile = 1 if lower == -1 else tile_elems[lower][t]
            # Distinct transfers across the fan-out between lower and upper (irrelevant factors multicast /
            # reduce), times every instance of upper in use.
            between = between_all = 1
            for j in range(lower + 1, upper + 1):
                for d, f in spatial[j]:
                    between_all *= f
                    if d in rel:
                        between *= f
            above = math.prod(spatial_total[upper + 1:])
            moved = tile * refills * between * above
            tr = Transfer(tensor=t, upper=upper, lower=lower)
            tr.lower_copies = tile * refills * between_all * above
            if t == "O":
                tr.updates = moved
                tr.fills = tile * (refills - distinct) * between * above  # partial sums coming back
                tr.final_updates = tile * distinct * between * above
            else:
                tr.fills = moved
            out.transfers.append(tr)
    return out
