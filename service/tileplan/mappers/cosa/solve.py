"""Solving a CosaModel with HiGHS through Pyomo's persistent solver interface.

A `Session` keeps the HiGHS instance (Pyomo's persistent interface), so a model changed after a solve is re-solved
incrementally instead of rebuilt.
"""

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


class Session:
    def __init__(self, model: CosaModel, mip_rel_gap: float = 1e-4) -> None:
        self.model = model
        self.solver = Highs()
        # The gap is in log2 units of cycles: 1e-3 of a ~16-bit objective let an answer 1% slower by the proxy pass as
        # optimal (a DianNao conv whose polish then stuck 1.8% above timeloop-mapper), 1e-4 costs next to nothing since
        # the MIP counts prime-factor copies. HiGHS's sub-MIP heuristics (RINS, RENS) and root restarts spent a third
        # of the binary formulation's time without changing a bench plan for the worse (issue 15: bench/results/mapper.md)
        self.options = {"mip_rel_gap": mip_rel_gap, "random_seed": 0, "threads": 1, "output_flag": False,
                        "mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False, "mip_allow_restart": False}

    def solve(self, time_limit_s: float) -> SolveOutcome:
        t0 = time.perf_counter()
        res = self.solver.solve(
            self.model.m,
            time_limit=max(time_limit_s, 0.05),
            load_solutions=False,
            raise_exception_on_nonoptimal_result=False,
            solver_options=self.options,
        )
        tc = res.termination_condition
        seconds = time.perf_counter() - t0
        if res.incumbent_objective is None:
            status = "time_limit" if tc == TerminationCondition.maxTimeLimit else "infeasible"
            return SolveOutcome(status, seconds, None, None)
        res.solution_loader.load_vars()
        obj, bound = res.incumbent_objective, res.objective_bound
        gap = None if bound is None else abs(obj - bound) / max(abs(obj), 1e-9)
        status = "optimal" if tc == TerminationCondition.convergenceCriteriaSatisfied else "time_limit"
        return SolveOutcome(status, seconds, obj, gap)


def value(var: pyo.Var) -> float:
    v = pyo.value(var, exception=False)
    return 0.0 if v is None else float(v)
