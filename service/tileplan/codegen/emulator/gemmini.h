/*
 * gemmini.h -- Tileplan's stand-in for Gemmini's software header.
 *
 * It declares a subset of the API of Gemmini's own header (ucb-bar/gemmini-rocc-tests, include/gemmini.h) by the
 * same names, as function-like macros with the same parameter lists, so code written against one compiles
 * unchanged against the other, and a call with the wrong number of arguments does not compile against either.
 * The instruction encodings (RoCC funct7 codes, the bit fields of rs1 / rs2) are those of the real header.
 * Written for Tileplan from those facts; no code is taken from the Gemmini repositories.
 *
 * What the macros expand to:
 *   RISC-V (__riscv):  Gemmini's instructions, RoCC custom-3 (opcode 0x7b), R-type, funct7 = the k_* code,
 *                      xd = 0 (rd = x0), xs1 = xs2 = 1; gemmini_fence() is the RISC-V `fence`.
 *   anything else:     calls of Tileplan's emulator (gemmini_emu.c) with the same (funct7, rs1, rs2) words, which
 *                      it decodes as Gemmini would; gemmini_fence() is emu_fence().
 *
 * The configuration (DIM, scratchpad / accumulator rows, element and scale types) comes from gemmini_params.h,
 * as with Gemmini's header; Tileplan writes one per hardware descriptor.
 *
 * Defined here: nothing with external linkage (macros, and static inline helpers only), so any number of
 * translation units that include it link into one program.
 *
 * Not declared here (the emulator does not model them): the loop FSMs (gemmini_loop_ws, gemmini_loop_conv_ws),
 * gemmini_config_norm, the performance counters and the library's tiled_* routines.
 */
#ifndef TILEPLAN_GEMMINI_H
#define TILEPLAN_GEMMINI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gemmini_params.h"

/* RoCC funct7 codes. */
#define k_CONFIG 0
#define k_MVIN2 1
#define k_MVIN 2
#define k_MVOUT 3
#define k_COMPUTE_PRELOADED 4
#define k_COMPUTE_ACCUMULATE 5
#define k_PRELOAD 6
#define k_FLUSH 7
#define k_LOOP_WS 8
#define k_LOOP_WS_CONFIG_BOUNDS 9
#define k_LOOP_WS_CONFIG_ADDRS_AB 10
#define k_LOOP_WS_CONFIG_ADDRS_DC 11
#define k_LOOP_WS_CONFIG_STRIDES_AB 12
#define k_LOOP_WS_CONFIG_STRIDES_DC 13
#define k_MVIN3 14
#define k_LOOP_CONV_WS 15
#define k_LOOP_CONV_WS_CONFIG_1 16
#define k_LOOP_CONV_WS_CONFIG_2 17
#define k_LOOP_CONV_WS_CONFIG_3 18
#define k_LOOP_CONV_WS_CONFIG_4 19
#define k_LOOP_CONV_WS_CONFIG_5 20
#define k_LOOP_CONV_WS_CONFIG_6 21
#define k_COUNTER 126

/* Which configuration a k_CONFIG instruction sets: rs1 bits 1:0. */
#define CONFIG_EX 0
#define CONFIG_LD 1
#define CONFIG_ST 2
#define CONFIG_BERT 3

/* Local addresses are rows (DIM elements).  The real header names no address bits; as Gemmini documents them,
 * bit 31 selects the accumulator, bit 30 accumulates on write, bit 29 reads the accumulator at full width. */
#define GARBAGE_ADDR ((uint32_t)(-1))

#define OUTPUT_STATIONARY 0
#define WEIGHT_STATIONARY 1

#define NO_ACTIVATION 0
#define RELU 1
#define LAYERNORM 2
#define IGELU 3
#define SOFTMAX 4

/* Bit patterns of the scale types (a float's bits travel in the upper half of rs1 / rs2). */
#ifdef HAS_MVIN_SCALE
static inline scale_t_bits scale_t_to_scale_t_bits(scale_t x) {
  union { scale_t f; scale_t_bits b; } u;
  u.f = x;
  return u.b;
}
#else
#define scale_t_to_scale_t_bits(x) 0
#endif

static inline acc_scale_t_bits acc_scale_t_to_acc_scale_t_bits(acc_scale_t x) {
  union { acc_scale_t f; acc_scale_t_bits b; } u;
  u.f = x;
  return u.b;
}

/* One RoCC instruction with two source registers and no result.  Spelled `asm`, the GNU keyword, as Gemmini's
   gemmini.h and xcustom.h spell it: a build that works against this stand-in must be GNU C (-std=gnu11, not
   -std=c11) as a build against the real header must. */
#if defined(__riscv)
#define TILEPLAN_ROCC_OPCODE(x) ((x) == 0 ? 0x0b : (x) == 1 ? 0x2b : (x) == 2 ? 0x5b : 0x7b)
#define ROCC_INSTRUCTION_RS1_RS2(x, rs1, rs2, funct)                                                      \
  {                                                                                                       \
    asm volatile(".insn r %2, 3, %3, x0, %0, %1"                                                          \
                 :                                                                                        \
                 : "r"((uint64_t)(rs1)), "r"((uint64_t)(rs2)), "i"(TILEPLAN_ROCC_OPCODE(x)), "i"(funct)     \
                 : "memory");                                                                             \
  }
#define gemmini_fence() asm volatile("fence" ::: "memory")
#else
#ifdef __cplusplus
extern "C" {
#endif
/* Tileplan's emulator (libgemmini_emu.so): one instruction, and the fence. */
void emu_rocc(uint32_t funct, uint64_t rs1, uint64_t rs2);
void emu_fence(void);
#ifdef __cplusplus
}
#endif
#define ROCC_INSTRUCTION_RS1_RS2(x, rs1, rs2, funct) \
  { emu_rocc((uint32_t)(funct), (uint64_t)(rs1), (uint64_t)(rs2)); }
#define gemmini_fence() emu_fence()
#endif

/* rows (bits 63:48), cols (47:32) and a local address (31:0) in one register. */
#define TILEPLAN_ROWS_COLS_ADDR(rows, cols, addr) \
  (((uint64_t)(rows) << (ADDR_LEN + 16)) | ((uint64_t)(cols) << ADDR_LEN) | (uint64_t)(uint32_t)(addr))

/* Data movement: DRAM <-> scratchpad / accumulator, rows <= DIM.  A load from DRAM address 0 writes zeros. */
#define gemmini_extended_mvin(dram_addr, spad_addr, cols, rows) \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, dram_addr, TILEPLAN_ROWS_COLS_ADDR(rows, cols, spad_addr), k_MVIN)
#define gemmini_extended_mvin2(dram_addr, spad_addr, cols, rows) \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, dram_addr, TILEPLAN_ROWS_COLS_ADDR(rows, cols, spad_addr), k_MVIN2)
#define gemmini_extended_mvin3(dram_addr, spad_addr, cols, rows) \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, dram_addr, TILEPLAN_ROWS_COLS_ADDR(rows, cols, spad_addr), k_MVIN3)
#define gemmini_block_mvin(dram_addr, spad_addr, len) \
  gemmini_extended_mvin(dram_addr, spad_addr, (len) * DIM, DIM)
#define gemmini_mvin(dram_addr, spad_addr) gemmini_extended_mvin(dram_addr, spad_addr, DIM, DIM)

#define gemmini_extended_mvout(dram_addr, spad_addr, cols, rows) \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, dram_addr, TILEPLAN_ROWS_COLS_ADDR(rows, cols, spad_addr), k_MVOUT)
#define gemmini_mvout(dram_addr, spad_addr) gemmini_extended_mvout(dram_addr, spad_addr, DIM, DIM)

/* Compute: A and B/D blocks by local address and size. */
#define gemmini_extended_compute_preloaded(A, BD, A_cols, A_rows, BD_cols, BD_rows)                        \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, TILEPLAN_ROWS_COLS_ADDR(A_rows, A_cols, A),                         \
                           TILEPLAN_ROWS_COLS_ADDR(BD_rows, BD_cols, BD), k_COMPUTE_PRELOADED)
#define gemmini_extended_compute_accumulated(A, BD, A_cols, A_rows, BD_cols, BD_rows)                      \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, TILEPLAN_ROWS_COLS_ADDR(A_rows, A_cols, A),                         \
                           TILEPLAN_ROWS_COLS_ADDR(BD_rows, BD_cols, BD), k_COMPUTE_ACCUMULATE)
#define gemmini_compute_preloaded(A, BD) gemmini_extended_compute_preloaded(A, BD, DIM, DIM, DIM, DIM)
#define gemmini_compute_accumulated(A, BD) gemmini_extended_compute_accumulated(A, BD, DIM, DIM, DIM, DIM)

/* Preload: B (weight stationary) or D (output stationary), and where the next compute's results go (C). */
#define gemmini_extended_preload(BD, C, BD_cols, BD_rows, C_cols, C_rows)                                  \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, TILEPLAN_ROWS_COLS_ADDR(BD_rows, BD_cols, BD),                      \
                           TILEPLAN_ROWS_COLS_ADDR(C_rows, C_cols, C), k_PRELOAD)
#define gemmini_preload(BD, C) gemmini_extended_preload(BD, C, DIM, DIM, DIM, DIM)
#define gemmini_preload_zeros(C) gemmini_preload(GARBAGE_ADDR, C)

/* Execute configuration.  rs1: acc scale bits (63:32), A stride (31:16), B transpose (9), A transpose (8),
 * set only strides (7), activation (6:3), dataflow (2), CONFIG_EX (1:0); rs2: C stride (63:48), shift (31:0). */
#define gemmini_extended3_config_ex(dataflow, sys_act, sys_shift, sys_acc_scale, C_stride, A_stride, A_transpose, \
                                    B_transpose, set_only_strides)                                                \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC,                                                                           \
                           ((uint64_t)acc_scale_t_to_acc_scale_t_bits((acc_scale_t)(sys_acc_scale)) << 32) |      \
                               ((uint64_t)(A_stride) << 16) | ((uint64_t)(B_transpose) << 9) |                    \
                               ((uint64_t)(A_transpose) << 8) | ((uint64_t)(set_only_strides) << 7) |             \
                               ((uint64_t)(sys_act) << 3) | ((uint64_t)(dataflow) << 2) | CONFIG_EX,              \
                           ((uint64_t)(C_stride) << 48) | (uint64_t)(uint32_t)(sys_shift), k_CONFIG)
#define gemmini_extended2_config_ex(dataflow, sys_act, sys_shift, A_stride, A_transpose, B_transpose) \
  gemmini_extended3_config_ex(dataflow, sys_act, sys_shift, ACC_SCALE_IDENTITY, 1, A_stride, A_transpose,  \
                              B_transpose, false)
#define gemmini_extended_config_ex(dataflow, sys_act, sys_shift, A_stride, A_transpose, B_transpose) \
  gemmini_extended2_config_ex(dataflow, sys_act, sys_shift, A_stride, A_transpose, B_transpose)
#define gemmini_config_ex(dataflow, sys_act, sys_shift) \
  gemmini_extended_config_ex(dataflow, sys_act, sys_shift, 1, 0, 0)

/* Load configuration of one of the three mvin channels (id 0: mvin, 1: mvin2, 2: mvin3).  rs1: scale bits
 * (63:32), block_mvin_stride (31:16), pixel_repeats (15:8), id (4:3), shrunk (2), CONFIG_LD (1:0); rs2: the
 * DRAM stride in bytes. */
#define gemmini_extended5_config_ld(stride, scale, shrunk, block_mvin_stride, pixel_repeats, id)              \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC,                                                                     \
                           ((uint64_t)scale_t_to_scale_t_bits(scale) << 32) |                               \
                               ((uint64_t)(block_mvin_stride) << 16) | ((uint64_t)(pixel_repeats) << 8) |   \
                               ((uint64_t)(id) << 3) | ((uint64_t)(shrunk) << 2) | CONFIG_LD,               \
                           stride, k_CONFIG)
#define gemmini_extended4_config_ld(stride, scale, shrunk, block_mvin_stride, id) \
  gemmini_extended5_config_ld(stride, scale, shrunk, block_mvin_stride, 1, id)
#define gemmini_extended3_config_ld(stride, scale, shrunk, id) \
  gemmini_extended4_config_ld(stride, scale, shrunk, DIM, id)
#define gemmini_extended2_config_ld(stride, scale, shrunk) gemmini_extended3_config_ld(stride, scale, shrunk, 0)
#define gemmini_extended_config_ld(stride, scale) gemmini_extended2_config_ld(stride, scale, false)
#define gemmini_config_ld(stride) gemmini_extended_config_ld(stride, MVIN_SCALE_IDENTITY)

/* Store configuration.  rs1: ocols (63:56), orows (55:48), pocols (47:40), porows (39:32), pool_out_dim
 * (31:24), lpad (11:10), upad (9:8), pool_size (7:6), pool_stride (5:4), activation (3:2), CONFIG_ST (1:0);
 * rs2: acc scale bits (63:32), the DRAM stride in bytes (31:0). */
#define gemmini_extended2_config_st(stride, acc_act, acc_scale, pool_stride, pool_size, pool_out_dim, porows,   \
                                    pocols, orows, ocols, upad, lpad)                                           \
  ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC,                                                                       \
                           ((uint64_t)(ocols) << 56) | ((uint64_t)(orows) << 48) | ((uint64_t)(pocols) << 40) | \
                               ((uint64_t)(porows) << 32) | ((uint64_t)(pool_out_dim) << 24) |                  \
                               ((uint64_t)(lpad) << 10) | ((uint64_t)(upad) << 8) |                             \
                               ((uint64_t)(pool_size) << 6) | ((uint64_t)(pool_stride) << 4) |                  \
                               ((uint64_t)(acc_act) << 2) | CONFIG_ST,                                          \
                           ((uint64_t)acc_scale_t_to_acc_scale_t_bits((acc_scale_t)(acc_scale)) << 32) |        \
                               (uint64_t)(uint32_t)(stride),                                                    \
                           k_CONFIG)
#define gemmini_extended_config_st(stride, acc_act, acc_scale) \
  gemmini_extended2_config_st(stride, acc_act, acc_scale, 0, 0, 0, 0, 0, 0, 0, 0, 0)
#define gemmini_config_st(stride) gemmini_extended_config_st(stride, NO_ACTIVATION, ACC_SCALE_IDENTITY)

/* Flush Gemmini's TLB (rs1 = skip). */
#define gemmini_flush(skip) ROCC_INSTRUCTION_RS1_RS2(XCUSTOM_ACC, skip, 0, k_FLUSH)

#endif /* TILEPLAN_GEMMINI_H */
