"""The fused kernels' accumulator reads, and a build in which they go through DRAM (for Spike + libgemmini).

A fused kernel's consumer layer reads the producer's accumulator rows as its A operand through the accumulator's
scale unit (README "Keeping an intermediate on chip", route 1).  libgemmini 5b1254a, the ISA model Spike runs,
does not implement that read: its `compute` takes A from the scratchpad vector with the accumulator bit still in
the address (gemmini.cc:586-593) and stops with `std::out_of_range`.  Every other instruction of the fused
kernels it does implement.  So each kernel takes its A address from `tp_acc_operand`, which normally returns the
accumulator address (the program the planner scored and the emulator runs), and, when the C build defines
`TILEPLAN_STAGE_ACC_READS` (the tar's `make riscv TILEPLAN_STAGE_ACC_READS=1`), moves the rows out by mvout
with the same activation and scale (config_st: what Gemmini's RTL applies on that read as well: the same
`acc_scale_unit`, Scratchpad.scala:635-681) into a DRAM buffer, and back by mvin into a free scratchpad region,
and returns that region's address.  The staged build issues more instructions and moves the intermediate through
DRAM, so its cycles say nothing about the fused kernel's; its outputs must equal the fused program's bit for bit
(bench/spike.py compares Spike running it with the emulator running the unstaged program), which checks
everything of the fused kernel but the accumulator read itself against libgemmini.
"""

from __future__ import annotations

import numpy as np


def _f32(x: float) -> str:
    return f"{float(np.float32(x)).hex()}f"


def stage_acc_reads(*, dim: int, band: int, act1: str, scale1: float, st_stride: int, act2: str, scale2: float,
                    free_rows: int, fn: str = "tp_acc_operand", ld1: tuple[int, int] | None = None) -> str:
    """C: `tp_acc_operand(mid, free_sp, stage, cols, rows)`, the A address of the accumulator rows mid.. (`rows`
    rows of `cols` columns, at most `band` rows) as the consumer reads them: the accumulator address, or with
    TILEPLAN_STAGE_ACC_READS the scratchpad rows free_sp.. (`free_rows` of them free while it runs) holding the
    same int8 values (mvout with config_st(DIM, act1, scale1) to `stage`, DIM bytes a row, and mvin back; the
    kernel's config_st(st_stride, act2, scale2) restored).  `stage`: `rows` x DIM bytes of the kernel's workspace
    that nothing reads after the band's input is in the scratchpad (the kernel's padded input copy of rows it has
    loaded and no later band loads, or a region of its workspace kept for it; a buffer of the kernel's own would be
    memory the emulator does not know).  Config_ld id 1 (mvin2) is set to the staging buffer's stride, and back to
    `ld1` = (stride, block stride) when given (a kernel loading weights through mvin2 between bands); without it
    the kernel loads only its resident weights through mvin2, before the first band.  `fn` names the function (a
    kernel with two accumulator reads of different scales has one for each)."""
    restore = ("" if ld1 is None else
               f"\n  gemmini_extended4_config_ld({ld1[0]}, MVIN_SCALE_IDENTITY, false, {ld1[1]}, 1);  /* the kernel's mvin2 */")
    return f"""/* The consumer's A operand: the producer's accumulator rows read through the scale unit; with
   TILEPLAN_STAGE_ACC_READS (for Spike + libgemmini, which does not model that read) the same rows stored by mvout
   with the same activation and scale and loaded back into free scratchpad rows (tileplan.fusion.staging). */
#ifdef TILEPLAN_STAGE_ACC_READS
#if {free_rows} < {band}
#error "TILEPLAN_STAGE_ACC_READS: this kernel has {free_rows} free scratchpad rows for a band of {band}"
#endif
#endif
static uint32_t {fn}(uint32_t mid, uint32_t free_sp, int8_t *stage, int32_t cols, int32_t rows) {{
#ifdef TILEPLAN_STAGE_ACC_READS
  gemmini_fence();  /* the band's input rows are in the scratchpad (stage may overwrite them in DRAM) and the
                       previous staging's mvin has read stage */
  gemmini_extended_config_st({dim}, {act1}, {_f32(scale1)});
  for (int32_t r = 0; r < rows; r += {dim})
    gemmini_extended_mvout(stage + r * {dim}, TP_ACC_ADDR | (mid + r), cols, tp_min({dim}, rows - r));
  gemmini_fence();  /* stored before it is loaded */
  gemmini_extended4_config_ld({dim}, MVIN_SCALE_IDENTITY, false, {dim}, 1);
  for (int32_t r = 0; r < rows; r += {dim})
    gemmini_extended_mvin2(stage + r * {dim}, free_sp + r, cols, tp_min({dim}, rows - r));{restore}
  gemmini_extended_config_st({st_stride}, {act2}, {_f32(scale2)});
  return free_sp;
#else
  (void)free_sp;
  (void)stage;
  (void)cols;
  (void)rows;
  return TP_ACC_ADDR | mid;
#endif
}}
"""
