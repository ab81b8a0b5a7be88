"""The browser view's chart geometry (tileplan.web.charts) and the numbers it is fed (tileplan.web.views)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tileplan.web import charts
from tileplan.web.views import cycle_parts


@given(st.floats(min_value=1e-3, max_value=1e12))
def test_ticks_cover_the_largest_value_in_round_steps(hi: float) -> None:
    ticks = charts.nice_ticks(hi)
    assert ticks[0] == 0 and ticks[-1] >= hi * (1 - 1e-9) and 2 <= len(ticks) <= 7
    step = ticks[1]
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert round(mantissa, 6) in (1, 2, 5, 10)


@given(st.floats(0, 1e9), st.floats(0, 1e9), st.floats(0, 1e9))
def test_cycle_parts_add_up_to_the_cycles(compute: float, transfer: float, stall: float) -> None:
    cycles = max(compute, transfer) + stall  # both cost models: max(compute, transfers) + stalls
    parts = cycle_parts({"cycles": cycles, "compute_cycles": compute, "stall_cycles": stall})
    assert sum(parts.values()) == pytest.approx(cycles, rel=1e-9, abs=1e-6)
    assert parts["compute"] == pytest.approx(min(compute, cycles - stall)) and parts["stall"] == stall
    assert all(v >= 0 for v in parts.values())


def test_bars_are_proportional_and_linked() -> None:
    c = charts.cycles_per_layer([("a", 100.0, 200.0, "/ui/plans/a"), ("b", 50.0, 50.0, "/ui/plans/b")],
                                "cosa", "gemmini-auto")
    plan = {r.tip.split(":")[0]: r for r in c.rects if r.cls == "plan"}
    base = {r.tip.split(":")[0]: r for r in c.rects if r.cls == "base"}
    assert base["a"].w == pytest.approx(2 * plan["a"].w) and plan["a"].w == pytest.approx(2 * plan["b"].w)
    assert plan["a"].href == "/ui/plans/a" and c.height > 2 * charts.ROW_H


def test_speedup_bars_grow_from_one_x() -> None:
    c = charts.speedup_per_layer([("fast", 2.0, ""), ("slow", 0.5, ""), ("even", 1.0, "")], "random")
    bars = {r.tip.split(":")[0]: r for r in c.rects}
    one = next(line.x1 for line in c.lines if line.cls == "axis")
    assert bars["fast"].x == pytest.approx(one) and bars["fast"].cls == "good"
    assert bars["slow"].x + bars["slow"].w == pytest.approx(one) and bars["slow"].cls == "bad"
    assert bars["fast"].w == pytest.approx(bars["slow"].w)  # log scale: 2x and 0.5x are as long
    assert "random" in c.title


def test_buffer_fill_is_a_share_of_capacity() -> None:
    c = charts.buffer_fill([("Scratchpad", 1000.0, {"W": 250.0, "I": 250.0}), ("Accumulator", 100.0, {"O": 100.0})])
    w = next(r for r in c.rects if r.cls == "tW")
    o = next(r for r in c.rects if r.cls == "tO")
    assert o.w == pytest.approx(4 * w.w)
    assert "50%" in [t.text for t in c.texts if t.cls == "value"]
