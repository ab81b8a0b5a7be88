/*
 * gemmini.h -- Tileplan's declaration of the Gemmini software API.
 *
 * The names, argument orders and meanings follow Gemmini's own software library (ucb-bar/gemmini,
 * software/gemmini-rocc-tests/include/gemmini.h).  There most of these are macros that emit RoCC
 * instructions; here they are declared as functions, implemented by Tileplan's emulator
 * (gemmini_emu.c), so the same generated C compiles against either header.
 *
 * Written for Tileplan; no code is taken from the Gemmini repository.
 */
#ifndef TILEPLAN_GEMMINI_H
#define TILEPLAN_GEMMINI_H

#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef DIM
#define DIM 16
#endif

typedef int8_t elem_t;
typedef int32_t acc_t;
typedef float scale_t;
typedef float acc_scale_t;

/* Local addresses: a row is DIM elements. */
#define GARBAGE_ADDR ((uint32_t)0xFFFFFFFFu)
#define ACC_ADDR_BIT ((uint32_t)1u << 31)      /* address is in the accumulator           */
#define ACC_ACCUMULATE_BIT ((uint32_t)1u << 30) /* add to the accumulator instead of write */
#define ACC_READ_FULL_BIT ((uint32_t)1u << 29)  /* mvout int32 without scaling             */

/* Dataflows (config_ex). */
#define OUTPUT_STATIONARY 0
#define WEIGHT_STATIONARY 1

/* Activations. */
#define NO_ACTIVATION 0
#define RELU 1

#define MVIN_SCALE_IDENTITY 1.0f
#define ACC_SCALE_IDENTITY 1.0f

/* Configuration. */
void gemmini_extended_config_ex(int dataflow, int sys_act, int sys_shift, uint32_t A_stride,
                                bool A_transpose, bool B_transpose);
void gemmini_extended_config_ld(uint64_t stride, scale_t scale, bool shrunk,
                                uint32_t block_mvin_stride, int id);
void gemmini_extended_config_st(uint64_t stride, int acc_act, acc_scale_t acc_scale);

/* Data movement: DRAM <-> scratchpad / accumulator.  rows <= DIM.  A load from DRAM address 0 (NULL)
 * writes zero rows without reading DRAM (Gemmini's zero-fill, used for convolution padding). */
void gemmini_extended_mvin(const void *dram_addr, uint32_t spad_addr, uint32_t cols, uint32_t rows);
void gemmini_extended_mvin2(const void *dram_addr, uint32_t spad_addr, uint32_t cols, uint32_t rows);
void gemmini_extended_mvin3(const void *dram_addr, uint32_t spad_addr, uint32_t cols, uint32_t rows);
void gemmini_extended_mvout(void *dram_addr, uint32_t spad_addr, uint32_t cols, uint32_t rows);

/* Compute. */
void gemmini_extended_preload(uint32_t BD, uint32_t C, uint32_t BD_cols, uint32_t BD_rows,
                              uint32_t C_cols, uint32_t C_rows);
void gemmini_extended_compute_preloaded(uint32_t A, uint32_t BD, uint32_t A_cols, uint32_t A_rows,
                                        uint32_t BD_cols, uint32_t BD_rows);
void gemmini_extended_compute_accumulated(uint32_t A, uint32_t BD, uint32_t A_cols, uint32_t A_rows,
                                          uint32_t BD_cols, uint32_t BD_rows);

/* Ordering. */
void gemmini_fence(void);
void gemmini_flush(int skip);

/* Short forms, as in Gemmini's header. */
#define gemmini_config_ex(dataflow, act, sys_shift) \
  gemmini_extended_config_ex(dataflow, act, sys_shift, 1, 0, 0)
#define gemmini_config_ld(stride) gemmini_extended_config_ld(stride, MVIN_SCALE_IDENTITY, false, DIM, 0)
#define gemmini_config_st(stride) gemmini_extended_config_st(stride, NO_ACTIVATION, ACC_SCALE_IDENTITY)
#define gemmini_mvin(dram_addr, spad_addr) gemmini_extended_mvin(dram_addr, spad_addr, DIM, DIM)
#define gemmini_mvout(dram_addr, spad_addr) gemmini_extended_mvout(dram_addr, spad_addr, DIM, DIM)
#define gemmini_preload(BD, C) gemmini_extended_preload(BD, C, DIM, DIM, DIM, DIM)
#define gemmini_preload_zeros(C) gemmini_preload(GARBAGE_ADDR, C)
#define gemmini_compute_preloaded(A, BD) gemmini_extended_compute_preloaded(A, BD, DIM, DIM, DIM, DIM)
#define gemmini_compute_accumulated(A, BD) gemmini_extended_compute_accumulated(A, BD, DIM, DIM, DIM, DIM)

#ifdef __cplusplus
}
#endif

#endif /* TILEPLAN_GEMMINI_H */
