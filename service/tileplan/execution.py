"""How a hierarchy executes a mapping, where that is more than a plain loop nest.

Gemmini-like hardware (registers -> output accumulator -> I/W scratchpad -> DRAM) runs a mapping as one
call of its software library per iteration of the DRAM loops (see tileplan.cost.gemmini for the full
semantics, measured on FireSim). A call owns everything below DRAM: its input and weight tiles sit in
the scratchpad and its whole output tile stays in the accumulator until the call's last reduction
step. The checker, the cost model, the mappers and the code generator all ask this module, so they
agree on which hardware executes that way.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from tileplan.hardware import Architecture, HardwareDescriptor
from tileplan.mapping import Mapping


@dataclass(frozen=True)
class LibraryLevels:
    accumulator: int
    scratchpad: int
    dram: int


def gemmini_levels(arch: Architecture) -> tuple[int, int, int] | None:
    """(accumulator, scratchpad, DRAM) level indices when `arch` is Gemmini-like, else None.

    Gemmini-like: the outermost level is the backing store; directly below it one scratchpad instance that
    keeps inputs and weights but not outputs; directly below that an on-chip level that keeps outputs and
    neither operand (the accumulator); anything below it keeps only weights (the PE registers of a
    weight-stationary array: the library's loop_ws / loop_conv_ws preload weights, so an output-stationary
    view of the same array is not executed this way).
    Level names do not matter, so a Timeloop-imported Gemmini qualifies like the catalog entries.
    """
    seen = _LEVELS.get(id(arch))
    if seen is not None and seen[0] is arch:  # (asked per candidate by the cost model, the checker, the mappers)
        return seen[1]
    found = _gemmini_levels(arch)
    if len(_LEVELS) >= 64:
        _LEVELS.clear()
    _LEVELS[id(arch)] = (arch, found)
    return found


# id(arch) -> (that architecture, its gemmini_levels): an Architecture is frozen, its levels a tuple of frozen levels
_LEVELS: dict[int, tuple[Architecture, tuple[int, int, int] | None]] = {}


def _gemmini_levels(arch: Architecture) -> tuple[int, int, int] | None:
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
        if lv.keeps - {"W"}:
            return None
    return a, s, d


def array_extent(arch: Architecture) -> tuple[int, int]:
    """(rows, cols) of a Gemmini-like array as its weight-stationary library uses it: the rows carry input
    channels (the fan-out below the scratchpad: accumulator slices x anything under them), the columns output
    channels (the scratchpad's fan-out). Read from the fan-outs, not from `pe_array.rows/cols`, so the model
    agrees with the checker on how far a mapping may unroll each way; rows x cols = the MACs."""
    levels = gemmini_levels(arch)
    if levels is None:
        raise ValueError(f"{arch.name} is not Gemmini-like")
    spad = levels[1]
    return math.prod(lv.fanout for lv in arch.levels[:spad]), arch.levels[spad].fanout


def occupied_array(arch: Architecture, mapping: Mapping) -> tuple[int, int, int]:
    """(software DIM, rows, cols) of the array a mapping runs on: the part its spatial factors occupy.

    Gemmini's software works in square DIM x DIM blocks (mvin/preload/compute/mvout of at most DIM rows of DIM
    elements); a mapping that unrolls fewer than the array's rows or columns runs as software built for a smaller
    DIM: the smallest power of two covering its spatial factors (on a power-of-two array; clipped to the array
    otherwise). That is what DOSA's FireSim harness did (one binary per `--pe_dim`), and it keeps the promise of
    the mapping: a plan on 4 x 4 of 16 x 16 PEs takes 16 times longer per block than one on all of them. Rows
    are the spatial factors below the scratchpad (input channels), columns the scratchpad's (output channels);
    the blocks are the software DIM clipped to the array's extent each way, so a non-square array is never
    credited with more PEs than it has. A mapping with no spatial factor at all states no array and gets the whole
    one (DOSA's mappings always unroll something)."""
    levels = gemmini_levels(arch)
    if levels is None:
        raise ValueError(f"{arch.name} is not Gemmini-like")
    spad = levels[1]
    rows, cols = array_extent(arch)
    used_rows = math.prod(lv.spatial_total for lv in mapping.levels[:spad])
    used_cols = mapping.levels[spad].spatial_total
    if used_rows == used_cols == 1:
        # a mapping that unrolls nothing states no array: the software uses the whole one
        return max(rows, cols), rows, cols
    dim = 1
    while dim < max(used_rows, used_cols, 2):
        dim *= 2
    return min(dim, max(rows, cols)), min(dim, rows), min(dim, cols)


def library_levels(arch: Architecture) -> LibraryLevels | None:
    levels = gemmini_levels(arch)
    return None if levels is None else LibraryLevels(*levels)


def library_dataflows(hw: HardwareDescriptor) -> list[str]:
    """Dataflows of `hw` that its software library executes (empty when it has no such library)."""
    return [df for df in hw.dataflow_names if library_levels(hw.resolve(df)) is not None]


def call_loop_order(dram_temporal: Iterable[tuple[str, int]], dims: Sequence[str], reduction: Collection[str]) -> list[str]:
    """The order in which Tileplan's code runs the DRAM loops (one call each), outermost first.

    `dram_temporal` is the plan's DRAM level (innermost first, as Mappings list loops); dimensions it does not
    list come first (outermost, in `dims` order); then the reduction loops move inside the output loops, so
    partial sums stay in the accumulator for the whole reduction. The code generator and the cost model both
    take the order from here, so what the model counts as a tile kept between consecutive calls is what the
    code keeps."""
    listed: list[str] = []
    for d, _ in reversed(list(dram_temporal)):
        if d not in listed:
            listed.append(d)
    order = [d for d in dims if d not in listed] + listed
    return [d for d in order if d not in reduction] + [d for d in order if d in reduction]
