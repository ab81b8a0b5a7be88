"""One number to rank legal mappings by, from the cost model's metrics and the objective weights.

score = w_lat * log2(cycles) + w_energy * log2(energy_pj) - w_mem * log2(memory utilisation)

Logs make the weights exponents of a weighted geometric mean: 0.6 / 0.3 / 0.1 means a 10% latency
gain is worth a 20% energy loss. Memory utilisation is the mean, over on-chip levels, of the share
of capacity the plan's tiles occupy: filled buffers are what CoSA's utilisation term rewards.
Every mapper ranks candidates with this function, so "best" means the same thing everywhere.
"""

from __future__ import annotations

import math

from tileplan.check import footprint
from tileplan.cost.model import Metrics
from tileplan.hardware import Architecture
from tileplan.mappers.base import Objective
from tileplan.mapping import Mapping
from tileplan.problem import Problem


def memory_utilization(problem: Problem, arch: Architecture, mapping: Mapping) -> float:
    shares = []
    for i, lv in enumerate(arch.levels):
        if lv.capacity is None or not lv.keeps:
            continue
        shares.append(min(1.0, sum(footprint(problem, arch, mapping, i).values()) / lv.capacity))
    return sum(shares) / len(shares) if shares else 1.0


def score(metrics: Metrics, objective: Objective, mem_util: float) -> float:
    wl, we, wm = objective.normalised()
    return (
        wl * math.log2(max(metrics.cycles, 1.0))
        + we * math.log2(max(metrics.energy_pj, 1e-9))
        - wm * math.log2(max(mem_util, 1e-6))
    )


def score_mapping(problem: Problem, arch: Architecture, mapping: Mapping, metrics: Metrics, objective: Objective) -> float:
    # the footprints behind memory use are a fifth of a polish step's time on Simba: not worked out when unweighed
    mem_util = memory_utilization(problem, arch, mapping) if objective.normalised()[2] > 0 else 1.0
    return score(metrics, objective, mem_util)
