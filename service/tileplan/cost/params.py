"""The free parameters of the Gemmini-aware cost model (tileplan.cost.gemmini).

Few and named, each one a mechanism of the hardware, each stated relative to the descriptor so the same
values carry from a 128x128 array to a 16x16 one:
- DRAM throughput is a fraction of the descriptor's DRAM bandwidth (bytes/cycle);
- every DMA request (<= 64 B of one row; Gemmini's DMA) costs a fixed number of cycles on top of its bytes;
- the weight preload of a DIM x DIM block is in units of DIM cycles;
- fixed issue costs (per compute instruction, per library call) are in plain cycles.

Defaults are the values fitted on the DOSA FireSim data set (128x128, see bench/results/costmodel.md);
`CostParams.for_descriptor(hw)` overlays whatever a descriptor stores under `cost_params`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tileplan.hardware import HardwareDescriptor


class CostParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dram_efficiency: float = Field(
        default=0.4799, gt=0, description="Effective DRAM bandwidth as a fraction of the descriptor's DRAM bandwidth."
    )
    dma_request_cycles: float = Field(
        default=0.8578, ge=0, description="Cycles each DMA request (<= 64 B of one row) occupies the DMA, on top of its bytes."
    )
    op_overhead_cycles: float = Field(
        default=1.159, ge=0, description="Issue cycles per compute instruction on top of one cycle per streamed row."
    )
    preload_dims: float = Field(
        default=0.05569, ge=0, description="Weight preload per DIM x DIM block, in DIM cycles (not hidden by the FSM)."
    )
    call_overhead_cycles: float = Field(
        default=116.6, ge=0, description="Cycles per library call (one scratchpad tile): CPU issue, FSM start, drain."
    )
    overlap_loss: float = Field(
        default=0.3192, ge=0, le=1,
        description="Share of the shorter of DMA and compute time per call that double buffering fails to hide.",
    )

    @classmethod
    def for_descriptor(cls, hw: HardwareDescriptor) -> "CostParams":
        """Defaults overlaid with the descriptor's stored `cost_params` (unknown keys are ignored)."""
        stored = {k: v for k, v in hw.cost_params.items() if k in cls.model_fields}
        return cls(**stored) if stored else DEFAULT_PARAMS

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.model_dump().items()}


# Names the calibration fits.
FITTED: tuple[str, ...] = (
    "dram_efficiency",
    "dma_request_cycles",
    "op_overhead_cycles",
    "preload_dims",
    "call_overhead_cycles",
    "overlap_loss",
)

DEFAULT_PARAMS = CostParams()
