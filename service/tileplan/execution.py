"""How a hierarchy executes a mapping, where that is more than a plain loop nest.

Gemmini-like hardware (registers -> output accumulator -> I/W scratchpad -> DRAM) runs a mapping as one
call of its software library per iteration of the DRAM loops (see tileplan.cost.gemmini for the full
semantics, measured on FireSim). A call owns everything below DRAM: its input and weight tiles sit in
the scratchpad and its whole output tile stays in the accumulator until the call's last reduction
step. The checker, the cost model, the mappers and the code generator all ask this module, so they
agree on which hardware executes that way.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from tileplan.hardware import Architecture, HardwareDescriptor


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
