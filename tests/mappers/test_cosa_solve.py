"""cosa's Session hands HiGHS the LP Pyomo's persistent HiGHS interface passed (kept here as the oracle): the same
rows, columns in the same order, bounds, integrality and costs, before and after `CosaModel.weigh`."""

import numpy as np
import pyomo.environ as pyo
import pytest
from pyomo.contrib.solver.solvers.highs import Highs as PersistentHighs

from tileplan.hardware.catalog import get_hardware
from tileplan.mappers.base import searched_dataflows
from tileplan.mappers.cosa.model import Weights, build_model
from tileplan.mappers.cosa.solve import Session
from tileplan.mappers.cosa.spec import build_spec
from tileplan.problem import Problem
from tileplan.workload import parse_layer

CONV = {"op": "conv2d", "in_channels": 64, "out_channels": 128, "in_h": 28, "in_w": 28, "kernel": 3, "padding": 1}
MATMUL = {"op": "matmul", "M": 384, "K": 768, "N": 768}


def model(layer, hw_name):
    hw = get_hardware(hw_name)
    arch = hw.resolve(searched_dataflows(hw, None)[0])
    return build_model(build_spec(Problem.from_layer(parse_layer(layer)), arch), Weights(0.6, 0.3, 0.1))


def lp(h, cols, rows):
    """HiGHS's model as {row name: {column name: coefficient}}, row and column bounds, costs, integrality, offset."""
    h.ensureColwise()
    p = h.getLp()
    a = p.a_matrix_
    matrix = {r: {} for r in rows}
    for j, c in enumerate(cols):
        for k in range(a.start_[j], a.start_[j + 1]):
            matrix[rows[a.index_[k]]][c] = a.value_[k]
    integ = list(p.integrality_) or [0] * p.num_col_
    return dict(
        matrix=matrix,
        rows={r: (p.row_lower_[i], p.row_upper_[i]) for i, r in enumerate(rows)},
        cols={c: (p.col_lower_[j], p.col_upper_[j], p.col_cost_[j], int(integ[j])) for j, c in enumerate(cols)},
        order=list(cols),
        offset=p.offset_,
    )


def persistent_lp(m):
    s = PersistentHighs()
    s.set_instance(m.m)
    cols = [None] * len(s._pyomo_var_to_solver_var_map)
    names = {id(v): v.name for v in m.m.component_data_objects(pyo.Var)}
    for vid, j in s._pyomo_var_to_solver_var_map.items():
        cols[j] = names[vid]
    rows = [None] * len(s._pyomo_con_to_solver_con_map)
    for con, i in s._pyomo_con_to_solver_con_map.items():
        rows[i] = con.name
    return s, lp(s._solver_model, cols, rows)


def session_lp(session, m):
    rows = [c.name for c in m.m.component_data_objects(pyo.Constraint, active=True)]
    return lp(session.h, [v.name for v in session.columns], rows)


def assert_same(theirs, ours):
    # the persistent interface also passed fixed variables, as empty columns (HiGHS's presolve drops them)
    for c, (lo, up, _cost, _int) in theirs["cols"].items():
        if c not in ours["cols"]:
            assert lo == up and all(c not in row for row in theirs["matrix"].values()), c
    assert ours["order"] == [c for c in theirs["order"] if c in ours["cols"]]
    assert list(ours["rows"]) == list(theirs["rows"])
    for c, (lo, up, cost, integ) in ours["cols"].items():
        assert (lo, up, integ) == theirs["cols"][c][:2] + theirs["cols"][c][3:], c
        assert cost == pytest.approx(theirs["cols"][c][2], abs=1e-12), c
    for r, bounds in ours["rows"].items():
        assert bounds == pytest.approx(theirs["rows"][r], abs=1e-12), r
        row = ours["matrix"][r]
        assert row.keys() == theirs["matrix"][r].keys(), r
        assert np.allclose([row[c] for c in row], [theirs["matrix"][r][c] for c in row], rtol=0, atol=1e-12), r
    assert ours["offset"] == pytest.approx(theirs["offset"], abs=1e-12)


@pytest.mark.parametrize("hw_name", ["gemmini-16x16", "simba"])
@pytest.mark.parametrize("layer", [CONV, MATMUL], ids=["conv", "matmul"])
def test_session_passes_the_persistent_interfaces_lp(layer, hw_name):
    m = model(layer, hw_name)
    solver, theirs = persistent_lp(m)
    session = Session(m)
    assert_same(theirs, session_lp(session, m))
    # re-weighed: new costs and offset in both, rows untouched
    m.weigh(Weights(1.0, 0.0, 0.0))
    solver.set_objective(m.m.obj)
    session.solve(60.0)
    rows = list(theirs["rows"])
    assert_same(lp(solver._solver_model, theirs["order"], rows), session_lp(session, m))


def test_reweighed_session_solves_as_a_fresh_one():
    m = model(CONV, "gemmini-16x16")
    session = Session(m)
    first = session.solve(60.0)
    m.weigh(Weights(1.0, 0.0, 0.0))
    again = session.solve(60.0)
    fresh = model(CONV, "gemmini-16x16")
    fresh.weigh(Weights(1.0, 0.0, 0.0))
    alone = Session(fresh).solve(60.0)
    assert again.status == alone.status == "optimal"
    assert again.objective != pytest.approx(first.objective, rel=1e-3)
    assert again.objective == pytest.approx(alone.objective, rel=1e-4)  # the same optimum, within the MIP gap
    # the solution read back into the Pyomo variables is the latency optimum's (decode reads them)
    assert pyo.value(m.m.lat) == pytest.approx(again.objective, abs=1e-2)  # (less the tie-break term)


def test_a_row_without_variables_that_cannot_hold_is_infeasible():
    m = model(CONV, "gemmini-16x16")
    db = next(v for v in m.m.db.values() if v.fixed)
    m.m.impossible = pyo.Constraint(expr=db >= 2)
    outcome = Session(m).solve(1.0)
    assert outcome.status == "infeasible" and outcome.objective is None


def test_presolve_is_chosen_per_solve():
    """cosa.mapper skips HiGHS's presolve for simba's weighted MIP only (it slows that MIP); the next solve on
    the same instance (the latency re-solve) presolves again, and skipping presolve keeps the optimum."""
    m = model(CONV, "simba")
    session = Session(m)
    without = session.solve(60.0, presolve=False)
    assert session.h.getOptionValue("presolve")[1] == "off"
    again = session.solve(60.0)
    assert session.h.getOptionValue("presolve")[1] == "choose"
    fresh = Session(model(CONV, "simba")).solve(60.0)
    assert without.status == again.status == fresh.status == "optimal"
    assert without.objective == pytest.approx(fresh.objective, rel=1e-4)


def test_a_re_solve_can_start_from_the_last_answer():
    """`from_last` hands HiGHS the previous answer after the new objective's costs (a start set before them is
    dropped by HiGHS): with a gap too loose to search further the re-solve returns that answer itself; the next solve
    is back on the session's gap and searches again."""
    m = model(CONV, "simba")
    session = Session(m)
    session.solve(60.0)
    weighted = {v.name: v.value for v in session.columns}
    m.weigh(Weights(1.0, 0.0, 0.0))
    started = session.solve(60.0, from_last=True, mip_rel_gap=0.5)
    assert {v.name: v.value for v in session.columns} == pytest.approx(weighted, abs=1e-6)
    assert session.h.getOptionValue("mip_rel_gap")[1] == 0.5
    again = session.solve(60.0)
    assert session.h.getOptionValue("mip_rel_gap")[1] == 1e-4
    assert again.objective < started.objective - 1e-3  # the weighted answer was not the latency optimum
