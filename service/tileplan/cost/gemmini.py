"""Gemmini-aware cycle model: the mechanisms that decide how fast a Gemmini-like array runs a mapping.

A Gemmini-like descriptor (see `gemmini_levels`) has, innermost first, optional PE registers, an
accumulator that keeps only outputs (one instance per array column), a single scratchpad that keeps
inputs and weights, and DRAM. The mapping is executed the way Gemmini's software and loop FSMs run it:

- Every iteration of the loops above the accumulator is one *accumulator-tile execution*: the array
  computes an output tile of X.K channels x X.N*X.P*X.Q pixels over X.C input channels and X.R*X.S taps
  (X: the tile extents up to the accumulator, times the scratchpad's spatial factors).
- Execute: the tile is cut into DIM x DIM weight *blocks*, ceil(K/DIM) * ceil(C/DIM) * R * S of them
  (padding a partial block wastes the rest of the array). Each block preloads its weights (about DIM
  cycles, `preload_dims`) and streams the tile's pixels through the array (one row per cycle), so a block
  costs max(pixels, preload) plus a systolic fill/drain that is not hidden (`block_overhead_dims` x DIM).
- DMA: tiles move between DRAM and the scratchpad/accumulator as rows: one input pixel's channels, one
  weight row of output channels per (r, s, c), one output pixel's channels. Each row is at least one DMA
  request of at most 64 bytes, so short or strided rows cost requests, not just bytes:
  time = bytes / (DRAM bandwidth x `dram_efficiency`) + requests x `dma_request_cycles`
  + output rows x `mvout_row_cycles` (accumulator read-out). Partial sums that leave before their reduction
  is complete go out and come back at accumulator width.
- Load, execute and store run in decoupled queues with double buffering: the longer of DMA and execute
  sets the pace, `overlap_loss` of the shorter one is not hidden, the first tile's load is never hidden,
  and every execution pays `tile_overhead_cycles` of issue/configuration.

All mapping-dependent quantities are gathered in `GemminiFeatures` (independent of the parameters), so the
cycle formula `cycles_from_features` is a few arithmetic operations, vectorisable for calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tileplan.cost.params import CostParams
from tileplan.dims import DIMS, RELEVANT
from tileplan.hardware import Architecture
from tileplan.nest import NestAnalysis


def gemmini_levels(arch: Architecture) -> tuple[int, int, int] | None:
    """(accumulator, scratchpad, DRAM) level indices when `arch` is Gemmini-like, else None.

    Gemmini-like: the outermost level is the backing store; directly below it one scratchpad instance that
    keeps inputs and weights but not outputs; directly below that an on-chip level that keeps outputs and
    neither operand (the accumulator); anything below it keeps a single tensor per PE (registers).
    Level names do not matter, so a Timeloop-imported Gemmini qualifies like the catalog entries.
    """
    n = len(arch.levels)
    if n < 3:
        return None
    d, s, a = n - 1, n - 2, n - 3
    dram, spad, acc = arch.levels[d], arch.levels[s], arch.levels[a]
    if not dram.is_backing_store or spad.is_backing_store or acc.is_backing_store:
        return None
    if spad.instances != 1 or not {"I", "W"} <= spad.keeps or "O" in spad.keeps:
        return None
    if "O" not in acc.keeps or acc.keeps & {"I", "W"}:
        return None
    for lv in arch.levels[:a]:
        if len(lv.keeps) > 1:
            return None
    return a, s, d


@dataclass(frozen=True)
class GemminiFeatures:
    """What a mapping does on a Gemmini-like array, before any parameter is applied."""

    dim: int  # array rows (= DIM for a square array)
    dram_bw: float  # descriptor DRAM bytes/cycle
    executions: float  # accumulator-tile executions
    blocks: float  # weight blocks preloaded into the array, over all executions
    pixels: float  # rows streamed per block (average)
    instructions: float  # compute instructions (iterations of the loops above the innermost level)
    spad_bytes: float  # operand bytes read from the scratchpad into the array
    dram_bytes: float  # bytes moved to and from DRAM
    requests: float  # DMA requests (each <= request bytes)
    out_rows: float  # rows moved out of the accumulator
    first_load_bytes: float  # bytes of the first tile's load (never hidden)
    first_load_requests: float
    padded_blocks_util: float  # useful share of the DIM x DIM blocks (padding waste)

    def as_row(self) -> list[float]:
        return [
            self.dim, self.dram_bw, self.executions, self.blocks, self.pixels, self.instructions, self.spad_bytes,
            self.dram_bytes,
            self.requests, self.out_rows, self.first_load_bytes, self.first_load_requests,
        ]


FEATURE_COLUMNS = (
    "dim", "dram_bw", "executions", "blocks", "pixels", "instructions", "spad_bytes", "dram_bytes",
    "requests", "out_rows", "first_load_bytes", "first_load_requests",
)


def _requests(rows: float, row_bytes: float, req_bytes: int) -> float:
    return rows * max(1, math.ceil(row_bytes / req_bytes))


def features(nest: NestAnalysis, levels: tuple[int, int, int], req_bytes: int = 64) -> GemminiFeatures:
    arch, mapping, problem = nest.arch, nest.mapping, nest.problem
    a, s, d = levels
    rows_dim, cols_dim = arch.hardware.pe_array.rows, arch.hardware.pe_array.cols
    dram = arch.levels[d]
    dram_bw = dram.read_bandwidth or dram.write_bandwidth or float(rows_dim)

    # X: the accumulator tile as the whole array sees it (the scratchpad's spatial factors included).
    x = dict(nest.tiles[a])
    for dim, f in mapping.levels[s].spatial:
        x[dim] *= f
    executions = math.prod(f for lv in mapping.levels[a + 1 :] for _, f in lv.temporal)
    # Blocks: each time the stationary tensor (what the innermost level keeps: W under WS) is reloaded into
    # the array. Loops above the innermost level that do not index it reuse the block in place; the rest
    # of the temporal iterations stream rows through it.
    inner = arch.levels[0]
    stationary = next(iter(inner.keeps)) if a > 0 and len(inner.keeps) == 1 else "W"
    rel = RELEVANT[stationary]
    blocks, seen = 1, False
    for lv in mapping.levels[1:] if a > 0 else mapping.levels:
        for dim, f in lv.temporal:
            seen = seen or dim in rel
            if seen:
                blocks *= f
    iterations = math.prod(f for lv in mapping.levels for _, f in lv.temporal)
    pixels = iterations / blocks
    # Compute instructions: one per iteration of the loops above the innermost level (each streams the
    # innermost level's rows through the array).
    instructions = iterations / math.prod(f for _, f in mapping.levels[0].temporal) if a > 0 else iterations
    # Operand bytes read out of the scratchpad into the array (weights preloaded, inputs streamed).
    spad_operand_bytes = sum(
        tr.fills for tr in nest.transfers if tr.upper == s and tr.tensor in ("W", "I")
    ) * arch.input_bytes
    useful = nest.spatial_used / arch.macs

    in_b, acc_b, out_b = arch.input_bytes, arch.acc_bytes, arch.output_bytes
    real = {t: 1.0 for t in "WIO"}
    for t, rel in (("W", "GKCRS"), ("I", "NGCPQRS"), ("O", "NGKPQ")):
        for dim in rel:
            real[t] *= problem.dims[dim] / nest.bounds[dim]

    dram_bytes = requests = out_rows = 0.0
    first_bytes = first_req = 0.0
    t_s = nest.tiles[s]
    for tr in nest.transfers:
        if tr.upper != d:
            continue
        if tr.tensor in ("W", "I"):
            tile = nest.tile_elems[s][tr.tensor] if tr.lower == s else None
            if tile is None:  # an operand that bypasses the scratchpad: treat its tile as moved per fill
                tile = max(1.0, tr.fills)
            loads = tr.fills / tile
            if tr.tensor == "I":
                h = problem.input_extent(t_s["P"], t_s["R"], 0)
                w = problem.input_extent(t_s["Q"], t_s["S"], 1)
                rows, row_bytes = t_s["N"] * t_s["G"] * h * w, t_s["C"] * in_b
            else:
                rows, row_bytes = t_s["G"] * t_s["R"] * t_s["S"] * t_s["C"], t_s["K"] * in_b
            b = tr.fills * in_b * real[tr.tensor]
            r = _requests(loads * rows, row_bytes, req_bytes)
            dram_bytes += b
            requests += r
            first_bytes += b / max(loads, 1.0)
            first_req += r / max(loads, 1.0)
        else:  # outputs between the accumulator and DRAM
            o_size = x["N"] * x["G"] * x["K"] * x["P"] * x["Q"]
            rows_per_tile = x["N"] * x["G"] * x["P"] * x["Q"] * math.ceil(x["K"] / cols_dim)
            row_elems = min(x["K"], cols_dim)
            final = tr.final_updates / o_size
            partial = (tr.updates - tr.final_updates) / o_size
            back = tr.fills / o_size
            dram_bytes += real["O"] * (tr.final_updates * out_b + (tr.updates - tr.final_updates + tr.fills) * acc_b)
            requests += _requests(final * rows_per_tile, row_elems * out_b, req_bytes)
            requests += _requests((partial + back) * rows_per_tile, row_elems * acc_b, req_bytes)
            out_rows += (final + partial) * rows_per_tile
    return GemminiFeatures(
        dim=rows_dim, dram_bw=dram_bw, executions=float(executions), blocks=float(blocks), pixels=float(pixels),
        instructions=float(instructions), spad_bytes=float(spad_operand_bytes),
        dram_bytes=dram_bytes, requests=requests, out_rows=out_rows,
        first_load_bytes=first_bytes, first_load_requests=first_req, padded_blocks_util=useful,
    )


@dataclass(frozen=True)
class GemminiCycles:
    cycles: float
    dma: float
    execute: float
    overhead: float
    bound: str  # "compute" or "DRAM"


def _cycle_terms(col, p) -> tuple:
    """The cycle formula over scalars or numpy columns (same code for evaluation and calibration)."""
    bw = col["dram_bw"] * p["dram_efficiency"]
    dma = col["dram_bytes"] / bw + col["requests"] * p["dma_request_cycles"] + col["out_rows"] * p["mvout_row_cycles"]
    block = np.maximum(col["pixels"], p["preload_dims"] * col["dim"]) + p["block_overhead_dims"] * col["dim"]
    execute = (
        col["blocks"] * block
        + col["instructions"] * p["instruction_cycles"]
        + col["spad_bytes"] / col["dim"] * p["spad_row_cycles"]
    )
    first = col["first_load_bytes"] / bw + col["first_load_requests"] * p["dma_request_cycles"]
    overhead = col["executions"] * p["tile_overhead_cycles"] + first
    total = np.maximum(dma, execute) + p["overlap_loss"] * np.minimum(dma, execute) + overhead
    return total, dma, execute, overhead


def cycles_from_features(f: GemminiFeatures, p: CostParams) -> GemminiCycles:
    col = {name: getattr(f, name) for name in FEATURE_COLUMNS}
    total, dma, execute, overhead = _cycle_terms(col, p.model_dump())
    return GemminiCycles(float(total), float(dma), float(execute), float(overhead), "DRAM" if dma >= execute else "compute")


def cycles_vectorised(x: np.ndarray, theta: dict[str, float | np.ndarray]) -> np.ndarray:
    """`cycles_from_features` over a matrix whose columns are FEATURE_COLUMNS (for calibration)."""
    col = {name: x[:, i] for i, name in enumerate(FEATURE_COLUMNS)}
    return _cycle_terms(col, theta)[0]


__all__ = [
    "DIMS", "FEATURE_COLUMNS", "GemminiCycles", "GemminiFeatures", "cycles_from_features", "cycles_vectorised",
    "features", "gemmini_levels",
]
