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
# Pairs where cosa's plan is above 1.10x of the best recorded search (bench/results/timeloop_mapper.md): open.
# fuzz1_019 L0 streams weights and inputs from DRAM past a 2x(3x3) array of output buffers; timeloop-mapper's plan reads
# them over the MACs' mesh links (an input window sliding along an unrolled Q, weights passed along it while P runs
# innermost), which the MIP's stream counts do not follow. fuzz1_019 L3 (1.17x) and fuzz1_032 L2 (1.53x) lose to the
# 30-second searches recorded last (not yet analysed).
KNOWN_GAPS = {("fuzz1_019", "L0"), ("fuzz1_019", "L3"), ("fuzz1_032", "L2")}


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
        mapper="cosa", baseline=False, time_limit_s=3, model="timeloop", objective=LATENCY))
    assert plan.metrics.cycles <= 1.10 * _best_mapper(row)
