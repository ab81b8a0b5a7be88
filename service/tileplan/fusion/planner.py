"""One decision per candidate group: fuse, or keep the per-layer program (with the reason).

A group is fused only when every intermediate can be requantized on chip exactly (`numerics`), its tile fits the
shared budget (`tiling`) and the modelled fused cycles are below the per-layer ones (`cost`).  `fusion: off`
plans nothing (today's program); `auto` plans every group and reports each one in the summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tileplan.fusion import chains, cost, dw_kernel, ir_kernel, kernel, numerics, tiling

FUSION_MODES = ("auto", "off")


@dataclass
class PointwiseChoice:
    """How the fused pointwise-chain kernel runs a group (tileplan.fusion.kernel)."""

    tiling: kernel.Tiling | dw_kernel.DwTiling | ir_kernel.IrTiling
    scale1: float  # the first member's mvout scale: layer 2 reads the intermediate with it (config_ex acc_scale)
    relu1: bool  # its ReLU (the epilogue's, or a host Relu / Clip absorbed into the link)
    depthwise: bool = False  # dw_kernel (a depthwise producer) instead of kernel (a pointwise one)
    scale2: float = 0.0  # ir_kernel: the depthwise's scale (the project reads its rows with it)
    relu2: bool = False


@dataclass
class GroupPlan:
    members: list[str]
    kind: str  # "inverted_residual" | "conv_chain" | "matmul_chain"
    tile: tiling.GroupTile | None
    cost: cost.GroupCost
    fused: bool
    reason: str
    blockers: list[str] = field(default_factory=list)  # every reason the group cannot be fused
    kernel: PointwiseChoice | None = None  # fused: how its kernel runs

    def doc(self) -> dict[str, Any]:
        return {"members": self.members, "kind": self.kind, "fused": self.fused, "reason": self.reason,
                "tile": self.tile.doc() if self.tile else None, **self.cost.doc(),
                "band_rows": (self.kernel.tiling.band if self.kernel and not self.kernel.depthwise
                              and len(self.members) == 2 else None),
                "band_output_rows": (self.kernel.tiling.band if self.kernel and (self.kernel.depthwise
                                                                                 or len(self.members) == 3)
                                     else None),
                "cycles_emulated_unfused": None, "dram_bytes_emulated_unfused": None,
                "cycles_emulated_fused": None, "dram_bytes_emulated_fused": None}


def _kind(ms: list[chains.Member]) -> str:
    tags = [m.spec.tag for m in ms]
    if "matmul" in tags:
        return "matmul_chain"
    if "depthwise_conv2d" in tags and len(ms) >= 2:
        return "inverted_residual"
    return "conv_chain"


def plan_groups(model: Any, qops: list[Any], specs: list[Any], model_cycles: list[float], hw: Any) -> list[GroupPlan]:
    """Every candidate group of the offloaded ops (in program order), each with its decision."""
    from tileplan.codegen.pipeline import gemmini_config, target_spec, timing_for

    target = target_spec(hw)
    bw = timing_for(hw).dram_bytes_per_cycle
    cycles = {q.name: c for q, c in zip(qops, model_cycles)}
    plans: list[GroupPlan] = []
    for group in chains.chains(model, chains.members(model, qops, specs)):
        three = _plan_three(group, cycles, target, hw, bw) if len(group) == 3 else None
        if three is not None and three.fused:
            plans.append(three)
            continue
        if (len(group) == 3 and dw_kernel.shape_of(group[1].spec, group[2].spec) is not None
                and numerics.requant_on_chip(group[1].name, group[1].spec) is None):
            # an inverted residual: its depthwise -> project pair has a fused kernel (the expand's output, read
            # through windows of rows, has none), so the pair is the group
            group = group[1:]
        layers = [m.spec.layer for m in group]
        tile = tiling.choose(layers, target.dim, target.spad_rows * target.dim, target.acc_rows * target.dim * 4)
        blockers = [r for m in group[:-1] for r in [numerics.requant_on_chip(m.name, m.spec)] if r]
        choice = None
        sh: Any = kernel.shape_of(group[0].spec, group[1].spec) if len(group) == 2 else None
        dsh = dw_kernel.shape_of(group[0].spec, group[1].spec) if len(group) == 2 else None
        if not blockers and dsh is not None:
            if group[1].spec.requant is not None:
                blockers.append(f"{group[1].name}: stores int32 accumulators for the host to requantize; the fused "
                                "kernel stores int8 through mvout")
            dband = dw_kernel.choose_band(dsh, target.dim, target.spad_rows, target.acc_rows)
            if dband is None:
                blockers.append("does not fit: both members' weights and two input slots of one output row exceed "
                                "the scratchpad, or one output row's accumulator regions the accumulator")
            else:
                choice = PointwiseChoice(dband, float(group[0].spec.epilogue.scale),
                                         bool(group[0].spec.epilogue.relu or group[0].absorbed), depthwise=True)
            sh = dsh
        elif not blockers and sh is not None:
            if group[1].spec.requant is not None:
                blockers.append(f"{group[1].name}: stores int32 accumulators for the host to requantize; the fused "
                                "kernel stores int8 through mvout")
            band = kernel.choose_band(sh, target.dim, target.spad_rows, target.acc_rows)
            if band is None:
                blockers.append("does not fit: both members' weights and two 16-row input slots exceed the "
                                "scratchpad, or two bands of both layers' accumulator rows the accumulator")
            else:
                choice = PointwiseChoice(band, float(group[0].spec.epilogue.scale),
                                         bool(group[0].spec.epilogue.relu or group[0].absorbed))
        elif not blockers:
            blockers = [r for m in group[:-1] for r in [numerics.route(m.name, m.spec)] if r]
        if tile is None and sh is None:
            blockers.append("does not fit: every member's weights and one output row of the last op (with the "
                            "rows it needs of the others) exceed the scratchpad or the accumulator")
        gc = cost.group_cost([m.spec for m in group], [cycles[m.name] for m in group], [m.macs for m in group],
                             tile.recompute_macs if tile else 0, target.dim, bw)
        if choice is not None:  # the fused kernel's own modelled cycles, as it runs
            matmul = group[0].spec.tag == "matmul"
            timing, max_bytes = timing_for(hw, matmul=matmul), gemmini_config(target).max_bytes
            t = choice.tiling
            if isinstance(t, dw_kernel.DwTiling):
                gc.cycles_model_fused = dw_kernel.model_cycles(sh, t, timing, target.dim, max_bytes)
            else:
                assert isinstance(t, kernel.Tiling)
                gc.cycles_model_fused = kernel.model_cycles(sh, t, timing, target.dim, max_bytes)
        if not blockers and gc.cycles_model_fused >= gc.cycles_model_unfused:
            blockers.append("fusion does not pay: modelled fused cycles are not below the per-layer program's")
        if three is not None:  # why the whole inverted residual is not one kernel
            blockers.append("expand -> depthwise -> project: " + three.blockers[0])
        fused = not blockers or (three is not None and len(blockers) == 1)
        reason = ("fused" if fused else "per-layer program kept: " + blockers[0]
                  + (f" (and {len(blockers) - 1} more)" if len(blockers) > 1 else ""))
        if fused and three is not None:
            reason = f"fused (the expand keeps its per-layer kernel: {three.blockers[0]})"
        plans.append(GroupPlan([m.name for m in group], _kind(group), tile, gc, fused, reason, blockers,
                               choice if fused else None))
    return plans


def _plan_three(group: list[chains.Member], cycles: dict[str, float], target: Any, hw: Any, bw: float
                ) -> GroupPlan | None:
    """An inverted residual (expand -> depthwise -> project) as one `ir_kernel`, or why not (None: not that
    shape at all)."""
    from tileplan.codegen.pipeline import gemmini_config, timing_for

    e, d, p = group
    sh = ir_kernel.shape_of(e.spec, d.spec, p.spec)
    if sh is None:
        return None
    blockers = [r for m in (e, d) for r in [numerics.requant_on_chip(m.name, m.spec)] if r]
    if p.spec.requant is not None:
        blockers.append(f"{p.name}: stores int32 accumulators for the host to requantize; the fused kernel "
                        "stores int8 through mvout")
    timing, max_bytes = timing_for(hw), gemmini_config(target).max_bytes
    gc = cost.group_cost([m.spec for m in group], [cycles[m.name] for m in group], [m.macs for m in group], 0,
                         target.dim, bw)
    choice = None
    if not blockers:
        t = ir_kernel.choose(sh, target.dim, target.spad_rows, target.acc_rows, timing, max_bytes)
        if t is None:
            blockers.append("does not fit: one output row's expanded input rows, depthwise and project regions "
                            "exceed the accumulator, or two weight slots and input slots the scratchpad")
        else:
            gc.cycles_model_fused = ir_kernel.model_cycles(sh, t, timing, target.dim, max_bytes)
            choice = PointwiseChoice(t, float(e.spec.epilogue.scale), bool(e.spec.epilogue.relu or e.absorbed),
                                     scale2=float(d.spec.epilogue.scale),
                                     relu2=bool(d.spec.epilogue.relu or d.absorbed))
            if gc.cycles_model_fused >= gc.cycles_model_unfused:
                blockers.append("fusion does not pay: modelled fused cycles are not below the per-layer "
                                f"program's ({gc.cycles_model_fused:,.0f} vs {gc.cycles_model_unfused:,.0f})")
    tile = _ir_tile(group, sh, choice.tiling, target.dim) if choice is not None else None
    fused = not blockers
    return GroupPlan([m.name for m in group], "inverted_residual", tile, gc, fused,
                     "fused" if fused else "per-layer program kept: " + blockers[0], blockers,
                     choice if fused else None)


def _ir_tile(group: list[chains.Member], sh: ir_kernel.IrShape, t: Any, dim: int) -> tiling.GroupTile:
    """The fused inverted residual's tile as `ir_kernel` runs it: bands of output rows, the expand's halo rows
    recomputed in every band (the extra MACs: its interior rows computed more than once)."""
    bs = tiling.bands([m.spec.layer for m in group], t.band)
    extra_rows = -sh.H
    for p0 in range(0, sh.P, t.band):
        vp = min(t.band, sh.P - p0)
        rows = range(p0 * sh.stride, p0 * sh.stride + (vp - 1) * sh.stride + sh.R)
        extra_rows += sum(1 for ih in rows if sh.pad_h <= ih < sh.pad_h + sh.H)
    n = -(-sh.P // t.band)
    return tiling.GroupTile(t.band, n, bs, "recompute" if n > 1 else "none", t.spad_rows * dim,
                            t.acc_rows * dim * 4, sh.N * extra_rows * sh.W * sh.C1 * sh.C,
                            [] if t.resident else ["weights loaded per band and channel block"])
