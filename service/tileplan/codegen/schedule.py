"""Plan (layer + Mapping on a hardware descriptor) -> scheduled TVM PrimFunc for a GEMM-array target.

The Mapping's levels are read as Gemmini's hierarchy: the innermost level keeping O on chip is the accumulator,
the innermost keeping I and W is the scratchpad, the last is DRAM.  Per internal loop dimension
(n, g, p, q, k, r, s, c; a matmul's rows are q) the tile held at the accumulator, the tile held at the scratchpad
and the full (padded) bound are rounded up to whole blocks (DIM for q, k, c) and nested.  The schedule:

    DRAM loops (mapping order, reduction loops moved inside output loops)
        acc tile <- bias (mvin_bias)                       [decompose_reduction]
        DRAM reduction loops                                (software-pipelined when I/W are double buffered)
            I tile -> scratchpad, W tile -> scratchpad      [cache_read + transform_layout + tensorize mvin]
            scratchpad loops, accumulator loops (mapping order)
                DIM x DIM x DIM block compute               [tensorize compute]
        acc tile -> DRAM with scale / ReLU / saturation     [reverse_compute_at + tensorize mvout]

Every change the realisation makes to the plan (blocks rounded up, loops reordered, tiles shrunk to fit) is
listed in `Realization.deviations`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import tvm
from tvm import te, tirx
from tvm import s_tir

from tileplan.codegen.registry import CodegenError, core_compute, intrinsic
from tileplan.codegen.targets import gemmini as G

O_DIMS = ("n", "g", "p", "q", "k")
RED_DIMS = ("r", "s", "c")
ALL_DIMS = O_DIMS + RED_DIMS
BLOCKED = ("q", "k", "c")
DMA_ANNOTATION = "tileplan.dma"


@dataclass
class Realization:
    """How a plan's mapping is realised as a loop nest (counts in units: DIM for q/k/c, 1 otherwise)."""

    dim: int
    acc_u: dict[str, int]
    spad_u: dict[str, int]
    full_u: dict[str, int]
    dram_order: list[str]
    spad_order: list[str]
    acc_order: list[str]
    double_buffer: bool
    weight_stationary: bool
    deviations: list[str] = field(default_factory=list)

    def unit(self, d: str) -> int:
        return self.dim if d in BLOCKED else 1

    def padded(self, d: str) -> int:
        return self.full_u[d] * self.unit(d)

    def trips(self, level: str, d: str) -> int:
        if level == "dram":
            return self.full_u[d] // self.spad_u[d]
        if level == "spad":
            return self.spad_u[d] // self.acc_u[d]
        return self.acc_u[d]


@dataclass
class TargetSpec:
    """What the schedule needs of the array: its size and local memory sizes in rows."""

    dim: int = 16
    spad_rows: int = 16384
    acc_rows: int = 1024


# ------------------------------------------------------------------------------------------------------------------
# Layer -> geometry


def layer_geometry(layer: Any) -> tuple[str, G.ConvGeometry, dict[str, str]]:
    """(compute tag, geometry, canonical dim -> internal dim) of a tileplan.workload layer."""
    if layer.op in ("matmul", "dense"):
        geo = G.ConvGeometry(N=1, G=1, K=layer.N, C=layer.K, H=1, W=layer.M, P=1, Q=layer.M, R=1, S=1)
        return "gemmini.matmul", geo, {"N": "n", "G": "g", "K": "k", "C": "c", "P": "q", "Q": "p", "R": "r",
                                        "S": "s"}
    d = layer.dims()
    geo = G.ConvGeometry(N=d["N"], G=d["G"], K=d["K"], C=d["C"], H=layer.in_h, W=layer.in_w, P=d["P"], Q=d["Q"],
                         R=d["R"], S=d["S"], stride=tuple(layer.stride), dilation=tuple(layer.dilation),
                         padding=tuple(layer.padding))
    tag = "gemmini.depthwise_conv2d" if d["G"] > 1 and d["C"] == 1 and d["K"] == 1 else "gemmini.conv2d"
    return tag, geo, {"N": "n", "G": "g", "K": "k", "C": "c", "P": "p", "Q": "q", "R": "r", "S": "s"}


def _level_roles(arch: Any) -> tuple[int, int]:
    acc = next((i for i, lv in enumerate(arch.levels) if not lv.is_backing_store and "O" in lv.keeps), None)
    spad = next((i for i, lv in enumerate(arch.levels)
                 if not lv.is_backing_store and {"I", "W"} <= set(lv.keeps)), None)
    if acc is None or spad is None or spad <= acc:
        raise CodegenError("the hierarchy needs an output-keeping level (accumulator) below an I+W-keeping level "
                           "(scratchpad)")
    return acc, spad


def realize(mapping: Any, arch: Any, names: dict[str, str], bounds: dict[str, int], target: TargetSpec) -> Realization:
    """Translate a contract Mapping into block-rounded tiles and loop orders that fit the target."""
    acc_i, spad_i = _level_roles(arch)
    levels = mapping.levels
    dim = target.dim
    dev: list[str] = []

    def tile(upto: int, canon: str) -> int:
        return math.prod(lv.temporal_factor(canon) * lv.spatial_factor(canon) for lv in levels[: upto + 1])

    inv = {v: k for k, v in names.items()}
    padded_bounds = mapping.bounds()
    acc_u, spad_u, full_u = {}, {}, {}
    for d in ALL_DIMS:
        canon = inv[d]
        unit = dim if d in BLOCKED else 1
        t_acc, t_spad = tile(acc_i, canon), tile(spad_i, canon)
        full = max(padded_bounds.get(canon, 1), bounds[canon])
        a = -(-t_acc // unit)
        s = a * -(-(-(-t_spad // unit)) // a)
        f = s * -(-(-(-full // unit)) // s)
        acc_u[d], spad_u[d], full_u[d] = a, s, f
        if unit > 1 and (t_acc % unit or t_spad % unit):
            dev.append(f"{canon}: tiles {t_acc}/{t_spad} rounded up to whole blocks of {unit}")

    def order(lvls: list[int]) -> list[str]:
        listed: list[str] = []
        for i in lvls:
            for c, _ in reversed(levels[i].temporal):
                if names[c] not in listed:
                    listed.append(names[c])
        # levels are innermost first; outer levels' loops come first
        return [d for d in ALL_DIMS if d not in listed] + listed

    dram_order = order([len(levels) - 1] + list(range(len(levels) - 2, spad_i, -1)))
    spad_order = order([spad_i])
    acc_order = order(list(range(acc_i, -1, -1)) + list(range(spad_i - 1, acc_i, -1)))
    db_levels = mapping.double_buffered.get(arch.levels[spad_i].name, [])
    double_buffer = bool({"I", "W"} & set(db_levels))
    ws = (mapping.dataflow or arch.dataflow or "weight_stationary") != "output_stationary"
    r = Realization(dim, acc_u, spad_u, full_u, dram_order, spad_order, acc_order, double_buffer, ws, dev)

    # Partial sums never leave the accumulator: DRAM reduction loops go inside the DRAM output loops.
    dram_trips = [d for d in r.dram_order if r.trips("dram", d) > 1]
    first_red = next((i for i, d in enumerate(dram_trips) if d in RED_DIMS), None)
    if first_red is not None and any(d in O_DIMS for d in dram_trips[first_red:]):
        dev.append("DRAM reduction loops moved inside the DRAM output loops (partial sums stay in the accumulator)")
    r.dram_order = [d for d in r.dram_order if d in O_DIMS] + [d for d in r.dram_order if d in RED_DIMS]
    return r


def footprint_rows(r: Realization, geo: G.ConvGeometry) -> tuple[int, int]:
    """(scratchpad rows, accumulator rows) the realisation occupies."""
    s = {d: r.spad_u[d] * r.unit(d) for d in ALL_DIMS}
    h = (s["p"] - 1) * geo.array_stride[0] + (s["r"] - 1) * geo.dilation[0] + 1
    w = (s["q"] - 1) * geo.array_stride[1] + (s["s"] - 1) * geo.dilation[1] + 1
    i_rows = s["n"] * s["g"] * h * w * r.spad_u["c"]
    w_rows = s["g"] * s["r"] * s["s"] * s["c"] * r.spad_u["k"]
    spad = (i_rows + w_rows) * (2 if r.double_buffer else 1)
    acc = s["n"] * s["g"] * s["p"] * s["q"] * r.spad_u["k"]
    return spad, acc


def fit(r: Realization, geo: G.ConvGeometry, target: TargetSpec) -> None:
    """Shrink the realisation until it fits the scratchpad and accumulator (recorded as deviations)."""
    while True:
        spad, acc = footprint_rows(r, geo)
        if spad <= target.spad_rows and acc <= target.acc_rows:
            return
        if spad > target.spad_rows and r.double_buffer:
            r.double_buffer = False
            r.deviations.append(f"double buffering dropped: {spad} scratchpad rows > {target.spad_rows}")
            continue
        dims = O_DIMS if acc > target.acc_rows else ALL_DIMS
        # Halve the largest scratchpad tile (scratchpad loops first, then accumulator tiles).
        cand = [(r.spad_u[d] // r.acc_u[d], d) for d in dims if r.spad_u[d] > r.acc_u[d]]
        if cand:
            _, d = max(cand)
            r.spad_u[d] = r.acc_u[d] * _half_divisor(r.spad_u[d] // r.acc_u[d])
        else:
            cand = [(r.acc_u[d], d) for d in dims if r.acc_u[d] > 1]
            if not cand:
                raise CodegenError(f"one block needs {spad} scratchpad / {acc} accumulator rows: does not fit")
            _, d = max(cand)
            r.acc_u[d] = _half_divisor(r.acc_u[d])
            r.spad_u[d] = r.acc_u[d] * -(-r.spad_u[d] // r.acc_u[d])
        r.full_u[d] = r.spad_u[d] * -(-r.full_u[d] // r.spad_u[d])
        r.deviations.append(f"{d} tile shrunk to fit ({spad} scratchpad / {acc} accumulator rows)")


def _half_divisor(n: int) -> int:
    """Largest divisor of n that is at most n // 2 (1 for primes)."""
    for q in range(max(1, n // 2), 0, -1):
        if n % q == 0:
            return q
    return 1


# ------------------------------------------------------------------------------------------------------------------
# TE -> PrimFunc with the bias as the accumulator's initial value


def _rebuild(stmt: Any, fn: Any) -> Any:
    """Rebuild the For / SeqStmt / SBlockRealize / SBlock tree with `fn` applied to every SBlock."""
    if isinstance(stmt, tirx.SeqStmt):
        return tirx.SeqStmt([_rebuild(s, fn) for s in stmt.seq])
    if isinstance(stmt, tirx.For):
        return tirx.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, _rebuild(stmt.body, fn),
                        stmt.thread_binding, stmt.annotations)
    if isinstance(stmt, s_tir.SBlockRealize):
        return s_tir.SBlockRealize(stmt.iter_values, stmt.predicate, _rebuild(stmt.block, fn))
    if isinstance(stmt, s_tir.SBlock):
        b = fn(stmt)
        return s_tir.SBlock(b.iter_vars, b.reads, b.writes, b.name_hint, _rebuild(b.body, fn), b.init,
                            b.alloc_buffers, b.match_buffers, b.annotations)
    return stmt


def prim_func(cd: G.ComputeDef) -> tirx.PrimFunc:
    # bias_p feeds no TE stage (it becomes the accumulator's initial value after scheduling), so it is listed as a
    # trailing parameter: a DRAM workspace the emitted kernel allocates itself.
    return te.create_prim_func([*cd.inputs, cd.output, cd.bias_padded])


def with_bias_init(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Make the decomposed init block `acc_init` load the bias (acc = bias_p[g, k]) instead of zero, and compute
    bias_p before everything else."""
    found: list[Any] = []

    def find(b: Any) -> Any:
        if b.name_hint == "bias_p":
            found.append(b.body.buffer)
        return b

    _rebuild(func.body, find)
    if not found:
        raise CodegenError("compute has no bias_p stage")
    bias_buf = found[0]

    def swap(b: Any) -> Any:
        if b.name_hint != "acc_init":
            return b
        store = b.body
        v = [iv.var for iv in b.iter_vars]  # n, g, p, q, k
        body = tirx.BufferStore(store.buffer, tirx.BufferLoad(bias_buf, [v[1], v[4]]), store.indices)
        reads = [tirx.BufferRegion(bias_buf, [tvm.ir.Range.from_min_extent(v[1], 1),
                                              tvm.ir.Range.from_min_extent(v[4], 1)])]
        return s_tir.SBlock(b.iter_vars, reads, b.writes, b.name_hint, body, b.init, b.alloc_buffers,
                            b.match_buffers, b.annotations)

    body = _rebuild(func.body, swap)
    root = body.block
    seq = list(root.body.seq)
    names = [_first_block_name(st) for st in seq]
    seq.insert(0, seq.pop(names.index("bias_p")))
    root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, tirx.SeqStmt(seq), root.init,
                        root.alloc_buffers, root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(body.iter_values, body.predicate, root))


def _first_block_name(stmt: Any) -> str:
    while isinstance(stmt, tirx.For):
        stmt = stmt.body
    return stmt.block.name_hint if isinstance(stmt, s_tir.SBlockRealize) else ""


# ------------------------------------------------------------------------------------------------------------------
# The schedule


@dataclass
class Scheduled:
    tag: str
    compute: G.ComputeDef
    realization: Realization
    schedule: s_tir.Schedule

    @property
    def mod(self) -> tvm.IRModule:
        return self.schedule.mod


def _largest_divisor_at_most(n: int, cap: int) -> int:
    for q in range(min(n, cap), 0, -1):
        if n % q == 0:
            return q
    return 1


def schedule_layer(layer: Any, mapping: Any, arch: Any, epilogue: G.Epilogue, target: TargetSpec) -> Scheduled:
    tag, geo0, names = layer_geometry(layer)
    bounds = layer.dims()
    r = realize(mapping, arch, names, bounds, target)
    fit(r, geo0, target)
    # geometry fields are the internal dims in capitals (a matmul's rows are Q)
    geo = G.ConvGeometry(**{**geo0.__dict__, "padded": {d.upper(): r.padded(d) for d in ALL_DIMS}})
    if epilogue.zero_point:
        raise CodegenError("Gemmini's mvout cannot add an output zero point; requantize with zero_point=0")
    cd = core_compute(tag)(geo, epilogue)
    sch = s_tir.Schedule(prim_func(cd))
    dim = target.dim

    blk = sch.get_sblock("acc")
    loops = dict(zip(ALL_DIMS, sch.get_loops(blk)))
    parts: dict[str, dict[str, Any]] = {}
    for d in ALL_DIMS:
        factors = [r.trips("dram", d), r.trips("spad", d), r.trips("acc", d)] + ([dim] if d in BLOCKED else [])
        split = sch.split(loops[d], factors)
        parts[d] = dict(zip(["dram", "spad", "acc", "unit"], split))
    order = ([parts[d]["dram"] for d in r.dram_order] + [parts[d]["spad"] for d in r.spad_order]
             + [parts[d]["acc"] for d in r.acc_order] + [parts[d]["unit"] for d in ("q", "k", "c")])
    sch.reorder(*order)
    sch.set_scope(blk, 0, G.ACC_SCOPE)

    last_o = parts[[d for d in r.dram_order if d in O_DIMS][-1]]["dram"]
    innermost_dram = parts[r.dram_order[-1]]["dram"]
    out_blk = sch.get_sblock("out_p")
    sch.reverse_compute_at(out_blk, last_o, preserve_unit_loops=True)

    i_sp = sch.cache_read(blk, "I_p", G.SPAD_SCOPE)
    sch.compute_at(i_sp, innermost_dram, preserve_unit_loops=True)
    w_sp = sch.cache_read(blk, "W_p", G.SPAD_SCOPE)
    sch.compute_at(w_sp, innermost_dram, preserve_unit_loops=True)
    sch.transform_layout(blk, ("read", 0), lambda n, g, h, w, c: (c // dim, n, g, h, w, c % dim))
    sch.transform_layout(blk, ("read", 1), lambda g, r_, s, c, k: (k // dim, g, r_, s, c, k % dim))
    sch.transform_layout(blk, ("write", 0), lambda n, g, p, q, k: (k // dim, n, g, p, q, k % dim))

    # Accumulator tile <- bias, before the first loop under the write-back point.
    o_pos = order.index(last_o)
    init = sch.decompose_reduction(blk, order[o_pos + 1])

    sw = geo.array_stride[1]
    sch.tensorize(parts["q"]["unit"], intrinsic("gemmini.compute", dim=dim, a_stride=sw,
                                                weight_stationary=r.weight_stationary))

    # write-back: (n, g, p, q, k) over the accumulator tile
    n_, g_, p_, q_, k_ = sch.get_loops(out_blk)[-5:]
    qo, qi = sch.split(q_, [None, dim])
    ko, ki = sch.split(k_, [None, dim])
    sch.reorder(n_, g_, p_, qo, ko, qi, ki)
    sch.tensorize(qi, intrinsic("gemmini.mvout", dim=dim, scale=float(epilogue.scale), lo=epilogue.lo))

    # I tile: rows are pixels along w, DIM channels each
    n_, g_, h_, w_, c_ = sch.get_loops(i_sp)[-5:]
    w_ext = _loop_extent(sch, w_)
    rows = _largest_divisor_at_most(w_ext, dim)
    co, ci = sch.split(c_, [None, dim])
    # The input tile overlaps its neighbours (convolution halo), so its block bindings are not a bijective map of the
    # outer loops and TVM cannot tensorize it.  The copy stays a loop nest marked for the C emitter, which lowers it
    # to mvins (the way TVM's async-DMA passes lower marked copies): (rows x DIM) blocks, or one row per mvin when
    # the tile width has no divisor in 2..DIM.
    if rows > 1:
        wo, wi = sch.split(w_, [None, rows])
        sch.reorder(n_, g_, h_, co, wo, wi, ci)
        sch.annotate(wi, DMA_ANNOTATION, "mvin:0:block")
    else:
        sch.reorder(n_, g_, h_, co, w_, ci)
        sch.annotate(w_, DMA_ANNOTATION, "mvin:0:rowwise")
    if rows < dim and w_ext > rows:
        r.deviations.append(f"input tile width {w_ext} loaded {rows} row(s) per mvin")

    # W tile: rows are input channels, DIM output channels each
    g_, r_, s_, c_, k_ = sch.get_loops(w_sp)[-5:]
    co, ci = sch.split(c_, [None, dim])
    ko, ki = sch.split(k_, [None, dim])
    sch.reorder(g_, r_, s_, ko, co, ci, ki)
    sch.tensorize(ci, intrinsic("gemmini.mvin_spad", dim=dim, rows=dim, channel=1))

    if r.double_buffer:
        if r.dram_order[-1] in RED_DIMS and r.trips("dram", r.dram_order[-1]) > 1:
            sch.annotate(innermost_dram, "software_pipeline_stage", [0, 0, 1])
            sch.annotate(innermost_dram, "software_pipeline_order", [0, 1, 2])
        else:
            r.deviations.append("double buffering not applied: no DRAM reduction loop to pipeline")
    # The accumulator starts from the bias: rewrite the init block, then tensorize it in a fresh schedule.
    sch = s_tir.Schedule(with_bias_init(sch.mod["main"]))
    sch.tensorize(sch.get_loops(sch.get_sblock("acc_init"))[-2],
                  intrinsic("gemmini.mvin_bias", dim=dim, rows=dim))
    return Scheduled(tag, cd, r, sch)


def _loop_extent(sch: s_tir.Schedule, loop: Any) -> int:
    return int(sch.get(loop).extent)
