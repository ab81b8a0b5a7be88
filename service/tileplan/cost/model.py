"""Cost model: cycles, energy, utilisation and traffic of a legal mapping.

`evaluate_mapping` picks the cycle model by the descriptor's shape:
- Gemmini-like hierarchies (registers -> output-only accumulator -> I/W scratchpad -> DRAM, recognised by
  structure, not by name: see `tileplan.cost.gemmini.gemmini_levels`) get the calibrated Gemmini model,
  with `CostParams.for_descriptor(hw)` (the descriptor's `cost_params` over the fitted defaults): the mapping
  is run the way Gemmini's library runs it (one tiled_conv / tiled_matmul call per DRAM-loop iteration,
  tile sizes = all factors below DRAM; see the execution semantics in `tileplan.cost.gemmini`);
- everything else falls back to the first-order model below (also what `first_order_metrics` returns,
  which the calibration reports as the uncalibrated baseline).
Traffic and energy come from the same Timeloop-style access counts in both cases.

First-order model: Timeloop-style access counts turned into cycles and energy.

cycles = max(compute, the slowest level's transfer time) + transfer time nothing hides.
Compute is one cycle per temporal iteration of the loop nest (the array does one unrolled step per
cycle). A level's transfer time is the bytes it reads and writes over its bandwidth. Transfers into
a level that double buffers the tensor overlap compute; transfers into a single-buffered tile stall
it, so they are added on top.
"""

from __future__ import annotations

import math
from collections import defaultdict

from pydantic import BaseModel, Field

from tileplan.cost.energy import MAC_PJ, level_energy, tensor_energy_breakdown
from tileplan.cost.gemmini import (
    GemminiCycles,
    cycles_many,
    execution_from_mapping,
    gemmini_cycles,
    gemmini_levels,
    gemmini_notes,
    nominal_dram_bandwidth,
    prediction_interval,
)
from tileplan.cost.params import INTERVAL_CONFIDENCE, CostParams
from tileplan.cost.timeloop import timeloop_metrics
from tileplan.dims import RELEVANT
from tileplan.hardware import Architecture
from tileplan.mapping import Mapping
from tileplan.nest import NestAnalysis, analyse
from tileplan.problem import Problem


class LevelTraffic(BaseModel):
    level: str
    reads_bytes: float
    writes_bytes: float
    cycles: float = Field(description="Transfer time at this level's bandwidth (0 when unlimited).")
    energy_pj: float
    by_tensor: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="Per tensor: reads/fills/updates in bytes."
    )


class Metrics(BaseModel):
    cycles: float
    energy_pj: float
    utilization: float = Field(description="Useful MACs / (cycles x PEs).")
    dram_bytes: float
    ideal_cycles: float = Field(description="MACs / PEs: the compute bound at full utilisation.")
    bound: str = Field(description="'compute' or the name of the level whose bandwidth sets the pace.")
    compute_cycles: float
    stall_cycles: float = 0.0
    macs: int
    padded_macs: int
    spatial_utilization: float
    energy_breakdown_pj: dict[str, float] = Field(default_factory=dict, description="pJ per level, plus MAC.")
    energy_by_tensor_pj: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="pJ per level and tensor (reads + writes); MAC under 'MAC'."
    )
    model: str = Field(
        default="first-order",
        description="'gemmini' (calibrated), 'timeloop' (timeloop-model's semantics) or 'first-order' (fallback).",
    )
    executor: str | None = Field(
        default=None,
        description="Gemmini model: who runs the calls, 'tileplan' (Tileplan's code: tiles kept between calls that "
        "share them), 'library' (Gemmini's tiled_conv / tiled_matmul, the baseline's execution) or 'library-auto' "
        "(tiled_conv_auto / tiled_matmul_auto: the same calls after the library's own tile search on the host).",
    )
    levels: list[LevelTraffic] = Field(default_factory=list)
    # (issue 13) what the calibrated Gemmini model can say about its own answer
    cycles_interval: tuple[float, float] | None = Field(
        default=None,
        description="Calibrated Gemmini model: the range the measured cycles fall in with probability "
        "`interval_confidence`, from the cross-validated residuals of FireSim runs of the same kind.",
    )
    interval_confidence: float | None = None
    notes: list[str] = Field(
        default_factory=list,
        description="How the model read the hardware and mapping: the array the mapping occupies, the DRAM rate "
        "used, and which parameters are extrapolated beyond the configurations they were measured on.",
    )


COST_MODELS = ("gemmini", "timeloop", "first-order")


def model_for(arch: Architecture, model: str | None = None) -> str:
    """The cost model that scores plans on `arch`: the one named (a request's `model`), else the descriptor's
    `cost_model`, else by shape: the calibrated Gemmini model on Gemmini-like hierarchies, first-order elsewhere."""
    chosen = model or arch.hardware.cost_model
    if chosen is None:
        return "gemmini" if gemmini_levels(arch) is not None else "first-order"
    if chosen == "gemmini" and gemmini_levels(arch) is None:
        raise ValueError(f"the calibrated Gemmini model needs a Gemmini-like hierarchy; {arch.name} is not one")
    return chosen


def evaluate_mapping(
    problem: Problem, arch: Architecture, mapping: Mapping, executor: str | None = None, model: str | None = None,
    gemmini: GemminiCycles | None = None,
) -> Metrics:
    """Metrics of a mapping the checker has accepted, by the cost model `model_for(arch, model)` picks. On library
    hardware `executor` says who runs the calls: Tileplan's generated code ("tileplan", which keeps tiles that
    consecutive calls share) or Gemmini's own library ("library", the hand-written baseline's execution); unset,
    the mapping's own `executor` field decides, and a mapping without one runs as the library. `gemmini`: the
    calibrated model's `gemmini_cycles(problem, arch, mapping, executor)`, when the caller has it already (retile
    costs its candidates' executions together, `cycles_many`); used only where that model scores the mapping."""
    chosen = model_for(arch, model)
    problem = problem.mapped_by(mapping.group_pack)  # packed groups: the factors are the packed layer's
    if chosen == "timeloop":
        return timeloop_metrics(problem, arch, mapping)
    nest = analyse(problem, arch, mapping)
    base = metrics_from_nest(nest)
    levels = gemmini_levels(arch)
    if levels is None or chosen == "first-order":
        return base
    g = gemmini if gemmini is not None else gemmini_cycles(problem, arch, mapping, executor)
    dram = arch.levels[levels[2]].name
    op = "matmul" if problem.dims["Q"] == problem.dims["R"] == problem.dims["S"] == 1 else "conv"
    return base.model_copy(
        update={
            "cycles_interval": prediction_interval(g.cycles, op, g.bound),
            "interval_confidence": INTERVAL_CONFIDENCE,
            "notes": gemmini_notes(arch, mapping, executor),
            "cycles": g.cycles,
            "utilization": base.macs / (g.cycles * arch.macs),
            "bound": dram if g.bound == "DRAM" else "compute",
            "compute_cycles": g.execute,
            "stall_cycles": g.cycles - max(g.execute, g.dma),
            "model": "gemmini",
            "executor": executor or mapping.executor or "library",
        }
    )


def gemmini_cycles_many(
    problem: Problem, arch: Architecture, mappings: list[Mapping], executor: str | None = None
) -> list[GemminiCycles | None]:
    """Per mapping, what `evaluate_mapping(problem, arch, mapping, executor, gemmini=...)` may be handed: the calibrated
    Gemmini model's `gemmini_cycles`, all costed in one vectorised pass (`cycles_many`; mappings that run alike, once),
    or None for every mapping when another model scores `arch`. For mappers that score many candidates at a time."""
    if not mappings or model_for(arch) != "gemmini":
        return [None] * len(mappings)
    es = [execution_from_mapping(problem, arch, m, executor) for m in mappings]
    distinct = list(dict.fromkeys(es))
    answers = dict(zip(distinct, cycles_many(distinct, nominal_dram_bandwidth(arch),
                                             CostParams.for_descriptor(arch.hardware))))
    return [answers[e] for e in es]


def first_order_metrics(problem: Problem, arch: Architecture, mapping: Mapping) -> Metrics:
    """The uncalibrated first-order model, whatever the hardware."""
    return metrics_from_nest(analyse(problem, arch, mapping))


def _real_fraction(nest: NestAnalysis, tensor: str) -> float:
    """Share of a padded tensor that is real data (padding is made on chip, never moved from DRAM)."""
    frac = 1.0
    for d in RELEVANT[tensor]:
        frac *= nest.problem.dims[d] / nest.bounds[d]
    return frac


def metrics_from_nest(nest: NestAnalysis) -> Metrics:
    arch, mapping = nest.arch, nest.mapping
    n = len(arch.levels)
    reads: list[defaultdict[str, float]] = [defaultdict(float) for _ in range(n)]
    writes: list[defaultdict[str, float]] = [defaultdict(float) for _ in range(n)]
    exposed = [0.0] * n  # bytes moved into single-buffered tiles of level i (stall compute)
    acc_b, out_b = arch.acc_bytes, arch.output_bytes
    db = {name: set(ts) for name, ts in mapping.double_buffered.items()}
    top = n - 1

    for tr in nest.transfers:
        up = arch.levels[tr.upper]
        ub = arch.element_bytes(tr.tensor, up)
        frac = _real_fraction(nest, tr.tensor) if tr.upper == top else 1.0
        if tr.tensor == "O":
            if tr.upper == top:
                # Final results leave in the output type; partial sums round-trip at accumulator width.
                partial = tr.updates - tr.final_updates
                writes[tr.upper]["O"] += frac * (tr.final_updates * out_b + partial * acc_b)
                reads[tr.upper]["O"] += frac * tr.fills * acc_b
            else:
                writes[tr.upper]["O"] += tr.updates * ub
                reads[tr.upper]["O"] += tr.fills * ub
            if tr.lower >= 0:
                lb = arch.element_bytes("O", arch.levels[tr.lower])
                reads[tr.lower]["O"] += tr.updates * lb
                writes[tr.lower]["O"] += tr.fills * lb
                if "O" not in db.get(arch.levels[tr.lower].name, set()):
                    exposed[tr.lower] += tr.fills * lb
        else:
            reads[tr.upper][tr.tensor] += tr.fills * ub * frac
            if tr.lower >= 0:
                low = arch.levels[tr.lower]
                lb = arch.element_bytes(tr.tensor, low)
                writes[tr.lower][tr.tensor] += tr.lower_copies * lb
                if tr.tensor not in db.get(low.name, set()):
                    exposed[tr.lower] += tr.lower_copies * lb

    compute = float(nest.temporal_iterations)
    level_rows: list[LevelTraffic] = []
    times: list[tuple[float, str]] = [(compute, "compute")]
    stall = 0.0
    energy_levels: dict[str, float] = {}
    for i, lv in enumerate(arch.levels):
        r, w = sum(reads[i].values()), sum(writes[i].values())
        t = _transfer_time(r, w, lv.read_bandwidth, lv.write_bandwidth, lv.shared_bandwidth, lv.instances)
        times.append((t, lv.name))
        if i < top and exposed[i] and t > 0:
            # The part of this level's traffic that fills single-buffered tiles cannot hide behind compute;
            # it streams in from the level above at that level's pace.
            src = arch.levels[i + 1]
            if src.read_bandwidth:
                stall += exposed[i] / (src.read_bandwidth * src.instances)
        e = level_energy(lv)
        energy = r * e.read_pj_per_byte + w * e.write_pj_per_byte
        energy_levels[lv.name] = energy
        tensors = sorted(set(reads[i]) | set(writes[i]))
        level_rows.append(
            LevelTraffic(
                level=lv.name, reads_bytes=r, writes_bytes=w, cycles=t, energy_pj=energy,
                by_tensor={tn: {"reads": reads[i][tn], "writes": writes[i][tn]} for tn in tensors},
            )
        )
    slowest, bound = max(times, key=lambda x: x[0])
    cycles = slowest + stall
    mac_pj = arch.hardware.pe_array.mac_energy_pj
    energy_levels["MAC"] = nest.padded_macs * (MAC_PJ if mac_pj is None else mac_pj)
    macs = nest.problem.useful_macs  # (a packed problem's block-diagonal zeros are padding)
    return Metrics(
        cycles=cycles,
        energy_pj=sum(energy_levels.values()),
        utilization=macs / (cycles * arch.macs),
        dram_bytes=sum(reads[top].values()) + sum(writes[top].values()),
        ideal_cycles=math.ceil(macs / arch.macs),
        bound=bound,
        compute_cycles=compute,
        stall_cycles=stall,
        macs=macs,
        padded_macs=nest.padded_macs,
        spatial_utilization=nest.spatial_used / arch.macs,
        energy_breakdown_pj=energy_levels,
        energy_by_tensor_pj=tensor_energy_breakdown(arch, reads, writes, energy_levels["MAC"]),
        levels=level_rows,
    )


def _transfer_time(
    r: float, w: float, rbw: float | None, wbw: float | None, shared: bool, instances: int
) -> float:
    if shared and rbw:
        return (r + w) / (rbw * instances)
    t = 0.0
    if rbw:
        t = max(t, r / (rbw * instances))
    if wbw:
        t = max(t, w / (wbw * instances))
    return t
