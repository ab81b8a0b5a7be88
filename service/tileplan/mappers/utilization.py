"""Timeloop's min-utilization: a level that states it refuses maps whose kept tiles fill less than that share of its
usable words. The MIP's capacity constraints are upper bounds only, so an answer that leaves such a level too empty is
grown here: single prime-factor moves between levels (`polish.neighbours`), each step the one that leaves the least
shortfall without breaking any other rule, until every level is full enough (polish, which keeps every rule, then
improves it). Where no single move shrinks the shortfall, a short detour through moves that leave it as it is may
(moving a factor out of the way first frees the room another level needs: `_detour`)."""

from __future__ import annotations

from tileplan.check import MIN_UTILIZATION, check_arch, utilization_deficits
from tileplan.hardware import Architecture
from tileplan.mappers.polish import neighbours
from tileplan.mapping import Mapping
from tileplan.problem import Problem


def _shortfall(problem: Problem, arch: Architecture, mapping: Mapping) -> float:
    return sum((need - words) / need for words, need in
               utilization_deficits(problem, arch, mapping).values())


def fill_to_min_utilization(problem: Problem, arch: Architecture, mapping: Mapping, steps: int = 64,
                            violations: list[str] | None = None) -> Mapping | None:
    """`mapping`, or a legal one grown from it where it breaks only min-utilization rules; None when it breaks others
    or no sequence of single moves found within `steps` makes it legal. `violations`: check_arch's of `mapping`,
    when the caller has them."""
    violations = check_arch(problem, arch, mapping) if violations is None else violations
    if not violations:
        return mapping
    if any(MIN_UTILIZATION not in v for v in violations):
        return None
    current, short = mapping, _shortfall(problem, arch, mapping)
    for _ in range(steps):
        best: tuple[float, Mapping] | None = None
        for cand in neighbours(current):
            v = check_arch(problem, arch, cand)
            if any(MIN_UTILIZATION not in x for x in v):
                continue
            s = _shortfall(problem, arch, cand) if v else 0.0
            if s < short - 1e-12 and (best is None or s < best[0] - 1e-12):
                best = (s, cand)
        if best is None:
            best = _detour(problem, arch, current, short)
            if best is None:
                return None
        short, current = best
        if short == 0.0:
            return current
    return None


DETOUR_DEPTH = 3  # moves
DETOUR_WIDTH = 16  # states kept per depth, least shortfall first


def _detour(problem: Problem, arch: Architecture, mapping: Mapping, short: float) -> tuple[float, Mapping] | None:
    """The least-shortfall state below `short` within DETOUR_DEPTH single moves of `mapping`, through states that break
    only min-utilization rules and are no emptier than it (breadth first, DETOUR_WIDTH states a depth). The seed-4
    fuzz's fuzz4_010 L2: every move filling an input buffer overflowed the weights' sibling buffer above it while K12
    sat in the input buffer; moving K up first fills nothing but makes the room (cosa 18,432 -> 10,728 cycles,
    timeloop-mapper's 3 s search 12,720)."""
    seen = {mapping.model_dump_json()}
    frontier = [mapping]
    for _ in range(DETOUR_DEPTH):
        found: tuple[float, Mapping] | None = None
        level: list[tuple[float, Mapping]] = []
        for state in frontier:
            for cand in neighbours(state):
                sig = cand.model_dump_json()
                if sig in seen:
                    continue
                seen.add(sig)
                v = check_arch(problem, arch, cand)
                if any(MIN_UTILIZATION not in x for x in v):
                    continue
                s = _shortfall(problem, arch, cand) if v else 0.0
                if s < short - 1e-12:
                    if found is None or s < found[0] - 1e-12:
                        found = (s, cand)
                elif s <= short + 1e-12:
                    level.append((s, cand))
        if found is not None:
            return found
        level.sort(key=lambda sm: sm[0])  # (stable: the first of equals in move order)
        frontier = [m for _, m in level[:DETOUR_WIDTH]]
        if not frontier:
            return None
    return None
