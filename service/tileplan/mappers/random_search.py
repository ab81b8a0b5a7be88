"""Random search: the best of N legal random mappings by the cost model (a common mapper baseline,
cf. Timeloop's random mapper and CoSA's "Random" comparison).

A sample is built so that it is legal by construction: a dataflow is drawn; all prime factors of all
dimensions start in DRAM's temporal loop; in a random order, each factor moves to a slot drawn
uniformly from those that keep every fan-out and buffer within bounds (space.py's slots: temporal at
any level, spatial where a fan-out may unroll the dimension; DRAM itself stays a possible draw). Half
the samples are built with every two-buffer level double-buffering all it keeps (halving its room),
half without; either way double buffering is then added wherever it still fits. Every level's loop
order is a uniformly random permutation. check.py verifies each sample, cost.evaluate_mapping scores it
and score.py ranks it; `options.samples` legal samples are drawn from `random.Random(options.seed)`,
so the result is a function of (problem, hardware, options) alone. The time limit only guards against
pathological cases (status "time_limit" when it cuts the run short).
"""

from __future__ import annotations

import math
import random
import time

from tileplan.check import check_arch
from tileplan.cost import evaluate_mapping
from tileplan.errors import MappingInfeasible
from tileplan.hardware import HardwareDescriptor
from tileplan.loop_constraints import VIOLATES as LOOPS_VIOLATED
from tileplan.loop_constraints import conform
from tileplan.mappers.base import TILEPLAN, MapperOptions, MapperResult, SolverInfo, register, searched_dataflows
from tileplan.mappers.score import score_mapping
from tileplan.mappers.space import MappingSpace
from tileplan.mapping import Mapping
from tileplan.problem import Problem


def sample_mapping(space: MappingSpace, rng: random.Random) -> Mapping:
    """One random legal mapping of `space` (see the module docstring)."""
    arch = space.arch
    double = rng.random() < 0.5
    db = {i: frozenset(arch.levels[i].keeps) for i in space.db_levels} if double else {}
    assign: dict[str, list[int]] = {d: [1] * len(space.slots[d]) for d in space.dims}
    for d in space.dims:
        assign[d][space.dram_slot[d]] = space.problem.dims[d]
    if not space.fits({d: tuple(v) for d, v in assign.items()}, db):
        db = {}  # even the smallest tiles do not fit doubled
    factors = [(d, p) for d in space.dims for p in space.problem.factors[d]]
    rng.shuffle(factors)
    for d, p in factors:
        home = space.dram_slot[d]
        choices = list(range(len(space.slots[d])))
        rng.shuffle(choices)
        for k in choices:
            if k == home:
                break
            assign[d][home] //= p
            assign[d][k] *= p
            if space.fits({dd: tuple(v) for dd, v in assign.items()}, db):
                break
            assign[d][k] //= p
            assign[d][home] *= p
    final = {d: tuple(v) for d, v in assign.items()}
    tiles = space.level_tiles(final)
    for i in space.db_levels:  # add double buffering wherever it still fits
        for t in sorted(arch.levels[i].keeps):
            cand = db.get(i, frozenset()) | {t}
            if space.db_fits(i, tiles, cand):
                db[i] = cand
    orders = []
    for dims in space.temporal_dims(final):
        dims = list(dims)
        rng.shuffle(dims)
        orders.append(dims)
    return space.build(final, orders, db)


@register("random")
class RandomMapper:
    """Best of `options.samples` random legal mappings, seeded and deterministic."""

    name = "random"
    version = "1"

    def map(self, problem: Problem, hw: HardwareDescriptor, options: MapperOptions) -> MapperResult:
        t0 = time.perf_counter()
        names = searched_dataflows(hw, options.dataflow)
        spaces = {n: MappingSpace(problem, hw.resolve(n)) for n in names}
        rng = random.Random(options.seed)
        best: Mapping | None = None
        best_score = math.inf
        seen: set[str] = set()
        scored = 0
        finished = True
        for _ in range(options.samples):
            if time.perf_counter() - t0 > options.time_limit_s:
                finished = False
                break
            space = spaces[rng.choice(names)]
            mapping = sample_mapping(space, rng)
            violations = check_arch(problem, space.arch, mapping)
            if violations and all(LOOPS_VIOLATED in v for v in violations):
                # a Timeloop file's loop constraints are not the sampler's: the sample is moved to keep them, and
                # dropped when that breaks something else
                kept = conform(space.arch, mapping, mapping.bounds())
                if kept is None or check_arch(problem, space.arch, kept):
                    continue
                mapping, violations = kept, []
            if violations:  # legal by construction; anything else is a bug to surface, not to hide
                raise MappingInfeasible(f"random built an illegal mapping: {'; '.join(violations)}")
            key = mapping.model_dump_json()
            scored += 1
            if key in seen:
                continue
            seen.add(key)
            metrics = evaluate_mapping(problem, space.arch, mapping, TILEPLAN)
            s = score_mapping(problem, space.arch, mapping, metrics, options.objective)
            if s < best_score - 1e-12:
                best, best_score = mapping, s
        if best is None:
            raise MappingInfeasible(f"random: no sample within the time limit on {hw.name}")
        return MapperResult(
            mapping=best,
            solver=SolverInfo(
                status="heuristic" if finished else "time_limit",
                seconds=time.perf_counter() - t0, objective=best_score, candidates=scored,
            ),
            notes=[f"best of {scored} random legal mappings ({len(seen)} distinct), seed {options.seed}"],
        )
