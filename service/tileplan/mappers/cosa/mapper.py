"""CosaMapper: one MIP per dataflow, candidates re-ranked by the cost model."""

from __future__ import annotations

import time

from tileplan.check import check_arch
from tileplan.cost.model import evaluate_mapping
from tileplan.errors import MappingInfeasible
from tileplan.dims import DIMS
from tileplan.hardware import Architecture, HardwareDescriptor
from tileplan.mappers.base import MapperOptions, MapperResult, SolverInfo, register
from tileplan.mappers.build import build_mapping, max_double_buffering
from tileplan.mappers.cosa.decode import candidate_mappings, decode_factors
from tileplan.mappers.cosa.model import Weights, build_model
from tileplan.mappers.cosa.solve import solve
from tileplan.mappers.cosa.spec import build_spec
from tileplan.mappers.score import score_mapping
from tileplan.mapping import Mapping
from tileplan.problem import Problem


def trivial_mapping(problem: Problem, arch: Architecture) -> Mapping:
    temporal: list[list[tuple[str, int]]] = [[] for _ in arch.levels]
    temporal[-1] = [(d, problem.dims[d]) for d in DIMS]
    return build_mapping(arch, temporal, [[] for _ in arch.levels])


@register("cosa")
class CosaMapper:
    name = "cosa"
    version = "3"

    def map(self, problem: Problem, hw: HardwareDescriptor, options: MapperOptions) -> MapperResult:
        t0 = time.perf_counter()
        wl, we, wm = options.objective.normalised()
        dataflows = [options.dataflow] if options.dataflow else hw.dataflow_names
        best: tuple[float, Mapping] | None = None
        statuses, gaps, objectives, n_cands = [], [], [], 0
        for i, df in enumerate(dataflows):
            arch = hw.resolve(df)
            remaining = options.time_limit_s - (time.perf_counter() - t0)
            budget = max(remaining / (len(dataflows) - i), 0.05)
            spec = build_spec(problem, arch)
            model = build_model(spec, Weights(wl, we, wm))
            outcome = solve(model, budget)
            statuses.append(outcome.status)
            if outcome.objective is None:
                continue
            gaps.append(outcome.gap or 0.0)
            objectives.append(outcome.objective)
            temporal, spatial, padded, db = decode_factors(model)
            dbs = [db] if db == max_double_buffering(arch) else [db, max_double_buffering(arch)]
            for mp in candidate_mappings(model, temporal, spatial, padded, dbs):
                if check_arch(problem, arch, mp):
                    continue
                n_cands += 1
                s = score_mapping(problem, arch, mp, evaluate_mapping(problem, arch, mp), options.objective)
                if best is None or s < best[0] - 1e-12:
                    best = (s, mp)
        if best is None and "time_limit" in statuses:
            # HiGHS found no incumbent in time. The best mapping known so far is the trivial one (every
            # loop in DRAM, tiles of one element); it is legal whenever one element fits each buffer.
            arch = hw.resolve(dataflows[0])
            trivial = trivial_mapping(problem, arch)
            if not check_arch(problem, arch, trivial):
                n_cands += 1
                best = (score_mapping(problem, arch, trivial, evaluate_mapping(problem, arch, trivial), options.objective), trivial)
        if best is None:
            why = "no dataflow admits a legal mapping" if "infeasible" in statuses else "no solution within the time limit"
            raise MappingInfeasible(f"cosa: {why} for {problem.name or problem.dims} on {hw.name}")
        status = "optimal" if all(s in ("optimal", "infeasible") for s in statuses) else "time_limit"
        return MapperResult(
            mapping=best[1],
            solver=SolverInfo(
                status=status,
                seconds=time.perf_counter() - t0,
                mip_gap=max(gaps) if gaps else None,
                objective=min(objectives) if objectives else None,
                candidates=n_cands,
            ),
        )
