"""bench/mapper.py's objective modes and its comparison with a reference (issue 15: simba's solve time under the
default weights, the objective a user of the service gets, had no committed command measuring it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def bench():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("bench_mapper", BENCH / "mapper.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    sys.path.remove(str(BENCH))


def test_default_objective_plans_no_hardware_for_latency_alone(bench) -> None:  # type: ignore[no-untyped-def]
    assert bench.latency_only("bench") == {"simba"}
    assert bench.latency_only("default") == set()


def test_release_runs_under_the_same_objective(bench, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    seen: list[list[str]] = []

    class Done:
        returncode, stdout, stderr = 0, "{}", ""

    monkeypatch.setattr(bench.subprocess, "run", lambda cmd, **kw: seen.append(cmd) or Done())
    bench.cosa_alone(BENCH.parent / "service", 10.0, "now", ["simba"], "default")
    bench.cosa_alone(BENCH.parent / "service", 10.0, "now", ["simba"])
    after = [cmd[cmd.index("--latency-only") + 1:cmd.index("--time-limit")] for cmd in seen]
    assert after == [[], ["simba"]]


def test_comparison_has_an_all_layers_row_per_hardware(bench, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(bench, "rescored", lambda d: d)  # records without mappings: compared as recorded

    def rec(cycles: float, cpu: float) -> dict:
        return {"cycles": cycles, "cpu": cpu, "seconds": cpu * 2}

    now = {"a on simba": {"x": rec(100, 0.1), "y": rec(100, 0.2)}, "b on simba": {"z": rec(103, 0.9)}}
    ref = {"a on simba": {"x": rec(100, 0.2), "y": rec(100, 0.4)}, "b on simba": {"z": rec(100, 1.0)}}
    text = bench.against_reference(now, ref, "test")
    row = next(line for line in text.splitlines() if "all layers on simba" in line)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "3" and cells[2] == "1.0300" and cells[4] == "1"  # 3 layers, the worst 3% slower
    assert cells[6] == "0.20 (0.40)"  # median CPU over all three layers, not per network
    assert cells[10] == "0.40 / 1.80 (0.80 / 2.00)"  # wall median / p95
    assert "- b on simba, z: 1.0300" in text
