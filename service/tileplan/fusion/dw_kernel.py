"""The fused kernel of a depthwise convolution followed by a pointwise one (an inverted residual's depthwise ->
project), the depthwise output never leaving the chip.

Same on-chip route as `kernel` (the pointwise consumer reads the depthwise's accumulator rows as its A operand
through the scale unit: config_ex act / acc_scale).  Per band of BP output rows (all Q columns) and per block j of
16 channels: the depthwise's accumulator region <- its bias, then for every kernel tap (r, s) one preload of a
diagonal weight block (the 16 channels' tap weights) and a compute per (output row, <= DIM output columns), A being
the input pixels of that tap; then the pointwise layer's products over block j, accumulating into its region;
after the last block the band's rows leave by mvout.  The input band is held per channel block and input row in
`stride` phases (pixels w = phase, phase + stride, ...), so a tap's pixels for consecutive output columns are
consecutive scratchpad rows for any stride (config_ex's A stride stays 1 for both layers).  The input arrives in
NCHW; the kernel copies it into a zero-padded NHWC copy in its workspace (the pad value is 0: symmetric
activations), and writes its output through an NHWC copy too.
Parameters: (I, W_p, bias_p, out, workspace): W_p = the depthwise's diagonal blocks [R, S, Cp/16, 16, 16] then the
pointwise weights [Cp, K2p]; bias_p = the depthwise's bias [Cp] then the pointwise's [K2p].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tileplan.fusion.staging import stage_acc_reads


def ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def c_prelude(*, dim: int, spad_rows: int, acc_rows: int, max_bytes: int, hw_name: str) -> str:
    """The C every fused kernel starts with: gemmini.h, the check that its configuration is the one the kernel was
    generated for, and the address bits and helpers the kernels use (dw_kernel's pairs, ir_kernel's residuals)."""
    return f"""#include <stdint.h>
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

#define TP_ACC_ADDR 0x80000000u
#define TP_ACCUMULATE 0x40000000u
#define TP_MEMORY_BARRIER() __asm__ __volatile__("" ::: "memory")

static inline int32_t tp_min(int32_t a, int32_t b) {{ return a < b ? a : b; }}"""


def project_store_tail(*, name: str, sh: Any, dim: int, nk2: int, bm: int, k2p: int) -> str:
    """The end of a fused kernel whose last layer is the pointwise project: each band's output blocks stored into
    the NHWC copy O_p, the fence, the CPU's copy of O_p into NCHW `out`, and the emulator runner's entry."""
    return f"""      for (int32_t kb = 0; kb < {nk2}; kb++)
        for (int32_t r = 0; r < rows; r += {dim})
          gemmini_extended_mvout(O_p + ((n * {sh.P} + p0) * {sh.Q} + r) * {k2p} + kb * {dim}, TP_ACC_ADDR | (acc + kb * {bm} + r),
                                 tp_min({dim}, {sh.K2} - kb * {dim}), tp_min({dim}, rows - r));
    }}
  gemmini_fence();
  TP_MEMORY_BARRIER();
  for (int32_t n = 0; n < {sh.N}; n++)
    for (int32_t k = 0; k < {sh.K2}; k++)
      for (int32_t p = 0; p < {sh.P * sh.Q}; p++) out[(n * {sh.K2} + k) * {sh.P * sh.Q} + p] = O_p[(n * {sh.P * sh.Q} + p) * {k2p} + k];
}}

/* Calling convention of the emulator's runner: args[i] is the i-th buffer, the workspace last. */
void {name}_entry(void **args) {{ {name}((const int8_t *)args[0], (const int8_t *)args[1], (const int32_t *)args[2], (int8_t *)args[3], (uint8_t *)args[4]); }}
"""


@dataclass(frozen=True)
class DwShape:
    N: int
    C: int  # channels of the depthwise (= the pointwise's input channels)
    H: int
    W: int
    R: int
    S: int
    stride: int
    pad_h: int
    pad_w: int
    P: int
    Q: int
    K2: int

    @property
    def Hp(self) -> int:
        return self.H + 2 * self.pad_h

    @property
    def Wp(self) -> int:
        return self.W + 2 * self.pad_w


def shape_of(s1: Any, s2: Any) -> DwShape | None:
    """The pair's shape, or None unless s1 is a depthwise conv (one channel per group, square stride, no dilation)
    in NCHW and s2 a 1x1 / stride-1 / unpadded / one-group conv reading all its channels."""
    from tileplan.fusion.kernel import pointwise

    a, b = s1.layer, s2.layer
    if getattr(a, "op", "") == "matmul" or getattr(b, "op", "") == "matmul" or not pointwise(s2):
        return None
    if s1.abi.layout != "NCHW" or s2.abi.layout != "NCHW":
        return None
    if not (a.groups == a.in_channels == a.out_channels and a.stride[0] == a.stride[1]
            and tuple(a.dilation) == (1, 1)):
        return None
    if b.in_channels != a.out_channels or b.in_h != a.out_h or b.in_w != a.out_w or a.batch != b.batch:
        return None
    return DwShape(a.batch, a.in_channels, a.in_h, a.in_w, a.kernel[0], a.kernel[1], a.stride[0], a.padding[0],
                   a.padding[1], a.out_h, a.out_w, b.out_channels)


@dataclass(frozen=True)
class DwTiling:
    band: int  # BP: output rows per band
    spad_rows: int
    acc_rows: int


def phase_cols(sh: Any) -> list[int]:
    """Padded input columns of each stride phase (a DwShape's, or an IrShape's depthwise)."""
    return [len(range(ph, sh.Wp, sh.stride)) for ph in range(sh.stride)]


def in_rows(sh: Any, bp: int) -> int:
    """Padded input rows a band of `bp` output rows reads (a DwShape's, or an IrShape's depthwise)."""
    return (bp - 1) * sh.stride + sh.R


def choose_band(sh: DwShape, dim: int, spad_rows: int, acc_rows: int) -> DwTiling | None:
    """The most output rows per band whose two input slots fit the scratchpad beside both layers' weights and
    whose accumulator regions (two of the pointwise's K2 columns, two of one block of the depthwise's) fit."""
    nj, nk2 = ceil_to(sh.C, dim) // dim, ceil_to(sh.K2, dim) // dim
    w_rows = sh.R * sh.S * nj * dim + nj * nk2 * dim
    wrow = sum(phase_cols(sh))
    best = None
    for bp in range(1, sh.P + 1):
        sp = w_rows + 2 * nj * in_rows(sh, bp) * wrow
        ac = 2 * (nk2 + 1) * bp * sh.Q
        if sp > spad_rows or ac > acc_rows:
            break
        best = DwTiling(bp, sp, ac)
    return best


def prelay(s1: Any, s2: Any, sh: DwShape, dim: int) -> tuple[np.ndarray, np.ndarray]:
    cp, k2p = ceil_to(sh.C, dim), ceil_to(sh.K2, dim)
    nj = cp // dim
    w = np.asarray(s1.weights).reshape(sh.C, sh.R, sh.S)  # [G, R, S, 1, 1]
    diag = np.zeros((sh.R, sh.S, nj, dim, dim), np.int8)
    for c in range(sh.C):
        diag[:, :, c // dim, c % dim, c % dim] = w[c]
    w2 = np.zeros((cp, k2p), np.int8)
    w2[:sh.C, :sh.K2] = np.asarray(s2.weights).reshape(sh.C, sh.K2)
    b = np.zeros(cp + k2p, np.int32)
    b[:sh.C] = np.asarray(s1.bias).reshape(-1)
    b[cp:cp + sh.K2] = np.asarray(s2.bias).reshape(-1)
    return np.concatenate([diag.reshape(-1), w2.reshape(-1)]), b


def workspace_bytes(sh: DwShape, dim: int) -> int:
    cp, k2p = ceil_to(sh.C, dim), ceil_to(sh.K2, dim)
    return ceil_to(sh.N * sh.Hp * sh.Wp * cp, 64) + ceil_to(sh.N * sh.P * sh.Q * k2p, 64)


def _f32(x: float) -> str:
    return f"{float(np.float32(x)).hex()}f"


def generate(name: str, sh: DwShape, t: DwTiling, *, dim: int, spad_rows: int, acc_rows: int, max_bytes: int,
             scale1: float, relu1: bool, scale2: float, relu2: bool, hw_name: str) -> str:
    cp, k2p = ceil_to(sh.C, dim), ceil_to(sh.K2, dim)
    nj, nk2 = cp // dim, k2p // dim
    bp = t.band
    bm = bp * sh.Q  # accumulator rows of a band
    mvin_cols = max(1, max_bytes // dim) * dim
    phases = phase_cols(sh)
    ph_off = [sum(phases[:i]) for i in range(sh.stride)]
    wrow = sum(phases)
    hb = in_rows(sh, bp)
    w2_row = sh.R * sh.S * nj * dim
    in_base = w2_row + nj * nk2 * dim
    slot_rows = nj * hb * wrow
    o_off = ceil_to(sh.N * sh.Hp * sh.Wp * cp, 64)
    act1 = "RELU" if relu1 else "NO_ACTIVATION"
    act2 = "RELU" if relu2 else "NO_ACTIVATION"
    ph_tab = ", ".join(str(x) for x in ph_off)
    return f"""/* Generated by tileplan.fusion.dw_kernel for {hw_name}: a fused depthwise {sh.R}x{sh.S}/{sh.stride} ({sh.C} channels,
   {sh.H}x{sh.W} -> {sh.P}x{sh.Q}) -> pointwise ({sh.C} -> {sh.K2}) pair, bands of {bp} output rows; the depthwise output
   stays in the accumulator and the pointwise layer reads it as its A operand through the scale unit (config_ex:
   {act1}, acc_scale {float(np.float32(scale1))!r}). Layouts: I NCHW int8, W_p diagonal blocks [{sh.R},{sh.S},{nj},{dim},{dim}] then
   W2[{cp},{k2p}] int8, bias_p b1[{cp}] then b2[{k2p}] int32, out NCHW int8. */
{c_prelude(dim=dim, spad_rows=spad_rows, acc_rows=acc_rows, max_bytes=max_bytes, hw_name=hw_name)}
static const int32_t tp_phase_off[{sh.stride}] = {{{ph_tab}}};

{stage_acc_reads(dim=dim, band=bm, act1=act1, scale1=scale1, st_stride=k2p, act2=act2, scale2=scale2,
                 free_rows=slot_rows)}
#define {name.upper()}_WORKSPACE_BYTES {workspace_bytes(sh, dim)}
void {name}(const int8_t *I, const int8_t *W_p, const int32_t *bias_p, int8_t *out, uint8_t *workspace) {{
  int8_t *I_p = (int8_t *)(workspace + 0);
  int8_t *O_p = (int8_t *)(workspace + {o_off});
  memset(I_p, 0, {sh.N * sh.Hp * sh.Wp * cp});
  for (int32_t n = 0; n < {sh.N}; n++)
    for (int32_t c = 0; c < {sh.C}; c++)
      for (int32_t h = 0; h < {sh.H}; h++)
        for (int32_t w = 0; w < {sh.W}; w++)
          I_p[((n * {sh.Hp} + h + {sh.pad_h}) * {sh.Wp} + w + {sh.pad_w}) * {cp} + c] = I[((n * {sh.C} + c) * {sh.H} + h) * {sh.W} + w];
  TP_MEMORY_BARRIER();
  const int8_t *W2 = W_p + {sh.R * sh.S * nj * dim * dim};
  const int32_t *b1 = bias_p, *b2 = bias_p + {cp};
  /* weights, resident: the diagonal block of (r, s, j) at ((r * S + s) * J + j) * DIM; W2's block (kb, j) after */
  gemmini_extended4_config_ld({dim}, MVIN_SCALE_IDENTITY, false, {dim}, 1);
  for (int32_t b = 0; b < {sh.R * sh.S * nj}; b += {mvin_cols // dim})
    for (int32_t i = 0; i < tp_min({mvin_cols // dim}, {sh.R * sh.S * nj} - b); i++)
      gemmini_extended_mvin2(W_p + (b + i) * {dim * dim}, (b + i) * {dim}, {dim}, {dim});
  gemmini_extended4_config_ld({k2p}, MVIN_SCALE_IDENTITY, false, {nj * dim}, 1);
  for (int32_t c = 0; c < {sh.C}; c += {dim})
    for (int32_t k = 0; k < {sh.K2}; k += {mvin_cols})
      gemmini_extended_mvin2(W2 + c * {k2p} + k, {w2_row} + (k / {dim} * {nj} + c / {dim}) * {dim},
                             tp_min({mvin_cols}, {sh.K2} - k), tp_min({dim}, {sh.C} - c));
  /* input pixels: every stride-th pixel of a row (one phase) into consecutive rows */
  gemmini_extended4_config_ld({sh.stride * cp}, MVIN_SCALE_IDENTITY, false, {hb * wrow}, 0);
  gemmini_extended4_config_ld(0, MVIN_SCALE_IDENTITY, false, {dim}, 2);
  gemmini_extended_config_st({k2p}, {act2}, {_f32(scale2)});
  uint32_t mid_slot = 0;
  int32_t slot = 0;
  for (int32_t n = 0; n < {sh.N}; n++)
    for (int32_t p0 = 0; p0 < {sh.P}; p0 += {bp}, slot ^= 1) {{
      const int32_t vp = tp_min({bp}, {sh.P} - p0), rows = vp * {sh.Q};
      const int32_t hin = (vp - 1) * {sh.stride} + {sh.R};
      const uint32_t sp = {in_base} + slot * {slot_rows}, acc = slot * {nk2 * bm};
      gemmini_extended3_config_ex(WEIGHT_STATIONARY, {act1}, 0, {_f32(scale1)}, 1, 1, false, false, false);
      for (int32_t h = 0; h < hin; h++)
        for (int32_t ph = 0; ph < {sh.stride}; ph++) {{
          const int32_t cols = ({sh.Wp} - ph + {sh.stride} - 1) / {sh.stride};
          for (int32_t c = 0; c < {sh.C}; c += {mvin_cols})
            for (int32_t w = 0; w < cols; w += {dim})
              gemmini_extended_mvin(I_p + ((n * {sh.Hp} + p0 * {sh.stride} + h) * {sh.Wp} + ph + w * {sh.stride}) * {cp} + c,
                                    sp + (c / {dim} * {hb} + h) * {wrow} + tp_phase_off[ph] + w,
                                    tp_min({mvin_cols}, {sh.C} - c), tp_min({dim}, cols - w));
        }}
      for (int32_t kb = 0; kb < {nk2}; kb++)
        for (int32_t r = 0; r < rows; r += {dim})
          gemmini_extended_mvin3(b2 + kb * {dim}, TP_ACC_ADDR | (acc + kb * {bm} + r), tp_min({dim}, {sh.K2} - kb * {dim}),
                                 tp_min({dim}, rows - r));
      for (int32_t j = 0; j < {nj}; j++, mid_slot ^= 1) {{
        const uint32_t mid = {2 * nk2 * bm} + mid_slot * {bm};
        const int32_t ch = tp_min({dim}, {sh.C} - j * {dim});
        for (int32_t r = 0; r < rows; r += {dim})
          gemmini_extended_mvin3(b1 + j * {dim}, TP_ACC_ADDR | (mid + r), ch, tp_min({dim}, rows - r));
        for (int32_t r = 0; r < {sh.R}; r++)
          for (int32_t s = 0; s < {sh.S}; s++) {{
            const uint32_t wblk = ((r * {sh.S} + s) * {nj} + j) * {dim};
            int fresh = 1;
            for (int32_t p = 0; p < vp; p++)
              for (int32_t q = 0; q < {sh.Q}; q += {dim}) {{
                const int32_t rr = tp_min({dim}, {sh.Q} - q);
                const uint32_t a = sp + (j * {hb} + p * {sh.stride} + r) * {wrow} + tp_phase_off[s % {sh.stride}] + s / {sh.stride} + q;
                const uint32_t c = TP_ACC_ADDR | TP_ACCUMULATE | (mid + p * {sh.Q} + q);
                if (fresh) {{
                  gemmini_extended_preload(wblk, c, ch, ch, ch, rr);
                  gemmini_extended_compute_preloaded(a, GARBAGE_ADDR, ch, rr, {dim}, {dim});
                }} else {{
                  gemmini_extended_preload(GARBAGE_ADDR, c, ch, ch, ch, rr);
                  gemmini_extended_compute_accumulated(a, GARBAGE_ADDR, ch, rr, {dim}, {dim});
                }}
                fresh = 0;
              }}
          }}
        /* staging (TILEPLAN_STAGE_ACC_READS) overwrites input rows p0 * stride.. of I_p: loaded, and before the
           next band's first row */
        const uint32_t a_mid = tp_acc_operand(mid, {in_base} + (slot ^ 1) * {slot_rows},
                                              I_p + (n * {sh.Hp} + p0 * {sh.stride}) * {sh.Wp * cp}, ch, rows);
        for (int32_t kb = 0; kb < {nk2}; kb++) {{
          const int32_t kcols = tp_min({dim}, {sh.K2} - kb * {dim});
          for (int32_t r = 0; r < rows; r += {dim}) {{
            const int32_t rr = tp_min({dim}, rows - r);
            const uint32_t c = TP_ACC_ADDR | TP_ACCUMULATE | (acc + kb * {bm} + r);
            if (r == 0) {{
              gemmini_extended_preload({w2_row} + (kb * {nj} + j) * {dim}, c, kcols, ch, kcols, rr);
              gemmini_extended_compute_preloaded(a_mid + r, GARBAGE_ADDR, ch, rr, {dim}, {dim});
            }} else {{
              gemmini_extended_preload(GARBAGE_ADDR, c, kcols, ch, kcols, rr);
              gemmini_extended_compute_accumulated(a_mid + r, GARBAGE_ADDR, ch, rr, {dim}, {dim});
            }}
          }}
        }}
      }}
{project_store_tail(name=name, sh=sh, dim=dim, nk2=nk2, bm=bm, k2p=k2p)}"""


def model_cycles(sh: DwShape, t: DwTiling, timing: Any, dim: int, max_bytes: int) -> float:
    """The calibrated per-call formula over the kernel's instructions as `generate` issues them (one call per band,
    the weights' prologue a call of its own), as `kernel.model_cycles` does for pointwise chains."""
    req = timing.dma_request_bytes
    cp, k2p = ceil_to(sh.C, dim), ceil_to(sh.K2, dim)
    nj, nk2 = cp // dim, k2p // dim
    mvin_cols = max(1, max_bytes // dim) * dim

    def call(ld_req: float, ld_bytes: float, st_req: float, st_bytes: float, ex: float) -> float:
        dma = (ld_req + st_req) * timing.dma_request_cycles + (ld_bytes + st_bytes) / timing.dram_bytes_per_cycle
        work = max(dma, ex) + timing.overlap_loss * min(dma, ex)
        return max(work, timing.call_floor_cycles) + timing.call_cycles

    w_req = sh.R * sh.S * nj * dim * math.ceil(dim / req)
    w_req += sum(min(dim, sh.C - c) * math.ceil(min(mvin_cols, sh.K2 - k) / req)
                 for c in range(0, sh.C, dim) for k in range(0, sh.K2, mvin_cols))
    total = call(w_req, sh.R * sh.S * nj * dim * dim + sh.C * sh.K2, 0, 0, 0.0)
    dmas, exs = [], []
    phases = phase_cols(sh)
    for _n in range(sh.N):
        for p0 in range(0, sh.P, t.band):
            vp = min(t.band, sh.P - p0)
            rows = vp * sh.Q
            hin = (vp - 1) * sh.stride + sh.R
            chunks = [min(mvin_cols, sh.C - c) for c in range(0, sh.C, mvin_cols)]
            ld_req = hin * sum(cols for cols in phases) * sum(math.ceil(c / req) for c in chunks)
            ld_bytes = hin * sum(phases) * sh.C
            blocks = math.ceil(rows / dim)
            ld_req += rows * (nj + nk2) * math.ceil(4 * dim / req)
            ld_bytes += blocks * (sh.C + sh.K2) * 4
            st_req, st_bytes = rows * nk2 * math.ceil(dim / req), rows * sh.K2
            qb = math.ceil(sh.Q / dim)
            part_q = sh.Q - (qb - 1) * dim
            dw_ops = nj * sh.R * sh.S * vp * qb
            dw_rows = nj * sh.R * sh.S * vp * (sh.Q + max(part_q, timing.compute_floor_cycles) - part_q)
            part = rows - (blocks - 1) * dim
            pw_ops = nj * nk2 * blocks
            pw_rows = nj * nk2 * (rows + max(part, timing.compute_floor_cycles) - part)
            preloads = nj * sh.R * sh.S + nj * nk2
            ex = dw_rows + pw_rows + (dw_ops + pw_ops) * timing.compute_op_cycles + preloads * timing.preload_cycles
            dma = (ld_req + st_req) * timing.dma_request_cycles + (ld_bytes + st_bytes) / timing.dram_bytes_per_cycle
            total += call(ld_req, ld_bytes, st_req, st_bytes, ex)
            dmas.append(dma)
            exs.append(ex)
    fill = (1.0 - timing.overlap_loss) * min(sum(dmas) / len(dmas), sum(exs) / len(exs))
    return float(total + fill + timing.run_cycles)
