"""The cosa MIP under Timeloop semantics holds the maps timeloop-mapper finds, and prices them near what
timeloop-model charges (cost.timeloop agrees with timeloop-model on the fuzzed files). Each map below is a recorded
timeloop-mapper search (bench/data/timeloop_fuzz/mapper.jsonl) whose plan the MIP either could not express or priced
far above its cycles, so cosa returned a slower plan.

`pinned_latency` fixes the MIP's factor placement to a map's (its loop orders and the other choices stay free) and
returns the MIP's latency in cycles, or None where the map lies outside the MIP's space."""

import json
from typing import Any

import pyomo.environ as pyo
import pytest
from tests.conftest import BENCH_DATA

from tileplan.cost.timeloop import timeloop_metrics
from tileplan.hardware.catalog import load_descriptor
from tileplan.interop.timeloop_map import read_timeloop_mapping
from tileplan.mappers.cosa.model import Weights, build_model
from tileplan.mappers.cosa.solve import Session, value
from tileplan.mappers.cosa.spec import build_spec
from tileplan.plan import ScheduleOptions, make_plan
from tileplan.problem import Problem
from tileplan.workload import parse_layer

DATA = BENCH_DATA / "timeloop_fuzz"
LATENCY = {"latency": 1.0, "energy": 0.0, "memory_utilization": 0.0}


def _row(arch: str, layer: str) -> dict:
    for line in (DATA / "mapper.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["arch"] == f"archs/{arch}.yaml" and r["layer"]["name"] == layer:
            return r
    raise LookupError((arch, layer))


def _primes(x: int) -> list[int]:
    out, p = [], 2
    while x > 1:
        while x % p == 0:
            out.append(p)
            x //= p
        p += 1
    return out


def pinned_latency(arch: str, layer: str, budget: str) -> tuple[float | None, float]:
    """(the MIP's latency with the recorded map's factors pinned or None if it cannot hold them, the map's cycles)."""
    row = _row(arch, layer)
    hw = load_descriptor((DATA / row["arch"]).read_text(), name="fuzz")
    problem = Problem.from_layer(parse_layer(row["layer"]))
    mp = read_timeloop_mapping(row["mapper"][budget]["map_yaml"], hw, problem).mapping
    resolved = hw.resolve(mp.dataflow)
    cycles = timeloop_metrics(problem, resolved, mp).cycles
    assert cycles == row["mapper"][budget]["cycles"]  # timeloop-model's, as recorded
    model = build_model(build_spec(problem, resolved), Weights(1.0, 0.0, 0.0))
    m = model.m
    copies: dict[tuple[str, int, int, int], int] = {}
    for i, lv in enumerate(mp.levels):
        for s, loops in ((0, lv.spatial), (1, lv.temporal)):
            for d, f in loops:
                for p in _primes(f):
                    copies[d, p, i, s] = copies.get((d, p, i, s), 0) + 1
    exact = {d: next(a for a, alt in enumerate(model.spec.alternatives[d]) if alt.bound == problem.dims[d])
             for d in problem.dims}
    placed = set()
    for key in model.x_keys:
        d, a, f, i, s = key
        c = 0
        if a == exact[d]:
            c = copies.get((d, f, i, s), 0)
            placed.add((d, f, i, s))
        m.X[key].setlb(c)
        m.X[key].setub(c)
    if set(copies) - placed:
        return None, cycles  # a placement the MIP has no variable for
    for d, a in m.u:
        if a == exact[d]:
            m.u[d, a].setlb(1)
        else:
            m.u[d, a].setub(0)
    out = Session(model).solve(30)
    if out.objective is None:
        return None, cycles
    return 2 ** value(m.lat), cycles


def test_a_map_with_several_relevant_loops_below_a_streamed_tensors_reuse_level_is_in_the_space():
    # Weights streamed from DRAM (no on-chip level keeps them); the buffer's loops C3 K4 over them. The run-of-loops
    # reuse term bounded its share by big * (1 - log(C3 K4)) >= 0, infeasible: cosa could not return this 904-cycle
    # map and took 1,164.
    lat, cycles = pinned_latency("fuzz1_019", "L0", "3")
    assert lat is not None
    assert lat <= cycles * 1.01


def test_the_output_buffers_fills_take_the_reuse_of_the_loops_that_leave_it_in_place():
    # A 0.5-word write port under DRAM's S7 R7 C5 loops innermost: 686 fills of the output tile, not 168,070 (the MIP
    # priced this map at 672,280 cycles, 1.8x its 371,322)
    lat, cycles = pinned_latency("fuzz1_000", "L2", "3")
    assert lat is not None
    assert lat <= cycles * 1.10


def _cosa_plan(row: dict) -> Any:
    """cosa's latency plan for a recorded (architecture, layer) pair, under Timeloop's semantics."""
    hw = load_descriptor((DATA / row["arch"]).read_text(), name="fuzz")
    return make_plan(parse_layer(row["layer"]), hw, ScheduleOptions(
        mapper="cosa", baseline=False, time_limit_s=30, model="timeloop", objective=LATENCY))


def test_a_dram_stating_only_a_write_bandwidth_paces_the_partial_sums():
    # 96 MACs each writing their partial sums into a 32-word DRAM write port: 735 cycles; R7 unrolled over the
    # buffers reduces them on the way (timeloop-mapper, 30 s: 480). The MIP had no DRAM term without a read bandwidth.
    row = _row("fuzz1_032", "L2")
    plan = _cosa_plan(row)
    assert plan.metrics.cycles <= row["mapper"]["30"]["cycles"]
    lat, cycles = pinned_latency("fuzz1_032", "L2", "30")
    assert lat is not None and abs(lat - cycles) <= 0.01 * cycles


def test_inputs_streamed_to_unrolled_windows_are_counted_once_per_window():
    # S3 x Q2 unrolled under a buffer that keeps only outputs: 4 distinct inputs per cycle from DRAM, not 6
    row = _row("fuzz1_019", "L0")
    plan = _cosa_plan(row)
    assert plan.metrics.cycles <= row["mapper"]["3"]["cycles"]


@pytest.mark.parametrize("arch,layer", [("fuzz1_019", "L0"), ("fuzz1_032", "L2")])
def test_the_mips_own_optimum_is_no_slower_than_a_pinned_map(arch, layer):
    # the helper itself: pinning only narrows the space, so the unpinned optimum is at most the pinned latency
    lat, cycles = pinned_latency(arch, layer, "3")
    row = _row(arch, layer)
    hw = load_descriptor((DATA / row["arch"]).read_text(), name="fuzz")
    problem = Problem.from_layer(parse_layer(row["layer"]))
    model = build_model(build_spec(problem, hw.resolve(hw.dataflow_names[0])), Weights(1.0, 0.0, 0.0))
    assert Session(model).solve(30).objective is not None
    assert lat is not None and 2 ** pyo.value(model.m.lat) <= lat * (1 + 1e-6)
