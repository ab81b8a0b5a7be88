"""Local search around a mapping, judged by the cost model: the MIP's objective is a proxy, so its
answer is polished by moving single prime factors between levels while the score improves.

A move takes one prime factor of one dimension out of a temporal loop at one level and puts it into
the temporal loop of that dimension at another level (appending the loop as outermost there when the
level had none). Every neighbour is checked for legality and scored with `mappers.score`; the best
improving neighbour is taken (steepest descent), until none improves or the evaluation budget is spent. Where no
single move improves, two kinds of compound moves are tried (`regroupings`, taken only if they save cycles)
before giving up.
Deterministic: neighbours are generated in a fixed order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import cast

from tileplan.check import check_arch
from tileplan.cost.model import Metrics, evaluate_mapping, gemmini_cycles_many
from tileplan.dims import RELEVANT, TENSORS
from tileplan.hardware import Architecture
from tileplan.mappers.base import TILEPLAN, Objective
from tileplan.mappers.build import stationary_order
from tileplan.mappers.score import score_mapping
from tileplan.mapping import Factor, LevelMapping, Mapping
from tileplan.problem import Problem, prime_factors


def _with_factor(loops: Sequence[tuple[str, int]], dim: str, mult: int, div: int) -> list[Factor]:
    out: list[tuple[str, int]] = []
    found = False
    for d, f in loops:
        if d == dim:
            found = True
            f = f * mult // div
        if f > 1:
            out.append((d, f))
    if not found and mult > 1:
        out.append((dim, mult))
    return cast("list[Factor]", out)  # the dims of `loops`, or `dim`: a Mapping's dimensions


def neighbours(mapping: Mapping) -> list[Mapping]:
    out = []
    levels = mapping.levels
    for i, src in enumerate(levels):
        for d, f in src.temporal:
            for p in sorted(set(prime_factors(f))):
                for j in range(len(levels)):
                    if j == i:
                        continue
                    new = list(levels)  # the levels left alone are shared, never changed in place
                    new[i] = LevelMapping(name=src.name, temporal=_with_factor(src.temporal, d, 1, p), spatial=src.spatial)
                    dst = levels[j]
                    new[j] = LevelMapping(name=dst.name, temporal=_with_factor(dst.temporal, d, p, 1), spatial=dst.spatial)
                    out.append(mapping.model_copy(update={"levels": new}))
    return out


def unrollings(mapping: Mapping) -> list[Mapping]:
    """Single prime factors moved into a fan-out with room left: from a temporal loop at one level to the spatial loop
    of that dimension at another (or the same) level, or from one level's spatial loop to another's. The MIP's proxy
    can leave a fan-out idle where the cost model would fill it (a buffer feeding two MACs on a 3x3 conv: 126 cycles
    where timeloop-mapper's P2 across them gave 76). Only moves into a fan-out are made, and illegal ones (fan-out,
    mesh, spatial dimensions) are dropped by the checker before any is costed, so a plan whose fan-outs are full
    costs nothing here."""
    out = []
    levels = mapping.levels
    n = len(levels)
    for i, src in enumerate(levels):
        for kind in ("temporal", "spatial"):
            for d, f in getattr(src, kind):
                for p in sorted(set(prime_factors(f))):
                    for j in range(n):
                        if j == i and kind == "spatial":
                            continue
                        new = list(levels)
                        taken = {"temporal": list(src.temporal), "spatial": list(src.spatial)}
                        taken[kind] = _with_factor(taken[kind], d, 1, p)
                        new[i] = LevelMapping(name=src.name, temporal=taken["temporal"],
                                              spatial=taken["spatial"])
                        dst = new[j]
                        new[j] = LevelMapping(name=dst.name, temporal=dst.temporal,
                                              spatial=_with_factor(dst.spatial, d, p, 1))
                        out.append(mapping.model_copy(update={"levels": new}))
    return out


def swaps(mapping: Mapping) -> list[Mapping]:
    """One prime factor out of a level's spatial loop (into the temporal loop of its dimension at any level) and one of
    another dimension into that spatial loop (out of a temporal loop at any level): the exchange a full fan-out needs,
    which no single move makes (the seed-2 fuzz's fuzz2_007: P13 Q7 across a buffer's 192 PEs summed its R3 S3 output
    updates in time, bound by its bandwidth at 13,104 cycles, where timeloop-mapper's P13 R3 took 7,120)."""
    out = []
    levels = mapping.levels
    n = len(levels)
    for i, lv in enumerate(levels):
        for d1, f1 in lv.spatial:
            for p in sorted(set(prime_factors(f1))):
                for j in range(n):
                    base = list(levels)
                    base[i] = LevelMapping(name=lv.name, temporal=lv.temporal, spatial=_with_factor(lv.spatial, d1, 1, p))
                    base[j] = LevelMapping(name=base[j].name, temporal=_with_factor(base[j].temporal, d1, p, 1),
                                           spatial=base[j].spatial)
                    for k in range(n):
                        for d2, f2 in base[k].temporal:
                            if d2 == d1:
                                continue
                            for q in sorted(set(prime_factors(f2))):
                                new = list(base)
                                new[k] = LevelMapping(name=new[k].name, temporal=_with_factor(new[k].temporal, d2, 1, q),
                                                      spatial=new[k].spatial)
                                new[i] = LevelMapping(name=new[i].name, temporal=new[i].temporal,
                                                      spatial=_with_factor(new[i].spatial, d2, q, 1))
                                out.append(mapping.model_copy(update={"levels": new}))
    return out


def regroupings(mapping: Mapping) -> list[Mapping]:
    """Moves no single factor move improves on its own: a level's loops reordered so one tensor stays put (those
    that leave it alone innermost), and all of a level's loops over one tensor's dimensions lifted to a level
    above, outermost there, or with that level then ordered to keep the tensor put (DianNao's one-word partial-sum registers are rewritten once per visit of an output:
    the output's loops belong outside every reduction loop above them, which takes two or more moves)."""
    out: list[Mapping] = []
    seen = {tuple(tuple(lv.temporal) for lv in mapping.levels)}  # the start, and each candidate once

    def add(new: list[LevelMapping]) -> None:
        key = tuple(tuple(lv.temporal) for lv in new)
        if key not in seen:
            seen.add(key)
            out.append(mapping.model_copy(update={"levels": new}))

    levels = mapping.levels
    for i, src in enumerate(levels):
        for t in TENSORS:
            if len(src.temporal) > 1:
                order = stationary_order(dict(src.temporal), t)
                if order != list(src.temporal):
                    new = list(levels)
                    new[i] = LevelMapping(name=src.name, temporal=cast("list[Factor]", order), spatial=src.spatial)
                    add(new)
            lift = [(d, f) for d, f in src.temporal if d in RELEVANT[t]]
            if not lift:
                continue
            for j in range(i + 1, len(levels)):
                new = list(levels)
                new[i] = LevelMapping(name=src.name, temporal=[(d, f) for d, f in src.temporal if d not in RELEVANT[t]],
                                      spatial=src.spatial)
                loops: list[Factor] = list(levels[j].temporal)
                for d, f in lift:
                    loops = _with_factor(loops, d, f, 1)
                new[j] = LevelMapping(name=levels[j].name, temporal=loops, spatial=levels[j].spatial)
                add(new)
                # and with the level above ordered to keep the tensor put there too: the lifted loops land outside
                # that level's own loops over the tensor's dimensions, but its reduction loops may still sit above
                # them (a DianNao conv's K2 lifted onto P8 Q5 R3 saves only once R3 goes innermost)
                kept = cast("list[Factor]", stationary_order(dict(loops), t))
                if kept != loops:
                    new = list(new)
                    new[j] = LevelMapping(name=levels[j].name, temporal=kept, spatial=levels[j].spatial)
                    add(new)
    return out


def polish(
    problem: Problem,
    arch: Architecture,
    mapping: Mapping,
    objective: Objective,
    budget: int = 300,
    deadline: float | None = None,
) -> tuple[Mapping, float, int]:
    """(best mapping, its score, evaluations spent); `mapping` must be legal."""
    best = mapping
    metrics = evaluate_mapping(problem, arch, mapping, TILEPLAN)
    best_score, best_cycles, best_energy = score_mapping(problem, arch, mapping, metrics, objective), metrics.cycles, metrics.energy_pj
    spent = 0
    improved = True
    latency_only = objective.normalised()[1:] == (0.0, 0.0)

    def in_time() -> bool:
        return spent < budget and (deadline is None or time.perf_counter() < deadline)

    def evaluated(cands: list[Mapping]) -> list[tuple[Mapping, Metrics]]:
        """The legal ones of `cands` the budget still allows, in order, with their metrics (their calls costed
        together, `gemmini_cycles_many`); counted as spent."""
        nonlocal spent
        legal: list[Mapping] = []
        for cand in cands:
            if spent + len(legal) >= budget:
                break
            if not check_arch(problem, arch, cand):
                legal.append(cand)
        spent += len(legal)
        return [(cand, evaluate_mapping(problem, arch, cand, TILEPLAN, gemmini=g))
                for cand, g in zip(legal, gemmini_cycles_many(problem, arch, legal, TILEPLAN))]

    while improved and in_time():
        improved = False
        # Single factor moves first; the regroupings only where none of them improves (a local optimum of theirs),
        # and only when they save cycles: they are there to leave plateaus of the cycle count, not to trade it away
        # for the other terms (which single moves already weigh; a regrouping that saved energy at equal cycles led
        # a ResNet-50 layer on Gemmini to a local optimum 7% slower).
        sideways: list[Mapping] = []  # single moves that change nothing the objective or the energy sees
        for moves in (neighbours, regroupings):
            step_best: tuple[float, float, float, Mapping] | None = None
            for cand, m in evaluated(moves(best)):
                if moves is regroupings and m.cycles >= best_cycles:
                    continue
                s = score_mapping(problem, arch, cand, m, objective)
                if s < best_score - 1e-9 and (step_best is None or s < step_best[0]):
                    step_best = (s, m.cycles, m.energy_pj, cand)
                elif moves is neighbours and abs(s - best_score) <= 1e-9 and m.energy_pj <= best_energy * (1 + 1e-9):
                    sideways.append(cand)
            if step_best is not None:
                best_score, best_cycles, best_energy, best = step_best
                improved = True
                break
        # A plateau: the saving may lie one sideways step away (a loop moved to another level at the same score and
        # energy, after which a second move saves; a Simba 1x1 convolution's weight loop to DRAM, then an input
        # channel loop into the global buffer: 2.2%). Look one move past each sideways move, in order, while the
        # budget lasts; the first that finds a saving is taken, so the search never cycles (the score only drops).
        for side in sideways if not improved else []:
            if not in_time():
                break
            step_best = None
            for cand, m in evaluated(neighbours(side)):
                s = score_mapping(problem, arch, cand, m, objective)
                if s < best_score - 1e-9 and (step_best is None or s < step_best[0]):
                    step_best = (s, m.cycles, m.energy_pj, cand)
            if step_best is not None:
                best_score, best_cycles, best_energy, best = step_best
                improved = True
                break
        # Last, a factor into an idle fan-out, then (none saving) an exchange of a spatial factor for another
        # dimension's, under a latency-only objective (where the score is the cycle count, so the plan can only get
        # faster). Where energy weighs, the moves after one trade the cycles it saved back for energy: Simba's
        # ResNet-50 plans under the default weights summed 3.03 M cycles against 2.92 M without it.
        for moves in (unrollings, swaps) if latency_only else ():
            if improved or not in_time():
                break
            step_best = None
            for cand, m in evaluated(moves(best)):
                s = score_mapping(problem, arch, cand, m, objective)
                if m.cycles < best_cycles and s < best_score - 1e-9 and (step_best is None or s < step_best[0]):
                    step_best = (s, m.cycles, m.energy_pj, cand)
            if step_best is not None:
                best_score, best_cycles, best_energy, best = step_best
                improved = True
    return best, best_score, spent
