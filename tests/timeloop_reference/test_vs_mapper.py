"""cosa against timeloop-mapper on the fuzzed Timeloop architectures, from the recorded mapper searches
(bench/data/timeloop_fuzz/mapper.jsonl, made by bench/timeloop_vs_mapper.py with real Timeloop).

cosa's predicted cycles are timeloop-model's on its exported map (the fuzz cases hold that: cycles within 1% on every
accepted case), so today's cosa is compared with the recorded mapper's cycles directly: never above 1.10x of the best
search recorded for the pair, on the pairs where the recorded run came closest to that or lost."""

import json

import pytest
from tests.conftest import BENCH_DATA

from tileplan.hardware.catalog import load_descriptor
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.workload import parse_layer

DATA = BENCH_DATA / "timeloop_fuzz"
LATENCY = {"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0}
HARDEST = 16  # pairs re-planned in CI (each a cosa solve)
# Pairs where cosa's plan is above 1.10x of the best recorded search (bench/results/timeloop_mapper.md): none open.
# (fuzz1_019 L0 and L3 and fuzz1_032 L2 were, until the MIP held maps with several relevant loops below a streamed
# tensor's reuse level, charged O's fills with their reuse and paced a DRAM that states only a write bandwidth:
# tests/mappers/test_cosa_mip_space.py)
KNOWN_GAPS: set[tuple[str, str]] = set()
# The solve's wall-clock limit: on an idle machine the MIP stops at its gap and polish at its evaluation budget well
# within a second or two, so a longer limit changes no plan there; on a loaded one (CI shares its cores) a 3 s limit
# could cut the MIP or polish short and fail a pair for the load, not the plan.
TIME_LIMIT_S = 60


def _rows() -> list[dict]:
    return [json.loads(x) for x in (DATA / "mapper.jsonl").read_text().splitlines() if x.strip()]


def _best_mapper(row: dict) -> int | None:
    found = [m["cycles"] for m in row["mapper"].values() if m["found"]]
    return min(found) if found else None


def _key(row: dict) -> tuple[str, str]:
    return row["arch"].split("/")[-1].removesuffix(".yaml"), row["layer"]["name"]


def _hardest() -> list:
    rows = [r for r in _rows() if _best_mapper(r)]
    # the recorded cosa/mapper ratio, highest first (a refusal or a rejected map counts as the worst)
    rows.sort(key=lambda r: -(r["cosa"].get("timeloop") or float("inf")) / _best_mapper(r))
    return [pytest.param(r, marks=pytest.mark.xfail(reason="a known gap to timeloop-mapper (see KNOWN_GAPS)"))
            if _key(r) in KNOWN_GAPS else r for r in rows[:HARDEST]]


def test_the_recorded_searches_cover_the_fuzzed_pairs():
    rows = _rows()
    assert len(rows) >= 200
    assert len({r["arch"] for r in rows}) >= 50
    assert sum(_best_mapper(r) is not None for r in rows) >= 0.9 * len(rows)


def test_cosa_refused_nothing_and_timeloop_accepted_every_map_in_the_recorded_run():
    rows = _rows()
    assert [r for r in rows if "refused" in r["cosa"] or r["cosa"].get("timeloop") is None] == []


@pytest.mark.parametrize("row", _hardest(), ids=lambda r: "-".join(_key(r)))
def test_cosa_is_never_above_1_10x_the_recorded_mapper(row):
    hw = load_descriptor((DATA / row["arch"]).read_text(), name="fuzz")
    plan = make_plan(parse_layer(row["layer"]), hw, ScheduleOptions(
        mapper="cosa", baseline=False, time_limit_s=TIME_LIMIT_S, model="timeloop", objective=LATENCY))
    assert plan.metrics.cycles <= 1.10 * _best_mapper(row)


def test_cosa_plans_where_the_outermost_level_s_permutation_takes_none_of_the_moved_loops():
    """The seed-9 fuzz's fuzz9_018 L1 (batch 1, 9 -> 1 channels): DRAM's temporal permutation NK, with N = K = 1,
    leaves DRAM no loop timeloop-model accepts, and Spad3's spatial constraint (R = S = K = N = 1, P <= 4, PCQ) moves
    what the MIP unrolled there out of the fan-out. The loops a constraint would not take went to DRAM, whose
    permutation refused them: cosa refused the layer, where timeloop-mapper found 1,152 cycles. They now go to the
    outermost level whose constraints take them; timeloop-model's check (as tileplan reproduces it) accepts the map,
    read back from its export as timeloop-model reads it."""
    from tileplan.interop.timeloop_map import timeloop_verdict, to_timeloop_mapping
    from tileplan.problem import Problem

    data = BENCH_DATA / "timeloop_fuzz_seed9"
    row = next(r for r in (json.loads(x) for x in (data / "mapper.jsonl").read_text().splitlines() if x.strip())
               if _key(r) == ("fuzz9_018", "L1"))
    assert row["mapper"]["3"]["model_accepts"] and row["mapper"]["3"]["cycles"] == 1152
    hw = load_descriptor((data / row["arch"]).read_text(), name="fuzz9_018")
    layer = parse_layer(row["layer"])
    plan = make_plan(layer, hw, ScheduleOptions(
        mapper="cosa", baseline=False, time_limit_s=TIME_LIMIT_S, model="timeloop", objective=LATENCY))
    mapping, why = timeloop_verdict(to_timeloop_mapping(plan.mapping, hw), hw, Problem.from_layer(layer))
    assert why == []
    assert mapping is not None and not plan.mapping.padded_dims
    assert plan.metrics.cycles <= 1.10 * row["mapper"]["3"]["cycles"]
