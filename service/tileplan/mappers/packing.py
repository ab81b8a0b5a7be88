"""Packing groups onto the array: which `Mapping.group_pack` factors a grouped layer's planning tries.

A depthwise convolution (C = K = 1 per group) planned group by group occupies one row and one column of a
weight-stationary array: every weight preload and every streamed input row serves one channel (MobileNetV2's
depthwise layers ran at under 1% of a 16x16 Gemmini's peak that way). Packing b groups into one
(`Problem.packed`) gives the array b x C rows and b x K columns of a block-diagonal weight tile: each streamed
input row (b x C channels of one pixel, contiguous in NHWC) feeds b groups at once. Of the b^2 C K MACs per tap
only b C K are useful, and the planner sees exactly that: the packed problem's loop nest, traffic (its weights
are b times larger, zeros included) and cycles are what the generated code runs (it lays the zeros out and
multiplies them). So the cost model, not a rule, decides between packings, as it decides tilings.

Packing more groups than the array's rows (or columns) hold only adds whole zero blocks, so the candidate is the
largest divisor b of G with b x C <= rows and b x K <= columns; the layer's own grouping (b = 1) always competes.
Smaller packings are not tried: each streamed input row then feeds fewer groups, and folding kernel columns into
the freed rows (`kernel_fold`) only trades columns for rows. Planned with every divisor on four of MobileNetV2's
depthwise shapes (3x3 over 144 channels at 56x56, 96 at 112x112 stride 2, 576 at 14x14, 960 at 7x7, on
gemmini-16x16), every smaller divisor scored worse than the largest (960 channels packed 15 per block: 8% more
cycles than 16; 144 channels 12 per block: 31% more).
Only for hardware whose software library Tileplan generates code for, scored by the calibrated model (Gemmini):
elsewhere no code runs the packed layer and its Timeloop export would describe another problem.
"""

from __future__ import annotations

from tileplan.cost.model import model_for
from tileplan.errors import InputError
from tileplan.execution import array_extent, library_levels
from tileplan.hardware import HardwareDescriptor
from tileplan.mappers.base import searched_dataflows
from tileplan.problem import Problem, divisors

# The mappers whose plans may pack groups: the hand-written baseline (gemmini-auto) runs one group per call,
# as Gemmini's library does.
PACKING_MAPPERS = frozenset({"cosa", "random", "exhaustive"})


def group_packs(problem: Problem, hw: HardwareDescriptor, mapper: str, dataflow: str | None = None) -> list[int]:
    """The pack factor (> 1) worth planning `problem` with on `hw`, as a list (empty: plan the layer as it is).
    `dataflow`: the one the plan is restricted to, if any."""
    g = problem.dims["G"]
    if g == 1 or problem.group_pack != 1 or mapper not in PACKING_MAPPERS:
        return []
    try:
        dataflows = searched_dataflows(hw, dataflow)
    except InputError:  # (the mapper itself says what is wrong with the dataflow)
        return []
    extents = []
    for df in dataflows:
        arch = hw.resolve(df)
        if library_levels(arch) is None or model_for(arch) != "gemmini":
            return []
        extents.append(array_extent(arch))
    rows = max(r for r, _ in extents)
    cols = max(c for _, c in extents)
    c, k = problem.dims["C"], problem.dims["K"]
    fits = [b for b in divisors(g) if b > 1 and b * c <= rows and b * k <= cols]
    return fits[-1:]
