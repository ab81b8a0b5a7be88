"""Gemmini-aware cycle model: how a mapping is *executed* on a Gemmini-like array, and what that costs.

Execution semantics (what the code generator emits and what the mapper must optimise)
---------------------------------------------------------------------------------------
One semantics for every door: POST /evaluate, the CLI, the SDK, the mappers, the benches and the calibration all
go through `gemmini_calls` (layer, hardware, mapping -> call features). A mapping on a Gemmini-like hierarchy
(registers -> output accumulator -> I/W scratchpad -> DRAM, see `gemmini_levels`) runs as ONE call of Gemmini's
software library per iteration of the DRAM-level loops:

* Convolutions run as `tiled_conv`: each call (`sp_tiled_conv`) hands one scratchpad tile to the
  `loop_conv_ws` hardware FSM. The tile sizes are the products of ALL factors below DRAM (temporal and
  spatial, registers included): batches, output rows (P), output cols (Q), output channels (K), kernel
  rows (R), kernel cols (S), input channels (C). Edge tiles are clipped to the layer.
* Layers with Q = R = S = 1 (FC / matmul) run as `tiled_matmul` (`loop_ws` FSM) with I = P, K = C,
  J = K, and tile sizes in DIM x DIM blocks: ceil(tile / DIM) blocks per dimension.
* Partial sums stay in the accumulator until the last reduction tile (C, R, S) of an output tile, which is
  the only call that moves outputs out (mvout, output type); the reduction loops run innermost at DRAM
  (tileplan.execution.call_loop_order). How factors are split among the levels below DRAM is ignored.
* Who runs the calls (`execution_from_mapping(..., executor)`): Gemmini's library ("library", the
  hand-written baseline) fetches each call's input and weight tiles from DRAM again, except that
  tiled_matmul keeps an operand whose tile is the whole matrix; Tileplan's generated code ("tileplan", what
  plans run as) keeps any tile the next call uses too. Then the DRAM loop order decides what is kept: output
  channels innermost keep the input tile, pixels innermost the weight tile (only when the calls cover the
  whole reduction; otherwise consecutive calls share nothing). Tileplan's code also folds adjacent kernel
  columns into the array rows when a convolution has few input channels (`kernel_fold`: conv1's 3 channels x
  5 columns fill 15 of 16 rows instead of 3). The FireSim runs are all library-style (no reuse, no fold)
  except the library's whole-matrix operands.
* The array: under the library, the part the mapping's spatial factors occupy (`occupied_array`: software
  built for the power of two covering them, as DOSA's harness did; a mapping that unrolls nothing gets the
  whole array); Tileplan's code uses the whole array. Input channels are blocked by its rows, output channels
  by its columns (`array_extent`, from the fan-outs), so a non-square array is never credited with more PEs
  than it has.
* Inside a call the FSM works in DIM-wide pieces: for every (output-channel block, kernel row, kernel col,
  input-channel block) it preloads one weight block and then issues one compute per (batch, output row,
  DIM consecutive output columns of that row): I = min(DIM, cols left) rows stream through the array, and a
  compute occupies it at least `compute_floor_dims` x DIM cycles. A tile with few output columns therefore
  wastes the array.
* DMA: the input tile moves as one row per input pixel (its C tile channels), weights as one row per
  (kernel row, kernel col, input channel) of the K tile, each row in mvin rows of up to 64 B (gemmini.h's
  MAX_BLOCK_LEN blocks side by side); outputs as one row per output pixel per DIM output channels. The DMA
  reads (writes) each such row as aligned power-of-two packets of at most 64 B (DMA.scala: StreamReader /
  StreamWriter), i.e. one request per 64-byte block the row touches: a channel tile that starts mid-block
  (the library's 624-channel tiles start at channel 624, byte 48 of a block) needs twice the requests of an
  aligned one (`_row_req`, averaged over the offsets the rows' stride cycles through). A layer's bias (or zeros) as one accumulator row per output pixel per DIM output channels on an
  output tile's first reduction call, only when the layer has a bias (Tileplan's code loads zeros the same way
  when it has none). Zero padding is not read from DRAM (the library makes it on chip); a strided 1x1
  convolution loads its whole strided window under the library (FireSim says so) and only the pixels it uses
  in Tileplan's code. DRAM runs at the DMA's peak (16 B per cycle) times a fitted efficiency; the descriptor's
  nominal DRAM figure is not used (`effective_dram_bandwidth`).
* The DMA reads and writes through the SoC's L2 (512 KiB on Gemmini's SoCs, `CostParams.l2_bytes`). The library
  refetches a tile call after call; a tensor that fits the L2 is still there at the next refetch, one larger than
  it has been evicted, so a request on it waits on DRAM, `dram_request_cycles` more, when its row is strided (a
  channel tile narrower than the tensor's rows; whole rows stream) (`_beyond_l2`; fitted: ~1 cycle; its effect on
  held-out error is in bench/results/costmodel.md). The FireSim image DOSA's runs used
  (firesim_rocket_singlecore_16pe4kdummygemmini_nofirstlayer_no_nic_l2_llc4mb_ddr3, charleshong3/firesim-dosa)
  models a 4 MiB last-level cache between the L2 and DDR3 (FASED's LLC model, `CostParams.llc_bytes`): a tensor
  larger than the L2 but not the LLC is refetched from the LLC, and `dram_request_cycles` is that wait; a strided
  request on a tensor larger than the LLC too goes to DRAM and waits `llc_miss_cycles` more (`far_req`; fitted:
  ~7 cycles against ~1), a strided store twice (`far_st_req`: the write-allocate L2 fetches the block before merging
  the write and writes it back dirty later, two DRAM transfers where a load makes one; no parameter of its own). A
  load of whole rows DRAM serves waits as long (`whole_far_reads`): every 64-byte block DRAM reads for a call's loads
  is one read (DMA.scala's StreamReader, one get per block), strided or not, so `far_bytes` / 64 reads (at least the
  strided loads of `far_req`, each one read however few bytes of its block it uses) wait `dram_request_cycles` +
  `llc_miss_cycles` and cross the memory bus (below); no parameter of its own. U-Net's 2-channel head reads its 9.6 MB
  input so: held out by network, with no other network to pin `dram_byte_cycles`, it was predicted 0.41x of FireSim,
  now 0.61x (costmodel_residuals.md, twelfth round). Beyond the LLC the DMA also cannot outrun DRAM (`far_bytes`): a call's DMA lasts at least
  the bytes DRAM reads for its loads x `dram_byte_cycles` (held at FireSim's measured DRAM rate, 5.5-8 B/cycle, by
  a prior: `calibrate.PRIORS`). A convolution's tile read again when a DRAM loop that does not index it comes back to
  it (the previous call's tile, a kernel tile that only shifts the input window, or a tile an outer loop returns to)
  is partly still in the caches (`_miss_shares`): both the L2 and the LLC model replace a random way, so a block
  survives the D bytes the calls in between touch with probability exp(-D / cache), D counting each tensor's rows in
  whole 64-byte blocks and a strided tile's own rows as its sets see them (rows a power-of-two pitch apart use a
  fraction of the sets: 16-byte weight rows 1 KiB apart take 64 of the L2's 1,024 sets); the share the L2 misses
  waits `dram_request_cycles` (`dram_req`), the share the LLC misses too waits `llc_miss_cycles` and is read by DRAM
  (`far_req`, `far_bytes`). No parameter of its own (ways, block and sizes are hardware facts); tiled_matmul keeps the
  previous call's rule (`_in_l2_across`). Counting the stores' fills and write-backs too, or a strided row's whole 64-byte blocks, did not
  improve both held-out splits (costmodel_residuals.md). A strided request DRAM serves (`far_req`) also brings its
  whole 64-byte block into the L2 over the SoC's memory bus (rocket-chip's MemoryBusParams: 8 bytes a beat, a beat a
  cycle, `CostParams.mem_bus_bytes`), and a strided store's block goes back out too (the L2 allocates on a write and
  writes the block back: `far_st_req`): a call's DMA lasts at least those blocks x 64 / mem_bus_bytes cycles
  (`refill_cycles`, no fitted parameter; the whole-row reads above too; the same bound on every strided request beyond the L2 fits much worse, so the
  L2 serves more of those than the size test says; the emulator has the same bound, refill_cycles). The emulator
  bounds its loads by DRAM's rate as well
  (`far_bytes` x `dram_byte_cycles`, gemmini_emu.c's count_far_load; 0 on every tensor within the LLC). The runs are bare-metal (machine mode, no
  virtual memory), so Gemmini's DMA TLB translates nothing and costs nothing here.
* Two calls are in flight (the FSM double-buffers the scratchpad and accumulator): the next call's loads
  overlap the current call's compute, so a call's work is about max(DMA, compute) + a fitted share of the
  shorter (one share for loop_conv_ws, one for loop_ws); the first call's loads and the last call's compute
  have nothing to hide behind (one average call's hidden share, once: loop_conv_ws waits for a call's loads
  before computing, loop_ws's first computes need A blocks of every row). The library always double buffers; Tileplan's code overlaps only what the
  plan double buffers (I+W in the scratchpad and O in the accumulator), otherwise a call's work is DMA + compute.
  Under the library, loop_conv_ws holds the two calls in two slots (LoopConv.scala, `concurrent_loops = 2`) and
  frees a slot only when its call has issued all its commands, so call i + 1's loads start when call i - 1's
  computes are done: each call's computes overlap the *next* call's DMA, not its own (`_slot_loop`, the `nx_*`
  columns). Where the innermost DRAM loop is a channel loop whose last tile is small (the library's 256 channels in
  tiles of 240 are 240 + 16), the large call's loads run beside the small call's short compute and are exposed; a
  call is paired with its successor in that loop (the last tile with the first: the loop starts again), and with
  itself everywhere else (calls next to each other alike). A switch, `CostParams.call_slots`, on in the shipped
  defaults (1; 0 pairs every call with itself): held out, refitted, it improves every MAPE, the library's runs most
  (costmodel_residuals.md, eleventh round).
  The emulator pairs library-stream convolution calls the same way when it is on (`timing_for`: call_slots).
* The host sets up and issues each call (loop bounds, addresses, the FSM's configuration) while the previous
  call runs, so a call lasts max(its work, the issue time) + whatever per-call cost nothing hides; the issue
  time of a tiled_conv call is about twice a tiled_matmul call's (FireSim: the smallest calls of the data set
  take ~275 and ~130 cycles however little they move). A layer also pays, once, its first load's and last
  store's latency and the closing fence.
* Gemmini's own tiler (executor "library-auto": tiled_conv_auto) searches for its tile on the host inside the
  run, before the first call and with the accelerator idle: every candidate it sizes costs two evaluations of
  tiled_conv_total_spad_rows (`tile_search_evaluations`, counted by replaying the search in
  tileplan.mappers.gemmini_auto). Layers whose channels shrink 16 at a time from 2048 size ~1,000 candidates,
  as many cycles as the accelerator's own work on a 7x7 layer (FireSim: the library's runs of small layers take
  up to twice what their calls cost). tiled_matmul_auto's search is a few candidates and is not counted.
* Loop iterators are 16-bit: a tile whose input window lies entirely in the zero padding (possible only
  with padded convolutions and kernel tiles no taller/wider than the stride) makes the input loader count
  ~2^16 rows, a pathological DMA storm that the model reproduces.

DOSA's FireSim runs (the calibration data) were made by a harness around a fork of that library whose
matmul tiles are elements/16 blocks of a software block size ("pe_dim", the power of two covering the
spatial factors), whose convolutions are square with padding R/2 and which ran without bias;
`tileplan.cost.firesim` reads those runs into what a user sends (DOSA's Timeloop-style YAML, the layer the
harness ran, a Mapping whose tiles are what ran), so the model has no path of its own for them.

All mapping-dependent quantities are gathered in per-call feature rows (`CallFeatures`, with
multiplicities) that are independent of the parameters, so the cycle formula is a few numpy operations,
vectorisable over the whole data set for calibration.
"""

from __future__ import annotations

import collections.abc as abc
import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from tileplan import emittable as _emittable
from tileplan.cost.params import DEFAULT_PARAMS, CostParams
from tileplan.dims import DIMS
from tileplan.execution import (
    array_extent,
    call_loop_order,
    gemmini_levels,
    occupied_array,
)
from tileplan.hardware import Architecture
from tileplan.mapping import Mapping
from tileplan.problem import Problem

ITERATOR_BITS = 16  # loop_conv_ws address/iterator registers (hardware fact)
REQUEST_BYTES = 64  # largest DMA request (hardware fact)
CACHE_WAYS = 8  # ways of the SoC's L2 (rocket-chip's InclusiveCache, 512 KiB, 8 ways) and of the LLC model behind it
ACC_BYTES = 4  # an accumulator element (int32)
REDUCTION_DIMS = ("R", "S", "C")
# The dimensions that index each operand tile: a call needs a new tile when one of them moves.
OPERAND_DIMS = {"I": frozenset("NGPQCRS"), "W": frozenset("GKCRS")}


@dataclass(frozen=True)
class LibraryTerms:
    """What a mapper must see of the library execution above, for a Gemmini-like descriptor: every
    iteration of the DRAM loops is one call that reloads its input and weight tiles (no reuse across
    calls), outputs leave once, and each call lasts at least its issue time (`call_floor`, `call_floor_matmul`)
    and pays a fixed cost, DMA requests per row and bytes at the effective DRAM bandwidth."""

    top: int  # DRAM level: one library call per iteration of its loops
    tile_level: int  # the scratchpad: tiles are everything at and below it
    dim: int
    call_cycles: float
    call_floor: float
    call_floor_matmul: float
    request_cycles: float
    op_cycles: float
    cycles_per_byte: float
    output_bytes: float
    request_elems: float  # input/weight elements one DMA request carries (64 B)


def nominal_dram_bandwidth(arch: Architecture) -> float:
    """Bytes per cycle the descriptor gives its backing store (read, else write; else one DIM-row per cycle)."""
    dram = arch.levels[-1]
    return dram.read_bandwidth or dram.write_bandwidth or float(arch.hardware.pe_array.rows)


def effective_dram_bandwidth(nominal, p):  # type: ignore[no-untyped-def]
    """Sustained DMA throughput (bytes/cycle): the DMA's peak x its fitted efficiency, whatever the descriptor's
    DRAM figure says. Timeloop-style files give Gemmini's DRAM a nominal rate (DOSA's say 8 B/cycle) that is a
    guess of this effective rate, not a measurement: FireSim sustains ~9.8 B/cycle on the same chips, so the
    calibrated model uses the measured rate (a descriptor models another memory system through its
    `cost_params`: dma_bytes_per_cycle, dram_efficiency). `nominal` (kept as a feature column for the notes)
    may be a numpy column; the answer has its shape."""
    return np.zeros_like(np.asarray(nominal, dtype=float)) + p["dma_bytes_per_cycle"] * p["dram_efficiency"]


def library_terms(arch: Architecture, params: CostParams) -> LibraryTerms | None:
    levels = gemmini_levels(arch)
    if levels is None:
        return None
    bw = float(effective_dram_bandwidth(nominal_dram_bandwidth(arch), params.as_dict()))
    return LibraryTerms(
        top=levels[2],
        tile_level=levels[1],
        dim=arch.hardware.pe_array.rows,
        call_cycles=params.call_overhead_cycles,
        call_floor=params.call_floor_cycles,
        call_floor_matmul=params.call_floor_matmul,
        request_cycles=params.dma_request_cycles,
        op_cycles=params.op_overhead_cycles,
        cycles_per_byte=1.0 / bw,
        output_bytes=arch.output_bytes,
        request_elems=REQUEST_BYTES / arch.input_bytes,
    )


@dataclass(frozen=True)
class Execution:
    """One layer as the Gemmini library runs it: loop bounds, tile sizes and steps of the DRAM loops."""

    kind: str  # "conv" (tiled_conv / loop_conv_ws) or "matmul" (tiled_matmul / loop_ws)
    dim: int  # software DIM: rows = cols of the array unless dim_c / dim_k say otherwise
    # conv geometry (matmul: out_h = I rows, c = K, k = J)
    batch: int
    groups: int
    out_h: int
    out_w: int
    k: int
    c: int
    r: int
    s: int
    stride: tuple[int, int]
    pad: tuple[int, int]
    in_h: int
    in_w: int
    # tile sizes (elements; matmul: blocks of DIM for i/j/k)
    t_n: int
    t_h: int
    t_w: int
    t_k: int
    t_c: int
    t_r: int
    t_s: int
    k_step: int  # step of the output-channel DRAM loop (= t_k for the standard library)
    c_step: int  # step of the input-channel DRAM loop (= t_c for the standard library)
    in_bytes: float = 1.0
    out_bytes: float = 1.0
    # Calls overlap (next loads and last stores hide behind compute) only when the scratchpad double
    # buffers I and W and the accumulator double buffers O; the library always does.
    overlapped: bool = True
    # The first reduction call of each output tile loads its accumulator rows (a bias, broadcast from one DRAM row
    # per mvin of up to DIM rows; Tileplan's code loads zeros the same way when a layer has none). The DOSA
    # harness ran without bias (NO_BIAS), so its runs skip that load.
    bias: bool = True
    # Tiles kept between calls: with `reuse`, a call whose input (weight) tile is the one the previous call
    # used does not load it again (Tileplan's generated code; the library does it only for tiled_matmul's
    # whole-matrix operands). `order` = the DRAM loops, outermost first, in canonical dimensions (a matmul's
    # rows are "P", its columns "K", its reduction "C"), as tileplan.execution.call_loop_order gives them.
    order: tuple[str, ...] = ()
    reuse: bool = False
    # Kernel columns folded into the array rows (Tileplan's code, few input channels; see kernel_fold): 1 = none.
    fold: int = 1
    # The occupied array (`occupied_array`): rows carry input channels (C), columns output channels (K); `dim` is
    # the software DIM (the longest row piece one compute instruction streams). 0: a square dim x dim array.
    dim_c: int = 0
    dim_k: int = 0
    # Candidate tiles the host sizes before the first call (tiled_conv_auto's search for its tile, inside the run:
    # executor "library-auto"); 0 when the tile is given (tiled_conv, Tileplan's code).
    search: int = 0
    # The SoC's shared L2 (bytes): the DMA's requests go through it, so a tensor that fits is refetched from it and
    # one that does not from DRAM (`l2_bytes` in CostParams, a hardware fact).
    l2_bytes: float = DEFAULT_PARAMS.l2_bytes
    # The last-level cache behind the L2 (`llc_bytes`): a tensor larger than it too is served by DRAM.
    llc_bytes: float = DEFAULT_PARAMS.llc_bytes
    # Elements between consecutive weight rows in DRAM (0: the layer's K, the weights as the caller lays them out;
    # Tileplan's kernels read a copy padded to the tile grid, rows K_p apart: tileplan.codegen.schedule.model_cycles)
    w_row: int = 0
    # Elements between consecutive output pixels the stores write (0: the layer's NHWC output, all groups' channels
    # per pixel; Tileplan's kernels that cannot store into the caller's output write a padded copy [N, G, P, Q, K_p],
    # pixels K_p apart: tileplan.codegen.schedule.model_cycles)
    o_row: int = 0
    # Kernel dilation (rows, columns): tap r of an output row p reads input row p x stride + r x dilation, so a call's
    # window of t_r taps spans (t_r - 1) x dilation + 1 more rows than its output rows need (`_axis`)
    dilation: tuple[int, int] = (1, 1)
    # Elements between consecutive input pixels in DRAM (0: the layer's C; a convolution's kernel reads its input from
    # a copy padded to the tile grid, pixels C_p apart: tileplan.codegen.schedule.model_cycles)
    i_row: int = 0
    # Whether the accumulator initialisation (`bias`) reads a bias: a layer without one has its rows zero-filled
    # (Tileplan's code: mvins from address 0, which Gemmini's DMA serves as requests that read no bytes)
    bias_bytes: bool = True

    @property
    def rows(self) -> int:
        return self.dim_c or self.dim

    @property
    def cols(self) -> int:
        return self.dim_k or self.dim


EXECUTORS = ("tileplan", "library", "library-auto")


def kernel_fold(dim: int, c: int, t_c: int, t_s: int, dilation_w: int) -> int:
    """Kernel columns Tileplan's code folds into one weight block (1: none): `tileplan.emittable.kernel_fold`, the
    rule the code generator and the planner share. With few input channels a weight-stationary array idles most of
    its DIM rows (conv1's 3 channels use 3 of 16); the input channels of f consecutive kernel columns are one
    contiguous run of the (padded, NHWC) input row, so one mvin row carries all of them and one preload covers
    f x C array rows."""
    return _emittable.kernel_fold(dim, c, t_c, t_s, dilation_w)


def library_matmul_keeps(whole_rows: bool, whole_cols: bool, whole_reduction: bool) -> tuple[tuple[str, ...], bool]:
    """(order, reuse) of a tiled_matmul call sequence: it keeps A across j0 only when A is the whole matrix (one
    row tile, one reduction tile) and B across i0 only when B is; otherwise every call reloads both. Expressed in
    the general rule (`_kept_across`): the kept operand's loop outermost."""
    order = ("P", "K", "C") if whole_rows else ("K", "P", "C")
    return order, whole_reduction and (whole_rows or whole_cols)


def runs_as_matmul(problem: Problem) -> bool:
    """Whether the model costs a layer as tiled_matmul calls (loop_ws: Q = R = S = 1, e.g. an FC layer or a 1x1
    convolution on a one-pixel map) rather than tiled_conv calls; the emulator times such a layer's calls the same
    way (`tileplan.codegen.pipeline.timing_for`)."""
    d = problem.dims
    return d["Q"] == 1 and d["R"] == 1 and d["S"] == 1


def execution_from_mapping(
    problem: Problem, arch: Architecture, mapping: Mapping, executor: str | None = None
) -> Execution:
    """How a mapping runs (tiles = everything below DRAM): `executor="tileplan"` is Tileplan's generated code
    (library-style calls in the plan's DRAM order, reductions innermost, tiles kept while consecutive calls
    share them); "library" is Gemmini's own tiled_conv / tiled_matmul (tiled_matmul keeps an operand only when
    its tile is the whole matrix: loops i, j, k with k innermost), the baseline every plan is compared with.
    Unset: the mapping's own `executor`, else the library (a bare mapping runs on the hardware's software).

    The same for every door (API, CLI, SDK, benches, calibration): under the library the array is the part the
    mapping's spatial factors occupy (`occupied_array`: Gemmini's software built for that array, as DOSA's harness
    did), while Tileplan's code, generated for the hardware, works in blocks of the whole array; the library always double buffers (loop_ws / loop_conv_ws), so its calls
    always overlap, while Tileplan's code overlaps only what the plan double buffers; the accumulator is loaded
    with a bias only when the layer has one (Tileplan's code loads zeros the same way when it has none)."""
    executor = executor or mapping.executor or "library"
    levels = gemmini_levels(arch)
    top = len(mapping.levels) - 1 if levels is None else levels[2]
    tile = {d: 1 for d in DIMS}
    for lv in mapping.levels[:top]:
        for d, f in lv.temporal:
            tile[d] *= f
        for d, f in lv.spatial:
            tile[d] *= f
    occupied = occupied_array(arch, mapping) if levels is not None and executor in ("library", "library-auto") else None
    return execution_from_tiles(problem, arch, tile, mapping.levels[top].temporal, mapping.double_buffered, executor,
                                occupied)


def execution_from_tiles(
    problem: Problem,
    arch: Architecture,
    tile: dict[str, int],
    dram_temporal: abc.Sequence[tuple[str, int]],
    double_buffered: abc.Mapping[str, abc.Sequence[str]],
    executor: str,
    occupied: tuple[int, int, int] | None = None,
) -> Execution:
    """`execution_from_mapping` from what it reads of a mapping: the call tile (per dimension, the product of the
    factors below DRAM), the DRAM level's loops and the double buffering, and for the library on Gemmini-like
    hardware the occupied array (`occupied_array`). Mappers that rank thousands of tilings (retile) keep an
    `ExecutionBuilder` instead, which works out what does not depend on the tiling once."""
    return ExecutionBuilder(problem, arch, executor, occupied).build(tile, dram_temporal, double_buffered)


class ExecutionBuilder:
    """`execution_from_tiles` for one layer, hardware and executor (and occupied array): what depends on those
    alone (geometry, array, padding, bias, the L2, the library's tile search) is worked out once, in `__init__`;
    `build` adds a tiling's call tile, DRAM loops and double buffering."""

    def __init__(self, problem: Problem, arch: Architecture, executor: str,
                 occupied: tuple[int, int, int] | None = None) -> None:
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor {executor!r}; use one of {EXECUTORS}")
        auto = executor == "library-auto"  # the library's own tiler picked the tile, at run time
        executor = "library" if auto else executor
        self.problem, self.arch, self.executor = problem, arch, executor
        levels = gemmini_levels(arch)
        dims = self.dims = problem.dims
        if levels is None:
            dim = dim_c = dim_k = arch.hardware.pe_array.rows
        elif executor == "tileplan":
            # Tileplan's code is generated for the array it runs on: DIM-wide blocks of the whole array
            dim_c, dim_k = array_extent(arch)
            dim = max(dim_c, dim_k)
        else:
            if occupied is None:
                raise ValueError("the library's execution on Gemmini-like hardware needs the occupied array")
            dim, dim_c, dim_k = occupied
        self.dim, self.dim_c, self.dim_k = dim, dim_c, dim_k
        # Calls overlap only when the scratchpad double buffers I and W and the accumulator O (Tileplan's code)
        self.db_levels = (None if levels is None or executor != "tileplan"
                          else (arch.levels[levels[1]].name, arch.levels[levels[0]].name))
        self.bias = problem.bias or executor == "tileplan"
        self.bias_bytes = bool(problem.bias)
        self.l2 = CostParams.for_descriptor(arch.hardware).l2_bytes
        self.llc = CostParams.for_descriptor(arch.hardware).llc_bytes
        self.kind = "matmul" if runs_as_matmul(problem) else "conv"
        sh, sw = problem.stride
        dh, dw = problem.dilation
        in_h = (dims["P"] - 1) * sh + (dims["R"] - 1) * dh + 1
        in_w = (dims["Q"] - 1) * sw + (dims["S"] - 1) * dw + 1
        # Gemmini's library makes the zero padding on chip (the loaders skip it, and a window wholly inside it makes
        # the 16-bit iterator wrap); Tileplan's code runs on an input the host has padded.
        pad = problem.padding if executor == "library" else (0, 0)
        if any(pad):
            in_h, in_w = problem.in_hw or (max(1, in_h - 2 * pad[0]), max(1, in_w - 2 * pad[1]))
        if dims["R"] == 1 and dims["S"] == 1 and (sh, sw) != (1, 1) and executor == "tileplan":
            # A strided 1x1 conv reads only every stride-th pixel in Tileplan's generated code, i.e. runs a stride-1
            # conv over the subsampled input. Gemmini's library, as FireSim measured it, loads the whole strided
            # window (every strided 1x1 layer of both data sets runs 1.5-3x slower than the subsampled load
            # predicts, under DOSA's mappings and the library's own tiles alike; costmodel.md, "Readings").
            sh = sw = 1
            in_h, in_w = dims["P"], dims["Q"]
            pad = (0, 0)
        self.dw = dw
        self.dim_bounds = tuple(dims[d] for d in DIMS)
        self._orders: dict[tuple[str, ...], tuple[str, ...]] = {}
        # every field but those a tiling sets (`build`'s `varying`)
        self._fixed: dict[str, Any]
        if self.kind == "matmul":
            self._fixed = dict(
                kind="matmul", dim=dim, batch=dims["N"], groups=dims["G"], out_h=dims["P"], out_w=1, k=dims["K"],
                c=dims["C"], r=1, s=1, stride=(1, 1), pad=(0, 0), in_h=dims["P"], in_w=1, t_n=1, t_w=1, t_r=1, t_s=1,
                k_step=0, c_step=0, in_bytes=arch.input_bytes, out_bytes=arch.output_bytes, bias=self.bias,
                bias_bytes=self.bias_bytes, dim_c=dim_c, dim_k=dim_k, l2_bytes=self.l2, llc_bytes=self.llc,
            )
        else:
            self._fixed = dict(
                search=tile_search_evaluations(problem, arch) if auto else 0,
                kind="conv", dim=dim, batch=dims["N"], groups=dims["G"], out_h=dims["P"], out_w=dims["Q"], k=dims["K"],
                c=dims["C"], r=dims["R"], s=dims["S"], stride=(sh, sw), pad=pad, in_h=in_h, in_w=in_w, dilation=(dh, dw),
                in_bytes=arch.input_bytes, out_bytes=arch.output_bytes, bias=self.bias, reuse=executor == "tileplan",
                bias_bytes=self.bias_bytes, dim_c=dim_c, dim_k=dim_k, l2_bytes=self.l2, llc_bytes=self.llc,
            )
        self._template: dict[str, Any] | None = None

    def overlapped(self, double_buffered: abc.Mapping[str, abc.Sequence[str]]) -> bool:
        if self.db_levels is None:
            return True
        spad, acc = self.db_levels
        return {"I", "W"} <= set(double_buffered.get(spad, [])) and "O" in double_buffered.get(acc, [])

    def build(self, tile: abc.Mapping[str, int], dram_temporal: abc.Sequence[tuple[str, int]],
              double_buffered: abc.Mapping[str, abc.Sequence[str]]) -> Execution:
        dims = self.dims
        loops = tuple([d for d, _ in dram_temporal])
        order = self._orders.get(loops)
        if order is None:  # (a layer's tilings share a few DRAM orders)
            order = self._orders[loops] = tuple(call_loop_order(dram_temporal, DIMS, REDUCTION_DIMS))
        tile = {d: t if t <= n else n for d, t, n in zip(DIMS, map(tile.__getitem__, DIMS), self.dim_bounds)}
        overlapped = self.overlapped(double_buffered)
        dim, dim_c, dim_k = self.dim, self.dim_c, self.dim_k
        varying: dict[str, Any]
        if self.kind == "matmul":
            if self.executor == "library":
                mm_order, reuse = library_matmul_keeps(
                    tile["P"] >= dims["P"] and tile["N"] >= dims["N"], tile["K"] >= dims["K"], tile["C"] >= dims["C"]
                )
            else:
                # batch and rows are one row dimension here; the generated code runs them as two loops, so only
                # claim reuse when at most one of them has several tiles
                rows = [d for d in order if d in ("N", "P") and dims[d] > 1][:1]
                mm_order = tuple("P" if d == "N" else d for d in order if d in ("G", "K", "C") or d in rows)
                reuse = dims["N"] == 1 or dims["P"] == 1
            varying = {"t_h": -(-tile["P"] * tile["N"] // dim), "t_k": -(-tile["K"] // dim_k),
                       "t_c": -(-tile["C"] // dim_c), "overlapped": overlapped, "order": mm_order, "reuse": reuse}
        else:
            varying = {
                "t_n": tile["N"], "t_h": tile["P"], "t_w": tile["Q"], "t_k": tile["K"], "t_c": tile["C"],
                "t_r": tile["R"], "t_s": tile["S"], "k_step": tile["K"], "c_step": tile["C"], "overlapped": overlapped,
                "order": order,
                "fold": kernel_fold(dim_c, dims["C"], tile["C"], tile["S"], self.dw) if self.executor == "tileplan" else 1,
            }
        if self._template is None:
            e = Execution(**self._fixed, **varying)
            self._template = dict(e.__dict__)
            return e
        # The object Execution(**self._fixed, **varying) is (a frozen dataclass without __post_init__: its fields are
        # its __dict__), without the ~35 object.__setattr__ calls of its __init__: retile builds tens of thousands
        e = object.__new__(Execution)
        e.__dict__.update(self._template)
        e.__dict__.update(varying)
        return e


def tile_search_evaluations(problem: Problem, arch: Architecture) -> int:
    """Candidate tiles tiled_conv_auto sizes on the host before its first call (0 when the hardware is not a square
    Gemmini, whose library has no such tiler). The search (gemmini.h, tiled_conv_auto: shrink the largest
    argument until the tile fits half the scratchpad and accumulator, then grow each argument by one while it
    fits) evaluates tiled_conv_total_spad_rows twice per candidate, divisions included, on the in-order core,
    while the accelerator idles: for a layer whose channels must shrink by DIM at a time from 2048 that is ~1,000
    candidates, as long as the accelerator's own work on a 7x7 layer."""
    from tileplan.mappers.gemmini_auto import ConvGeometry, conv_tile_search, gemmini_shape

    shape = gemmini_shape(arch)
    if shape is None:
        return 0
    d = problem.dims
    geometry = ConvGeometry(stride=problem.stride, kernel_dilation=problem.dilation)
    return conv_tile_search(d["N"], d["P"], d["Q"], d["K"], d["R"], d["S"], d["C"], geometry, shape.dim,
                            shape.spad_rows, shape.acc_rows)[1]


# Per-call feature columns (all counts per call; `count` = how many calls share the row). `search` is a per-run
# quantity (the host's tile search before the first call), carried by a run's first row and not multiplied by
# `count`. `dram_req`: the DMA requests (of ld_req and st_req) on tensors larger than the L2 (`_beyond_l2`).
# `block_req`: store requests that wait behind earlier ones of their mvout to the same 64-byte block (`_store_chain`).
# `far_req`: the requests of `dram_req` on tensors larger than the LLC too (`_beyond_l2` at llc_bytes).
# `far_st_req`: the store requests among `far_req` (a write-allocate L2 moves their block twice: `refill_cycles`).
# The DMA columns of a call (what `_dma_cycles` reads), and the same of the call whose loads overlap this call's
# computes in loop_conv_ws's two call slots (`nx_*`: the next call, `_slot_loop`; the call itself elsewhere).
DMA_COLUMNS = ("ld_req", "ld_bytes", "st_req", "st_bytes", "dram_req", "block_req", "far_req", "far_bytes",
               "far_st_req")
FEATURE_COLUMNS = (
    "count", "dim", "dram_bw", "ld_req", "ld_bytes", "ex_rows", "ex_ops", "preloads", "st_req", "st_bytes",
    "overlap", "matmul", "part_ops", "part_rows", "search", "dram_req", "block_req", "far_req", "far_bytes",
    "far_st_req", *("nx_" + c for c in DMA_COLUMNS),
)


def _axis(out: int, tile_o: int, kdim: int, tile_k: int, stride: int, pad: int, in_dim: int,
          dilation: int = 1) -> np.ndarray:
    """Distinct tiles of one spatial axis: rows (count, output extent, kernel extent, DRAM rows loaded,
    last kernel tile, first kernel tile, first output tile). A tile of o outputs and kk kernel taps reads the
    window its taps span: o x stride + (kk - 1) x dilation rows from row po x stride + kr x dilation - pad."""
    acc: dict[tuple, int] = {}
    wrap = 1 << ITERATOR_BITS
    n_full = out // tile_o
    if pad == 0 and n_full > 2:
        # No padding: every full output tile loads the same window (the first is kept apart: with tiles kept
        # between calls it is the one that loads), only the remainder tile differs.
        starts = [(0, 1), (tile_o, n_full - 1)] + ([(n_full * tile_o, 1)] if out % tile_o else [])
    else:
        starts = [(po, 1) for po in range(0, out, tile_o)]
    for po, mult in starts:
        o = min(tile_o, out - po)
        for kr in range(0, kdim, tile_k):
            kk = min(tile_k, kdim - kr)
            start = po * stride + kr * dilation - pad
            n = o * stride + (kk - 1) * dilation
            unpadded = n - max(0, -start) - max(0, start + n - in_dim)
            if unpadded < 0:  # window entirely in the zero padding: the 16-bit iterator wraps
                unpadded += wrap
            key = (o, kk, unpadded, kr + tile_k >= kdim, kr == 0, po == 0)
            acc[key] = acc.get(key, 0) + mult
    return np.array([(c, *k) for k, c in acc.items()], dtype=float)


def _chunks(total: int, step: int, tile: int, elem_bytes: float = 0.0) -> np.ndarray:
    """Distinct chunks of a channel/batch loop stepping by `step` with `tile`-sized calls: rows
    (count, size, last, first, byte offset of the chunk's start within a DMA request block). With `elem_bytes`
    (the chunk indexes a contiguous DRAM row: channels), chunks starting at different offsets are kept apart,
    since a misaligned row takes more requests (`_row_req`); otherwise the offset is 0."""
    acc: dict[tuple, int] = {}
    n = -(-total // step)

    def off(s0: int) -> float:
        return float((s0 * elem_bytes) % REQUEST_BYTES) if elem_bytes else 0.0

    for i in range(n):
        s0 = i * step
        key = (min(tile, total - s0), s0 + tile >= total, s0 == 0, off(s0))
        acc[key] = acc.get(key, 0) + 1
    return np.array([(c, *k) for k, c in acc.items()], dtype=float)


def _chunks_next(total: int, step: int, tile: int, elem_bytes: float, cyclic: bool) -> np.ndarray:
    """`_chunks` with each chunk's successor: rows (count, size, last, first, offset, and the same four of the chunk
    the next call runs). With `cyclic` (the loop is the innermost of the calls, `_slot_loop`), a chunk's successor is
    the next chunk, the last chunk's the first (the loop starts again for the next iteration of the loops outside
    it); otherwise every chunk is its own successor (the rows are `_chunks`' rows)."""
    if not cyclic:
        rows = _chunks(total, step, tile, elem_bytes)
        return np.concatenate([rows, rows[:, 1:]], axis=1)
    n = -(-total // step)

    def key(i: int) -> tuple:
        s0 = i * step
        off = float((s0 * elem_bytes) % REQUEST_BYTES) if elem_bytes else 0.0
        return (min(tile, total - s0), s0 + tile >= total, s0 == 0, off)

    acc: dict[tuple, int] = {}
    for i in range(n):
        k = key(i) + key((i + 1) % n)
        acc[k] = acc.get(k, 0) + 1
    return np.array([(c, *k) for k, c in acc.items()], dtype=float)


def _req(row_bytes):  # type: ignore[no-untyped-def]
    """DMA requests for rows of `row_bytes` (each at least one request of at most REQUEST_BYTES)."""
    if isinstance(row_bytes, int | float):  # one number (matmul_calls): the same IEEE arithmetic without numpy's
        return max(1.0, float(math.ceil(row_bytes / REQUEST_BYTES)))  # per-call cost
    return np.maximum(1.0, np.ceil(row_bytes / REQUEST_BYTES))


def _acc_row_req(channels, cols):  # type: ignore[no-untyped-def]
    """DMA requests of the accumulator rows one output pixel's `channels` take: one row per block of `cols`
    channels, each row its channels x 4 bytes (a 32-wide block's 128 B row is two 64-byte requests)."""
    full = np.floor(channels / cols)
    rest = channels - full * cols
    return full * _req(cols * ACC_BYTES) + np.where(rest > 0, _req(np.maximum(rest, 1) * ACC_BYTES), 0.0)


def _store_chain_one(n, row_stride, row_bytes):  # type: ignore[no-untyped-def]
    """Requests of one mvout of `n` rows that wait behind an earlier request of the same mvout to their 64-byte
    block: the mvout's `n` requests (one per row: rows closer than a block are narrower than one) spread over the
    blocks its rows span (expected count over where the first row starts in its block: a span of L bytes touches
    1 + (L - 1) / 64 blocks), and a block's requests are served one after another, so an mvout waits for its
    longest chain: requests per block, less the first. Only rows closer than a block (`row_stride` < 64 B) share."""
    n = np.asarray(n, dtype=float)
    span = (np.maximum(n, 1.0) - 1.0) * row_stride + row_bytes
    blocks = 1.0 + np.maximum(span - 1.0, 0.0) / REQUEST_BYTES
    return np.where((row_stride < REQUEST_BYTES) & (n > 0), np.maximum(0.0, n / blocks - 1.0), 0.0)


def _store_chain(rows, per_mvout, row_stride, row_bytes):  # type: ignore[no-untyped-def]
    """`_store_chain_one` over a run of `rows` consecutive output rows stored as mvouts of at most `per_mvout` rows
    (loop_conv_ws / loop_ws store up to DIM rows per mvout). Gemmini's DMA writes each row as its own TileLink put
    (DMA.scala, StreamWriter: at least one 16-byte beat, up to 16 in flight); puts to one block of the L2 are
    served one after another, so an mvout of rows two bytes apart (two output channels) waits ~16 times the L2's
    turnaround instead of overlapping its requests (FireSim: U-Net's 2-channel head at 2.6-3.4x the model)."""
    full = np.floor(rows / per_mvout)
    rest = rows - full * per_mvout
    return full * _store_chain_one(per_mvout, row_stride, row_bytes) + np.where(
        rest > 0, _store_chain_one(rest, row_stride, row_bytes), 0.0)


def max_block_len(dim: int, elem_bytes: float = 1.0) -> int:
    """gemmini.h's MAX_BLOCK_LEN: DIM-wide blocks one scratchpad mvin row carries side by side (64 B of them,
    at least one)."""
    return max(1, int(REQUEST_BYTES // (dim * elem_bytes)))


@functools.lru_cache(maxsize=4096)
def _row_req_one(elems: float, offset: float, row_stride: float, span: float, elem_bytes: float) -> float:
    """Mean DMA requests per DRAM row (see `_row_req`) for scalars."""
    # Rows start at offset + i x row_stride; their offsets within a 64-byte block repeat with this period
    period = REQUEST_BYTES // math.gcd(int(row_stride) % REQUEST_BYTES or REQUEST_BYTES, REQUEST_BYTES)
    total = 0.0
    for i in range(period):
        start = (offset + i * row_stride) % REQUEST_BYTES
        done = 0.0
        while done < elems:  # one mvin row per `span` elements
            piece = min(span, elems - done) * elem_bytes
            o = (start + done * elem_bytes) % REQUEST_BYTES
            total += max(1.0, math.ceil((o + piece) / REQUEST_BYTES))
            done += span
    return total / period


def _mvin_rows(elems, span, elem_bytes):  # type: ignore[no-untyped-def]
    """DMA requests for a row of `elems` elements moved as mvin rows of `span` elements (`_req` of each)."""
    if isinstance(elems, int | float) and isinstance(span, int | float):  # numbers: as `_req`
        whole = float(math.floor(elems / span))
        left = elems - whole * span
        return whole * _req(span * elem_bytes) + (_req(left * elem_bytes) if left > 0 else 0.0)
    full = np.floor(elems / span)
    rest = elems - full * span
    return full * _req(span * elem_bytes) + np.where(rest > 0, _req(rest * elem_bytes), 0.0)


def _row_req(elems, offset, row_stride, span, elem_bytes):  # type: ignore[no-untyped-def]
    """DMA requests per DRAM row of `elems` contiguous elements: the row moves in mvin (mvout) rows of `span`
    elements, and Gemmini's DMA reads each as aligned power-of-two packets of at most 64 B, one request per
    64-byte block it touches (DMA.scala, StreamReader: the packet that covers the most bytes, aligned to its
    size). A row starting `offset` bytes into a block therefore takes one more request than an aligned one when
    it crosses a block boundary: a channel tile of 624 = 9 x 64 + 48 starting at byte 48 moves in 20 requests,
    not 10. Rows follow each other `row_stride` bytes apart (pixels: the channel count), so the offsets cycle;
    the answer is the mean over that cycle. Every argument may be a numpy array (they broadcast); the distinct
    combinations are few, so each is worked out once."""
    scalars = (elems, offset, row_stride, span, elem_bytes)
    if all(isinstance(a, int | float) for a in scalars):  # numbers (matmul_calls): no numpy round trip, ~60x faster
        return _row_req_one(*map(float, scalars))
    args = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (elems, offset, row_stride, span, elem_bytes)))
    flat = np.stack([a.ravel() for a in args], axis=1)
    if not len(flat):
        return np.zeros(args[0].shape)
    combos, inverse = np.unique(flat, axis=0, return_inverse=True)
    per = np.array([_row_req_one(*map(float, c)) for c in combos])
    return per[inverse.ravel()].reshape(args[0].shape)


def conv_calls(e: Execution, dram_bw: float) -> np.ndarray:
    """Feature rows (FEATURE_COLUMNS) of the distinct tiled_conv calls of an execution."""
    return conv_calls_many([e], dram_bw)[0]


@functools.lru_cache(maxsize=4096)
def _axis_table(out: int, tile_o: int, kdim: int, tile_k: int, stride: int, pad: int, in_dim: int,
                dilation: int = 1) -> np.ndarray:
    table = _axis(out, tile_o, kdim, tile_k, stride, pad, in_dim, dilation)
    table.flags.writeable = False  # shared by every execution with this axis
    return table


@functools.lru_cache(maxsize=4096)
def _chunk_table(total: int, step: int, tile: int, elem_bytes: float = 0.0) -> np.ndarray:
    table = _chunks(total, step, tile, elem_bytes)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=4096)
def _chunk_row_req(total: int, step: int, tile: int, elem_bytes: float, row_stride: float, span: float,
                   req_bytes: float, off_mul: float = 1.0, off_div: float = 1.0) -> np.ndarray:
    """`_row_req` of each row of `_chunk_table(total, step, tile, elem_bytes)` (its chunk size, its offset x
    off_mul / off_div), per distinct chunk: conv_calls_many gathers these rather than asking `_row_req` for
    every call row (the same numbers, worked out on a few rows instead of sorting thousands)."""
    table = _chunk_table(total, step, tile, elem_bytes)
    out = np.array([_row_req_one(float(size), float(off) * off_mul / off_div, row_stride, span, req_bytes)
                    for size, off in zip(table[:, 1], table[:, 4])], dtype=float)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=4096)
def _chunk_table_next(total: int, step: int, tile: int, elem_bytes: float, cyclic: bool) -> np.ndarray:
    table = _chunks_next(total, step, tile, elem_bytes, cyclic)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=4096)
def _chunk_row_req_next(total: int, step: int, tile: int, elem_bytes: float, cyclic: bool, row_stride: float,
                        span: float, req_bytes: float, off_mul: float = 1.0, off_div: float = 1.0,
                        successor: bool = False) -> np.ndarray:
    """`_chunk_row_req` of each row of `_chunk_table_next` (of its successor's chunk with `successor`)."""
    table = _chunk_table_next(total, step, tile, elem_bytes, cyclic)
    size, off = (table[:, 5], table[:, 8]) if successor else (table[:, 1], table[:, 4])
    out = np.array([_row_req_one(float(z), float(o) * off_mul / off_div, row_stride, span, req_bytes)
                    for z, o in zip(size, off)], dtype=float)
    out.flags.writeable = False
    return out


def _slot_loop(e: Execution) -> str | None:
    """The channel loop ("C" or "K") whose tiles pair a call's compute with the next call's DMA in loop_conv_ws's two
    call slots, or None (every call paired with itself: the calls of the innermost loop are alike, or the calls do
    not run through loop_conv_ws). LoopConv.scala holds two calls (`concurrent_loops = 2`) and frees a call's slot
    only when it has issued all its commands, so call i + 1's loads wait for call i - 1's computes: each call's
    computes overlap the next call's loads, not its own. Only the library's calls run through the FSM (Tileplan's
    code issues its own instructions: `reuse`), and only where they overlap at all. The successor is taken in the
    innermost DRAM loop with several trips, when that is a channel loop (the reduction's or the output channels'
    small last tile: 256 channels in tiles of 240 are 240 + 16); elsewhere consecutive calls are alike but for edge
    tiles, and each call is its own successor."""
    if e.kind != "conv" or e.reuse or not e.overlapped:
        return None
    trips = {"P": -(-e.out_h // e.t_h), "Q": -(-e.out_w // e.t_w), "K": -(-e.k // e.k_step),
             "C": -(-e.c // e.c_step), "N": -(-e.batch // e.t_n), "R": -(-e.r // e.t_r), "S": -(-e.s // e.t_s),
             "G": e.groups}
    for d in reversed(e.order):
        if trips.get(d, 1) > 1:
            return d if d in ("C", "K") else None
    return None


def conv_calls_many(es: list[Execution], dram_bw: float) -> tuple[np.ndarray, np.ndarray]:
    """Feature rows of the distinct tiled_conv calls of several executions, stacked, and the execution each row
    belongs to. Per execution: every combination of the distinct tiles of its loops (output rows, output columns,
    output channels, input channels, batch; the first loop varies slowest), each row costed by the same arithmetic
    whether it is alone or among thousands (mappers rank many tilings at once)."""
    columns, xid = _conv_columns(es, dram_bw)
    feats = np.stack([columns[name] for name in FEATURE_COLUMNS], axis=1).astype(float, copy=False)
    return feats, xid


def _conv_columns(es: list[Execution], dram_bw: float) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """`conv_calls_many`'s feature rows as columns (FEATURE_COLUMNS, each as long as the rows: read-only
    broadcasts where every row has the same value), and the execution each row belongs to."""
    n = len(es)
    # Each loop's table of distinct tiles (and, for the channel loops, DMA requests per DRAM row of each chunk: input
    # rows are pixels c x in_bytes apart in mvin rows of `rows` x MAX_BLOCK_LEN channels; weight rows k x in_bytes
    # apart in mvin rows of `cols` x MAX_BLOCK_LEN; output rows k x out_bytes apart in mvout rows of at most `cols`)
    # is looked up once per distinct loop among the executions (a mapper's candidates share most of them), and each
    # execution's rows are gathered from the distinct tables stacked.
    def _h(e: Execution) -> tuple[np.ndarray, ...]:
        return (_axis_table(e.out_h, e.t_h, e.r, e.t_r, e.stride[0], e.pad[0], e.in_h, e.dilation[0]),)

    def _w(e: Execution) -> tuple[np.ndarray, ...]:
        return (_axis_table(e.out_w, e.t_w, e.s, e.t_s, e.stride[1], e.pad[1], e.in_w, e.dilation[1]),)

    def _k(e: Execution) -> tuple[np.ndarray, ...]:
        cyc = _slot_loop(e) == "K"
        w_args = (float((e.w_row or e.k) * e.in_bytes), float(e.cols * max_block_len(e.cols, e.in_bytes)),
                  float(e.in_bytes))
        o_args = (float((e.o_row or e.k) * e.out_bytes), float(e.cols), float(e.out_bytes), float(e.out_bytes),
                  float(e.in_bytes))
        return (
            _chunk_table_next(e.k, e.k_step, e.t_k, e.in_bytes, cyc),
            _chunk_row_req_next(e.k, e.k_step, e.t_k, e.in_bytes, cyc, *w_args),
            _chunk_row_req_next(e.k, e.k_step, e.t_k, e.in_bytes, cyc, *o_args),
            _chunk_row_req_next(e.k, e.k_step, e.t_k, e.in_bytes, cyc, *w_args, 1.0, 1.0, True),
            _chunk_row_req_next(e.k, e.k_step, e.t_k, e.in_bytes, cyc, *o_args, True),
        )

    def _c(e: Execution) -> tuple[np.ndarray, ...]:
        cyc = _slot_loop(e) == "C"
        i_args = (float((e.i_row or e.c) * e.in_bytes), float(e.rows * max_block_len(e.rows, e.in_bytes)),
                  float(e.in_bytes))
        return (
            _chunk_table_next(e.c, e.c_step, e.t_c, e.in_bytes, cyc),
            _chunk_row_req_next(e.c, e.c_step, e.t_c, e.in_bytes, cyc, *i_args),
            _chunk_row_req_next(e.c, e.c_step, e.t_c, e.in_bytes, cyc, *i_args, 1.0, 1.0, True),
        )

    def _n(e: Execution) -> tuple[np.ndarray, ...]:
        return (_chunk_table(e.batch, e.t_n, e.t_n),)

    tables_of = (_h, _w, _k, _c, _n)
    seen: list[dict[tuple, int]] = [{} for _ in range(5)]
    distinct: list[list[tuple[np.ndarray, ...]]] = [[] for _ in range(5)]
    which_rows = []  # per execution, per loop: its distinct table
    scalar_rows = []  # per execution: `_conv_scalars`
    # how an execution keeps tiles (`_kept_across`) depends on its reuse, order and which loops have several trips
    keeps: dict[tuple, int] = {}
    keep_rows: list[tuple[list[bool], list[bool]]] = []
    # per execution, per cache (L2, LLC), I and W: the share of a tile that misses when each loop comes back to it
    miss_rows: list[list[list[float]]] = []
    keep_idx = []
    slots = [_slot_loop(e) for e in es]
    for e, slot in zip(es, slots):
        loops = ((e.out_h, e.t_h, e.r, e.t_r, e.stride[0], e.pad[0], e.in_h, e.dilation[0]),
                 (e.out_w, e.t_w, e.s, e.t_s, e.stride[1], e.pad[1], e.in_w, e.dilation[1]),
                 (e.k, e.k_step, e.t_k, e.in_bytes, e.out_bytes, e.cols, e.w_row, e.o_row, slot == "K"),
                 (e.c, e.c_step, e.t_c, e.in_bytes, e.rows, e.i_row, slot == "C"),
                 (e.batch, e.t_n))
        row = []
        for i, key in enumerate(loops):
            j = seen[i].get(key)
            if j is None:
                j = seen[i][key] = len(distinct[i])
                distinct[i].append(_loop_tables(i, key, tables_of[i], e))
            row.append(j)
        which_rows.append(row)
        scalar_rows.append(_conv_scalars(e))
        # (a loop has several trips when its extent exceeds its step)
        several = (e.out_h > e.t_h, e.out_w > e.t_w, e.k > e.k_step, e.c > e.c_step, e.batch > e.t_n, e.r > e.t_r,
                   e.s > e.t_s, e.groups > 1)
        kkey = (e.reuse, e.order, several)
        k = keeps.get(kkey)
        if k is None:
            k = keeps[kkey] = len(keep_rows)
            trips = {
                "P": -(-e.out_h // e.t_h), "Q": -(-e.out_w // e.t_w), "K": -(-e.k // e.k_step),
                "C": -(-e.c // e.c_step), "N": -(-e.batch // e.t_n), "R": -(-e.r // e.t_r), "S": -(-e.s // e.t_s),
                "G": e.groups,
            }
            kept_i, kept_w = _kept_across(e, trips, "I"), _kept_across(e, trips, "W")
            keep_rows.append(([d in kept_i for d in _FIRST], [d in kept_w for d in _FIRST]))
        keep_idx.append(k)
        trips_e = {"P": -(-e.out_h // e.t_h), "Q": -(-e.out_w // e.t_w), "K": -(-e.k // e.k_step),
                   "C": -(-e.c // e.c_step), "N": -(-e.batch // e.t_n), "R": -(-e.r // e.t_r),
                   "S": -(-e.s // e.t_s), "G": e.groups}
        miss_rows.append(_miss_rows(e, trips_e))
    which = np.array(which_rows, dtype=np.int64).reshape(n, 5)
    lengths = np.empty((n, 5), dtype=np.int64)
    stacked: list[list[np.ndarray]] = []  # per loop: the distinct tables (and request columns), stacked
    table_starts: list[np.ndarray] = []  # per loop: where each distinct table starts in the stack
    for i in range(5):
        size = np.array([len(t[0]) for t in distinct[i]], dtype=np.int64)
        lengths[:, i] = size[which[:, i]]
        table_starts.append(np.cumsum(size) - size)
        stacked.append([np.concatenate([t[m] for t in distinct[i]]) for m in range(len(distinct[i][0]))]
                       if distinct[i] else [])
    # row r of execution x: its tile of loop i is (r // stride_i) % length_i, loop 0 slowest
    strides = np.ones_like(lengths)
    for i in range(3, -1, -1):
        strides[:, i] = strides[:, i + 1] * lengths[:, i + 1]
    per = strides[:, 0] * lengths[:, 0]
    xid = np.repeat(np.arange(n), per)
    cols = []
    idxs = []
    # the columns of each loop's table that the rows read (the chunks' offsets are in their request columns)
    used = ((0, 1, 2, 3, 4, 5, 6), (0, 1, 2, 3, 4, 5, 6), (0, 1, 3, 5, 7), (0, 1, 2, 3, 5, 6, 7), (0, 1, 3))
    for i in range(5):
        table = stacked[i][0] if n else np.zeros((0, 7 if i < 2 else (9 if i in (2, 3) else 5)))
        offset = table_starts[i][which[:, i]] if n else np.zeros(0, dtype=np.int64)
        # row r of execution x reads tile (r // stride) % length of loop i: the tile sequence of the slower loops'
        # iterations (r // stride, one entry per `stride` rows), each entry repeated `stride` times
        runs = per // strides[:, i]
        run_x = np.repeat(np.arange(n), runs)
        run = np.arange(len(run_x)) - np.repeat(np.cumsum(runs) - runs, runs)
        idx = np.repeat(run % lengths[run_x, i] + offset[run_x], np.repeat(strides[:, i], runs))
        idxs.append(idx)
        cols.append(list(table.T[list(used[i])].take(idx, axis=1)))  # one gather per table, a row per column
    c_req, c_req_nx = ((stacked[3][m][idxs[3]] if n else np.zeros(0)) for m in (1, 2))
    k_req_in, k_req_out, k_req_in_nx, k_req_out_nx = ((stacked[2][m][idxs[2]] if n else np.zeros(0))
                                                      for m in (1, 2, 3, 4))
    ((hn, ho, hk, hu, hf, h0, p0), (wn, wo, wk, wu, wf, w0, q0), (kn, kk, k0, kk_nx, k0_nx),
     (cn, cc, cf, c0, cc_nx, cf_nx, c0_nx), (nn, nb, n0)) = cols

    # one value per execution, per row: the executions' scalars read once each (`_conv_scalars`)
    scalars = np.array(scalar_rows, dtype=float).reshape(n, len(_CONV_SCALARS))

    # (a value every execution shares stays one number: the same arithmetic, broadcast, without a gather per row)
    uniform = (scalars == scalars[:1]).all(axis=0) if n else np.zeros(len(_CONV_SCALARS), dtype=bool)

    def each(name: str) -> Any:
        j = _CONV_SCALARS.index(name)
        return scalars[0, j] if uniform[j] else scalars[:, j][xid]

    d = each("dim")
    rows, cols_ = each("rows"), each("cols")
    in_b, out_b = each("in_bytes"), each("out_bytes")
    fold = each("fold")
    count = hn * wn * kn * cn * nn * each("groups")
    # (input, weight) load indicators: with tiles kept, an operand loads only on the first iteration of the DRAM
    # loops it is kept across (`_kept_across`, worked out above per distinct way of keeping)
    table = np.array(keep_rows, dtype=bool).reshape(len(keep_rows), 2, len(_FIRST))[np.array(keep_idx, dtype=np.int64)]
    kept = {"I": table[:, 0, :], "W": table[:, 1, :]}
    # what the L2 and the LLC still hold when a loop comes back to a tile (`_miss_shares`): [cache][tensor] -> the
    # share that misses, per execution and loop (1: the loop indexes the tensor)
    misses = np.array(miss_rows, dtype=float).reshape(n, 2, 2, len(_FIRST))
    kb = np.ceil(kk / cols_)
    cb = np.ceil(cc / rows)
    # per kernel-column block (folded): one input row of (up to fold) x C channels per (batch, input row, output
    # column), one preload per (output-channel block, kernel row) of up to fold x C array rows
    blocks = np.ceil(wk / fold)
    folded = fold > 1
    pre = np.where(folded, kb * hk * blocks, kb * hk * wk * cb)
    ops = pre * nb * ho * np.ceil(wo / d)
    ex_rows = pre * nb * ho * wo
    part_rows = wo % d  # the last compute of an output row streams fewer than DIM rows
    part_ops = pre * nb * ho * (part_rows > 0)
    big = {t: each("big_" + t) for t in ("I", "W", "O")}
    # the same requests on tensors larger than the LLC too (`_beyond_l2` at llc_bytes): DRAM serves them
    far = {t: each("far_" + t) for t in ("I", "W", "O")}
    c_all, k_all = each("c"), each("k")
    # (a call runs one group, and an NHWC output pixel holds every group's channels: a grouped layer's output rows
    # are always wider than a call's tile, unless the stores write a group-major padded copy: o_row; the input is
    # read from the host's group-major padded copy, whole rows per group)
    grouped = each("groups") > 1
    o_row = each("o_row")

    def dma_columns(kk: Any, k0: Any, k_req_in: Any, k_req_out: Any, cc: Any, cf: Any, c0: Any,
                    c_req: Any) -> tuple[Any, ...]:
        """The DMA columns (DMA_COLUMNS) of the calls whose channel tiles are these (a call's own, or the next
        call's: `_slot_loop`)."""
        first = {"P": p0, "Q": q0, "K": k0, "C": c0, "N": n0, "R": h0, "S": w0}
        load_i, load_w = (np.ones(len(xid)) for _ in range(2))
        for t, load in (("I", load_i), ("W", load_w)):
            for j, dim in enumerate(first):
                if kept[t][:, j].any():
                    load *= np.where(kept[t][xid, j], first[dim], 1.0)
        # the share of a call's I and W tiles that misses the L2 (l2_i, l2_w) and the LLC (llc_i, llc_w): the tile's first
        # read misses; after that the innermost loop that moved on decides, the one that came back soonest (the shares
        # grow outward, so the smallest of the loops that moved)
        fetch = []
        for cache in (0, 1):
            for tensor in (0, 1):
                share = np.ones(len(xid))
                for j, dim in enumerate(first):
                    m = misses[:, cache, tensor, j]
                    if (m < 1.0).any():
                        np.minimum(share, np.where(first[dim] > 0, 1.0, m[xid]), out=share)
                fetch.append(share)
        l2_i, l2_w, llc_i, llc_w = fetch
        in_req = np.where(folded, nb * hu * wo * blocks * _req(fold * cc * in_b),
                          nb * hu * wu * c_req)
        in_bytes = np.where(folded, nb * hu * wo * wk * cc, nb * hu * wu * cc)
        w_req = hk * wk * cc * k_req_in
        ld_req = load_i * in_req + load_w * w_req
        init = h0 * w0 * c0 * each("bias")  # calls that initialise the accumulator
        # one accumulator row per output pixel and DIM output channels (the block's channels x 4 bytes: one request
        # per 64 B of it), each mvin reading one DRAM row of the bias (stride 0)
        ld_req = ld_req + init * nb * ho * wo * _acc_row_req(kk, cols_)
        ld_bytes = (load_i * in_bytes + load_w * hk * wk * cc * kk) * in_b
        # one DRAM row per mvin (none where the rows are zero-filled: bias_bytes)
        ld_bytes = ld_bytes + init * nb * ho * np.ceil(wo / d) * kk * ACC_BYTES * each("bias_bytes")
        final = hf * wf * cf
        st_req = final * nb * ho * wo * k_req_out  # mvout rows: <= DIM
        st_bytes = final * nb * ho * wo * kk * out_b
        # only rows narrower than the tensor's (a channel tile short of all channels): whole rows stream contiguously
        strided_st = (kk < k_all) | (grouped & (o_row == 0))
        # (the strided loads the L2 misses wait on what lies behind it; those the LLC misses too, on DRAM)
        dram_req = (l2_i * load_i * in_req * big["I"] * (cc < c_all) + l2_w * load_w * w_req * big["W"] * (kk < k_all)
                    + st_req * big["O"] * strided_st)
        far_st_req = st_req * far["O"] * strided_st
        far_req = (llc_i * load_i * in_req * far["I"] * (cc < c_all)
                   + llc_w * load_w * w_req * far["W"] * (kk < k_all) + far_st_req)
        # bytes DRAM reads for the loads of tensors larger than the LLC (`far_bytes`): what the LLC misses
        far_bytes = (llc_i * in_bytes * far["I"] + llc_w * hk * wk * cc * kk * far["W"]) * in_b
        # store requests waiting behind one to the same 64-byte block (`_store_chain`): mvouts of up to DIM pixels of
        # one block of up to DIM output channels, rows a pixel's channels apart (all groups': NHWC)
        block_req = final * nb * ho * np.ceil(kk / cols_) * _store_chain(
            wo, d, np.where(o_row > 0, o_row, each("groups") * k_all) * out_b, np.minimum(kk, cols_) * out_b)
        return ld_req, ld_bytes, st_req, st_bytes, dram_req, block_req, far_req, far_bytes, far_st_req

    own = dma_columns(kk, k0, k_req_in, k_req_out, cc, cf, c0, c_req)
    ld_req, ld_bytes, st_req, st_bytes, dram_req, block_req, far_req, far_bytes, far_st_req = own
    # the next call's DMA (`_slot_loop`): itself where no execution pairs its calls
    nxt = own if not any(slots) else dma_columns(kk_nx, k0_nx, k_req_in_nx, k_req_out_nx, cc_nx, cf_nx, c0_nx,
                                                 c_req_nx)
    # the host's tile search (a per-run quantity) rides on each execution's first row
    search = np.zeros(len(xid))
    starts = np.flatnonzero(np.r_[True, xid[1:] != xid[:-1]]) if len(xid) else np.zeros(0, dtype=int)
    search[starts] = [float(es[i].search) for i in xid[starts]]
    out = np.broadcast_arrays(
        count, rows, float(dram_bw), ld_req, ld_bytes, ex_rows, ops, pre, st_req, st_bytes,
        each("overlapped"), 0.0, part_ops, part_rows, search, dram_req, block_req, far_req, far_bytes, far_st_req,
        *nxt,
    )
    return dict(zip(FEATURE_COLUMNS, out)), xid




_FIRST = ("P", "Q", "K", "C", "N", "R", "S")  # the loops conv_calls_many's load indicators read, in its order

# (loop, its key in conv_calls_many) -> its tables: a mapper's batches share most loops
_LOOP_TABLES: dict[tuple[int, tuple], tuple[np.ndarray, ...]] = {}


def _loop_tables(i: int, key: tuple, tables_of: abc.Callable[[Execution], tuple[np.ndarray, ...]],
                 e: Execution) -> tuple[np.ndarray, ...]:
    found = _LOOP_TABLES.get((i, key))
    if found is None:
        if len(_LOOP_TABLES) >= 8192:
            _LOOP_TABLES.clear()
        found = _LOOP_TABLES[(i, key)] = tables_of(e)
    return found


_CONV_SCALARS = ("dim", "rows", "cols", "in_bytes", "out_bytes", "fold", "groups", "bias", "overlapped", "c", "k",
                 "big_I", "big_W", "big_O", "o_row", "far_I", "far_W", "far_O", "bias_bytes")


def _conv_scalars(e: Execution) -> tuple[float, ...]:
    """The per-execution values conv_calls_many spreads over an execution's rows, in _CONV_SCALARS order."""
    big = _tensors_beyond_l2(e.batch, e.in_h, e.in_w, e.c, e.groups, e.r, e.s, e.k, e.out_h, e.out_w, e.in_bytes,
                             e.out_bytes, e.l2_bytes, e.w_row, e.o_row, e.i_row)
    far = _tensors_beyond_l2(e.batch, e.in_h, e.in_w, e.c, e.groups, e.r, e.s, e.k, e.out_h, e.out_w, e.in_bytes,
                             e.out_bytes, e.llc_bytes, e.w_row, e.o_row, e.i_row)
    return (e.dim, e.rows, e.cols, e.in_bytes, e.out_bytes, e.fold, e.groups, float(e.bias), float(e.overlapped),
            e.c, e.k, *big, e.o_row, *far, float(e.bias_bytes))


@functools.lru_cache(maxsize=1024)
def _tensors_beyond_l2(*geometry: Any) -> tuple[float, float, float]:
    """`_beyond_l2` of I, W and O, for every execution of one geometry (as 0.0 / 1.0)."""
    (batch, in_h, in_w, c, groups, r, s, k, out_h, out_w, in_bytes, out_bytes, l2_bytes, w_row, o_row, i_row) = geometry
    e = Execution(kind="conv", dim=1, batch=batch, groups=groups, out_h=out_h, out_w=out_w, k=k, c=c, r=r, s=s,
                  stride=(1, 1), pad=(0, 0), in_h=in_h, in_w=in_w, t_n=1, t_h=1, t_w=1, t_k=1, t_c=1, t_r=1, t_s=1,
                  k_step=1, c_step=1, in_bytes=in_bytes, out_bytes=out_bytes, l2_bytes=l2_bytes, w_row=w_row,
                  o_row=o_row, i_row=i_row)
    return float(_beyond_l2(e, "I")), float(_beyond_l2(e, "W")), float(_beyond_l2(e, "O"))


def _beyond_l2(e: Execution, tensor: str, cache_bytes: float | None = None) -> bool:
    """Whether a whole operand tensor ("I", "W", "O") is larger than the L2 the DMA reads and writes through. The
    library refetches its tiles call after call; a tensor that fits stays in the L2 between refetches, one that
    does not is evicted before it is needed again, so its requests go to DRAM. The callers count only the requests
    of rows narrower than the tensor's own (a channel tile short of all channels), which jump from row to row;
    whole rows stream contiguously (counting those too fits worse: costmodel.md). Where the code reads weights or its
    input from a copy padded to the tile grid (`w_row`, `i_row`) or stores into a padded copy (`o_row`), that copy is
    the tensor."""
    size = {
        "I": e.batch * e.in_h * e.in_w * (e.i_row or e.c) * e.groups,
        "W": e.r * e.s * e.c * (e.w_row or e.k) * e.groups,
        "O": e.batch * e.out_h * e.out_w * (e.o_row * e.groups if e.o_row else e.k * e.groups),
    }[tensor] * (e.out_bytes if tensor == "O" else e.in_bytes)
    return size > (e.l2_bytes if cache_bytes is None else cache_bytes)


def _kept_across(e: Execution, trips: dict[str, int], tensor: str) -> list[str]:
    """The DRAM loops across which `tensor`'s tile is kept, so it loads only on their first iteration. Without
    reuse every call loads both operands. With it, an operand is loaded only when one of its own dimensions moved:
    consecutive calls across the innermost DRAM loops (several tiles) that do not index it share its tile."""
    kept: list[str] = []
    if e.reuse:
        for d in reversed(e.order):
            if trips.get(d, 1) <= 1:
                continue
            if d in OPERAND_DIMS[tensor]:
                break
            kept.append(d)
    return kept


def _in_l2_across(e: Execution, trips: dict[str, int], tensor: str) -> list[str]:
    """`_kept_across` as the L2 sees it, whoever runs the calls: the DRAM loops across which consecutive calls read the
    same `tensor` data, so that all but the first of them find it in the L2. A kernel-row or kernel-column tile
    only shifts the input window a call reads (by the dilation), so for the input those loops read the same data."""
    indexing = OPERAND_DIMS[tensor] - ({"R", "S"} if tensor == "I" else set())
    kept: list[str] = []
    for d in reversed(e.order):
        if trips.get(d, 1) <= 1:
            continue
        if d in indexing:
            break
        kept.append(d)
    return kept


def _set_blocks(rows: float, width: float, pitch: float, cache_bytes: float) -> float:
    """64-byte blocks a tile of `rows` rows of `width` bytes, `pitch` bytes apart, takes of a cache of `cache_bytes` as
    its busiest sets see it (CACHE_WAYS ways of REQUEST_BYTES blocks). A row's blocks sit in consecutive sets, but the
    rows of a pitch divisible by a power of two above the block start in only sets / g of them (g = that power / the
    block: rows 1 KiB apart in a 512 KiB 8-way L2 use 64 of its 1,024 sets), so once the rows wrap around those sets a
    row takes max(its blocks, g) of the cache. Whole rows (width = pitch) are one contiguous range."""
    if width >= pitch:
        return math.ceil(rows * pitch / REQUEST_BYTES)
    blocks = math.ceil(width / REQUEST_BYTES)
    sets = cache_bytes / CACHE_WAYS / REQUEST_BYTES
    g = max(1, math.gcd(int(pitch), int(sets * REQUEST_BYTES)) // REQUEST_BYTES)
    return rows * blocks if rows * g <= sets else rows * max(blocks, g)


def _miss_shares(e: Execution, trips: dict[str, int], tensor: str, cache_bytes: float) -> dict[str, float]:
    """Per DRAM loop that does not index `tensor` (a kernel-row or -column loop only shifts the input window), the
    share of `tensor`'s tile the cache of `cache_bytes` no longer holds when that loop comes back to the tile (a
    convolution; loops of one trip skipped). Between two reads of the tile one iteration of the loop runs: the calls of
    the loops inside it touch D bytes (their tiles of I, W and O, each row in whole 64-byte blocks, the tensor's own
    blocks as its sets see them: `_set_blocks`). The SoC's L2 (SiFive's InclusiveCache) and the LLC model behind it
    (FASED's, `..._l2_llc4mb_ddr3`) replace a random way, so a block survives D bytes of fills with probability
    exp(-D / cache_bytes): the tile misses 1 - exp(-D / cache_bytes) of its blocks. The innermost such loop that moved
    decides (`conv_calls_many`); the tile's first read always misses."""
    indexing = OPERAND_DIMS[tensor] - ({"R", "S"} if tensor == "I" else set())
    inner: dict[str, int] = {}
    shares: dict[str, float] = {}
    for d in reversed(e.order):
        n = trips.get(d, 1)
        if n <= 1:
            continue
        if d not in indexing:
            def ext(dim: str, tile: int, full: int) -> int:
                return min(full, tile * inner.get(dim, 1))

            hh, ww = ext("P", e.t_h, e.out_h), ext("Q", e.t_w, e.out_w)
            kk, cc = ext("K", e.t_k, e.k), ext("C", e.t_c, e.c)
            rr, ss, nn = ext("R", e.t_r, e.r), ext("S", e.t_s, e.s), ext("N", e.t_n, e.batch)
            ih = (hh - 1) * e.stride[0] + (rr - 1) * e.dilation[0] + 1
            iw = (ww - 1) * e.stride[1] + (ss - 1) * e.dilation[1] + 1
            tiles = {"I": (nn * ih * iw, cc * e.in_bytes, (e.i_row or e.c) * e.groups * e.in_bytes),
                     "W": (rr * ss * cc, kk * e.in_bytes, (e.w_row or e.k) * e.in_bytes),
                     "O": (nn * hh * ww, kk * e.out_bytes, (e.o_row or e.k) * e.groups * e.out_bytes)}
            blocks = 0.0
            for x, (rows, width, pitch) in tiles.items():
                if x == tensor:
                    blocks += _set_blocks(rows, width, pitch, cache_bytes)
                else:
                    blocks += rows * math.ceil(min(width, pitch) / REQUEST_BYTES) if width < pitch else \
                        math.ceil(rows * pitch / REQUEST_BYTES)
            shares[d] = 1.0 - math.exp(-blocks * REQUEST_BYTES / cache_bytes)
        inner[d] = n
    return shares


_NOT_INDEXING = {t: frozenset(_FIRST) - (OPERAND_DIMS[t] - ({"R", "S"} if t == "I" else set())) for t in ("I", "W")}


def _miss_rows(e: Execution, trips: dict[str, int]) -> list[list[float]]:
    """`_miss_shares` of (L2, I), (L2, W), (LLC, I), (LLC, W), each per loop of _FIRST (1.0: none), as conv_calls_many
    reads them: the same arithmetic, with each loop's tiles worked out once for the four (the integer block counts
    add up exactly in any order)."""
    caches = (e.l2_bytes, e.llc_bytes)
    rows_out: list[list[float]] = [[1.0] * len(_FIRST) for _ in range(4)]
    not_i, not_w = _NOT_INDEXING["I"], _NOT_INDEXING["W"]
    inner: dict[str, int] = {}
    in_b, out_b = e.in_bytes, e.out_bytes
    for d in reversed(e.order):
        n = trips.get(d, 1)
        if n <= 1:
            continue
        own = "I" if d in not_i else "W" if d in not_w else None
        if own is not None:
            get = inner.get
            hh, ww = min(e.out_h, e.t_h * get("P", 1)), min(e.out_w, e.t_w * get("Q", 1))
            kk, cc = min(e.k, e.t_k * get("K", 1)), min(e.c, e.t_c * get("C", 1))
            rr, ss, nn = min(e.r, e.t_r * get("R", 1)), min(e.s, e.t_s * get("S", 1)), min(e.batch, e.t_n * get("N", 1))
            ih = (hh - 1) * e.stride[0] + (rr - 1) * e.dilation[0] + 1
            iw = (ww - 1) * e.stride[1] + (ss - 1) * e.dilation[1] + 1
            tiles = {"I": (nn * ih * iw, cc * in_b, (e.i_row or e.c) * e.groups * in_b),
                     "W": (rr * ss * cc, kk * in_b, (e.w_row or e.k) * in_b),
                     "O": (nn * hh * ww, kk * out_b, (e.o_row or e.k) * e.groups * out_b)}
            others = 0
            for x, (rows, width, pitch) in tiles.items():
                if x != own:
                    others += rows * math.ceil(min(width, pitch) / REQUEST_BYTES) if width < pitch else \
                        math.ceil(rows * pitch / REQUEST_BYTES)
            rows, width, pitch = tiles[own]
            j = _FIRST.index(d) if d in _FIRST else -1
            for c, cache_bytes in enumerate(caches):
                blocks = float(others + _set_blocks(rows, width, pitch, cache_bytes))
                if j >= 0:
                    rows_out[2 * c + (own == "W")][j] = 1.0 - math.exp(-blocks * REQUEST_BYTES / cache_bytes)
        inner[d] = n
    return rows_out


def matmul_calls(e: Execution, dram_bw: float) -> np.ndarray:
    """Feature rows of the distinct tiled_matmul calls (tiles in DIM-blocks: e.t_h x e.t_k x e.t_c)."""
    d, rows, cols = e.dim, e.rows, e.cols
    rows_i = e.out_h * e.batch

    def blocks(total: int, tile_blocks: int, d: int, row_elems: bool = False) -> Counter:
        """Distinct tiles of `tile_blocks` DIM-blocks over `total` elements: (blocks, elements, last, first, byte
        offset of the tile's start within a 64-byte DMA block when the tile runs along DRAM rows, else 0) -> how
        many; in loop order: the first tile, the full ones between, the last (which holds the remainder)."""
        acc: Counter = Counter()
        nblk = -(-total // d)
        n = -(-nblk // tile_blocks)
        step = (tile_blocks * d * e.in_bytes) % REQUEST_BYTES if row_elems else 0.0

        def off(i: int) -> float:
            return (i * step) % REQUEST_BYTES

        if n == 1:
            acc[(nblk, min(nblk * d, total), True, True, 0.0)] = 1
            return acc
        acc[(tile_blocks, tile_blocks * d, False, True, 0.0)] = 1
        # the full tiles between: their offsets repeat with a period of at most 64 tiles
        period = int(REQUEST_BYTES // math.gcd(int(step) or REQUEST_BYTES, REQUEST_BYTES)) if step else 1
        for i0 in range(1, min(n - 1, 1 + period)):
            acc[(tile_blocks, tile_blocks * d, False, False, off(i0))] += len(range(i0, n - 1, period))
        b0 = (n - 1) * tile_blocks
        acc[(nblk - b0, min((nblk - b0) * d, total - b0 * d), True, False, off(n - 1))] = 1
        return acc

    def tiles(total: int, tile_blocks: int, d: int) -> int:  # DRAM-loop trips: tiles of whole DIM-blocks
        return -(-(-(-total // d)) // tile_blocks)

    trips = {"P": tiles(rows_i, e.t_h, d), "K": tiles(e.k, e.t_k, cols), "C": tiles(e.c, e.t_c, rows), "G": e.groups}
    out = []
    big = {t: float(_beyond_l2(e, t)) for t in ("I", "W", "O")}
    far = {t: float(_beyond_l2(e, t, e.llc_bytes)) for t in ("I", "W", "O")}
    kept = {t: _kept_across(e, trips, t) for t in ("I", "W")}  # the DRAM loops each operand is kept across
    a_span, b_span = rows * max_block_len(rows, e.in_bytes), cols * max_block_len(cols, e.in_bytes)
    c_blocks, k_blocks = blocks(e.c, e.t_c, rows, row_elems=True), blocks(e.k, e.t_k, cols, row_elems=True)
    # DMA requests per operand row, worked out once per block: A rows are ke of a row of C elements, B rows je of
    # a row of K elements, starting at the block's offset in its 64-byte block (`blocks`)
    a_req = {(ke, k_off): float(_row_req(ke, k_off, e.c * e.in_bytes, a_span, e.in_bytes))
             for (_, ke, _, _, k_off) in c_blocks}
    b_req = {(je, j_off): float(_row_req(je, j_off, (e.w_row or e.k) * e.in_bytes, b_span, e.in_bytes))
             for (_, je, _, _, j_off) in k_blocks}
    # and per output row (stores): je of a row of K output elements
    o_stride = (e.o_row or e.k) * e.out_bytes  # bytes between output rows
    s_req = {(je, j_off): float(_row_req(je, j_off * e.out_bytes / e.in_bytes, o_stride, cols, e.out_bytes))
             for (_, je, _, _, j_off) in k_blocks}
    # store requests waiting behind others to their 64-byte block, per mvout row run (`_store_chain`)
    chain_o = {(ie, je): float(_store_chain(ie, d, o_stride, min(je, cols) * e.out_bytes))
               for (_, ie, _, _, _) in blocks(rows_i, e.t_h, d) for (_, je, _, _, _) in k_blocks}
    # an operand loads only on the first iteration of the loops it is kept across (`first` is 0.0 or 1.0 per loop)
    keep_a = [{"P": 0, "K": 1, "C": 2}[dim] for dim in kept["I"]]
    keep_b = [{"P": 0, "K": 1, "C": 2}[dim] for dim in kept["W"]]
    l2_a = [{"P": 0, "K": 1, "C": 2}[dim] for dim in _in_l2_across(e, trips, "I")]
    l2_b = [{"P": 0, "K": 1, "C": 2}[dim] for dim in _in_l2_across(e, trips, "W")]
    groups, in_bytes, out_bytes, bias = e.groups, e.in_bytes, e.out_bytes, e.bias
    c_all, k_all, overlapped = e.c, e.k, float(e.overlapped)
    big_i, big_w, big_o = big["I"], big["W"], big["O"]
    far_i, far_w, far_o = far["I"], far["W"], far["O"]
    for (ib, ie, _, i0, _), i_n in blocks(rows_i, e.t_h, d).items():
        ceil_i = np.ceil(ie / d)
        part_rows = ie % d
        for (jb, je, _, j0, j_off), j_n in k_blocks.items():
            b_row, st_row = b_req[(je, j_off)], s_req[(je, j_off)]
            for (kb, ke, kf, k0, k_off), k_n in c_blocks.items():
                count = i_n * j_n * k_n * groups
                pre = jb * kb
                ops = ib * jb * kb
                ex_rows = ie * jb * kb
                part_ops = jb * kb * float(part_rows > 0)
                first = (float(i0), float(j0), float(k0))
                load_a = load_b = 1.0
                for j in keep_a:
                    load_a = load_a * first[j]
                for j in keep_b:
                    load_b = load_b * first[j]
                a_row = a_req[(ke, k_off)]
                ld_req = load_a * ie * a_row + load_b * ke * b_row
                # stores behind others to the same 64-byte block: mvouts of up to DIM rows per DIM columns
                block_req = jb * chain_o[(ie, je)] if kf else 0.0
                dram_req = (load_a * ie * a_row * big_i * (ke < c_all)
                            + load_b * ke * b_row * big_w * (je < k_all))
                far_req = (load_a * ie * a_row * far_i * (ke < c_all)
                           + load_b * ke * b_row * far_w * (je < k_all))
                ld_bytes = (load_a * ie * ke + load_b * ke * je) * in_bytes
                fetch_a = fetch_b = 1.0
                for j in l2_a:
                    fetch_a = fetch_a * first[j]
                for j in l2_b:
                    fetch_b = fetch_b * first[j]
                far_bytes = (fetch_a * ie * ke * far_i + fetch_b * ke * je * far_w) * in_bytes
                if k0 and bias:  # accumulator initialisation, as in conv_calls
                    ld_req += ie * float(_acc_row_req(je, cols))
                    ld_bytes += ceil_i * je * ACC_BYTES * e.bias_bytes
                st_req = st_bytes = far_st_req = 0.0
                if kf:
                    st_req = ie * st_row
                    st_bytes = ie * je * out_bytes
                    dram_req += st_req * big_o * (je < k_all)
                    far_st_req = st_req * far_o * (je < k_all)
                    far_req += far_st_req
                out.append(
                    (count, rows, dram_bw, ld_req, ld_bytes, ex_rows, ops, pre, st_req, st_bytes, overlapped, 1.0,
                     part_ops, part_rows, 0.0, dram_req, block_req, far_req, far_bytes, far_st_req,
                     # (loop_ws: each call paired with itself)
                     ld_req, ld_bytes, st_req, st_bytes, dram_req, block_req, far_req, far_bytes, far_st_req)
                )
    return np.array(out, dtype=float).reshape(-1, len(FEATURE_COLUMNS))


@functools.lru_cache(maxsize=512)
def call_features(e: Execution, dram_bw: float) -> np.ndarray:
    """Feature rows of an execution's calls (read-only: kept per execution, since searches cost the same one many
    times: polish moves factors below DRAM without changing a call, retile's shortlist repeats what it ranked; a
    few hundred cover one layer's search and stay a few MB in a long-running service)."""
    rows = matmul_calls(e, dram_bw) if e.kind == "matmul" else conv_calls(e, dram_bw)
    rows.flags.writeable = False
    return rows


def call_features_many(es: list[Execution], dram_bw: float) -> tuple[np.ndarray, np.ndarray]:
    """`call_features` of several executions, stacked, and the execution each row belongs to (for
    `cycles_vectorised`): convolutions in one vectorised pass."""
    if es and all(e.kind == "conv" for e in es):
        return conv_calls_many(es, dram_bw)
    rows = [call_features(e, dram_bw) for e in es]
    return np.concatenate(rows).reshape(-1, len(FEATURE_COLUMNS)), np.repeat(np.arange(len(rows)), [len(r) for r in rows])


def gemmini_calls(problem: Problem, arch: Architecture, mapping: Mapping, executor: str | None = None) -> np.ndarray:
    """The call features of a mapping on Gemmini-like hardware: the one path from (layer, hardware, mapping) to
    what the cycle formula reads, shared by POST /evaluate, the CLI, the mappers, the benches and the calibration."""
    return call_features(execution_from_mapping(problem, arch, mapping, executor), nominal_dram_bandwidth(arch))


def gemmini_cycles(
    problem: Problem, arch: Architecture, mapping: Mapping, executor: str | None = None, params: CostParams | None = None
) -> GemminiCycles:
    """Cycles of a mapping on Gemmini-like hardware (parameters: the descriptor's, over the fitted defaults)."""
    return cycles_from_calls(
        gemmini_calls(problem, arch, mapping, executor), params or CostParams.for_descriptor(arch.hardware)
    )


def refill_cycles(p: Any) -> Any:
    """Cycles the SoC's memory bus takes to move one 64-byte block (REQUEST_BYTES, the L2's block) between the L2 and
    what lies behind it: a block over `mem_bus_bytes` a beat, one beat a cycle (rocket-chip's memory bus: 8 B)."""
    return REQUEST_BYTES / p["mem_bus_bytes"]


def whole_far_reads(col: Any, pre: str = "") -> Any:
    """A call's DRAM reads of whole rows: the loads DRAM serves (on tensors larger than the LLC) that `far_req` does not
    count because their rows are whole. Every 64-byte block DRAM reads is a read (DMA.scala's StreamReader: one TileLink
    get per block), whole row or strided, and waits on DRAM as long: `far_bytes` / 64 reads, less the strided loads
    DRAM serves (`far_req` - `far_st_req`, each a read of its own however few of its block's bytes it uses), at least 0.
    No parameter of its own: they wait `dram_request_cycles` + `llc_miss_cycles` as strided ones do and cross the
    memory bus (`refill_cycles`). The emulator counts the same (gemmini_emu.c, call_terms)."""
    loads = col[pre + "far_req"] - col[pre + "far_st_req"]
    return np.maximum(col[pre + "far_bytes"] / REQUEST_BYTES - loads, 0.0)


def _dma_cycles(col: Any, p: Any, pre: str = "") -> Any:
    """A call's DMA cycles from its DMA columns (`pre` = "nx_": the next call's, `_slot_loop`)."""
    bw = effective_dram_bandwidth(col["dram_bw"], p)
    dma = ((col[pre + "ld_req"] + col[pre + "st_req"]) * p["dma_request_cycles"]
           + (col[pre + "ld_bytes"] + col[pre + "st_bytes"]) / bw)
    # the loads' reads of whole rows that DRAM serves (`whole_far_reads`): each waits as a strided one does
    whole = whole_far_reads(col, pre)
    # a request on a tensor the L2 cannot hold waits on DRAM (`_beyond_l2`)
    dma = dma + (col[pre + "dram_req"] + whole) * p["dram_request_cycles"]
    # and waits longer still when the tensor is larger than the LLC too: DRAM serves it (`_beyond_l2` at llc_bytes); a
    # strided store's block goes to DRAM twice (the write-allocate L2 fills it before merging the write, and writes the
    # dirty block back), so it waits twice (`far_st_req`, no parameter of its own), as it crosses the memory bus twice
    far = col[pre + "far_req"] + col[pre + "far_st_req"] + whole
    dma = dma + far * p["llc_miss_cycles"]
    # and the DMA cannot load faster than DRAM reads a tensor larger than the LLC (`far_bytes` at DRAM's own rate)
    dma = np.maximum(dma, col[pre + "far_bytes"] * p["dram_byte_cycles"])
    # and each of those strided requests DRAM serves brings its whole 64-byte block into the L2 over the memory bus
    # (mem_bus_bytes a beat), a store's block back out again too (the L2 allocates on a write and writes back): the
    # bus moves a call's blocks no faster than that (`refill_cycles`; no fitted parameter)
    dma = np.maximum(dma, far * refill_cycles(p))
    # a store request waits for the ones before it to its 64-byte block (`_store_chain`)
    return dma + col[pre + "block_req"] * p["block_wait_cycles"]


def _cycle_terms(col: Any, p: Any) -> Any:
    """Per-call cycles over numpy columns (same code for evaluation and calibration)."""
    dma = _dma_cycles(col, p)
    # loop_conv_ws's two call slots (`call_slots`): a call's computes overlap the next call's loads, not its own
    # (`_slot_loop`; the call itself where the calls do not run through the FSM or the next call is alike)
    dma_nx = _dma_cycles(col, p, "nx_") if p.get("call_slots", 0.0) > 0 else dma
    # A compute instruction streams its rows (up to DIM) through the array, and occupies it for at least a fitted
    # share of DIM cycles however few rows it has (FireSim: tiles of 1-4 output columns run 2-4x slower per row
    # than full ones). Only a row's last piece can be short: `part_ops` computes of `part_rows` rows each.
    short = np.maximum(col["part_rows"], p["compute_floor_dims"] * col["dim"]) - col["part_rows"]
    rows = col["ex_rows"] + col["part_ops"] * short
    ex = rows + col["ex_ops"] * p["op_overhead_cycles"] + col["preloads"] * p["preload_dims"] * col["dim"]
    # loop_ws (matmuls) and loop_conv_ws (convolutions) are different FSMs: each hides DMA behind compute
    # to its own degree.
    loss = np.where(col["matmul"] > 0, p["overlap_loss_matmul"], p["overlap_loss"])
    overlapped = np.maximum(dma_nx, ex) + loss * np.minimum(dma_nx, ex)
    # The host issues the next call while the accelerator runs this one, so a call lasts at least the time to
    # issue it (tiled_conv's per-call set-up is longer than tiled_matmul's) and otherwise hides it.
    floor = np.where(col["matmul"] > 0, p["call_floor_matmul"], p["call_floor_cycles"])
    work = np.where(col["overlap"] > 0, overlapped, dma + ex)
    per_call = np.maximum(work, floor) + p["call_overhead_cycles"]
    return per_call * col["count"], dma * col["count"], ex * col["count"], loss


def _totals(col, p, row_id: np.ndarray, n_rows: int):  # type: ignore[no-untyped-def]
    """Cycles, DMA and execute time per run (`row_id` says which run each call row belongs to).

    Overlap needs a neighbour: loop_conv_ws computes nothing before all of a call's loads have arrived, so the
    first call's loads have no compute to hide behind and the last call's compute no loads, and a run of
    overlapped calls also pays, once, the part of one (average) call that the steady state hides. It matters for
    layers of a few calls and vanishes for long ones. loop_ws pays it too: its computes run k-block by k-block
    over every row block (k, j, i), so the first ones wait for A blocks of every row, which load late (FireSim:
    BERT's one-call 128x64x128 matmuls measure about DMA + compute + the run's overhead, 7.5k cycles, not their
    maximum; counting it takes held-out MAPE of DOSA's mappings from 12.1% to 11.9% by configuration)."""
    total, dma, ex, loss = _cycle_terms(col, p)
    count = np.bincount(row_id, weights=col["count"], minlength=n_rows)

    def per(v: np.ndarray) -> np.ndarray:
        return np.bincount(row_id, weights=v, minlength=n_rows) / np.maximum(count, 1)

    mean_dma, mean_ex = per(dma), per(ex)
    overlapped, mean_loss = per(col["overlap"] * col["count"]), per(loss * col["count"])
    fill = np.where(overlapped > 0.5, (1.0 - mean_loss) * np.minimum(mean_dma, mean_ex), 0.0)
    cycles = np.bincount(row_id, weights=total, minlength=n_rows) + fill + p["run_overhead_cycles"]
    # tiled_conv_auto's tile search runs on the host before the first call; nothing overlaps it
    cycles = cycles + np.bincount(row_id, weights=col["search"], minlength=n_rows) * p["tile_search_cycles"]
    return cycles, count * mean_dma, count * mean_ex, count


# What the calibration measured (bench/data): square arrays of these sizes, int8 operands.
CALIBRATED_ARRAYS = (16, 128)


def prediction_interval(cycles: float, op: str, bound: str) -> tuple[float, float]:
    """[low, high] cycles the hardware measures with probability INTERVAL_CONFIDENCE (params.py)."""
    from tileplan.cost.params import INTERVAL_LOG_QUANTILES

    lo, hi = INTERVAL_LOG_QUANTILES[(op, bound)]
    return float(cycles * np.exp(lo)), float(cycles * np.exp(hi))


def gemmini_notes(arch: Architecture, mapping: Mapping, executor: str | None = None) -> list[str]:
    """How the calibrated model read this hardware and mapping, and which of its parameters are extrapolated
    (measured only on square 16x16 and 128x128 int8 Gemminis with a 16-byte DMA beat)."""
    occupied = occupied_array(arch, mapping)
    executor = executor or mapping.executor or "library"
    # the same for every mapping that occupies the same array (every candidate a mapper scores, as a rule)
    key = (id(arch), occupied, executor)
    seen = _NOTES.get(key)
    if seen is None or seen[0] is not arch or seen[1] != arch.hardware.cost_params:
        if len(_NOTES) >= 256:
            _NOTES.clear()
        seen = _NOTES[key] = (arch, dict(arch.hardware.cost_params), _notes(arch, occupied, executor))
    return list(seen[2])


# (id(arch), occupied array, executor) -> (that architecture, its descriptor's cost_params then, the notes)
_NOTES: dict[tuple[int, tuple[int, int, int], str], tuple[Architecture, dict[str, float], list[str]]] = {}


def _notes(arch: Architecture, occupied: tuple[int, int, int], executor: str) -> list[str]:
    params = CostParams.for_descriptor(arch.hardware)
    p = params.as_dict()
    rows, cols = array_extent(arch)
    dim, used_r, used_c = occupied
    runs = {
        "library": "Gemmini's library (tiled_conv / tiled_matmul)",
        "library-auto": "Gemmini's library through its own tiler (tiled_conv_auto / tiled_matmul_auto)",
    }.get(executor, "Tileplan's generated code")
    notes = [f"calibrated Gemmini model (FireSim); calls run by {runs}"]
    if executor == "library-auto":
        notes.append(
            f"tiled_conv_auto searches for its tile on the host first ({p['tile_search_cycles']:.0f} cycles per "
            "candidate tile it sizes); tiled_matmul_auto's few candidates are not counted"
        )
    if (used_r, used_c) != (rows, cols) and executor == "tileplan":
        notes.append(f"Tileplan's code runs blocks of the whole {rows}x{cols} array, whatever the spatial factors say")
    elif (used_r, used_c) != (rows, cols):
        notes.append(
            f"the mapping's spatial factors occupy {used_r}x{used_c} of the {rows}x{cols} array: it runs as software "
            f"for a {dim}-wide array"
        )
    rate = float(effective_dram_bandwidth(0.0, p))
    nominal = nominal_dram_bandwidth(arch)
    notes.append(
        f"DRAM: the calibrated DMA rate, {rate:.2f} B/cycle ({p['dma_bytes_per_cycle']:g} B/cycle peak x "
        f"{p['dram_efficiency']:.3f}); the descriptor's nominal {nominal:g} B/cycle is not used by this model "
        "(set cost_params.dram_efficiency or dma_bytes_per_cycle to model another memory system); requests on a "
        f"tensor larger than the {p['l2_bytes'] / 1024:g} KiB L2 wait {p['dram_request_cycles']:.2f} cycles more, "
        f"{p['llc_miss_cycles']:.2f} more again beyond the {p['llc_bytes'] / 1024:g} KiB LLC"
    )
    default = CostParams().as_dict()
    own = sorted(k for k, v in arch.hardware.cost_params.items() if k in default and abs(v - default[k]) > 1e-9)
    if own:
        notes.append("the descriptor's own cost_params (not the fitted defaults): " + ", ".join(own))
    return notes + ["extrapolated: " + e for e in extrapolation_notes(arch)]


def extrapolation_notes(arch: Architecture) -> list[str]:
    """Which calibrated parameters a Gemmini-like descriptor takes beyond what was measured (empty: none)."""
    rows, cols = array_extent(arch)
    extrapolated: list[str] = []
    if rows != cols:
        extrapolated.append(
            f"a {rows}x{cols} array is not square (measured: square only): input channels are blocked by its "
            f"{rows} rows and output channels by its {cols} columns, so cycles never drop below the ideal, but "
            "preload_dims (per weight block, x its rows) and compute_floor_dims (per compute, x its rows) are extrapolated"
        )
    measured = " and ".join(f"{d}x{d}" for d in CALIBRATED_ARRAYS)
    pow2 = not (rows & (rows - 1) or cols & (cols - 1))
    if pow2 and rows == cols and 2 <= rows <= max(CALIBRATED_ARRAYS) and rows not in CALIBRATED_ARRAYS:
        extrapolated.append(
            f"no FireSim run on a {rows}x{cols} chip (measured: {measured}); software arrays of that size were "
            "measured on the 128x128 one, so the DIM-scaled parameters are interpolated, and the host issue times "
            "(call_floor_cycles, call_floor_matmul, run_overhead_cycles) are taken as measured there"
        )
    elif not pow2 or max(rows, cols) > max(CALIBRATED_ARRAYS):
        extrapolated.append(
            f"array size {rows}x{cols} (measured: {measured}, software arrays of 2-128, powers of two): "
            "call_floor_cycles, call_floor_matmul and run_overhead_cycles (host issue times), preload_dims and "
            "compute_floor_dims are extrapolated"
        )
    if arch.input_bytes != 1:
        extrapolated.append(
            f"{arch.input_bytes * 8:g}-bit operands (measured: 8-bit): dma_request_cycles and DMA row splitting "
            "are extrapolated"
        )
    return extrapolated


@dataclass(frozen=True)
class GemminiCycles:
    cycles: float
    dma: float
    execute: float
    calls: float
    bound: str  # "compute" or "DRAM"


def merge_identical_calls(x: np.ndarray) -> np.ndarray:
    """One run's call rows with the rows that differ only in how many calls they stand for merged (their
    `count`s, and the host's `search` candidates, add up). Every cycle term is a per-call figure times `count` or
    a sum over rows, so the run's cycles are unchanged; the calibration evaluates far fewer rows (tile classes
    that differ only in where they start in a 64-byte block mostly cost the same: ~1.2M rows -> ~8k on the
    random-mapping set)."""
    if len(x) < 2:
        return x
    additive = [FEATURE_COLUMNS.index("count"), FEATURE_COLUMNS.index("search")]
    rest = [i for i in range(x.shape[1]) if i not in additive]
    keys, inverse = np.unique(x[:, rest], axis=0, return_inverse=True)
    out = np.zeros((len(keys), x.shape[1]))
    out[:, rest] = keys
    for i in additive:
        out[:, i] = np.bincount(inverse.ravel(), weights=x[:, i], minlength=len(keys))
    return out


def cycles_from_calls(x: np.ndarray, p: CostParams) -> GemminiCycles:
    col = {name: x[:, i] for i, name in enumerate(FEATURE_COLUMNS)}
    total, dma, ex, calls = (float(v[0]) for v in _totals(col, p.model_dump(), np.zeros(len(x), dtype=int), 1))
    return GemminiCycles(total, dma, ex, calls, "DRAM" if dma >= ex else "compute")


def cycles_many(es: list[Execution], dram_bw: float, params: CostParams) -> list[GemminiCycles]:
    """`cycles_from_calls(call_features(e, dram_bw), params)` of each execution, all costed in one vectorised pass
    (per execution the same arithmetic, summed in the same order, as costing it alone): mappers rank thousands."""
    if not es:
        return []
    if all(e.kind == "conv" for e in es):  # the rows' columns as conv_calls_many works them out, unstacked
        col, row_id = _conv_columns(es, dram_bw)
    else:
        x, row_id = call_features_many(es, dram_bw)
        col = {name: x[:, i] for i, name in enumerate(FEATURE_COLUMNS)}
    totals = _totals(col, params.model_dump(), row_id, len(es))
    return [GemminiCycles(total, dma, ex, calls, "DRAM" if dma >= ex else "compute")
            for total, dma, ex, calls in zip(*(v.tolist() for v in totals))]


def cycles_vectorised(x: np.ndarray, row_id: np.ndarray, n_rows: int, theta: dict) -> np.ndarray:
    """Total cycles per data row; `x` stacks the call features of all rows, `row_id` says whose they are."""
    col = {name: x[:, i] for i, name in enumerate(FEATURE_COLUMNS)}
    return _totals(col, theta, row_id, n_rows)[0]


__all__ = [
    "Execution", "FEATURE_COLUMNS", "GemminiCycles", "merge_identical_calls", "call_features", "call_features_many", "cycles_from_calls", "cycles_many", "cycles_vectorised", "kernel_fold",
    "execution_from_mapping", "effective_dram_bandwidth", "gemmini_calls", "gemmini_cycles", "gemmini_levels", "library_matmul_keeps", "LibraryTerms", "library_terms",
    "max_block_len", "nominal_dram_bandwidth", "refill_cycles", "runs_as_matmul",
]
