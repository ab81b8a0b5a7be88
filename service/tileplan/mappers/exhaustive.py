"""Exhaustive search: the cost model's true optimum over every legal unpadded mapping of a small layer.

Enumerates, per dataflow, every ordered factorisation of every dimension over its slots (space.py:
temporal at each level, spatial where a fan-out may unroll it), pruning partial assignments that
already overflow a fan-out or a buffer (tiles only grow as factors are added); for each legal tiling,
every maximal double-buffering choice and every non-dominated loop order per level (at most three:
see space.py). Each candidate is checked by check.py and scored by cost.evaluate_mapping with the
objective of score.py (a weighted geometric mean of cycles and energy over memory utilisation).
Padded bounds are not explored, so "optimal" means optimal among exact factorisations.

The space is sized before anything is scored: the legal tilings are enumerated (cheap: no Mapping is
built) and their candidates counted, stopping as soon as the count passes `MAX_CANDIDATES`, in which
case the mapper refuses with an InputError instead of running for hours. (`raw_estimate` gives a
looser, instant upper bound.) If the time limit runs out while scoring, the best mapping so far is
returned with status "time_limit".
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

from tileplan.check import check_arch
from tileplan.cost import evaluate_mapping
from tileplan.errors import InputError, MappingInfeasible
from tileplan.hardware import Architecture, HardwareDescriptor
from tileplan.mappers.base import TILEPLAN, MapperOptions, MapperResult, SolverInfo, register, searched_dataflows
from tileplan.mappers.score import score_mapping
from tileplan.mappers.space import MappingSpace, level_orders, ordered_factorizations
from tileplan.mapping import Mapping
from tileplan.problem import Problem

MAX_CANDIDATES = 50_000  # about 2-4 minutes of cost-model calls


def _dataflows(hw: HardwareDescriptor, options: MapperOptions) -> list[str]:
    return searched_dataflows(hw, options.dataflow)


def _dim_options(space: MappingSpace, d: str) -> list[tuple[int, ...]]:
    """Factorisations of one dimension that are legal on their own (the others at 1)."""
    out = []
    for fs in ordered_factorizations(space.problem.dims[d], len(space.slots[d])):
        if space.fits({d: fs}):
            out.append(fs)
    return out


def raw_estimate(space: MappingSpace, all_orders: bool = False) -> tuple[int, dict[str, list[tuple[int, ...]]]]:
    """Cheap upper bound on the candidates of one dataflow (per-dimension legal factorisations times
    order choices per level), and the per-dimension options it counted."""
    options = {d: _dim_options(space, d) for d in space.dims}
    tilings = math.prod(len(v) for v in options.values())
    per_level = []
    for i in range(space.n):
        dims_here = [d for d in space.dims if any(not s.spatial and s.level == i for s in space.slots[d])]
        per_level.append(len(level_orders(dims_here, all_orders)))
    return tilings * math.prod(per_level), options


def enumerate_tilings(space: MappingSpace, options: dict[str, list[tuple[int, ...]]]
                      ) -> Iterator[dict[str, tuple[int, ...]]]:
    """Every legal assignment (depth first over dimensions, most constrained first)."""
    dims = sorted(space.dims, key=lambda d: (len(options[d]), d))

    def rec(k: int, assign: dict[str, tuple[int, ...]]) -> Iterator[dict[str, tuple[int, ...]]]:
        if k == len(dims):
            yield dict(assign)
            return
        d = dims[k]
        for fs in options[d]:
            assign[d] = fs
            if space.fits(assign):
                yield from rec(k + 1, assign)
        assign.pop(d, None)

    yield from rec(0, {})


Leaf = tuple[dict[str, tuple[int, ...]], list[dict[int, frozenset[str]]], list[list[tuple[str, ...]]]]


def enumerate_space(space: MappingSpace, cap: int, all_orders: bool = False) -> tuple[list[Leaf], int]:
    """The legal tilings with their double-buffering and order choices, and the number of candidates
    they make; stops (returning what it has and a count above `cap`) once the count passes `cap`."""
    raw, options = raw_estimate(space, all_orders)
    leaves: list[Leaf] = []
    count = 0
    for assign in enumerate_tilings(space, options):
        dbs = space.max_double_buffering(space.level_tiles(assign))
        orders = [level_orders(td, all_orders) for td in space.temporal_dims(assign)]
        count += len(dbs) * math.prod(len(o) for o in orders)
        leaves.append((assign, dbs, orders))
        if count > cap:
            break
    return leaves, count


def _too_big(hw_name: str, dataflow: str, count: int, cap: int) -> InputError:
    return InputError(
        ("options", "mapper"),
        f"exhaustive: more than {cap:,} legal candidate mappings on {hw_name} ({dataflow}) (counted {count:,} "
        "before stopping); use a smaller layer or another mapper (cosa, random)",
    )


def search(
    problem: Problem, arch: Architecture, leaves: list[Leaf], options: MapperOptions, deadline: float
) -> tuple[Mapping | None, float, int, bool]:
    """(best mapping, its score, candidates scored, finished) over one dataflow's enumerated space."""
    space = MappingSpace(problem, arch)
    best: Mapping | None = None
    best_score = math.inf
    scored = 0
    for assign, dbs, order_choices in leaves:
        for db in dbs:
            for k, orders in enumerate(_product(order_choices)):
                mapping = space.build(assign, orders, db)
                # Legality does not depend on loop order: check.py sees each (tiling, buffering) once.
                violations = check_arch(problem, arch, mapping) if k == 0 else []
                if violations:  # the incremental test and check.py disagree: a bug, never a silent skip
                    raise MappingInfeasible(f"exhaustive built an illegal mapping: {'; '.join(violations)}")
                metrics = evaluate_mapping(problem, arch, mapping, TILEPLAN)
                s = score_mapping(problem, arch, mapping, metrics, options.objective)
                scored += 1
                if s < best_score - 1e-12:
                    best, best_score = mapping, s
                if time.perf_counter() > deadline:
                    return best, best_score, scored, False
    return best, best_score, scored, True


def _product(choices: Sequence[Sequence[Any]]) -> Iterator[list[Any]]:
    if not choices:
        yield []
        return
    first, *rest = choices
    for c in first:
        for tail in _product(rest):
            yield [c, *tail]


@register("exhaustive")
class ExhaustiveMapper:
    """Every legal (unpadded) mapping of a small layer, scored by the cost model: the true optimum."""

    name = "exhaustive"
    version = "1"

    def __init__(self, max_candidates: int = MAX_CANDIDATES, all_orders: bool = False):
        self.max_candidates = max_candidates
        self.all_orders = all_orders

    def map(self, problem: Problem, hw: HardwareDescriptor, options: MapperOptions) -> MapperResult:
        t0 = time.perf_counter()
        deadline = t0 + options.time_limit_s
        names = _dataflows(hw, options)
        # Size every dataflow's space first: refuse before scoring anything.
        spaces = {}
        for name in names:
            leaves, count = enumerate_space(MappingSpace(problem, hw.resolve(name)), self.max_candidates, self.all_orders)
            if count > self.max_candidates:
                raise _too_big(hw.name, name, count, self.max_candidates)
            spaces[name] = leaves
        best, best_score, total, finished = None, math.inf, 0, True
        for name in names:
            m, s, n, done = search(problem, hw.resolve(name), spaces[name], options, deadline)
            total += n
            if m is not None and s < best_score - 1e-12:
                best, best_score = m, s
            if not done:
                finished = False
                break
        if best is None:
            raise MappingInfeasible(f"no legal unpadded mapping of this layer on {hw.name}")
        status = "optimal" if finished else "time_limit"
        notes = [f"{total} candidates scored over {len(names)} dataflow(s); unpadded factorisations only"]
        if not finished:
            notes.append(f"time limit {options.time_limit_s}s reached: best found so far, not proven optimal")
        return MapperResult(
            mapping=best,
            solver=SolverInfo(status=status, seconds=time.perf_counter() - t0, objective=best_score,
                              candidates=total, mip_gap=0.0 if finished else None),
            notes=notes,
        )
