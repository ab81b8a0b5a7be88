"""Naming the cost model: `"model": "timeloop"` in /evaluate and schedule options."""

import pytest
from tests.conftest import BENCH_DATA

from tileplan.errors import InputError
from tileplan.hardware.catalog import get_hardware, load_descriptor
from tileplan.interop.timeloop_map import from_timeloop_mapping
from tileplan.interop.timeloop_reference import case_problem, load_cases
from tileplan.plan import ScheduleOptions, evaluate, make_plan
from tileplan.workload import parse_layer

DATA = BENCH_DATA / "timeloop_reference"


def _case(case_id):
    return next(c for c in load_cases(DATA) if c["id"] == case_id)


def test_evaluate_with_the_timeloop_model_gives_timeloops_cycles_on_gemmini():
    case = _case("gemmini_arch_v03/conv_24_24_3x3_s2_28x44/random1")
    hw = load_descriptor((DATA / case["arch"]).read_text(), name="gemmini_arch_v03")
    layer = parse_layer(case["layer"])
    mapping = from_timeloop_mapping(case["map_yaml"], hw, case_problem(case))
    tl = evaluate(layer, hw, mapping, model="timeloop")
    assert tl.valid and tl.metrics.model == "timeloop"
    assert tl.metrics.cycles == case["timeloop"]["cycles"]
    # the default on Gemmini-like hardware stays the calibrated model
    assert evaluate(layer, hw, mapping).metrics.model == "gemmini"


def test_timeloop_model_judges_legality_like_timeloop():
    case = next(c for c in load_cases(DATA) if not c["timeloop"]["accepted"]
                and "exceeds buffer capacity" in c["timeloop"]["error"] and not c.get("padded_problem"))
    hw = load_descriptor((DATA / case["arch"]).read_text(), name="x")
    mapping = from_timeloop_mapping(case["map_yaml"], hw, case_problem(case))
    out = evaluate(parse_layer(case["layer"]), hw, mapping, model="timeloop")
    assert not out.valid and any("exceeds buffer capacity" in v for v in out.violations)


def test_the_gemmini_model_is_refused_where_it_does_not_apply():
    layer = parse_layer({"op": "matmul", "M": 64, "K": 64, "N": 64})
    with pytest.raises(InputError, match="Gemmini-like hierarchy") as exc:
        make_plan(layer, get_hardware("simba"), ScheduleOptions(model="gemmini", baseline=False, time_limit_s=2))
    assert exc.value.loc == ("options", "model")


def test_schedule_with_the_timeloop_model_on_the_catalog():
    layer = parse_layer({"op": "matmul", "M": 64, "K": 64, "N": 64})
    plan = make_plan(layer, get_hardware("simba"), ScheduleOptions(model="timeloop", baseline=False, time_limit_s=2))
    assert plan.metrics.model == "timeloop"
    assert ScheduleOptions().key_doc() == ScheduleOptions(model=None).key_doc()
    assert "model" in ScheduleOptions(model="timeloop").key_doc()
