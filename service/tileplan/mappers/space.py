"""The space of (unpadded) mappings of a problem on a resolved architecture, shared by the random and
exhaustive mappers.

A mapping places every dimension's bound as a product of factors over *slots*: a temporal slot at
every level, and a spatial slot at every on-chip level with a fan-out whose `spatial_dims` allow the
dimension. Legality (fan-outs, capacities with double buffering, partitions, max_tile) is tested here
incrementally so that search can prune; check.py has the final word on every mapping returned.

Loop orders and dominance. In the loop-nest model (nest.py) a level's loop order matters only through
the run of innermost loops that do not index a tensor: those reuse the tensor's tile below. The
dimensions that do not index W are {N, P, Q}, those that do not index I are {K}, those that do not
index O are {C, R, S}; every one of them indexes the other two tensors. So whichever loop is innermost
at a level gives reuse to at most one tensor, and that tensor's reuse is largest when all of its
non-indexing loops at the level come first; the order of the rest is immaterial. Per level it is thus
enough to try "W-reuse first", "I-reuse first" and "O-reuse first" (at most 3 orders); every other
order moves at least as much data for every tensor. `all_orders=True` turns this off (for testing
the claim against brute force).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

from tileplan.check import call_violations, level_violations
from tileplan.dims import DIMS
from tileplan.hardware import Architecture
from tileplan.mapping import LevelMapping, Mapping
from tileplan.problem import Problem, prime_factors

# Dimensions that do not index W, I, O respectively.
REUSE_GROUPS: tuple[tuple[str, ...], ...] = (("N", "P", "Q"), ("K",), ("C", "R", "S"))


def level_orders(present: list[str], all_orders: bool = False) -> list[tuple[str, ...]]:
    """Non-dominated loop orders (innermost first) of the dimensions with a factor > 1 at one level."""
    canon = tuple(d for d in DIMS if d in present)
    if len(canon) <= 1:
        return [canon]
    if all_orders:
        return list(itertools.permutations(canon))
    out: list[tuple[str, ...]] = []
    for group in REUSE_GROUPS:
        first = tuple(d for d in canon if d in group)
        if first:
            order = first + tuple(d for d in canon if d not in group)
            if order not in out:
                out.append(order)
    return out or [canon]


def ordered_factorizations(n: int, slots: int) -> list[tuple[int, ...]]:
    """Every way to write n as an ordered product of `slots` factors."""
    if slots == 0:
        return [()] if n == 1 else []
    counts: dict[int, int] = {}
    for p in prime_factors(n):
        counts[p] = counts.get(p, 0) + 1
    per_prime = []
    for p, a in sorted(counts.items()):
        # compositions of a into `slots` non-negative parts
        comps = [
            tuple(b - a_ - 1 for a_, b in zip((-1,) + bars, bars + (a + slots - 1,)))
            for bars in itertools.combinations(range(a + slots - 1), slots - 1)
        ]
        per_prime.append([tuple(p**e for e in c) for c in comps])
    out = []
    for combo in itertools.product(*per_prime):
        out.append(tuple(math.prod(c[i] for c in combo) for i in range(slots)))
    return out if per_prime else [(1,) * slots]


def count_factorizations(n: int, slots: int) -> int:
    counts: dict[int, int] = {}
    for p in prime_factors(n):
        counts[p] = counts.get(p, 0) + 1
    return math.prod(math.comb(a + slots - 1, slots - 1) for a in counts.values())


@dataclass(frozen=True)
class Slot:
    level: int
    spatial: bool


class MappingSpace:
    """Slots, incremental legality and Mapping assembly for one problem on one resolved architecture."""

    def __init__(self, problem: Problem, arch: Architecture):
        self.problem = problem
        self.arch = arch
        self.n = len(arch.levels)
        self.dims = [d for d in DIMS if problem.dims[d] > 1]
        self.slots: dict[str, list[Slot]] = {}
        for d in self.dims:
            s = [Slot(i, False) for i in range(self.n)]
            for i, lv in enumerate(arch.levels):
                if lv.fanout > 1 and d in lv.spatial_dims:  # the backing store too, where it feeds several instances
                    s.append(Slot(i, True))
            self.slots[d] = s
        self.db_levels = [i for i, lv in enumerate(arch.levels) if lv.buffer_count == 2 and not lv.is_backing_store]

    # ---- tiles and legality -------------------------------------------------------------------------

    def level_tiles(self, assign: dict[str, tuple[int, ...]]) -> list[dict[str, int]]:
        """Tile extent per dimension at every level (factors at and below it), for the assigned dims."""
        tiles = [{d: 1 for d in DIMS} for _ in range(self.n)]
        for d, fs in assign.items():
            for slot, f in zip(self.slots[d], fs):
                if f > 1:
                    for i in range(slot.level, self.n):
                        tiles[i][d] *= f
        return tiles

    def spatial_products(self, assign: dict[str, tuple[int, ...]]) -> list[int]:
        out = [1] * self.n
        for d, fs in assign.items():
            for slot, f in zip(self.slots[d], fs):
                if slot.spatial:
                    out[slot.level] *= f
        return out

    def level_fits(self, i: int, tile: dict[str, int], db: frozenset[str] = frozenset()) -> bool:
        return not level_violations(self.problem, self.arch, i, tile, db)

    def db_fits(self, i: int, tiles: list[dict[str, int]], db: frozenset[str]) -> bool:
        """Level i can hold its tile with `db` double buffered (including a library call's output tile)."""
        return self.level_fits(i, tiles[i], db) and not call_violations(self.problem, self.arch, tiles, {i: db})

    def fits(self, assign: dict[str, tuple[int, ...]], db: dict[int, frozenset[str]] | None = None) -> bool:
        sp = self.spatial_products(assign)
        if any(s > lv.fanout for s, lv in zip(sp, self.arch.levels)):
            return False
        tiles = self.level_tiles(assign)
        db = db or {}
        if call_violations(self.problem, self.arch, tiles, db):
            return False
        return all(self.level_fits(i, tiles[i], db.get(i, frozenset())) for i in range(self.n))

    def max_double_buffering(self, tiles: list[dict[str, int]]) -> list[dict[int, frozenset[str]]]:
        """Every combination, over levels with two buffers, of a maximal set of kept tensors that still fits
        when doubled (double buffering only hides transfers, so a maximal set dominates its subsets)."""
        per_level: list[list[tuple[int, frozenset[str]]]] = []
        for i in self.db_levels:
            keeps = sorted(self.arch.levels[i].keeps)
            feasible = [
                frozenset(c) for r in range(len(keeps), -1, -1) for c in itertools.combinations(keeps, r)
                if self.db_fits(i, tiles, frozenset(c))
            ]
            maximal = [s for s in feasible if not any(s < o for o in feasible)]
            per_level.append([(i, s) for s in maximal])
        return [dict(c) for c in itertools.product(*per_level)]

    # ---- assembly -----------------------------------------------------------------------------------

    def temporal_dims(self, assign: dict[str, tuple[int, ...]]) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in range(self.n)]
        for d in self.dims:
            for slot, f in zip(self.slots[d], assign[d]):
                if not slot.spatial and f > 1:
                    out[slot.level].append(d)
        return out

    def build(
        self,
        assign: dict[str, tuple[int, ...]],
        orders: list[tuple[str, ...]] | list[list[str]],
        db: dict[int, frozenset[str]],
    ) -> Mapping:
        temporal: list[dict[str, int]] = [{} for _ in range(self.n)]
        spatial: list[list[tuple[str, int]]] = [[] for _ in range(self.n)]
        for d in self.dims:
            for slot, f in zip(self.slots[d], assign[d]):
                if f > 1:
                    if slot.spatial:
                        spatial[slot.level].append((d, f))
                    else:
                        temporal[slot.level][d] = f
        return Mapping(
            levels=[
                LevelMapping(
                    name=lv.name,
                    temporal=[(d, temporal[i][d]) for d in orders[i]],  # type: ignore[misc]
                    spatial=spatial[i],  # type: ignore[arg-type]
                )
                for i, lv in enumerate(self.arch.levels)
            ],
            double_buffered={self.arch.levels[i].name: sorted(s) for i, s in db.items() if s},  # type: ignore[arg-type]
            dataflow=self.arch.dataflow,
        )

    @cached_property
    def dram_slot(self) -> dict[str, int]:
        """Index of the outermost temporal slot of each dimension (always legal to put factors there)."""
        return {d: next(k for k, s in enumerate(self.slots[d]) if s.level == self.n - 1 and not s.spatial)
                for d in self.dims}
