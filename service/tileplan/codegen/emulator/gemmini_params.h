/* gemmini_params.h -- the Gemmini configuration a program is built for: 16x16 int8 array,
 * scratchpad 4 banks x 4096 rows, accumulator 1024 rows, 64-byte DMA requests.
 * Written by Tileplan (tileplan.codegen.emulator.params) with the names of Gemmini's generated header. */
#ifndef GEMMINI_PARAMS_H
#define GEMMINI_PARAMS_H

#include <limits.h>
#include <stdint.h>

#define XCUSTOM_ACC 3
#define DIM 16
#define ADDR_LEN 32
#define BANK_NUM 4
#define BANK_ROWS 4096
#define ACC_ROWS 1024
#define MAX_BYTES 64
#define MAX_BLOCK_LEN 4
#define MAX_BLOCK_LEN_ACC 1

typedef int8_t elem_t;
static const elem_t elem_t_max = 127;
static const elem_t elem_t_min = -128;
typedef int32_t acc_t;
typedef int64_t full_t;

#define HAS_MVIN_SCALE
typedef float scale_t;
typedef uint32_t scale_t_bits;

typedef int32_t scale_acc_t;
typedef uint32_t scale_acc_t_bits;

typedef float acc_scale_t;
typedef uint32_t acc_scale_t_bits;

#define MVIN_SCALE_IDENTITY 1.0
#define ACC_SCALE_IDENTITY 1.0

#define ACC_SCALE_T_IS_FLOAT
#define ACC_SCALE_EXP_BITS 8
#define ACC_SCALE_SIG_BITS 24

/* mvout of the accumulator with address bit 29 set returns the int32 values (Gemmini's acc_read_full_width) */
#define ACC_READ_FULL_WIDTH

#endif /* GEMMINI_PARAMS_H */
