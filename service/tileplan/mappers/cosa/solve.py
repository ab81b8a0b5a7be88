"""Solving a CosaModel with HiGHS through Pyomo's solver interface, within a time limit."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyomo.environ as pyo
from pyomo.contrib.solver.common.results import TerminationCondition
from pyomo.contrib.solver.solvers.highs import Highs

from tileplan.mappers.cosa.model import CosaModel


@dataclass
class SolveOutcome:
    status: str  # optimal | time_limit | infeasible
    seconds: float
    objective: float | None
    gap: float | None


def solve(model: CosaModel, time_limit_s: float, mip_rel_gap: float = 1e-3) -> SolveOutcome:
    t0 = time.perf_counter()
    solver = Highs()
    res = solver.solve(
        model.m,
        time_limit=max(time_limit_s, 0.05),
        load_solutions=False,
        raise_exception_on_nonoptimal_result=False,
        solver_options={"mip_rel_gap": mip_rel_gap, "random_seed": 0, "threads": 1, "output_flag": False},
    )
    tc = res.termination_condition
    has_solution = res.incumbent_objective is not None
    if has_solution:
        res.solution_loader.load_vars()
    seconds = time.perf_counter() - t0
    if not has_solution:
        return SolveOutcome("infeasible" if tc != TerminationCondition.maxTimeLimit else "time_limit", seconds, None, None)
    obj, bound = res.incumbent_objective, res.objective_bound
    gap = None
    if bound is not None and obj is not None:
        gap = abs(obj - bound) / max(abs(obj), 1e-9)
    status = "optimal" if tc == TerminationCondition.convergenceCriteriaSatisfied else "time_limit"
    return SolveOutcome(status, seconds, obj, gap)


def value(var: pyo.Var) -> float:
    v = pyo.value(var, exception=False)
    return 0.0 if v is None else float(v)
