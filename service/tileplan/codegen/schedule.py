"""Plan (layer + Mapping on a hardware descriptor) -> scheduled TVM PrimFunc for a GEMM-array target.

Execution semantics are those of the calibrated cost model (tileplan.cost.gemmini): one library call per
iteration of the DRAM-level loops, the call's tile = the product of ALL factors below DRAM (edge tiles clipped to
the layer; a matmul's M, K and N tiles in whole DIM blocks), no reuse across calls, partial sums in the
accumulator until the last reduction (R, S, C) tile, outputs stored once, two calls in flight.

    TE compute over the tile grid (bounds = tiles x tile size; the intrinsics clip the real extents)
    DRAM loops (mapping order; reduction loops moved inside the output loops, which changes no cost)
        accumulator tile <- bias                 [decompose_reduction + tensorize gemmini.tile_init]
        DRAM reduction loops
            one call                              [tensorize gemmini.tile_call over the in-tile loops]
        accumulator tile -> DRAM, requantized    [reverse_compute_at + tensorize gemmini.tile_store]
    fence                                        (then the CPU may touch what the stores wrote)

The stores write an NHWC output directly (`store_into_output`: the padded output stage and the CPU's copy of it
are dropped): the caller's output, or, for an NCHW caller, an NHWC staging copy that the CPU transposes into the
output after the fence (`ComputeDef.store_target`); with `direct_store=False` the CPU copies the padded output.

Every change the realisation makes to the plan is listed in `Realization.deviations`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, cast

import tvm
from tvm import s_tir, te, tirx

from tileplan.codegen.registry import CodegenError, core_compute, intrinsic
from tileplan.codegen.targets import gemmini as G
from tileplan.cost.gemmini import (
    call_features,
    cycles_from_calls,
    execution_from_mapping,
    gemmini_levels,
    kernel_fold,
    library_matmul_keeps,
    nominal_dram_bandwidth,
)
from tileplan.cost.params import CostParams
from tileplan.dims import Dim
from tileplan.execution import call_loop_order
from tileplan.mapping import Factor, LevelMapping, Mapping
from tileplan.problem import Problem

O_DIMS = ("n", "g", "p", "q", "k")
RED_DIMS = ("r", "s", "c")
ALL_DIMS = O_DIMS + RED_DIMS
BLOCKED = ("q", "k", "c")


@dataclass
class Realization:
    """How a plan's mapping is realised: the tile of one call (elements) and the DRAM loop order."""

    dim: int
    tile: dict[str, int]  # internal dim -> tile size (g is always 1: groups are DRAM loops)
    bound: dict[str, int]  # internal dim -> real bound
    dram_order: list[str]
    double_buffer: bool
    matmul: bool
    canonical: dict[str, str]  # internal dim -> canonical dim (a matmul's M is P, run along the q axis)
    deviations: list[str] = field(default_factory=list)
    # dims whose tiles are whole DIM blocks (a matmul's BLOCKED; a convolution the cost model costs as tiled_matmul
    # calls, `runs_as_matmul`: its channel tiles, as the model counts them)
    blocked: tuple[str, ...] = ()

    def tiles(self, d: str) -> int:
        return -(-self.bound[d] // self.tile[d])

    def padded(self, d: str) -> int:
        """The tile-grid bound (whole tiles)."""
        return self.tiles(d) * self.tile[d]

    @property
    def calls(self) -> int:
        return math.prod(self.tiles(d) for d in ALL_DIMS)


@dataclass
class TargetSpec:
    """What the schedule needs of the array: its size and local memory sizes in rows."""

    dim: int = 16
    spad_rows: int = 16384
    acc_rows: int = 1024


# ------------------------------------------------------------------------------------------------------------------
# Layer -> geometry


def layer_geometry(layer: Any, pack: int = 1) -> tuple[str, G.ConvGeometry, dict[str, str]]:
    """(compute tag, geometry, canonical dim -> internal dim) of a tileplan.workload layer; `pack` groups packed
    into one (Mapping.group_pack: the geometry is the packed layer's)."""
    if pack != 1 and (layer.op in ("matmul", "dense") or layer.dims()["G"] % pack):
        raise CodegenError(f"group_pack={pack} does not divide the layer's groups")
    if layer.op in ("matmul", "dense"):
        geo = G.ConvGeometry(N=1, G=1, K=layer.N, C=layer.K, H=1, W=layer.M, P=1, Q=layer.M, R=1, S=1)
        return "gemmini.matmul", geo, {"N": "n", "G": "g", "K": "k", "C": "c", "P": "q", "Q": "p", "R": "r",
                                        "S": "s"}
    d = layer.dims()
    tag = "gemmini.depthwise_conv2d" if d["G"] > 1 and d["C"] == 1 and d["K"] == 1 else "gemmini.conv2d"
    if layer.in_w == 1 and d["Q"] == 1 and d["R"] == 1 and d["S"] == 1 and d["P"] > 1:
        # a 1x1 convolution on a one-column map (MobileViTv2's unfolded patches): the cost model costs it as
        # tiled_matmul calls of P rows (`runs_as_matmul`), and the code's array rows run along a pixel row (Q), so
        # the code runs it transposed: one row of P pixels, the same memory in NCHW and NHWC alike
        geo = G.ConvGeometry(N=d["N"], G=d["G"] // pack, K=d["K"] * pack, C=d["C"] * pack, H=1, W=layer.in_h,
                             P=1, Q=d["P"], R=1, S=1, stride=tuple(layer.stride)[::-1],
                             dilation=tuple(layer.dilation)[::-1], padding=tuple(layer.padding)[::-1], pack=pack)
        return tag, geo, {"N": "n", "G": "g", "K": "k", "C": "c", "P": "q", "Q": "p", "R": "r", "S": "s"}
    geo = G.ConvGeometry(N=d["N"], G=d["G"] // pack, K=d["K"] * pack, C=d["C"] * pack, H=layer.in_h, W=layer.in_w,
                         P=d["P"], Q=d["Q"], R=d["R"], S=d["S"], stride=tuple(layer.stride),
                         dilation=tuple(layer.dilation), padding=tuple(layer.padding), pack=pack)
    return tag, geo, {"N": "n", "G": "g", "K": "k", "C": "c", "P": "p", "Q": "q", "R": "r", "S": "s"}


def realize(mapping: Any, arch: Any, names: dict[str, str], bounds: dict[str, int], target: TargetSpec,
            matmul: bool) -> Realization:
    """The call tile of a contract Mapping: all factors below the DRAM level, clipped to the layer. A matmul's
    blocked tiles are whole DIM blocks (tiled_matmul's); so are the channel tiles (C, K) of a convolution the cost
    model costs as tiled_matmul calls (Q = R = S = 1, `runs_as_matmul`), whose calls it counts in whole blocks."""
    levels = mapping.levels
    top = len(levels) - 1
    dim = target.dim
    dev: list[str] = []
    inv = {v: k for k, v in names.items()}
    as_matmul = not matmul and all(bounds[c] == 1 for c in ("Q", "R", "S"))
    blocked = BLOCKED if matmul or as_matmul else ()  # (q: a matmul's rows, a transposed one-column conv's)
    tile, bound = {}, {}
    for d in ALL_DIMS:
        canon = inv[d]
        t = math.prod(lv.temporal_factor(canon) * lv.spatial_factor(canon) for lv in levels[:top])
        b = bounds[canon]
        if d == "g":
            if t > 1:
                dev.append(f"G: {t} groups per tile run as {t} calls (groups are DRAM loops)")
            t = 1
        elif d in blocked:
            t0, t = t, -(-t // dim) * dim  # tiled_matmul tiles are whole DIM blocks
            if not matmul and min(t, b) != min(t0, b):
                dev.append(f"{canon}: tile {t0} run as {min(t, b)} (whole DIM blocks, as the cost model counts "
                           "the calls of a Q = R = S = 1 layer)")
        tile[d], bound[d] = max(1, min(t, b)), b
    temporal = [(names[c], f) for c, f in levels[top].temporal]
    dram = call_loop_order(temporal, ALL_DIMS, RED_DIMS)
    r = Realization(dim, tile, bound, dram, True, matmul, inv, dev, blocked)
    planned = call_loop_order(temporal, ALL_DIMS, ())  # the plan's own order, reductions where it put them
    trips = [d for d in planned if r.tiles(d) > 1]
    first_red = next((i for i, d in enumerate(trips) if d in RED_DIMS), None)
    if first_red is not None and any(d in O_DIMS for d in trips[first_red:]):
        dev.append("DRAM reduction loops moved inside the DRAM output loops (partial sums stay in the accumulator)")
    return r


def call_layout(r: Realization, geo: G.ConvGeometry, epi: G.Epilogue, fold_ok: bool = True,
                pad_value: int = 0) -> G.CallLayout:
    """`fold_ok`: the stream may fold kernel columns into the array rows (Tileplan's; the library's may not).
    `pad_value` != 0: the padding is not zero, so every row of I_p is read (none is zero-filled)."""
    sh, sw = geo.array_stride
    dh, dw = geo.dilation
    t = G.TileShape(r.tile["n"], r.tile["p"], r.tile["q"], r.tile["k"], r.tile["r"], r.tile["s"], r.tile["c"],
                    sh, sw, dh, dw)
    fh, fw = geo.stride if geo.folds_stride else (1, 1)
    ph, pw = geo.padding
    # rows / cols of I_p that hold real input: I_p[h] = I[h * f - pad]
    rows = (-(-ph // fh), -(-(geo.H + ph) // fh))
    cols = (-(-pw // fw), -(-(geo.W + pw) // fw))
    if pad_value:
        rows, cols = (0, geo.Hp), (0, geo.Wp)
    real = {"N": geo.N, "P": geo.P, "Q": geo.Q, "K": geo.K, "R": geo.R, "S": geo.S, "C": geo.C}
    padded = {d.upper(): r.padded(d) for d in ALL_DIMS}
    fold = kernel_fold(r.dim, geo.C, t.c, t.s, dw) if fold_ok and not r.matmul else 1
    return G.CallLayout(r.dim, real, padded, t, geo.Hp, geo.Wp, rows, cols, r.double_buffer, epi.bias, fold=fold)


def realised_mapping(r: Realization, arch: Any) -> Mapping:
    """The contract Mapping of what the code runs: the call tile below DRAM (at the scratchpad), the tile counts
    as DRAM loops in the realised order, padded bounds of the tile grid, and the double buffering the code does.
    The cost model reads only the factors below DRAM and the double buffering (`execution_from_mapping`)."""
    levels = gemmini_levels(arch)
    n = len(arch.levels)
    acc, spad, dram = levels if levels is not None else (n - 3, n - 2, n - 1)
    canon = r.canonical
    names = [lv.name for lv in arch.levels]
    tile = [(canon[d], r.tile[d]) for d in ALL_DIMS if r.tile[d] > 1]
    outer = [(canon[d], r.tiles(d)) for d in reversed(r.dram_order) if r.tiles(d) > 1]  # innermost first
    loops = {spad: tile, dram: outer}
    return Mapping(  # canon maps the realisation's dimensions to a Mapping's (Dim) names
        levels=[LevelMapping(name=name, temporal=cast("list[Factor]", loops.get(i, []))) for i, name in enumerate(names)],
        padded_dims=cast("dict[Dim, int]", {canon[d]: r.padded(d) for d in ALL_DIMS if r.padded(d) != r.bound[d]}),
        double_buffered={names[spad]: ["I", "W"], names[acc]: ["O"]} if r.double_buffer else {})


def model_cycles(r: Realization, problem: Problem, arch: Any, executor: str = "tileplan",
                 out_bytes: float | None = None, w_row: int = 0, o_row: int = 0, pad_read: bool = False) -> float:
    """The calibrated cost model's cycles for the realised tiles: `cycles_from_calls` of `model_calls` (the same
    arguments)."""
    calls = model_calls(r, problem, arch, executor, out_bytes, w_row, o_row, pad_read)
    return cycles_from_calls(calls, CostParams.for_descriptor(arch.hardware)).cycles


def model_calls(r: Realization, problem: Problem, arch: Any, executor: str = "tileplan",
                out_bytes: float | None = None, w_row: int = 0, o_row: int = 0, pad_read: bool = False,
                acc_init: bool = False, i_row: int = 0) -> Any:
    """The calibrated cost model's call features (tileplan.cost.gemmini) for the realised tiles, so the prediction
    matches what the code runs rather than the plan it came from (`executor`: see CallLayout.reuse; `out_bytes`:
    bytes per stored output element where the kernel does not store the hardware's output type, e.g. the int32
    accumulators of KernelABI.acc_output; `w_row`: elements between the weight rows the kernel reads, when it reads
    a copy padded to the tile grid rather than the layer's K: a row's offset in its 64-byte block sets its DMA
    requests; `o_row`: elements between the output pixels the stores write, when they write a padded copy
    (CallLayout.store_pixel) rather than the caller's output: rows closer than 64 bytes wait on each other;
    `pad_read`: the kernel reads the input's padding rows from memory (a non-zero padding value, KernelABI.pad_value),
    so under the library's executor, whose model makes zero padding on chip, the padded input is what it loads;
    `acc_init`: the code initialises every output tile's accumulator, from the bias or, where the layer has none
    (`problem.bias`), by zero-fills that read no bytes, whichever executor's stream it follows; `i_row`: elements
    between the input pixels a convolution's kernel reads, from its copy of the input padded to the tile grid
    (C_p): the copy's size decides whether it stays in the L2 / LLC, a row's offset its DMA requests)."""
    e = execution_from_mapping(problem, arch, realised_mapping(r, arch), executor)
    if acc_init:
        e = dataclasses.replace(e, bias=True, bias_bytes=bool(problem.bias))
    if i_row and e.kind == "conv" and i_row != e.c:  # the input copy's pixels are i_row channels apart
        e = dataclasses.replace(e, i_row=i_row)
    if out_bytes is not None:
        e = dataclasses.replace(e, out_bytes=float(out_bytes))
    if w_row and w_row != e.k:  # the kernel reads a copy of the weights whose rows are w_row elements apart
        e = dataclasses.replace(e, w_row=w_row)
    if o_row:
        e = dataclasses.replace(e, o_row=o_row)
    if pad_read and e.kind == "conv" and any(e.pad):
        dh, dw = problem.dilation
        e = dataclasses.replace(e, pad=(0, 0), in_h=(e.out_h - 1) * e.stride[0] + (e.r - 1) * dh + 1,
                                in_w=(e.out_w - 1) * e.stride[1] + (e.s - 1) * dw + 1)
    return call_features(e, nominal_dram_bandwidth(arch))


def library_keeps(r: Realization) -> bool:
    """Whether Gemmini's library keeps a tile between calls (the baseline stream): only tiled_matmul's whole-matrix
    operands, with the whole reduction in each call (tileplan.cost.gemmini.library_matmul_keeps, the model's rule:
    a matmul whose row and column tiles are both partial reloads both operands every call)."""
    if not r.matmul:
        return False
    rows = r.tiles("q") == 1 and r.tiles("n") == 1
    return library_matmul_keeps(rows, r.tiles("k") == 1, r.tiles("c") == 1)[1]


def fit(r: Realization, geo: G.ConvGeometry, epi: G.Epilogue, target: TargetSpec, arch: Any,
        problem: Problem, executor: str = "tileplan") -> G.CallLayout:
    """Make one call fit HALF the scratchpad and accumulator (two calls in flight, as the cost model assumes):
    while it does not, take the single-dimension shrink (one more tile along that dimension; whole DIM blocks for
    a matmul's blocked dimensions and for channel tiles above DIM) with the lowest cost-model cycles among those
    that shrink the over-full memory.  Every shrink is listed in the deviations; when not even a one-element
    tile fits twice, the call runs single buffered."""
    def over(lay: G.CallLayout, halves: int) -> float:
        return max(halves * lay.spad_call_rows / target.spad_rows, halves * lay.acc_tile_rows / target.acc_rows)

    def unit(d: str) -> int:
        return r.dim if (d in r.blocked or (d in BLOCKED and r.tile[d] > r.dim)) else 1

    start = dict(r.tile)
    while True:
        lay = call_layout(r, geo, epi, executor == "tileplan")
        if over(lay, 2 if r.double_buffer else 1) <= 1.0:
            break
        cands = []
        for d in ALL_DIMS:
            if d == "g" or r.tile[d] <= 1:
                continue
            u = unit(d)
            n = r.tiles(d) + 1
            while True:  # the next tile count that changes the (unit-rounded) tile
                t_new = max(1, u * -(-(-(-r.bound[d] // n)) // u))
                if t_new < r.tile[d] or n > r.bound[d]:
                    break
                n += 1
            if t_new >= r.tile[d]:
                continue
            old = r.tile[d]
            r.tile[d] = t_new
            lay_new = call_layout(r, geo, epi, executor == "tileplan")
            if over(lay_new, 2) < over(lay, 2):
                cands.append((model_cycles(r, problem, arch, executor), d, t_new))
            r.tile[d] = old
        if not cands:
            r.double_buffer = False
            if over(lay, 1) > 1.0:
                raise CodegenError(f"one call needs {lay.spad_call_rows} scratchpad / {lay.acc_tile_rows} "
                                   "accumulator rows: does not fit")
            r.deviations.append("single buffered: not even the smallest tile fits half the local memories")
            break
        _, d, t_new = min(cands)
        r.tile[d] = t_new
    shrunk = [f"{d} {start[d]}->{r.tile[d]}" for d in ALL_DIMS if r.tile[d] != start[d]]
    if shrunk:
        r.deviations.append("tiles shrunk (cost-model guided) so that a call fits half the scratchpad and "
                            "accumulator: " + ", ".join(shrunk))
    return call_layout(r, geo, epi, executor == "tileplan")


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
    # bias_p feeds no TE stage (it becomes the accumulator's initial value after scheduling), so unless it is an
    # input (prelaid) it is listed as a trailing parameter: a DRAM workspace the emitted kernel allocates itself.
    return te.create_prim_func(cd.params)


def with_bias_init(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Make the decomposed init block `acc_init` load the bias (acc = bias_p[g, k]) instead of zero, and compute
    bias_p before everything else."""
    found: list[Any] = []

    def find(b: Any) -> Any:
        if b.name_hint == "bias_p":
            found.append(b.body.buffer)
        return b

    _rebuild(func.body, find)
    staged = bool(found)
    if not staged:  # prelaid: bias_p is a parameter
        found = [b for b in func.params if str(getattr(b, "name", "")) == "bias_p"]
    if not found:
        raise CodegenError("compute has no bias_p stage or parameter")
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
    if not staged:
        return func.with_body(body)
    root = body.block
    seq = list(root.body.seq)
    names = [_first_block_name(st) for st in seq]
    seq.insert(0, seq.pop(names.index("bias_p")))
    root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, tirx.SeqStmt(seq), root.init,
                        root.alloc_buffers, root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(body.iter_values, body.predicate, root))


def _with_root_seq(func: tirx.PrimFunc, edit: Any) -> tirx.PrimFunc:
    """`func` with its root block's statement list replaced by edit(list)."""
    realize = func.body
    root = realize.block
    seq = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, tirx.SeqStmt(edit(seq)),
                        root.init, root.alloc_buffers, root.match_buffers, root.annotations)
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, root))


def store_into_output(func: tirx.PrimFunc, store_fn: str, target: str = "out") -> tirx.PrimFunc:
    """Let the tensorized tile store (`store_fn(out_ptr, o_off, acc)`) write the NHWC buffer `target` itself (the
    caller's output `out`, or a staging copy the CPU transposes into `out`), and drop the padded out_p and the
    stage that copied it into `target`.  The call gets the tile's offset in out_p [N, G, P, Q, K] (from the
    tile's region), from which the support code finds the tile (G.call_support_c, TP_STORE_DIRECT)."""
    allocated = list(func.body.block.alloc_buffers) if isinstance(func.body, s_tir.SBlockRealize) else []
    out = next((b for b in [*func.params, *allocated] if getattr(b, "name", "") == target), None)
    if out is None:
        raise CodegenError(f"the compute has no output buffer named {target!r}")
    found: list[Any] = []

    def retarget(b: Any) -> Any:
        if b.name_hint != "out_p_o":
            return b
        call = b.body.value if isinstance(b.body, tirx.Evaluate) else None
        if call is None or str(call.args[0].value) != store_fn:
            raise CodegenError(f"the tensorized store block does not call {store_fn}")
        tile = next((m for m in b.match_buffers if getattr(m.source.source, "name", "") == "out_p"), None)
        if tile is None:
            raise CodegenError("the tensorized store block does not match a region of out_p")
        out_p = tile.source.source
        offset: Any = tirx.const(0, "int32")
        for extent, rng in zip(out_p.shape, tile.source.region):
            offset = offset * extent + rng.min
        found.append(out_p)
        body = tirx.Evaluate(tirx.call_extern("int32", store_fn, out.access_ptr("w"), offset, *call.args[3:]))
        whole = tirx.BufferRegion(out, [tvm.ir.Range.from_min_extent(0, x) for x in out.shape])
        return s_tir.SBlock(b.iter_vars, b.reads, [whole], b.name_hint, body, b.init, b.alloc_buffers,
                            [m for m in b.match_buffers if not m.same_as(tile)], b.annotations)

    func = func.with_body(_rebuild(func.body, retarget))
    if not found:
        raise CodegenError("no tensorized store block (out_p_o) to retarget")
    func = _with_root_seq(func, lambda seq: [st for st in seq if _first_block_name(st) != target])
    realize = func.body
    root = realize.block
    root = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, root.body, root.init,
                        [a for a in root.alloc_buffers if not a.same_as(found[0])], root.match_buffers,
                        root.annotations)
    return func.with_body(s_tir.SBlockRealize(realize.iter_values, realize.predicate, root))


def with_fence(func: tirx.PrimFunc, fence_fn: str) -> tirx.PrimFunc:
    """Call `fence_fn()` once every Gemmini instruction has been issued: before the first stage that copies what
    the stores wrote (the padded output or the NHWC staging copy of an NCHW output; the CPU must not read what an
    mvout wrote before a fence), or at the end when there is none."""
    fence = tirx.Evaluate(tirx.call_extern("int32", fence_fn))

    def edit(seq: list[Any]) -> list[Any]:
        names = [_first_block_name(st) for st in seq]
        at = min((names.index(n) for n in ("out_nhwc", "out") if n in names), default=len(seq))
        return [*seq[:at], fence, *seq[at:]]

    return _with_root_seq(func, edit)


def with_host_session(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The host module's body after `tp_host_begin()` (emulator reset and the kernel's configuration prologue,
    which the C kernel prints before its body); `tp_host_end()` (the fence) is placed by schedule_layer."""
    begin = tirx.Evaluate(tirx.call_extern("int32", "tp_host_begin"))
    return _with_root_seq(func, lambda seq: [begin, *seq])


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
    layout: G.CallLayout
    schedule: s_tir.Schedule
    model_cycles: float  # the cost model's cycles for the realised tiles

    @property
    def mod(self) -> tvm.IRModule:
        return self.schedule.mod


STREAMS = ("tileplan", "baseline")


@dataclass
class Realised:
    """What `schedule_layer` works out before TVM: the core compute's tag, the geometry (padded to the tile grid),
    the realisation, the call layout, the (packed) problem, the executor whose stream the code follows, and the
    cost model's cycles for the code (`Scheduled.model_cycles`)."""

    tag: str
    geometry: G.ConvGeometry
    realization: Realization
    layout: G.CallLayout
    problem: Problem
    executor: str
    model_cycles: float
    model_calls: Any = None  # the cost model's call features of the code (tileplan.cost.gemmini.FEATURE_COLUMNS)


def realise_layer(layer: Any, mapping: Any, arch: Any, epilogue: G.Epilogue, target: TargetSpec,
                  double_buffer: bool = True, stream: str = "tileplan", direct_store: bool = True,
                  abi: G.KernelABI | None = None) -> Realised:
    """`schedule_layer`'s work up to the TVM schedule: the realisation, its call layout and the modelled cycles of
    the code it schedules (the same arguments, the same errors for a layer the realisation refuses). A caller that
    needs a kernel's modelled cycles and not its code (the library's tiling of an op, `frontend.compile`) asks
    this: a fraction of the schedule's and the C emitter's time."""
    abi = abi or G.KernelABI()
    if stream not in STREAMS:
        raise CodegenError(f"unknown instruction stream {stream!r}; use one of {STREAMS}")
    pack = getattr(mapping, "group_pack", None) or 1
    tag, geo0, names = layer_geometry(layer, pack)
    if epilogue.zero_point:
        raise CodegenError("Gemmini's mvout cannot add an output zero point; requantize with zero_point=0")
    problem = Problem.from_layer(layer).packed(pack)
    r = realize(mapping, arch, names, problem.dims, target, matmul=tag == "gemmini.matmul")
    if (mapping.dataflow or arch.dataflow or "weight_stationary") == "output_stationary":
        r.deviations.append("output-stationary mapping run weight stationary (the library's loop_conv_ws)")
    if not double_buffer:
        r.double_buffer = False
        r.deviations.append("single buffered on request")
    # Tileplan's stream keeps tiles between calls; the baseline runs as Gemmini's library would (which keeps
    # only tiled_matmul's whole-matrix operands: the same rule, since its loops then repeat the operand's tile)
    executor = "tileplan" if stream == "tileplan" else "library"
    lay = fit(r, geo0, epilogue, target, arch, problem, executor)
    geo = G.ConvGeometry(**{**geo0.__dict__, "padded": {d.upper(): r.padded(d) for d in ALL_DIMS}})
    lay = dataclasses.replace(call_layout(r, geo, epilogue, stream == "tileplan", abi.pad_value),
                              bias_ahead=stream == "tileplan", reuse=stream == "tileplan" or library_keeps(r),
                              acc_output=abi.acc_output, w_in_place=abi.b_in_place)
    if abi.b_in_place and tag != "gemmini.matmul":
        raise CodegenError("b_in_place reads a matmul's B where it lies; this layer is not a matmul")
    if abi.acc_output:
        r.deviations.append("int32 accumulators stored (4 bytes per output element); the caller requantizes")
    if abi.pad_value and (geo.padding != (0, 0)):
        r.deviations.append(f"input padding value {abi.pad_value}: padding rows are read from memory, not "
                            "zero-filled")
    lay = dataclasses.replace(lay, store_direct=direct_store)
    # the model counts the bytes the stores write: int32 accumulators are four per element
    # (the model of the code: every output tile's accumulator is initialised by mvins of its rows, from the bias, or,
    # for a layer without one, a zero-fill from address 0 (requests, no bytes), in either stream: the library's
    # model, which skips a missing bias as Gemmini's library does, would not count them)
    coded = dataclasses.replace(problem, bias=bool(epilogue.bias))
    calls = model_calls(r, coded, arch, executor, 4.0 if abi.acc_output else None,
                        0 if lay.w_in_place else lay.padded["K"], 0 if lay.store_direct else lay.store_pixel,
                        bool(abi.pad_value), acc_init=True, i_row=lay.padded["C"])
    cycles = cycles_from_calls(calls, CostParams.for_descriptor(arch.hardware)).cycles
    return Realised(tag, geo, r, lay, problem, executor, cycles, calls)


def schedule_layer(layer: Any, mapping: Any, arch: Any, epilogue: G.Epilogue, target: TargetSpec,
                   double_buffer: bool = True, host: bool = False, stream: str = "tileplan",
                   direct_store: bool = True, abi: G.KernelABI | None = None) -> Scheduled:
    """`host`: tensorize with the intrinsics' host-glue implementations (tp_host_*) for TVM's llvm build of the
    module (tileplan.codegen.host); the schedule itself is the same.  `stream`: the order of one call's loads,
    "tileplan" (the first output-channel block's bias rows ahead of the tiles) or "baseline" (every bias row
    after the tiles: the order benchmarks keep for Gemmini's hand-written library, see CallLayout.bias_ahead).
    `direct_store=False` keeps the padded output and the CPU's copy of it (after the fence) even where the stores
    could write the caller's output.  `abi`: how the kernel meets its caller (layout, padding value, prelaid
    weights; G.KernelABI)."""
    abi = abi or G.KernelABI()
    rl = realise_layer(layer, mapping, arch, epilogue, target, double_buffer, stream, direct_store, abi)
    tag, geo, r, lay = rl.tag, rl.geometry, rl.realization, rl.layout
    cd = core_compute(tag)(geo, epilogue, abi=abi)
    sch = s_tir.Schedule(prim_func(cd))
    t = lay.tile

    blk = sch.get_sblock("acc")
    loops = dict(zip(ALL_DIMS, sch.get_loops(blk)))
    parts = {d: sch.split(loops[d], [r.tiles(d), r.tile[d]]) for d in ALL_DIMS}
    sch.reorder(*([parts[d][0] for d in r.dram_order] + [parts[d][1] for d in ALL_DIMS]))
    sch.set_scope(blk, 0, G.ACC_SCOPE)
    outs = [d for d in r.dram_order if d in O_DIMS]
    sch.reverse_compute_at(sch.get_sblock("out_p"), parts[outs[-1]][0], preserve_unit_loops=True)
    sch.decompose_reduction(blk, parts[r.dram_order[len(outs)]][0])
    glue = {"host": True} if host else {}  # the kernel C's intrinsics keep their registered names
    sch.tensorize(parts["n"][1], intrinsic("gemmini.tile_call", n=t.n, p=t.p, q=t.q, k=t.k, r=t.r, s=t.s, c=t.c,
                                           sh=t.sh, sw=t.sw, dh=t.dh, dw=t.dw, **glue))
    sch.tensorize(sch.get_loops(sch.get_sblock("out_p"))[-5],
                  intrinsic("gemmini.tile_store", n=t.n, p=t.p, q=t.q, k=t.k, scale=float(epilogue.scale),
                            lo=epilogue.lo, full=abi.acc_output, **glue))
    # The accumulator starts from the bias: rewrite the init block, then tensorize it in a fresh schedule.
    sch = s_tir.Schedule(with_bias_init(sch.mod["main"]))
    sch.tensorize(sch.get_loops(sch.get_sblock("acc_init"))[-5],
                  intrinsic("gemmini.tile_init", n=t.n, p=t.p, q=t.q, k=t.k, **glue))
    # The stores write the caller's output where they can; one fence once everything is issued (before the CPU
    # copies the padded output where they cannot).  The host module's fence is its session's end.
    func = sch.mod["main"]
    if lay.store_direct:
        func = store_into_output(func, "tp_host_store" if host else "tp_store", cd.store_target)
    sch = s_tir.Schedule(with_fence(func, "tp_host_end" if host else "tp_fence"))
    return Scheduled(tag, cd, r, lay, sch, rl.model_cycles)
