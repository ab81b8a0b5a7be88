"""The free parameters of the Gemmini-aware cost model (tileplan.cost.gemmini).

Few and named, each one a mechanism of the hardware, each stated relative to the descriptor so the same
values carry from a 128x128 array to a 16x16 one:
- DRAM throughput is a fraction of the DMA engine's peak (16 B/cycle on Gemmini), capped by the descriptor's
  DRAM bandwidth: Timeloop descriptions of the same chip say 8 or 5.75 B/cycle, which are guesses of that
  effective rate, not a peak to scale;
- every DMA request (<= 64 B of one row; Gemmini's DMA) costs a fixed number of cycles on top of its bytes;
- the weight preload of a DIM x DIM block is in units of DIM cycles;
- fixed issue costs (per compute instruction, per library call) are in plain cycles.

Defaults are the values fitted on DOSA's FireSim runs (random mappings and 16x16 artifact runs, see
bench/results/costmodel.md);
`CostParams.for_descriptor(hw)` overlays whatever a descriptor stores under `cost_params`.
"""

from __future__ import annotations

import functools

from pydantic import BaseModel, ConfigDict, Field

from tileplan.hardware import HardwareDescriptor


class CostParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    dram_efficiency: float = Field(
        default=0.7197, gt=0, description="Sustained DMA throughput as a fraction of the DMA's peak (dma_bytes_per_cycle)."
    )
    dma_bytes_per_cycle: float = Field(
        default=16.0, gt=0,
        description=(
            "Peak rate of the DMA engine (Gemmini: one 16-byte beat per cycle, gemmini.md); a hardware fact, not "
            "fitted. Effective DRAM throughput = min(descriptor DRAM bandwidth, this x dram_efficiency), so a "
            "descriptor's nominal DRAM figure (Timeloop files say 8 or 5.75) caps the rate but does not scale it."
        ),
    )
    dma_request_cycles: float = Field(
        default=1.0279, ge=0, description="Cycles each DMA request (<= 64 B of one row) occupies the DMA, on top of its bytes."
    )
    dram_request_cycles: float = Field(
        default=1.4099, ge=0,
        description=(
            "Extra cycles of a strided DMA request on a tensor larger than the L2 (l2_bytes): it is served from beyond "
            "the L2 that keeps a smaller tensor between the library's refetches of its tiles (by the LLC, llc_bytes, "
            "when the tensor fits there; llc_miss_cycles adds DRAM's wait when it does not)."
        ),
    )
    block_wait_cycles: float = Field(
        default=9.2343, ge=0,
        description=(
            "Cycles a DMA store request waits for an earlier request of its mvout to the same 64-byte block (output "
            "rows a few bytes apart, e.g. two output channels): the L2 serves puts to one block one after another "
            "(per request of the longest chain in a block)."
        ),
    )
    l2_bytes: float = Field(
        default=512 * 1024, gt=0,
        description=(
            "The SoC's L2 cache the DMA goes through (Gemmini's SoC configurations: 512 KiB); a hardware fact, not "
            "fitted."
        ),
    )
    llc_bytes: float = Field(
        default=4 * 1024 * 1024, gt=0,
        description=(
            "The last-level cache behind the L2, in front of DRAM (the FireSim image DOSA's runs used, "
            "firesim_rocket_singlecore_16pe4kdummygemmini_nofirstlayer_no_nic_l2_llc4mb_ddr3: FASED's 4 MiB LLC model); "
            "a hardware fact, not fitted."
        ),
    )
    mem_bus_bytes: float = Field(
        default=8.0, gt=0,
        description=(
            "Bytes per beat of the SoC's memory bus between the L2 and the LLC / DRAM (rocket-chip's MemoryBusParams: "
            "XLen / 8 = 8 on a 64-bit Rocket SoC, one beat a cycle); a hardware fact, not fitted. A strided DMA request "
            "that DRAM serves (far_req) moves its whole 64-byte block over it, a store's block twice (the L2 "
            "allocates on a write and writes the block back): a call's DMA lasts at least those blocks x 64 / this."
        ),
    )
    llc_miss_cycles: float = Field(
        default=8.3865, ge=0,
        description=(
            "Extra cycles of a strided DMA request on a tensor larger than the LLC (llc_bytes) too: it is served by "
            "DRAM, on top of dram_request_cycles (which the LLC then serves); a strided store waits twice (the "
            "write-allocate L2 fetches the block before merging the write and writes it back). A load of whole rows "
            "DRAM serves waits the same, dram_request_cycles and this, per 64-byte block read (gemmini.whole_far_reads)."
        ),
    )
    dram_byte_cycles: float = Field(
        default=0.1508, ge=0,
        description=(
            "Cycles per byte DRAM needs to read a tensor larger than the LLC (llc_bytes): a call's DMA lasts at least "
            "the bytes its loads read there (less what the caches still hold of a tile read again: "
            "gemmini._miss_shares) times this; held at FireSim's measured DRAM rate, 5.5-8 B/cycle, by a prior "
            "(calibrate.PRIORS)."
        ),
    )
    op_overhead_cycles: float = Field(
        default=0.0361, ge=0, description="Issue cycles per compute instruction on top of one cycle per streamed row."
    )
    compute_floor_dims: float = Field(
        default=0.4673, ge=0,
        description="Shortest a compute instruction occupies the array, in DIM cycles (it streams up to DIM rows; "
        "one with fewer rows still takes this long).",
    )
    preload_dims: float = Field(
        default=0.2196, ge=0, description="Weight preload per DIM x DIM block, in DIM cycles (not hidden by the FSM)."
    )
    call_overhead_cycles: float = Field(
        default=0.0, ge=0,
        description="Cycles per library call (one scratchpad tile) that nothing hides, on top of its work or its floor.",
    )
    call_floor_cycles: float = Field(
        default=274.52, ge=0,
        description=(
            "Shortest a convolution call (tiled_conv -> loop_conv_ws) can be: the host's time to set up and issue "
            "it, hidden behind the previous call's work when that is longer."
        ),
    )
    call_floor_matmul: float = Field(
        default=129.14, ge=0, description="The same for a matrix-multiplication call (tiled_matmul -> loop_ws)."
    )
    run_overhead_cycles: float = Field(
        default=779.29, ge=0,
        description="Cycles once per layer: the first load's and the last store's latency, the closing fence.",
    )
    overlap_loss: float = Field(
        default=0.1688, ge=0, le=1,
        description="Share of the shorter of DMA and compute time per call that double buffering fails to hide (convolutions: loop_conv_ws).",
    )
    overlap_loss_matmul: float = Field(
        default=0.0, ge=0, le=1,
        description="The same for matrix multiplications (loop_ws, a different FSM).",
    )
    call_slots: float = Field(
        default=1.0, ge=0, le=1,
        description=(
            "1 (default): model loop_conv_ws's two call slots (LoopConv.scala, concurrent_loops = 2: a library "
            "convolution call's computes overlap the next call's DMA, not its own, so a large call followed by a small "
            "last channel tile exposes its DMA); 0: each call overlaps its own DMA. A switch, not fitted: on because it "
            "is the hardware's, and, held out with every parameter refitted, it improves every MAPE: DOSA's mappings "
            "9.92% -> 9.80% by configuration and 10.35% -> 10.27% by network, the library's runs 13.07% -> 12.37% and "
            "13.82% -> 12.91%; Spearman 0.99539 -> 0.99551 by configuration, 0.99586 -> 0.99579 by network "
            "(bench/results/costmodel_residuals.md, eleventh round; bench/results/costmodel.md)."
        ),
    )

    tile_search_cycles: float = Field(
        default=260.12, ge=0,
        description=(
            "Host cycles per candidate tile of tiled_conv_auto's tile search (two evaluations of gemmini.h's "
            "tiled_conv_total_spad_rows), paid before the first call when the library picks its own tile "
            "(executor 'library-auto')."
        ),
    )

    @classmethod
    def for_descriptor(cls, hw: HardwareDescriptor) -> CostParams:
        """Defaults overlaid with the descriptor's stored `cost_params` (unknown keys are ignored). The mappers cost
        tens of thousands of candidates per layer, each asking for its descriptor's parameters: equal stored values
        give the one (frozen) instance instead of a validation each time."""
        if not hw.cost_params:
            return DEFAULT_PARAMS
        seen = _BY_DESCRIPTOR.get(id(hw))
        # the descriptor asked last time, its stored values unchanged (a frozen model whose dict could still be
        # mutated in place): the same answer, without sorting and converting them again
        if seen is not None and seen[0] is hw and seen[1] == hw.cost_params:
            return seen[2]
        fields = cls.model_fields  # (a class property: read once, not per item)
        stored = tuple(sorted((k, float(v)) for k, v in hw.cost_params.items() if k in fields))
        params = _params_from(stored) if stored else DEFAULT_PARAMS
        if len(_BY_DESCRIPTOR) >= 64:
            _BY_DESCRIPTOR.clear()
        _BY_DESCRIPTOR[id(hw)] = (hw, dict(hw.cost_params), params)
        return params

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.model_dump().items()}


# Names the calibration fits.
FITTED: tuple[str, ...] = (
    "dram_efficiency",
    "dma_request_cycles",
    "dram_request_cycles",
    "llc_miss_cycles",
    "dram_byte_cycles",
    "block_wait_cycles",
    "op_overhead_cycles",
    "compute_floor_dims",
    "preload_dims",
    "call_overhead_cycles",
    "overlap_loss",
    "overlap_loss_matmul",
    "call_floor_cycles",
    "call_floor_matmul",
    "run_overhead_cycles",
    "tile_search_cycles",
)

DEFAULT_PARAMS = CostParams()


# id(descriptor) -> (that descriptor, its cost_params when asked, the answer): the mappers ask tens of thousands of
# times per layer for the same descriptor
_BY_DESCRIPTOR: dict[int, tuple[HardwareDescriptor, dict[str, float], CostParams]] = {}


@functools.lru_cache(maxsize=256)
def _params_from(stored: tuple[tuple[str, float], ...]) -> CostParams:
    return CostParams(**dict(stored))


# Prediction intervals: quantiles of log(measured / predicted) over the cross-validated FireSim runs
# (bench/costmodel.py: each configuration or layer shape predicted by a fit without it), per kind of run: the
# operation ("conv" / "matmul") and what bounds the prediction ("DRAM" / "compute"). A prediction of c cycles is
# reported with [c x exp(lo), c x exp(hi)], meant to hold INTERVAL_CONFIDENCE (80%) of runs never seen.
# The quantiles span INTERVAL_RESIDUAL_SPAN (84%: the 8% and 92% quantiles), not 80%: a fold held out of the fit
# *and* of the quantiles (bench/costmodel.py, `nested_coverage`) is covered less often than the pooled residuals
# suggest, because a whole configuration or network shifts its runs' errors together (10% / 90% quantiles: 78.6%
# held out by configuration, 75.1% by network, at the edge; 84%: 82.4%, 79.6%, and 82.8% by 128x128 layer shape). The
# span was chosen as the narrowest that brings every held-out split (configuration, network, 128x128 layer shape)
# within 80% +- 5% (before call_slots, 80% gave 72.3% by network); bench/results/costmodel.md measures it.
INTERVAL_CONFIDENCE = 0.8
INTERVAL_RESIDUAL_SPAN = 0.84
# The table is bench/costmodel.py's "Quantiles to ship" for the parameters shipped above (refreshed by cost25p: the
# previous table was derived before the last refit, and its matmul-compute upper quantile, +0.177, held 78% of those
# held-out runs against the +0.235 the refitted model's residuals give).
INTERVAL_LOG_QUANTILES: dict[tuple[str, str], tuple[float, float]] = {
    ("conv", "DRAM"): (-0.16, 0.56),
    ("conv", "compute"): (-0.1, 0.211),
    ("matmul", "DRAM"): (-0.369, 0.519),
    ("matmul", "compute"): (-0.173, 0.235),
}
