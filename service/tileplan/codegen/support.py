"""Which hardware Tileplan generates code for, decided from the descriptor alone.

Imports nothing of TVM, so the API and the CLI can refuse `codegen` on other hardware at once (a 422 / exit 2
with the reason) instead of starting a build that cannot succeed. The code generator itself asks the same
question first (`pipeline.target_spec`), so both give the same reason.
"""

from __future__ import annotations

from tileplan.execution import library_dataflows
from tileplan.hardware import HardwareDescriptor

GEMMINI_LIKE = (
    "Tileplan generates code for Gemmini-like accelerators (PE registers keeping weights, an output accumulator, "
    "one scratchpad keeping inputs and weights, DRAM), run as calls of Gemmini's library"
)


def codegen_unsupported(hw: HardwareDescriptor) -> str | None:
    """Why no code can be generated for `hw`, or None if it can (a plan of any of its dataflows: the generated
    calls realise the plan's tiles whichever loop the array keeps stationary)."""
    if not library_dataflows(hw):
        return f"no code generator for {hw.name}: {GEMMINI_LIKE}; its memory hierarchy is not one"
    pe = hw.pe_array
    if pe.rows != pe.cols:
        return f"the Gemmini target needs a square PE array, {hw.name} has {pe.rows}x{pe.cols}"
    return None
