"""Gemmini's hand-written baseline: `tiled_matmul_auto` and `tiled_conv_auto` of its `gemmini.h`.

Re-implemented from the description in docs/gemmini.md ("The hand-written baseline") and the
behaviour of Gemmini's software library; the tiles it picks are then written as a contract Mapping on
any Gemmini-shaped descriptor (see `gemmini_shape`). Nothing is a constant: DIM is the array width,
the scratchpad holds `capacity / DIM` rows of DIM input elements, the accumulator `capacity per column
/ word size` rows, and, as in gemmini.h, one `loop_ws` / `loop_conv_ws` call may use half of each
(the hardware loops double-buffer).

Matmul (`tiled_matmul_auto`, WS): dimensions are counted in DIM blocks; tile_I = min(I, s),
tile_J = min(J, s), tile_K = min(K, m / s) with s = floor(sqrt(half acc rows / DIM)) and
m = quarter spad rows / DIM; then grow J, I (scratchpad and accumulator limits) and K (scratchpad
limit) in turn until nothing grows. Tiles run i0 -> j0 -> k0 (k innermost); inside a tile the
loop_ws FSM preloads a weight block and streams the A rows: j, k, i with i innermost.

Conv (`tiled_conv_auto`, WS): args (batches, orows, ocols, ochs, krows, kcols, kchs) start at the
whole layer; while the tile overflows half the scratchpad or accumulator, shrink the largest arg
(ties: the first; ocols is skipped while it is <= DIM and orows > 1; channel counts drop to the next
multiple of DIM below, or by DIM, never below 1; the others by 1); then grow ocols by 1 while it
fits; then repeatedly try +1 on every arg in order. Row counts as gemmini.h computes them:
input rows = orows * stride + dilated krows - 1 (per axis), halved for a stride-2 1x1 "downsample"
conv, channels in DIM blocks; weights = och blocks * krows * kcols * kchs rows; outputs = och blocks
* batches * orows * ocols rows. Tiles run b -> orow -> ocol -> och -> krow -> kcol -> kch (kch
innermost); inside a tile loop_conv_ws runs och, krow, kcol, kch, b, orow, ocol (ocol innermost).

Contract form (levels innermost first, Gemmini WS): the accumulator's fan-out unrolls C over the
rows, the scratchpad's unrolls K over the columns, the tile loops sit at the accumulator (its O tile
is the whole output tile, kept while k0/kch advance), the tile-grid loops at DRAM. A channel tile
of c > DIM takes ceil(c / DIM) array passes, as in Gemmini, written as passes x ceil(c / passes)
(the same passes, minimal padding; Gemmini's own partial last block would pad the weights). A perfect loop nest cannot say "tiles of 240 channels
and a last one of 16": by default ("balanced" grid) the mapping keeps Gemmini's number of tiles per
dimension and gives each ceil(bound / tiles), which covers the work Gemmini does (256 channels: 2 x
128, not 2 x 240); `plan_gemmini(..., grid="literal")` writes Gemmini's own tile size and pads the
grid to whole tiles instead, which can nearly double a dimension's MACs. Leftover rounding goes in
`padded_dims` either way; `GemminiPlan.tile` is always gemmini.h's own choice.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from tileplan.check import check_arch
from tileplan.errors import InputError, MappingInfeasible
from tileplan.hardware import Architecture, HardwareDescriptor
from tileplan.mappers.base import MapperOptions, MapperResult, SolverInfo, register
from tileplan.mappers.build import build_mapping
from tileplan.mapping import Mapping
from tileplan.problem import Problem


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


# --------------------------------------------------------------------------------------------------
# Which descriptors look like Gemmini


@dataclass(frozen=True)
class GemminiShape:
    """A Gemmini-like hierarchy under one weight-stationary dataflow."""

    arch: Architecture
    dim: int  # array is dim x dim
    reg: int | None  # index of the per-PE weight register level, if the descriptor has one
    acc: int  # accumulator: keeps O, one instance per column, fan-out over the rows (C)
    spad: int  # scratchpad: keeps I and W, one instance, fan-out over the columns (K)
    dram: int
    spad_rows: int  # rows of DIM input elements
    acc_rows: int  # rows of the accumulator (entries per column instance)

    @property
    def max_spad_rows(self) -> int:
        """Rows one double-buffered loop_ws / loop_conv_ws call may use."""
        return self.spad_rows // 2

    @property
    def max_acc_rows(self) -> int:
        return self.acc_rows // 2


def _is_weight_stationary(arch: Architecture) -> bool:
    first = arch.levels[0]
    if first.keeps == frozenset({"W"}):
        return True
    name = arch.dataflow.lower().replace("-", "_")
    return name in {"ws", "weight_stationary", "weightstationary"}


def gemmini_shape(arch: Architecture) -> GemminiShape | None:
    """The Gemmini roles of `arch`'s levels, or None when it is not shaped like Gemmini (WS):
    [weight registers (optional)] -> accumulator (O) -> scratchpad (I+W, shared pool) -> DRAM,
    a square DIM x DIM array, C unrollable over the accumulator's fan-out and K over the scratchpad's."""
    lv = arch.levels
    if not _is_weight_stationary(arch):
        return None
    if len(lv) == 4:
        reg, acc, spad, dram = 0, 1, 2, 3
        r = lv[reg]
        if r.keeps != frozenset({"W"}) or r.fanout != 1:
            return None
    elif len(lv) == 3:
        reg, acc, spad, dram = None, 0, 1, 2
    else:
        return None
    a, s = lv[acc], lv[spad]
    if a.keeps != frozenset({"O"}) or s.keeps != frozenset({"I", "W"}) or s.partition is not None:
        return None
    if a.partition is not None or a.capacity is None or s.capacity is None or not lv[dram].is_backing_store:
        return None
    dim = s.fanout
    if dim < 2 or a.fanout != dim or s.instances != 1 or arch.macs != dim * dim:
        return None
    if "C" not in a.spatial_dims or "K" not in s.spatial_dims:
        return None
    spad_rows = int(s.capacity // (dim * arch.input_bytes))
    acc_rows = int(a.capacity // a.word_bytes)
    if spad_rows < 4 or acc_rows < 2:
        return None
    return GemminiShape(arch, dim, reg, acc, spad, dram, spad_rows, acc_rows)


def find_shape(hw: HardwareDescriptor, dataflow: str | None = None) -> GemminiShape | None:
    """The first (or the named) dataflow under which `hw` is Gemmini-shaped."""
    names = [dataflow] if dataflow is not None else hw.dataflow_names
    for name in names:
        shape = gemmini_shape(hw.resolve(name))
        if shape is not None:
            return shape
    return None


def applicable(hw: HardwareDescriptor) -> bool:
    """True for descriptors shaped like Gemmini (weight-stationary dataflow, an O-keeping accumulator
    fanned out over the rows, an I+W scratchpad fanned out over the columns)."""
    return find_shape(hw) is not None


# --------------------------------------------------------------------------------------------------
# tiled_matmul_auto


@dataclass(frozen=True)
class MatmulTiles:
    tile_i: int  # in DIM blocks
    tile_j: int
    tile_k: int


def matmul_tiles(dim_i: int, dim_j: int, dim_k: int, dim: int, spad_rows: int, acc_rows: int) -> MatmulTiles:
    """tiled_matmul_auto's tile sizes (in DIM blocks) for C[I,J] = A[I,K] B[K,J], WS, double buffered.

    `spad_rows` / `acc_rows` are the full memories (rows of DIM elements); a call gets half of each."""
    blocks_i, blocks_j, blocks_k = _ceil(dim_i, dim), _ceil(dim_j, dim), _ceil(dim_k, dim)
    max_spad, max_acc = spad_rows // 2, acc_rows // 2
    mats_in_acc = max_acc // dim  # accumulator blocks a call may use
    mats_in_partition = (spad_rows // 4) // dim  # scratchpad blocks per operand partition
    max_ij = math.isqrt(mats_in_acc)
    if max_ij < 1:
        raise MappingInfeasible(f"gemmini-auto: half the accumulator ({max_acc} rows) holds no {dim}x{dim} block")
    max_k = mats_in_partition // max_ij
    ti, tj, tk = min(blocks_i, max_ij), min(blocks_j, max_ij), min(blocks_k, max_k)
    if tk < 1:
        raise MappingInfeasible("gemmini-auto: a quarter of the scratchpad holds no column of blocks")

    def spad(i: int, j: int, k: int) -> int:
        return (i * k + k * j) * dim

    def acc(i: int, j: int) -> int:
        return i * j * dim

    if spad(ti, tj, tk) > max_spad or acc(ti, tj) > max_acc:
        raise MappingInfeasible("gemmini-auto: the starting tile does not fit half the scratchpad/accumulator")
    while True:
        grew = False
        if spad(ti, tj + 1, tk) <= max_spad and acc(ti, tj + 1) <= max_acc and tj + 1 <= blocks_j:
            tj += 1
            grew = True
        if spad(ti + 1, tj, tk) <= max_spad and acc(ti + 1, tj) <= max_acc and ti + 1 <= blocks_i:
            ti += 1
            grew = True
        if spad(ti, tj, tk + 1) <= max_spad and tk + 1 <= blocks_k:
            tk += 1
            grew = True
        if not grew:
            return MatmulTiles(ti, tj, tk)


# --------------------------------------------------------------------------------------------------
# tiled_conv_auto


@dataclass(frozen=True)
class ConvGeometry:
    """What tiled_conv_auto's row counts depend on (per axis: rows, cols)."""

    stride: tuple[int, int] = (1, 1)
    kernel_dilation: tuple[int, int] = (1, 1)
    input_dilation: int = 1
    downsample: bool = False
    pool_size: int = 1  # 1 / 1: no pooling (the contract's layers have none)
    pool_stride: int = 1


ARG_NAMES = ("batches", "orows", "ocols", "ochs", "krows", "kcols", "kchs")


def conv_rows(args: tuple[int, ...] | list[int], g: ConvGeometry, dim: int) -> tuple[int, int]:
    """(scratchpad rows, accumulator rows) of a conv tile, as gemmini.h's tiled_conv_total_spad_rows
    counts them (non-transposed inputs and weights)."""
    batches, porows, pocols, ochs, krows, kcols, kchs = args
    orows = porows * g.pool_stride + g.pool_size - 1
    ocols = pocols * g.pool_stride + g.pool_size - 1
    krows_d = krows + (g.kernel_dilation[0] - 1) * (krows - 1)
    kcols_d = kcols + (g.kernel_dilation[1] - 1) * (kcols - 1)
    irows = orows * g.stride[0] + krows_d - 1  # gemmini.h's count: one more than the halo at stride 2
    icols = ocols * g.stride[1] + kcols_d - 1
    irows = _ceil(irows, g.input_dilation)
    icols = _ceil(icols, g.input_dilation)
    ich_blocks = _ceil(kchs, dim)
    och_blocks = _ceil(ochs, dim)
    a_rows = ich_blocks * batches * (irows >> g.downsample) * (icols >> g.downsample)
    b_rows = och_blocks * kcols * krows * kchs
    c_rows = och_blocks * batches * orows * ocols
    return a_rows + b_rows, c_rows


def conv_tiles(
    batch: int, out_rows: int, out_cols: int, out_ch: int, k_rows: int, k_cols: int, in_ch: int,
    geometry: ConvGeometry, dim: int, spad_rows: int, acc_rows: int,
) -> tuple[int, int, int, int, int, int, int]:
    """tiled_conv_auto's tile (batches, orows, ocols, ochs, krows, kcols, kchs)."""
    return conv_tile_search(batch, out_rows, out_cols, out_ch, k_rows, k_cols, in_ch, geometry, dim, spad_rows,
                            acc_rows)[0]


def conv_tile_search(
    batch: int, out_rows: int, out_cols: int, out_ch: int, k_rows: int, k_cols: int, in_ch: int,
    geometry: ConvGeometry, dim: int, spad_rows: int, acc_rows: int,
) -> tuple[tuple[int, int, int, int, int, int, int], int]:
    """tiled_conv_auto's tile and how many candidate tiles its search sized on the way (each one evaluation of
    gemmini.h's tiled_conv_total_spad_rows for the scratchpad and one for the accumulator): the search runs on the
    host every time tiled_conv_auto is called, so it is part of what the call costs (`tileplan.cost.gemmini`)."""
    max_spad, max_acc = spad_rows // 2, acc_rows // 2
    args = [batch, out_rows, out_cols, out_ch, k_rows, k_cols, in_ch]
    max_args = list(args)
    orows_i, ocols_i, och_i, ich_i = 1, 2, 3, 6
    evaluations = 0

    def fits(a: list[int]) -> bool:
        nonlocal evaluations
        evaluations += 1
        s, c = conv_rows(a, geometry, dim)
        return s <= max_spad and c <= max_acc

    while not fits(args):
        if all(a <= 1 for a in args):
            raise MappingInfeasible(
                "gemmini-auto: even a 1x1x1 conv tile overflows half the scratchpad or accumulator"
            )
        best_val, best = -1, -1
        for i, a in enumerate(args):
            if i == ocols_i and a <= dim and args[orows_i] > 1:
                continue  # keep the array's rows busy: shrink ocols last
            if a > best_val:
                best_val, best = a, i
        if best in (och_i, ich_i):
            args[best] = (args[best] // dim) * dim if args[best] % dim else args[best] - dim
            args[best] = max(args[best], 1)
        else:
            args[best] -= 1

    while args[ocols_i] + 1 <= max_args[ocols_i]:
        cand = list(args)
        cand[ocols_i] += 1
        if not fits(cand):
            break
        args = cand

    grew = True
    while grew:
        grew = False
        for i in range(len(args)):
            cand = list(args)
            cand[i] += 1
            if cand[i] > max_args[i]:
                continue
            if fits(cand):
                args = cand
                grew = True
    return tuple(args), evaluations  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------------
# Problem -> tiles -> contract Mapping


def is_matmul(problem: Problem) -> bool:
    """Matmuls (P=M, C=K, K=N; everything else 1) go through tiled_matmul_auto. A 1x1, stride-1 conv
    of one output column and batch 1 is the same problem and is tiled the same way."""
    d = problem.dims
    return d["N"] == d["G"] == d["Q"] == d["R"] == d["S"] == 1 and problem.stride == (1, 1)


def is_downsample(problem: Problem) -> bool:
    """gemmini.h's strided 1x1 fast path (stride 2, kernel 1, no padding, even input). The Problem has
    no padding or input size: a 1x1 kernel never needs padding, and an even input is assumed."""
    d = problem.dims
    return d["R"] == d["S"] == 1 and problem.stride == (2, 2)


@dataclass
class _Split:
    """One dimension: its spatial factor, per-tile temporal factor and number of tiles."""

    spatial: int
    temporal: int
    tiles: int

    @property
    def tile(self) -> int:
        return self.spatial * self.temporal

    @property
    def padded(self) -> int:
        return self.tile * self.tiles


def _split(total: int, tile: int, width: int | None, balanced: bool) -> _Split:
    """`total` cut into ceil(total / tile) tiles. `width`: the dimension lies on an array axis that
    wide (C on the rows, K on the columns): up to `width` unrolled, beyond that whole blocks of
    `width`, each pass using ceil(tile / passes) of the axis. `balanced`: every tile gets
    ceil(total / tiles), so the grid covers the dimension like Gemmini's full tiles plus its smaller
    last tile do; otherwise every tile is written at Gemmini's full tile size."""
    tiles = _ceil(total, tile)
    if balanced:
        tile = _ceil(total, tiles)
    if width is None:
        return _Split(1, tile, tiles)
    if tile <= width:
        return _Split(tile, 1, tiles)
    blocks = _ceil(tile, width)
    # As many array passes (blocks) as Gemmini makes; the channels spread evenly over them, so a tile
    # of 56 on 16 rows is 4 x 14 (4 blocks, like Gemmini's 16+16+16+8) and not a padded 4 x 16.
    return _Split(_ceil(tile, blocks), blocks, tiles)


@dataclass(frozen=True)
class GemminiPlan:
    """gemmini-auto's decision for one problem: which routine, its tile, and the contract Mapping."""

    routine: str  # "tiled_matmul_auto" | "tiled_conv_auto"
    tile: dict[str, int]  # the routine's own tile variables (DIM blocks for matmuls)
    mapping: Mapping
    calls: int  # loop_ws / loop_conv_ws invocations (= tiles in the grid)
    notes: tuple[str, ...]
    resized: bool = False  # the downsample-sized tile overflowed the checker; re-sized as a plain conv


GRIDS = ("balanced", "literal")


def plan_gemmini(
    problem: Problem, shape: GemminiShape, grid: str = "balanced", downsample: bool | None = None,
    tiles: tuple[int, ...] | None = None,
) -> GemminiPlan:
    """Gemmini's tile for `problem` and its contract Mapping.

    grid "literal": every tile at Gemmini's tile size, the grid padded up to whole tiles (the last,
    partial tile is written as a full one, which can double a dimension: 256 channels in tiles of 240
    become 480). grid "balanced" (default): the same number of tiles per dimension (the same loop calls,
    loop order and per-tile structure), each ceil(bound / tiles) wide, so the padded bounds stay within
    a DIM block or a tile count of the real ones and the cost model sees about the work Gemmini does.
    `tiles`: a tile gemmini.h chose elsewhere (e.g. recorded with a measurement), instead of computing it:
    (tile_I, tile_J, tile_K) DIM blocks for a matmul, tiled_conv_auto's (batches, orows, ocols, ochs, krows,
    kcols, kchs) for a convolution.
    """
    if grid not in GRIDS:
        raise ValueError(f"grid must be one of {GRIDS}")
    bal = grid == "balanced"
    d = problem.dims
    dim = shape.dim
    arch = shape.arch
    n = len(arch.levels)
    temporal: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    spatial: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    notes: list[str] = []

    if is_matmul(problem):
        m, k, nn = d["P"], d["C"], d["K"]
        t = matmul_tiles(m, nn, k, dim, shape.spad_rows, shape.acc_rows) if tiles is None else MatmulTiles(*tiles)
        # Rows of A stream through the array (one per cycle), so M needs no padding to DIM; C and K lie on
        # the array's rows and columns and are processed in DIM blocks.
        splits = {
            "P": _split(m, min(t.tile_i * dim, m), None, bal),
            "C": _split(k, min(t.tile_k * dim, _ceil(k, dim) * dim), dim, bal),
            "K": _split(nn, min(t.tile_j * dim, _ceil(nn, dim) * dim), dim, bal),
        }
        p, c, kk = splits["P"], splits["C"], splits["K"]
        # loop_ws: j outer, k, i inner (a weight block is preloaded, A rows stream under it).
        temporal[shape.acc] = [("P", p.temporal), ("C", c.temporal), ("K", kk.temporal)]
        # tiled_matmul_outer: i0 -> j0 -> k0, k0 innermost.
        temporal[shape.dram] = [("C", c.tiles), ("K", kk.tiles), ("P", p.tiles)]
        routine = "tiled_matmul_auto"
        tile = {"tile_I": t.tile_i, "tile_J": t.tile_j, "tile_K": t.tile_k}
        calls = p.tiles * c.tiles * kk.tiles
        if kk.tiles > 1 and p.tiles > 1 and c.tiles == 1:
            notes.append(
                "gemmini.h reloads an A tile for every j0 unless A is whole; the loop-nest model credits its "
                f"reuse across j0 here, so DRAM reads of A are under-counted up to {kk.tiles}x"
            )
    else:
        ds = is_downsample(problem) if downsample is None else downsample
        geom = ConvGeometry(stride=problem.stride, kernel_dilation=problem.dilation, downsample=ds)
        args = tiles if tiles is not None else conv_tiles(
            d["N"], d["P"], d["Q"], d["K"], d["R"], d["S"], d["C"], geom, dim, shape.spad_rows, shape.acc_rows
        )
        b, orows, ocols, ochs, krows, kcols, kchs = args
        splits = {
            "N": _split(d["N"], b, None, bal),
            "P": _split(d["P"], orows, None, bal),
            "Q": _split(d["Q"], ocols, None, bal),
            "K": _split(d["K"], ochs, dim, bal),
            "R": _split(d["R"], krows, None, bal),
            "S": _split(d["S"], kcols, None, bal),
            "C": _split(d["C"], kchs, dim, bal),
        }
        s = splits
        # loop_conv_ws inside a tile: och, krow, kcol, kch, b, orow, ocol (ocol innermost).
        temporal[shape.acc] = [
            ("Q", s["Q"].temporal), ("P", s["P"].temporal), ("N", s["N"].temporal), ("C", s["C"].temporal),
            ("S", s["S"].temporal), ("R", s["R"].temporal), ("K", s["K"].temporal),
        ]
        # tiled_conv: b -> porow -> pocol -> poch -> krow -> kcol -> kch (kch innermost); groups outside.
        temporal[shape.dram] = [
            ("C", s["C"].tiles), ("S", s["S"].tiles), ("R", s["R"].tiles), ("K", s["K"].tiles),
            ("Q", s["Q"].tiles), ("P", s["P"].tiles), ("N", s["N"].tiles), ("G", d["G"]),
        ]
        routine = "tiled_conv_auto"
        tile = dict(zip(ARG_NAMES, args))
        calls = d["G"] * math.prod(x.tiles for x in splits.values())
        if d["G"] > 1:
            notes.append(f"groups: tiled_conv_auto has no groups; one call sequence per group ({d['G']} groups)")
        if ds:
            notes.append("stride-2 1x1 conv: sized by gemmini.h's downsample path (inputs loaded at stride 2)")

    spatial[shape.acc] = [("C", splits["C"].spatial)]
    spatial[shape.spad] = [("K", splits["K"].spatial)]
    padded = {dname: sp.padded for dname, sp in splits.items() if sp.padded != d[dname]}
    db = {}
    if arch.levels[shape.acc].buffer_count == 2:
        db[arch.levels[shape.acc].name] = ["O"]
    if arch.levels[shape.spad].buffer_count == 2:
        db[arch.levels[shape.spad].name] = ["I", "W"]
    mapping = build_mapping(arch, temporal, spatial, padded_dims=padded, double_buffered=db)

    notes.insert(0, f"{routine}: tile {tile}, {calls} loop call(s), {grid} grid")
    if padded:
        ratio = math.prod(padded.get(x, d[x]) for x in d) / problem.macs
        notes.append(
            "padded bounds " + ", ".join(f"{x} {d[x]}->{v}" for x, v in sorted(padded.items()))
            + f" ({ratio:.2f}x the MACs)"
        )
    return GemminiPlan(routine, tile, mapping, calls, tuple(notes))


def gemmini_auto(problem: Problem, hw: HardwareDescriptor, dataflow: str | None = None, grid: str = "balanced") -> GemminiPlan:
    """plan_gemmini on the descriptor's Gemmini-shaped dataflow, checked. The contract's input tiles
    span the whole strided window, so a tile sized by gemmini.h's stride-2 1x1 downsample path (which
    loads every other pixel) can overflow the checker's count; it is then re-sized without that path."""
    shape = find_shape(hw, dataflow)
    if shape is None:
        where = f"dataflow {dataflow!r} of " if dataflow else ""
        raise InputError(
            ("options", "mapper"),
            "gemmini-auto needs a Gemmini-shaped weight-stationary hierarchy ([registers W] -> accumulator O "
            f"-> scratchpad I+W -> DRAM, square array); {where}{hw.name} is not",
        )
    plan = plan_gemmini(problem, shape, grid)
    violations = check_arch(problem, shape.arch, plan.mapping)
    if violations and not is_matmul(problem) and is_downsample(problem):
        plan = plan_gemmini(problem, shape, grid, downsample=False)
        plan = GemminiPlan(
            plan.routine, plan.tile, plan.mapping, plan.calls,
            plan.notes + ("the downsample-sized tile overflows the halo-exact input count; sized as a plain "
                          "strided conv instead",),
            resized=True,
        )
        violations = check_arch(problem, shape.arch, plan.mapping)
    if violations and plan.mapping.double_buffered:
        # gemmini.h sizes tiles by its own row count; the checker counts padded channels, which can put a
        # tile that fits half the scratchpad by gemmini.h's count a few percent over it twice. Such a
        # tile still runs, single buffered.
        single = plan.mapping.model_copy(update={"double_buffered": {}})
        if not check_arch(problem, shape.arch, single):
            plan = GemminiPlan(
                plan.routine, plan.tile, single, plan.calls,
                plan.notes + ("padded tile does not fit twice by the checker's count; single buffered",),
                resized=plan.resized,
            )
            violations = []
    if violations:
        raise MappingInfeasible(f"gemmini-auto: {'; '.join(violations)}")
    return plan


@register("gemmini-auto")
class GemminiAutoMapper:
    """Gemmini's own tiling heuristic (gemmini.h), the baseline Tileplan is compared against."""

    name = "gemmini-auto"
    version = "1"

    def map(self, problem: Problem, hw: HardwareDescriptor, options: MapperOptions) -> MapperResult:
        t0 = time.perf_counter()
        if options.dataflow is not None and options.dataflow not in hw.dataflow_names:
            raise InputError(("options", "dataflow"), f"unknown dataflow {options.dataflow!r}; {hw.name} has {hw.dataflow_names}")
        plan = gemmini_auto(problem, hw, options.dataflow)
        return MapperResult(
            mapping=plan.mapping,
            solver=SolverInfo(status="heuristic", seconds=time.perf_counter() - t0, candidates=1),
            notes=list(plan.notes),
        )
