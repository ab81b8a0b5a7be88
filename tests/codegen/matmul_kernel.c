/* Hand-written tiled int8 matmul with bias, scale and ReLU, calling the Gemmini API (test fixture).
 * args: [0] int32 params, [1] A (M x K int8), [2] B (K x N int8), [3] bias (N int32), [4] C (M x N int8)
 * params: M K N relu dataflow TI TJ TK use_bias scale_bits  (TI/TJ/TK: tile sizes in DIM blocks)
 */
#include "gemmini.h"
#include <string.h>

/* Local address bits (Gemmini's header gives them no names): accumulator, accumulate on write. */
#define ACC_ADDR (1u << 31)
#define ACCUMULATE (1u << 30)

static uint32_t min_u(uint32_t a, uint32_t b) { return a < b ? a : b; }

void kernel_entry(void **args) {
  const int32_t *p = (const int32_t *)args[0];
  const elem_t *A = (const elem_t *)args[1];
  const elem_t *B = (const elem_t *)args[2];
  const acc_t *bias = (const acc_t *)args[3];
  elem_t *C = (elem_t *)args[4];
  const uint32_t M = p[0], K = p[1], N = p[2], TI = p[5], TJ = p[6], TK = p[7];
  const int relu = p[3], df = p[4], use_bias = p[8];
  float scale;
  memcpy(&scale, &p[9], sizeof scale);
  const uint32_t MB = (M + DIM - 1) / DIM, KB = (K + DIM - 1) / DIM, NB = (N + DIM - 1) / DIM;
  const uint32_t A_BASE = 0, B_BASE = TI * TK * DIM;

  gemmini_extended_config_ex(df, NO_ACTIVATION, 0, 1, false, false);
  gemmini_extended3_config_ld(K * sizeof(elem_t), MVIN_SCALE_IDENTITY, false, 0);
  gemmini_extended3_config_ld(N * sizeof(elem_t), MVIN_SCALE_IDENTITY, false, 1);
  gemmini_extended3_config_ld(0, MVIN_SCALE_IDENTITY, false, 2); /* stride 0: repeat the bias row */
  gemmini_extended_config_st(N * sizeof(elem_t), relu ? RELU : NO_ACTIVATION, scale);

  for (uint32_t i0 = 0; i0 < MB; i0 += TI)
    for (uint32_t j0 = 0; j0 < NB; j0 += TJ) {
      const uint32_t ti = min_u(TI, MB - i0), tj = min_u(TJ, NB - j0);
      if (use_bias)
        for (uint32_t ii = 0; ii < ti; ii++)
          for (uint32_t jj = 0; jj < tj; jj++) {
            uint32_t rows = min_u(DIM, M - (i0 + ii) * DIM), cols = min_u(DIM, N - (j0 + jj) * DIM);
            gemmini_extended_mvin3(bias + (j0 + jj) * DIM, ACC_ADDR | ((ii * tj + jj) * DIM), cols, rows);
          }
      for (uint32_t k0 = 0; k0 < KB; k0 += TK) {
        const uint32_t tk = min_u(TK, KB - k0);
        /* A tile: up to 4 K-blocks per mvin, blocks DIM rows apart */
        for (uint32_t ii = 0; ii < ti; ii++) {
          uint32_t rows = min_u(DIM, M - (i0 + ii) * DIM);
          for (uint32_t kk = 0; kk < tk; kk += 4) {
            uint32_t cols = min_u(4 * DIM, K - (k0 + kk) * DIM);
            cols = min_u(cols, (tk - kk) * DIM);
            gemmini_extended_mvin(A + (size_t)(i0 + ii) * DIM * K + (k0 + kk) * DIM,
                                  A_BASE + (ii * TK + kk) * DIM, cols, rows);
          }
        }
        for (uint32_t kk = 0; kk < tk; kk++)
          for (uint32_t jj = 0; jj < tj; jj++) {
            uint32_t rows = min_u(DIM, K - (k0 + kk) * DIM), cols = min_u(DIM, N - (j0 + jj) * DIM);
            gemmini_extended_mvin2(B + (size_t)(k0 + kk) * DIM * N + (j0 + jj) * DIM,
                                   B_BASE + (kk * TJ + jj) * DIM, cols, rows);
          }
        for (uint32_t ii = 0; ii < ti; ii++)
          for (uint32_t jj = 0; jj < tj; jj++) {
            const uint32_t mr = min_u(DIM, M - (i0 + ii) * DIM), nc = min_u(DIM, N - (j0 + jj) * DIM);
            const int acc_on = use_bias || k0 > 0;
            const uint32_t c_addr = ACC_ADDR | (acc_on ? ACCUMULATE : 0) | ((ii * tj + jj) * DIM);
            for (uint32_t kk = 0; kk < tk; kk++) {
              const uint32_t kc = min_u(DIM, K - (k0 + kk) * DIM);
              const uint32_t a_addr = A_BASE + (ii * TK + kk) * DIM, b_addr = B_BASE + (kk * TJ + jj) * DIM;
              if (df == WEIGHT_STATIONARY) {
                uint32_t c = (kk == 0) ? c_addr : (c_addr | ACCUMULATE);
                gemmini_extended_preload(b_addr, c, nc, kc, nc, mr);
                gemmini_extended_compute_preloaded(a_addr, GARBAGE_ADDR, kc, mr, nc, mr);
              } else {
                uint32_t c = (kk == tk - 1) ? c_addr : GARBAGE_ADDR;
                gemmini_extended_preload(GARBAGE_ADDR, c, nc, mr, nc, mr);
                if (kk == 0) { /* braces: Gemmini's instruction macros are blocks */
                  gemmini_extended_compute_preloaded(a_addr, b_addr, kc, mr, nc, kc);
                } else {
                  gemmini_extended_compute_accumulated(a_addr, b_addr, kc, mr, nc, kc);
                }
              }
            }
          }
      }
      for (uint32_t ii = 0; ii < ti; ii++)
        for (uint32_t jj = 0; jj < tj; jj++) {
          uint32_t rows = min_u(DIM, M - (i0 + ii) * DIM), cols = min_u(DIM, N - (j0 + jj) * DIM);
          gemmini_extended_mvout(C + (size_t)(i0 + ii) * DIM * N + (j0 + jj) * DIM,
                                 ACC_ADDR | ((ii * tj + jj) * DIM), cols, rows);
        }
    }
  gemmini_fence();
}
