"""The fused kernel of a pointwise chain: two 1x1 convolutions (stride 1, no padding, one group) or matmuls, whose
intermediate never leaves the chip.

Gemmini's only exact way from one layer's int32 accumulators to the next layer's int8 operand on chip is the
execute unit reading its A operand from the accumulator (`ex_read_from_acc`, on by default): the read passes the
accumulator's scale unit with config_ex's activation and float `acc_scale`, rounds half to even and clips to int8
-- the same unit, and so the same int8 values, as an mvout with that scale and activation (README
"Keeping an intermediate on chip").  So the first layer's requantization must be what an mvout computes: one
per-tensor scale, no output zero point (activations quantized symmetrically), a ReLU at most.

Per band of BM output rows (pixels), with both layers' weights resident in the scratchpad:
  mvin the band's input rows (C1 channels) into a scratchpad slot; the layer-1 accumulator region <- bias1
  (broadcast rows), layer 2's <- bias2; for every (K1 block, C1 block) one weight preload and a compute per DIM
  rows accumulating layer 1; then, config_ex(act1, acc_scale = M1), for every (K2 block, K1 block) one preload and
  a compute per DIM rows whose A is the layer-1 accumulator rows; mvout the layer-2 rows (config_st: M2, act2).
Input slots and accumulator regions alternate between bands (two bands in flight).  The input arrives in the
model's layout (NCHW for a convolution, row-major for a matmul); the kernel copies it once into a padded
pixel-major copy in its workspace and writes its output through one as well (as the per-layer kernels do).
Parameters: (I, W_p, bias_p, out, workspace), W_p = W1[C1p, K1p] then W2[K1p, K2p] int8, bias_p = b1[K1p] then
b2[K2p] int32 (zero-padded to DIM multiples).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tileplan.fusion.staging import stage_acc_reads


def _ceil(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class PointwiseShape:
    M: int  # output rows (N*H*W pixels, or matmul rows)
    C1: int
    K1: int
    K2: int
    nchw: bool  # convolutions in the model's NCHW layout (else row-major matmuls)
    batch: int = 1  # N (NCHW)
    hw: int = 1  # H*W (NCHW)


def pointwise(spec: Any) -> bool:
    """A 1x1 / stride-1 / unpadded / one-group convolution or a matmul."""
    layer = spec.layer
    if getattr(layer, "op", "") == "matmul":
        return True
    return (tuple(layer.kernel) == (1, 1) and tuple(layer.stride) == (1, 1) and tuple(layer.padding) == (0, 0)
            and layer.groups == 1)


def shape_of(s1: Any, s2: Any) -> PointwiseShape | None:
    """The chain's shape, or None when the two are not a pointwise chain this kernel runs."""
    if not (pointwise(s1) and pointwise(s2)):
        return None
    d1, d2 = s1.layer.dims(), s2.layer.dims()
    if d1["K"] != d2["C"]:
        return None
    m1, m2 = d1["N"] * d1["P"] * d1["Q"], d2["N"] * d2["P"] * d2["Q"]
    if m1 != m2:
        return None
    conv = getattr(s1.layer, "op", "") != "matmul"
    if conv != (getattr(s2.layer, "op", "") != "matmul"):
        return None
    nchw = conv and s1.abi.layout == "NCHW"
    if conv and (s1.abi.layout != s2.abi.layout):
        return None
    return PointwiseShape(m1, d1["C"], d1["K"], d2["K"], nchw, d1["N"], d1["P"] * d1["Q"])


@dataclass(frozen=True)
class Tiling:
    band: int  # BM: rows per band (a multiple of DIM)
    spad_rows: int
    acc_rows: int


def choose_band(sh: PointwiseShape, dim: int, spad_rows: int, acc_rows: int) -> Tiling | None:
    """The largest band (multiple of DIM, at most the padded M) whose two input slots fit the scratchpad beside both
    layers' weights and whose accumulator regions fit the accumulator: two of layer 2's (K2 columns, one per band
    in flight) and two of layer 1's, each one DIM-column block of the intermediate (layer 1 is computed one block
    of its output channels at a time, each consumed by layer 2 at once, so the intermediate's width does not
    limit the band); None if not even DIM rows fit."""
    n1, k1, k2 = _ceil(sh.C1, dim) // dim, _ceil(sh.K1, dim) // dim, _ceil(sh.K2, dim) // dim
    w_rows = (n1 * k1 + k1 * k2) * dim
    best = None
    bm = dim
    while bm <= _ceil(sh.M, dim):
        sp = w_rows + 2 * n1 * bm
        ac = 2 * (k2 + 1) * bm
        if sp > spad_rows or ac > acc_rows:
            break
        best = Tiling(bm, sp, ac)
        bm += dim
    return best


def prelay(s1: Any, s2: Any, sh: PointwiseShape, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """W_p (W1[C1p, K1p] then W2[K1p, K2p], int8) and bias_p (b1[K1p] then b2[K2p], int32)."""
    c1p, k1p, k2p = _ceil(sh.C1, dim), _ceil(sh.K1, dim), _ceil(sh.K2, dim)
    w1 = np.zeros((c1p, k1p), np.int8)
    w1[:sh.C1, :sh.K1] = np.asarray(s1.weights).reshape(sh.C1, sh.K1)
    w2 = np.zeros((k1p, k2p), np.int8)
    w2[:sh.K1, :sh.K2] = np.asarray(s2.weights).reshape(sh.K1, sh.K2)
    b = np.zeros(k1p + k2p, np.int32)
    b[:sh.K1] = np.asarray(s1.bias).reshape(-1)
    b[k1p:k1p + sh.K2] = np.asarray(s2.bias).reshape(-1)
    return np.concatenate([w1.reshape(-1), w2.reshape(-1)]), b


def _f32(x: float) -> str:
    return f"{float(np.float32(x)).hex()}f"


def workspace_bytes(sh: PointwiseShape, dim: int) -> int:
    mp = _ceil(sh.M, dim)
    return _ceil(mp * _ceil(sh.C1, dim), 64) + _ceil(mp * _ceil(sh.K2, dim), 64)


def generate(name: str, sh: PointwiseShape, tiling: Tiling, *, dim: int, spad_rows: int, acc_rows: int,
             max_bytes: int, scale1: float, relu1: bool, scale2: float, relu2: bool, hw_name: str) -> str:
    """The C source of the fused kernel `name` (+ `name`_entry, the emulator runner's calling convention)."""
    c1p, k1p, k2p = _ceil(sh.C1, dim), _ceil(sh.K1, dim), _ceil(sh.K2, dim)
    mp = _ceil(sh.M, dim)
    n1, nk1, nk2 = c1p // dim, k1p // dim, k2p // dim
    bm = tiling.band
    mvin_cols = max(1, max_bytes // dim) * dim  # int8 columns of one mvin: gemmini.h's MAX_BLOCK_LEN blocks
    w_rows = (n1 * nk1 + nk1 * nk2) * dim
    in_off = 0
    out_off = _ceil(mp * c1p, 64)
    if sh.nchw:
        copy_in = (f"  for (int32_t n = 0; n < {sh.batch}; n++)\n"
                   f"    for (int32_t c = 0; c < {sh.C1}; c++)\n"
                   f"      for (int32_t p = 0; p < {sh.hw}; p++) I_p[(n * {sh.hw} + p) * {c1p} + c] = "
                   f"I[(n * {sh.C1} + c) * {sh.hw} + p];\n")
        copy_out = (f"  for (int32_t n = 0; n < {sh.batch}; n++)\n"
                    f"    for (int32_t k = 0; k < {sh.K2}; k++)\n"
                    f"      for (int32_t p = 0; p < {sh.hw}; p++) out[(n * {sh.K2} + k) * {sh.hw} + p] = "
                    f"O_p[(n * {sh.hw} + p) * {k2p} + k];\n")
    else:
        copy_in = (f"  for (int32_t m = 0; m < {sh.M}; m++)\n"
                   f"    for (int32_t c = 0; c < {sh.C1}; c++) I_p[m * {c1p} + c] = I[m * {sh.C1} + c];\n")
        copy_out = (f"  for (int32_t m = 0; m < {sh.M}; m++)\n"
                    f"    for (int32_t k = 0; k < {sh.K2}; k++) out[m * {sh.K2} + k] = O_p[m * {k2p} + k];\n")
    act1 = "RELU" if relu1 else "NO_ACTIVATION"
    act2 = "RELU" if relu2 else "NO_ACTIVATION"
    return f"""/* Generated by tileplan.fusion.kernel for {hw_name}: a fused pointwise chain, M {sh.M} x C {sh.C1} -> K {sh.K1}
   -> K {sh.K2}, bands of {bm} rows; the intermediate stays in the accumulator and layer 2 reads it as its A operand
   through the accumulator's scale unit (config_ex: {act1}, acc_scale {float(np.float32(scale1))!r}). Layouts: I {'NCHW' if sh.nchw else 'row-major'}
   int8, W_p W1[{c1p},{k1p}] then W2[{k1p},{k2p}] int8, bias_p b1[{k1p}] then b2[{k2p}] int32, out {'NCHW' if sh.nchw else 'row-major'} int8. */
#include <stdint.h>
#include <string.h>
#include "gemmini.h"

#if !defined(DIM) || !defined(BANK_NUM) || !defined(BANK_ROWS) || !defined(ACC_ROWS) || !defined(MAX_BYTES)
#error "gemmini.h did not define the configuration (gemmini_params.h)"
#elif DIM != {dim} || BANK_NUM * BANK_ROWS != {spad_rows} || ACC_ROWS != {acc_rows} || MAX_BYTES != {max_bytes}
#error "this kernel was generated for {hw_name}: DIM {dim}, {spad_rows} scratchpad rows, {acc_rows} accumulator rows, MAX_BYTES {max_bytes}"
#endif
#if defined(ELEM_T_IS_FLOAT) || !defined(ACC_SCALE_T_IS_FLOAT)
#error "this kernel needs int8 elements and float accumulator scales (gemmini_params.h)"
#endif
#if !defined(gemmini_extended_mvin) || !defined(gemmini_extended_mvin2) || !defined(gemmini_extended_mvin3) \\
    || !defined(gemmini_extended_mvout) || !defined(gemmini_extended_preload) \\
    || !defined(gemmini_extended_compute_preloaded) || !defined(gemmini_extended_compute_accumulated) \\
    || !defined(gemmini_extended3_config_ex) || !defined(gemmini_extended4_config_ld) \\
    || !defined(gemmini_extended_config_st) || !defined(gemmini_fence)
#error "gemmini.h lacks an instruction macro this kernel calls"
#endif

#define TP_ACC_ADDR 0x80000000u
#define TP_ACCUMULATE 0x40000000u
#define TP_MEMORY_BARRIER() __asm__ __volatile__("" ::: "memory")
#define TP_W2 {n1 * nk1 * dim}u           /* scratchpad row of W2 (W1 at 0) */
#define TP_IN {w_rows}u                  /* scratchpad rows of the two input slots */
#define TP_IN_SLOT {n1 * bm}u
#define TP_OUT_SLOT {nk2 * bm}u         /* accumulator: two layer-2 regions (one per band slot) */
#define TP_MID {2 * nk2 * bm}u           /* then two layer-1 regions of one block (alternating per block) */

static inline int32_t tp_min(int32_t a, int32_t b) {{ return a < b ? a : b; }}

/* Weight-stationary products of one band: accumulator rows acc_c + kb * {bm} + r (output-channel block kb) +=
   A rows a_base + cb * {bm} + r (reduction block cb) x the weight block at w + kb * kstride + cb * DIM. */
static void tp_layer(uint32_t a_base, uint32_t w, uint32_t kstride, uint32_t acc_c, int32_t nkb, int32_t ncb,
                     int32_t kreal, int32_t creal, int32_t rows) {{
  for (int32_t kb = 0; kb < nkb; kb++) {{
    const int32_t kcols = tp_min({dim}, kreal - kb * {dim});
    for (int32_t cb = 0; cb < ncb; cb++) {{
      const int32_t crows = tp_min({dim}, creal - cb * {dim});
      for (int32_t r = 0; r < rows; r += {dim}) {{
        const int32_t rr = tp_min({dim}, rows - r);
        const uint32_t a = a_base + cb * {bm} + r;
        const uint32_t c = TP_ACC_ADDR | TP_ACCUMULATE | (acc_c + kb * {bm} + r);
        if (r == 0) {{
          gemmini_extended_preload(w + kb * kstride + cb * {dim}, c, kcols, crows, kcols, rr);
          gemmini_extended_compute_preloaded(a, GARBAGE_ADDR, crows, rr, {dim}, {dim});
        }} else {{
          gemmini_extended_preload(GARBAGE_ADDR, c, kcols, crows, kcols, rr);
          gemmini_extended_compute_accumulated(a, GARBAGE_ADDR, crows, rr, {dim}, {dim});
        }}
      }}
    }}
  }}
}}

{stage_acc_reads(dim=dim, band=bm, act1=act1, scale1=scale1, st_stride=k2p, act2=act2, scale2=scale2,
                 free_rows=n1 * bm)}
#define {name.upper()}_WORKSPACE_BYTES {workspace_bytes(sh, dim)}
void {name}(const int8_t *I, const int8_t *W_p, const int32_t *bias_p, int8_t *out, uint8_t *workspace) {{
  int8_t *I_p = (int8_t *)(workspace + {in_off});
  int8_t *O_p = (int8_t *)(workspace + {out_off});
  memset(I_p, 0, {mp * c1p});
{copy_in}  TP_MEMORY_BARRIER();
  const int8_t *W1 = W_p, *W2 = W_p + {c1p * k1p};
  const int32_t *b1 = bias_p, *b2 = bias_p + {k1p};
  /* both layers' weights, resident: block (kb, cb) of a layer at its base + (kb * cblocks + cb) * DIM */
  gemmini_extended4_config_ld({k1p}, MVIN_SCALE_IDENTITY, false, {n1 * dim}, 1);
  for (int32_t c = 0; c < {sh.C1}; c += {dim})
    for (int32_t k = 0; k < {sh.K1}; k += {mvin_cols})
      gemmini_extended_mvin2(W1 + c * {k1p} + k, (k / {dim} * {n1} + c / {dim}) * {dim}, tp_min({mvin_cols}, {sh.K1} - k),
                             tp_min({dim}, {sh.C1} - c));
  gemmini_extended4_config_ld({k2p}, MVIN_SCALE_IDENTITY, false, {nk1 * dim}, 1);
  for (int32_t c = 0; c < {sh.K1}; c += {dim})
    for (int32_t k = 0; k < {sh.K2}; k += {mvin_cols})
      gemmini_extended_mvin2(W2 + c * {k2p} + k, TP_W2 + (k / {dim} * {nk1} + c / {dim}) * {dim},
                             tp_min({mvin_cols}, {sh.K2} - k), tp_min({dim}, {sh.K1} - c));
  gemmini_extended4_config_ld({c1p}, MVIN_SCALE_IDENTITY, false, {bm}, 0);
  gemmini_extended4_config_ld(0, MVIN_SCALE_IDENTITY, false, {dim}, 2);
  gemmini_extended_config_st({k2p}, {act2}, {_f32(scale2)});
  uint32_t mid_slot = 0;
  for (int32_t m0 = 0, slot = 0; m0 < {sh.M}; m0 += {bm}, slot ^= 1) {{
    const int32_t rows = tp_min({bm}, {sh.M} - m0);
    const uint32_t sp = TP_IN + slot * TP_IN_SLOT, acc = slot * TP_OUT_SLOT;
    /* one band's operations form one call (config_ex); layer 1 writes only the accumulator (no activation
       applies there), layer 2 reads it through the scale unit with act1 and M1 */
    gemmini_extended3_config_ex(WEIGHT_STATIONARY, {act1}, 0, {_f32(scale1)}, 1, 1, false, false, false);
    for (int32_t c = 0; c < {sh.C1}; c += {mvin_cols})
      for (int32_t r = 0; r < rows; r += {dim})
        gemmini_extended_mvin(I_p + (m0 + r) * {c1p} + c, sp + c / {dim} * {bm} + r, tp_min({mvin_cols}, {sh.C1} - c),
                              tp_min({dim}, rows - r));
    for (int32_t kb = 0; kb < {nk2}; kb++)
      for (int32_t r = 0; r < rows; r += {dim})
        gemmini_extended_mvin3(b2 + kb * {dim}, TP_ACC_ADDR | (acc + kb * {bm} + r), tp_min({dim}, {sh.K2} - kb * {dim}),
                               tp_min({dim}, rows - r));
    /* per block jb of layer 1's output channels: those columns into a layer-1 region (bias, then the products
       over every input-channel block), then layer 2's products over that block, accumulating */
    for (int32_t jb = 0; jb < {nk1}; jb++, mid_slot ^= 1) {{
      const uint32_t mid = TP_MID + mid_slot * {bm};
      for (int32_t r = 0; r < rows; r += {dim})
        gemmini_extended_mvin3(b1 + jb * {dim}, TP_ACC_ADDR | (mid + r), tp_min({dim}, {sh.K1} - jb * {dim}),
                               tp_min({dim}, rows - r));
      tp_layer(sp, (uint32_t)(jb * {n1} * {dim}), 0, mid, 1, {n1}, {sh.K1} - jb * {dim}, {sh.C1}, rows);
      tp_layer(tp_acc_operand(mid, TP_IN + (slot ^ 1) * TP_IN_SLOT, I_p + m0 * {c1p}, tp_min({dim}, {sh.K1} - jb * {dim}),
                              rows),
               TP_W2 + (uint32_t)(jb * {dim}), {nk1 * dim}, acc, {nk2}, 1, {sh.K2}, {sh.K1} - jb * {dim}, rows);
    }}
    for (int32_t kb = 0; kb < {nk2}; kb++)
      for (int32_t r = 0; r < rows; r += {dim})
        gemmini_extended_mvout(O_p + (m0 + r) * {k2p} + kb * {dim}, TP_ACC_ADDR | (acc + kb * {bm} + r),
                               tp_min({dim}, {sh.K2} - kb * {dim}), tp_min({dim}, rows - r));
  }}
  gemmini_fence();
  TP_MEMORY_BARRIER();
{copy_out}}}

/* Calling convention of the emulator's runner: args[i] is the i-th buffer, the workspace last. */
void {name}_entry(void **args) {{ {name}((const int8_t *)args[0], (const int8_t *)args[1], (const int32_t *)args[2], (int8_t *)args[3], (uint8_t *)args[4]); }}
"""


def model_cycles(sh: PointwiseShape, tiling: Tiling, timing: Any, dim: int, max_bytes: int) -> float:
    """The calibrated cost model's cycles for the fused kernel as it runs: one call per band (its config_ex), each
    scored by the per-call formula the emulator and `tileplan.cost.gemmini` share (DMA requests and bytes; array
    rows, compute instructions and weight preloads; DMA and array overlapped with the calibrated loss; at least
    the call floor), the first call also loading both layers' weights, plus the run's fill and overhead.
    `timing`: the emulator's TimingParams for the program step (`codegen.pipeline.timing_for`)."""
    import math

    req = timing.dma_request_bytes
    n1, nk1, nk2 = _ceil(sh.C1, dim) // dim, _ceil(sh.K1, dim) // dim, _ceil(sh.K2, dim) // dim
    mvin_cols = max(1, max_bytes // dim) * dim
    w_req = sum(min(dim, sh.C1 - c) * math.ceil(min(mvin_cols, sh.K1 - k) / req)
                for c in range(0, sh.C1, dim) for k in range(0, sh.K1, mvin_cols))
    w_req += sum(min(dim, sh.K1 - c) * math.ceil(min(mvin_cols, sh.K2 - k) / req)
                 for c in range(0, sh.K1, dim) for k in range(0, sh.K2, mvin_cols))
    w_bytes = sh.C1 * sh.K1 + sh.K1 * sh.K2

    def call(ld_req: float, ld_bytes: float, st_req: float, st_bytes: float, ex: float) -> tuple[float, float, float]:
        dma = (ld_req + st_req) * timing.dma_request_cycles + (ld_bytes + st_bytes) / timing.dram_bytes_per_cycle
        work = max(dma, ex) + timing.overlap_loss * min(dma, ex)
        return max(work, timing.call_floor_cycles) + timing.call_cycles, dma, ex

    # the weights load before the first config_ex: a call of their own (DMA only)
    calls = [call(w_req, w_bytes, 0, 0, 0.0)]
    for m0 in range(0, sh.M, tiling.band):
        rows = min(tiling.band, sh.M - m0)
        blocks = math.ceil(rows / dim)
        ld_req = rows * sum(math.ceil(min(mvin_cols, sh.C1 - c) / req) for c in range(0, sh.C1, mvin_cols))
        ld_bytes = rows * sh.C1
        # bias rows: one request a row; the DRAM stride is 0, so an mvin reads its row's bytes once
        ld_req += rows * (nk1 + nk2) * math.ceil(4 * dim / req)
        ld_bytes += blocks * (sh.K1 + sh.K2) * 4
        st_req = rows * nk2 * math.ceil(dim / req)
        st_bytes = rows * sh.K2
        weight_blocks = nk1 * n1 + nk1 * nk2  # one weight preload each per band
        ops = weight_blocks * blocks
        part = rows - (blocks - 1) * dim  # the last compute of a block column has these rows
        ex_rows = weight_blocks * (rows + max(part, timing.compute_floor_cycles) - part)
        ex = ex_rows + ops * timing.compute_op_cycles + weight_blocks * timing.preload_cycles
        calls.append(call(ld_req, ld_bytes, st_req, st_bytes, ex))
    mean_dma = sum(c[1] for c in calls) / len(calls)
    mean_ex = sum(c[2] for c in calls) / len(calls)
    fill = (1.0 - timing.overlap_loss) * min(mean_dma, mean_ex)
    return float(sum(c[0] for c in calls) + fill + timing.run_cycles)
