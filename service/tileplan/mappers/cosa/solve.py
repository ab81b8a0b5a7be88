"""Solving a CosaModel with HiGHS: the Pyomo model compiled to arrays by Pyomo's linear visitor, handed to HiGHS in
one call.

Pyomo's persistent HiGHS interface cost 15% of cosa's time on Simba (issue 15; bench/mapper.py --profile before
this change): it walks every constraint with
generate_standard_repn, keeps per-variable bookkeeping for incremental changes, re-checks the whole model for
changes before each solve and captures the file descriptors around it. Pyomo's linear visitor (the walk behind its
LP writers and standard-form compiler) reads each constraint once; HiGHS gets the same rows, bounds, integrality
and costs.

A `Session` keeps the HiGHS instance, so a model whose objective was replaced after a solve (`CosaModel.weigh`) is
re-solved with new costs and the same rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import highspy
import numpy as np
import pyomo.core as pyo
from pyomo.core.base.objective import ObjectiveData
from pyomo.core.base.var import VarData
from pyomo.repn.linear import LinearRepnVisitor

from tileplan.mappers.cosa.model import CosaModel

INF = highspy.kHighsInf


@dataclass
class SolveOutcome:
    status: str  # optimal | time_limit | infeasible
    seconds: float
    objective: float | None
    gap: float | None


class QuietHighs(highspy.Highs):
    """highspy's Highs, silent from the start. Its constructor already calls into HiGHS (registering callbacks),
    and HiGHS prints its banner on the first call made while output is on, so output goes off before that."""

    def enableCallbacks(self) -> None:
        self.setOptionValue("output_flag", False)
        super().enableCallbacks()


def _sense(objective: ObjectiveData) -> highspy.ObjSense:
    return highspy.ObjSense.kMinimize if objective.sense == pyo.minimize else highspy.ObjSense.kMaximize


def pass_model(h: highspy.Highs, m: pyo.ConcreteModel) -> tuple[list[VarData], np.ndarray]:
    """Compile the Pyomo model's constraints with Pyomo's linear visitor and hand them to HiGHS in one call; the Pyomo
    variable of each HiGHS column (every variable of the objective is in some constraint) and which columns are
    integer.

    Rows and columns as the persistent interface passed them: one row per constraint in declaration order (constant
    terms moved to its bounds), columns numbered in order of first appearance. Fixed variables
    (db forced on under library execution, reuse where no loop order saves anything) are constants to the visitor:
    they get no column (the persistent interface gave them an empty one, which HiGHS's presolve dropped) and keep
    their fixed values for decode. (Pyomo's LinearStandardFormCompiler does the same walk but builds scipy matrices,
    and its first use imports scipy.stats: 0.7 s CPU per process.)"""
    visitor = LinearRepnVisitor({})
    column: dict[int, int] = {}  # id(var) -> column
    columns: list[VarData] = []

    def terms(expr: object) -> tuple[float, list[int], list[float]]:
        repn = visitor.walk_expression(expr)
        for var_id in repn.linear:
            if var_id not in column:
                column[var_id] = len(columns)
                columns.append(visitor.var_map[var_id])
        return repn.constant, [column[v] for v in repn.linear], list(repn.linear.values())

    row_lower, row_upper, start, index, value = [], [], [0], [], []
    for con in m.component_data_objects(pyo.Constraint, active=True):
        lb, body, ub = con.to_bounded_expression(evaluate_bounds=True)
        constant, cols, coefs = terms(body)
        row_lower.append(-INF if lb is None else lb - constant)
        row_upper.append(INF if ub is None else ub - constant)
        index += cols
        value += coefs
        start.append(len(index))
    n = len(columns)
    integer = np.fromiter((v.is_integer() for v in columns), bool, n)
    h.passModel(  # the objective's costs come after (`Session._load_objective`, also what a re-weighing changes)
        n, len(row_lower), len(index), int(highspy.MatrixFormat.kRowwise), int(highspy.ObjSense.kMinimize), 0.0,
        np.zeros(n),
        np.fromiter((-INF if v.lb is None else v.lb for v in columns), np.float64, n),
        np.fromiter((INF if v.ub is None else v.ub for v in columns), np.float64, n),
        np.array(row_lower, dtype=np.float64), np.array(row_upper, dtype=np.float64),
        np.array(start, dtype=np.int32), np.array(index, dtype=np.int32), np.array(value, dtype=np.float64),
        integer.astype(np.int32),  # HighsVarType: 0 continuous, 1 integer
    )
    return columns, integer


class Session:
    def __init__(self, model: CosaModel, mip_rel_gap: float = 1e-4) -> None:
        self.model = model
        # The gap is in log2 units of cycles: 1e-3 of a ~16-bit objective let an answer 1% slower by the proxy pass as
        # optimal (a DianNao conv whose polish then stuck 1.8% above timeloop-mapper), 1e-4 costs next to nothing since
        # the MIP counts prime-factor copies. HiGHS's sub-MIP heuristics (RINS, RENS) and root restarts spent a third
        # of the binary formulation's time without changing a bench plan for the worse (issue 15: bench/results/mapper.md)
        self.options = {"mip_rel_gap": mip_rel_gap, "random_seed": 0, "threads": 1, "output_flag": False,
                        "mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False, "mip_allow_restart": False}
        self.h = QuietHighs()
        for name, value in self.options.items():
            self.h.setOptionValue(name, value)
        self.columns, self.integer = pass_model(self.h, model.m)
        self.column = {id(v): j for j, v in enumerate(self.columns)}
        self.last: np.ndarray | None = None  # the last solve's answer, per column
        self._load_objective()

    def _load_objective(self) -> None:
        """The model's objective into HiGHS: its costs, offset and sense (after `CosaModel.weigh` replaced it, only
        these change)."""
        self.objective = self.model.m.obj  # the objective HiGHS holds
        repn = LinearRepnVisitor({}).walk_expression(self.objective.expr)  # fixed variables land in the constant
        cost = np.zeros(len(self.columns))
        for var_id, coef in repn.linear.items():
            cost[self.column[var_id]] = coef
        self.h.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32), cost)
        self.h.changeObjectiveOffset(float(repn.constant))
        self.h.changeObjectiveSense(_sense(self.objective))

    def solve(self, time_limit_s: float, presolve: bool = True, from_last: bool = False,
              mip_rel_gap: float | None = None) -> SolveOutcome:
        """Solve with the model's current objective. For this solve only: `presolve=False` skips HiGHS's presolve,
        `from_last` starts branch and bound from the last solve's answer (feasible under any objective: only the
        costs changed), `mip_rel_gap` replaces the session's gap (see cosa.mapper for where each pays)."""
        h = self.h
        t0 = time.perf_counter()
        if self.model.m.obj is not self.objective:
            self._load_objective()
        if from_last and self.last is not None:
            # after the objective's costs: a change to the model drops a start HiGHS holds (so a start set before
            # `weigh`'s new costs reach HiGHS is silently lost)
            h.setSolution(len(self.last), np.arange(len(self.last), dtype=np.int32), self.last)
        h.setOptionValue("presolve", "choose" if presolve else "off")
        h.setOptionValue("mip_rel_gap", self.options["mip_rel_gap"] if mip_rel_gap is None else mip_rel_gap)
        h.setOptionValue("time_limit", max(time_limit_s, 0.05))
        h.run()
        status, info = h.getModelStatus(), h.getInfo()
        seconds = time.perf_counter() - t0
        if info.primal_solution_status != highspy.kSolutionStatusFeasible:
            return SolveOutcome("time_limit" if status == highspy.HighsModelStatus.kTimeLimit else "infeasible",
                                seconds, None, None)
        x = np.array(h.getSolution().col_value)
        # integer columns come back within HiGHS's integrality tolerance (0.999999...): rounded, so that as a start
        # the answer is exactly feasible
        self.last = np.where(self.integer, np.round(x), x)
        for v, xv in zip(self.columns, x):
            v.set_value(xv, skip_validation=True)
        obj = info.objective_function_value
        # no branch and bound (presolve or the root LP settled it): the incumbent is its own bound once optimal
        optimal = status == highspy.HighsModelStatus.kOptimal
        bound = (obj if optimal else None) if info.mip_node_count == -1 else info.mip_dual_bound
        gap = None if bound is None else abs(obj - bound) / max(abs(obj), 1e-9)
        return SolveOutcome("optimal" if optimal else "time_limit", seconds, obj, gap)


def value(var: pyo.Var) -> float:
    v = pyo.value(var, exception=False)
    return 0.0 if v is None else float(v)
