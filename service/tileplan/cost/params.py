"""The free parameters of the Gemmini-aware cost model (tileplan.cost.gemmini).

Few and named, each one a mechanism of the hardware, each stated relative to the descriptor so the same
values carry from a 128x128 array to a 16x16 one:
- cycles that scale with the array (fill/drain, preload) are in units of DIM cycles;
- DRAM throughput is a fraction of the descriptor's DRAM bandwidth;
- DMA requests are at most 64 bytes (Gemmini's DMA); a short or strided row still costs a request;
- fixed software/issue costs are in plain cycles (they do not grow with the array).

Defaults are the values fitted on the DOSA FireSim data set (128x128, see bench/results/costmodel.md);
`CostParams.for_descriptor(hw)` overlays whatever a descriptor stores under `cost_params`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tileplan.hardware import HardwareDescriptor


class CostParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dram_efficiency: float = Field(
        default=0.9824, gt=0, description="Effective DRAM bandwidth as a fraction of the descriptor's DRAM bandwidth."
    )
    dma_request_cycles: float = Field(
        default=0.8116, ge=0, description="Cycles each DMA request (<= dma_request_bytes of one row) costs on top of its bytes."
    )
    dma_request_bytes: int = Field(default=64, gt=0, description="Largest DMA request (Gemmini: 64 B); a fact, not fitted.")
    preload_dims: float = Field(
        default=0.06248, ge=0, description="Weight preload per DIM x DIM block, in DIM cycles (hidden by >= that many rows)."
    )
    block_overhead_dims: float = Field(
        default=0.05929, ge=0, description="Systolic fill/drain per block, in DIM cycles, not hidden."
    )
    instruction_cycles: float = Field(
        default=0.0, ge=0, description="Issue cycles per compute instruction (one per iteration above the PE registers)."
    )
    spad_row_cycles: float = Field(
        default=1.0, ge=0, description="Cycles per scratchpad row (DIM bytes) of operands read into the array."
    )
    tile_overhead_cycles: float = Field(
        default=97.1, ge=0, description="Issue/configuration cycles per accumulator-tile execution (one loop call)."
    )
    mvout_row_cycles: float = Field(
        default=0.0, ge=0, description="Accumulator read-out cycles per output row moved out (mvout)."
    )
    overlap_loss: float = Field(
        default=0.8092, ge=0, le=1,
        description="Share of the shorter of DMA and execute time that double buffering fails to hide (0: perfect).",
    )

    @classmethod
    def for_descriptor(cls, hw: HardwareDescriptor) -> "CostParams":
        """Defaults overlaid with the descriptor's stored `cost_params` (unknown keys are ignored)."""
        stored = {k: v for k, v in hw.cost_params.items() if k in cls.model_fields}
        return cls(**stored) if stored else DEFAULT_PARAMS

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.model_dump().items()}


# Names the calibration fits (dma_request_bytes is a hardware fact).
FITTED: tuple[str, ...] = (
    "dram_efficiency",
    "dma_request_cycles",
    "preload_dims",
    "block_overhead_dims",
    "instruction_cycles",
    "spad_row_cycles",
    "tile_overhead_cycles",
    "mvout_row_cycles",
    "overlap_loss",
)

DEFAULT_PARAMS = CostParams()
