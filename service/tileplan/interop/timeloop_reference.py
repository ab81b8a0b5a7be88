"""Reading Timeloop's recorded verdicts (bench/data/timeloop_reference/cases.jsonl) and judging Tileplan against
them: for each case, Tileplan's own verdict on the recorded map (`timeloop_verdict`), and on accepted cases its
Timeloop-semantics cycles and energy next to timeloop-model's. The tests and `bench/timeloop.py` share this."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tileplan.cost.model import evaluate_mapping
from tileplan.cost.timeloop import timeloop_counts
from tileplan.hardware import HardwareDescriptor
from tileplan.hardware.catalog import load_descriptor
from tileplan.interop.timeloop_map import from_timeloop_mapping, timeloop_verdict
from tileplan.problem import Problem


@dataclass
class Judged:
    case: dict[str, Any]
    arch: str  # the architecture file's stem
    violations: list[str]
    cycles: float | None  # Tileplan's Timeloop-semantics cycles (accepted maps)
    energy_pj: float | None

    @property
    def agrees(self) -> bool:
        return (not self.violations) == bool(self.case["timeloop"]["accepted"])

    @property
    def cycle_ratio(self) -> float | None:
        tl = self.case["timeloop"]
        return None if self.cycles is None or not tl["accepted"] else self.cycles / tl["cycles"]

    @property
    def energy_ratio(self) -> float | None:
        tl = self.case["timeloop"]
        return None if self.energy_pj is None or not tl["accepted"] else self.energy_pj / tl["energy_pj"]


def load_cases(folder: Path) -> list[dict[str, Any]]:
    with open(folder / "cases.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


@lru_cache(maxsize=16)
def _hardware(path: str) -> HardwareDescriptor:
    p = Path(path)
    return load_descriptor(p.read_text(), name=p.stem)


def case_problem(case: dict[str, Any]) -> Problem:
    """The case's Timeloop problem (padded bounds on `+padded` cases). Timeloop's W-axis pairs R with P."""
    p = case["problem"]
    dims = {d: int(p[d]) for d in ("N", "K", "C", "P", "Q", "R", "S")}
    dims["G"] = int(p.get("G", 1))
    return Problem(dims=dims, stride=(p["Wstride"], p["Hstride"]), dilation=(p["Wdilation"], p["Hdilation"]),
                   name=case["id"])


def access_mismatches(folder: Path, case: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """Per level of an accepted case, where Tileplan's Timeloop-semantics counts (reads, fills, updates per instance,
    utilized instances, tile words; per tensor) differ from timeloop-model's: (level, ours, theirs)."""
    hw = _hardware(str(folder / case["arch"]))
    problem = case_problem(case)
    mapping = from_timeloop_mapping(case["map_yaml"], hw, problem)
    counts = timeloop_counts(problem.for_hardware("bounding_box"), hw.resolve(mapping.dataflow), mapping)
    keys = ("reads", "fills", "updates", "instances", "capacity")
    out = []
    for lc in counts.levels:
        ours = {t: [c.reads, c.fills, c.updates, c.instances, c.capacity] for t, c in lc.tensors.items()}
        theirs = {t: [v[k] for k in keys] for t, v in case["timeloop"]["levels"][lc.name].items() if t in "WIO"}
        if ours != theirs:
            out.append((lc.name, ours, theirs))
    return out


def judge(folder: Path, case: dict[str, Any]) -> Judged:
    hw = _hardware(str(folder / case["arch"]))
    problem = case_problem(case)
    mapping, violations = timeloop_verdict(case["map_yaml"], hw, problem)
    cycles = energy = None
    if not violations and mapping is not None:
        m = evaluate_mapping(problem, hw.resolve(mapping.dataflow), mapping, model="timeloop")
        cycles, energy = m.cycles, m.energy_pj
    return Judged(case, Path(case["arch"]).stem, violations, cycles, energy)
