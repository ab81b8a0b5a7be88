"""descriptor + layer -> problem -> mapper -> check -> cost -> Plan (the contract shape).

`make_plan` is the one function every door (CLI, API, jobs, benchmarks) calls to schedule a layer.
A mapper's answer is never trusted: it is checked, and an illegal mapping is an error, not a plan.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace
from typing import Any, ClassVar, Literal
from urllib.parse import urlencode

from pydantic import BaseModel, Field

from tileplan import __version__, provenance
from tileplan.check import check
from tileplan.cost import Metrics, evaluate_mapping
from tileplan.cost.model import model_for
from tileplan.cost.timeloop import backing_store_overflow, timeloop_violations
from tileplan.errors import InputError, MappingInfeasible
from tileplan.execution import library_levels
from tileplan.hardware import HardwareDescriptor
from tileplan.mappers.base import MapperOptions, Objective, SolverInfo, get_mapper
from tileplan.mappers.packing import group_packs
from tileplan.mappers.score import score_mapping
from tileplan.mapping import Mapping
from tileplan.problem import Problem
from tileplan.strict import StrictModel
from tileplan.workload import Conv2dLayer, MatmulLayer, layer_doc


def solver_version() -> str:
    """Part of every plan's cache key and stored with each plan: Tileplan's version and the digest of the code
    that plans (`tileplan.provenance`), so a plan stored by other code (an upgrade that changed a mapper or the
    cost model) is solved again rather than answered."""
    return f"{__version__}+code.{provenance.code_digest()[:12]}"

MapperName = Literal["cosa", "gemmini-auto", "random", "exhaustive"]
CostModelName = Literal["gemmini", "timeloop", "first-order"]


class ScheduleOptions(StrictModel):
    """Options of POST /schedule and `tileplan schedule` (contracts.md). An unknown option is an error naming it
    (a typo would otherwise plan with the defaults)."""

    unknown_what: ClassVar[str] = "option"

    mapper: MapperName = "cosa"
    objective: Objective = Objective()
    time_limit_s: float = Field(default=10.0, gt=0, le=600)
    codegen: bool = False
    baseline: bool = Field(default=True, description="Also plan the hand-written baseline to compare with.")
    dataflow: str | None = None
    seed: int = 0
    model: CostModelName | None = Field(
        default=None,
        description="The cost model plans are scored and searched with: 'timeloop' (timeloop-model's semantics), "
        "'gemmini' (calibrated, Gemmini-like hardware only), 'first-order'. Unset: the hardware's default "
        "(the calibrated model on Gemmini-like hardware, Timeloop's semantics on hardware imported from Timeloop YAML).",
    )

    group_packing: Literal["auto", "off"] = Field(default="auto", description=(
        "Grouped and depthwise convolutions: 'auto' also plans them with several groups packed onto the array "
        "(block-diagonal weight tiles; the plan's mapping.group_pack says how many) and keeps whichever scores "
        "better; 'off' plans one group at a time, as Gemmini's library runs them."))

    def mapper_options(self) -> MapperOptions:
        return MapperOptions(
            objective=self.objective, time_limit_s=self.time_limit_s, seed=self.seed, dataflow=self.dataflow
        )

    def key_doc(self) -> dict[str, Any]:
        """The options that change the answer (codegen adds an artifact, not a different plan)."""
        # (an unset model and the default group packing are left out, so requests that do not name them keep their
        # keys)
        return self.model_dump(mode="json", exclude={"codegen"} | ({"model"} if self.model is None else set())
                               | ({"group_packing"} if self.group_packing == "auto" else set()))


class Baseline(BaseModel):
    mapper: str
    mapping: Mapping
    metrics: Metrics
    notes: list[str] = Field(default_factory=list, description="How the baseline's mapper found its mapping.")


class Plan(BaseModel):
    key: str
    layer: dict[str, Any]
    hardware: str
    mapper: str
    mapping: Mapping
    metrics: Metrics
    baseline: Baseline | None = None
    solver: SolverInfo
    cached: bool = False
    speedup: float | None = Field(default=None, description="Baseline cycles / plan cycles.")
    notes: list[str] = Field(default_factory=list, description=(
        "How the mapper found the plan: e.g. a time limit reached, or the hand-written tiling kept because the "
        "weighted optimum was slower."))
    links: dict[str, str] = Field(default_factory=dict)


def hardware_fingerprint(hw: HardwareDescriptor) -> dict[str, Any]:
    """What identifies a descriptor's behaviour: everything but its name and description."""
    return hw.model_dump(mode="json", exclude={"name", "description"})


def plan_key(hw: HardwareDescriptor, problem: Problem, options: ScheduleOptions) -> str:
    doc = {
        "hardware": hardware_fingerprint(hw),
        "problem": problem.key(),
        "options": options.key_doc(),
        "solver": solver_version(),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def links_for(key: str, name: str | None = None) -> dict[str, str]:
    """A plan's links; with `name`, links that keep the layer name an asker gave a cached plan (which is shared by
    every request for the same layer, whatever it is called), so its module carries that name too."""
    query = "" if name is None else "?" + urlencode({"name": name})
    return {"self": f"/plans/{key}{query}", "module": f"/plans/{key}/module{query}",
            "timeloop": f"/plans/{key}/timeloop{query}"}


def run_mapper(
    name: str, problem: Problem, hw: HardwareDescriptor, options: MapperOptions, group_packing: bool = True
) -> tuple[Mapping, SolverInfo, Metrics, list[str]]:
    """One mapper's mapping, checked and costed, with the mapper's notes. With `group_packing` a grouped layer is
    planned as it is and with its groups packed onto the array (`tileplan.mappers.packing`), each in its share of
    the time limit; the best by the objective wins (its mapping's `group_pack` says how the groups run)."""
    packs = group_packs(problem, hw, name, options.dataflow) if group_packing else []
    if not packs:
        return _run_one_mapper(name, problem, hw, options)
    t0 = time.perf_counter()
    deadline = t0 + options.time_limit_s
    tries: list[tuple[float, int, tuple[Mapping, SolverInfo, Metrics, list[str]]]] = []
    for i, pack in enumerate([1, *packs]):
        share = max((deadline - time.perf_counter()) / (len(packs) + 1 - i), 0.05)
        try:
            got = _run_one_mapper(name, problem.packed(pack), hw, options.model_copy(update={"time_limit_s": share}))
        except MappingInfeasible:
            if pack == 1:
                raise
            continue  # (a packing that admits no plan: the others still compete)
        mapping = got[0] if pack == 1 else got[0].model_copy(update={"group_pack": pack})
        s = score_mapping(problem, hw.resolve(mapping.dataflow), mapping, got[2], options.objective)
        tries.append((s, pack, (mapping, *got[1:])))
    s, pack, (mapping, solver, metrics, notes) = min(tries, key=lambda t: t[0])  # the first of equals: unpacked
    unpacked = tries[0][2][2].cycles
    if pack > 1:
        notes = [*notes, f"{pack} groups packed per block (block-diagonal weight tiles): {metrics.cycles:,.0f} "
                 f"cycles, {unpacked:,.0f} one group at a time"]
    solver = solver.model_copy(update={
        "seconds": time.perf_counter() - t0, "candidates": sum(t[2][1].candidates for t in tries),
        "status": "optimal" if all(t[2][1].status == "optimal" for t in tries) else solver.status})
    return mapping, solver, metrics, notes


def _run_one_mapper(
    name: str, problem: Problem, hw: HardwareDescriptor, options: MapperOptions
) -> tuple[Mapping, SolverInfo, Metrics, list[str]]:
    # (a sized backing store too small for the layer: refused up front, as timeloop-model refuses every map of it)
    whys = [backing_store_overflow(problem, a) if model_for(a) == "timeloop" else None
            for a in (hw.resolve(df) for df in ([options.dataflow] if options.dataflow else hw.dataflow_names))]
    if whys and all(whys):
        raise MappingInfeasible(f"{name}: {whys[0]}")
    result = get_mapper(name).map(problem, hw, options)
    violations = check(problem, hw, result.mapping)
    if violations:
        # A mapper bug, not a user error: never hand out a plan the hardware cannot run.
        raise MappingInfeasible(f"{name} produced an illegal mapping: {'; '.join(violations)}")
    arch = hw.resolve(result.mapping.dataflow)
    # on library hardware the plan says who runs it, so evaluating the plan's mapping later gives its cycles
    mapping = result.mapping
    if library_levels(arch) is not None:
        # (a mapper may say so itself: cosa hands back the hand-written tiling as the library runs it when its
        # own plan would be slower)
        mapping = mapping.model_copy(update={"executor": mapping.executor or executor_for(name)})
    metrics = evaluate_mapping(problem, arch, mapping)
    return mapping, result.solver, metrics, list(result.notes)


def executor_for(mapper: str) -> str:
    """Who runs a mapper's plans on library hardware: gemmini-auto's are Gemmini's own library calls (the
    hand-written baseline as it is used); every other plan runs as Tileplan's generated code."""
    return "library" if mapper == "gemmini-auto" else "tileplan"


BASELINE_MEANING = {
    "gemmini-auto": "Gemmini's hand-written tiling (tiled_conv_auto / tiled_matmul_auto), run by its library",
    "random": "the best of random legal mappings (this hardware has no hand-written tiling to compare with)",
}


def baseline_mapper_for(hw: HardwareDescriptor) -> str:
    """Gemmini's hand-written heuristic where it applies, else best-of-N random (a common baseline)."""
    from tileplan.mappers.gemmini_auto import applicable

    return "gemmini-auto" if applicable(hw) else "random"


def make_plan(
    layer: Conv2dLayer | MatmulLayer, hw: HardwareDescriptor, options: ScheduleOptions | None = None
) -> Plan:
    options = options or ScheduleOptions()
    problem = Problem.from_layer(layer)
    key = plan_key(hw, problem, options)
    hw = with_cost_model(hw, options.model, ("options", "model"))
    mopts = options.mapper_options()
    mapping, solver, metrics, notes = run_mapper(options.mapper, problem, hw, mopts, options.group_packing == "auto")
    baseline = None
    if options.baseline:
        bname = baseline_mapper_for(hw)
        if bname == options.mapper:
            baseline = Baseline(mapper=bname, mapping=mapping, metrics=metrics, notes=notes)
        else:
            bmap, _, bmetrics, bnotes = run_mapper(bname, problem, hw, mopts.model_copy(update={"dataflow": None}))
            baseline = Baseline(mapper=bname, mapping=bmap, metrics=bmetrics, notes=bnotes)
    return Plan(
        key=key,
        layer=layer_doc(layer),
        hardware=hw.name,
        mapper=options.mapper,
        mapping=mapping,
        metrics=metrics,
        baseline=baseline,
        solver=solver,
        speedup=None if baseline is None else baseline.metrics.cycles / metrics.cycles,
        notes=notes,
        links=links_for(key),
    )


class Evaluation(BaseModel):
    """Answer of POST /evaluate and `tileplan evaluate`."""

    valid: bool
    metrics: Metrics | None = None
    violations: list[str] = Field(default_factory=list)


def with_cost_model(hw: HardwareDescriptor, model: str | None, loc: tuple[str | int, ...]) -> HardwareDescriptor:
    """`hw` scored by the named cost model (unchanged when none is named); a model that cannot apply to `hw` is an
    input error at `loc`. Mappers and the checker then see the model through the descriptor."""
    if model is None:
        return hw
    try:
        model_for(hw.resolve(), model)
    except ValueError as exc:
        raise InputError(loc, str(exc)) from None
    return hw.model_copy(update={"cost_model": model})


def evaluate(
    layer: Conv2dLayer | MatmulLayer, hw: HardwareDescriptor, mapping: Mapping, executor: str | None = None,
    model: str | None = None,
) -> Evaluation:
    """Any mapping on any descriptor: its metrics when legal, its violations when not. `executor` (library
    hardware): run as Tileplan's code ("tileplan") or as Gemmini's own library ("library"); unset, the mapping's
    own `executor` (a plan's says how it runs), else the library. `model` names the cost model (see
    ScheduleOptions.model); under "timeloop" legality is Timeloop's (`timeloop_violations`), on the padded problem
    when the mapping pads, as its exported bundle is."""
    problem = Problem.from_layer(layer)
    hw = with_cost_model(hw, model, ("model",))
    if model_for(hw.resolve()) == "timeloop":
        try:
            arch = hw.resolve(mapping.dataflow)
        except ValueError as exc:
            return Evaluation(valid=False, violations=[f"dataflow: {exc}"])
        try:
            problem = problem.mapped_by(mapping.group_pack)
        except ValueError as exc:
            return Evaluation(valid=False, violations=[f"group_pack: {exc}"])
        padded = replace(problem, dims={**problem.dims, **{str(d): v for d, v in mapping.padded_dims.items()}})
        violations = timeloop_violations(padded, arch, mapping)
        if violations:
            return Evaluation(valid=False, violations=violations)
        return Evaluation(valid=True, metrics=evaluate_mapping(padded, arch, mapping, executor))
    violations = check(problem, hw, mapping)
    if violations:
        return Evaluation(valid=False, violations=violations)
    return Evaluation(valid=True, metrics=evaluate_mapping(problem, hw.resolve(mapping.dataflow), mapping, executor))
