"""The fused kernel of an inverted residual: a pointwise expand, a depthwise convolution and a pointwise project,
neither the expanded tensor nor the depthwise output leaving the chip.

The on-chip route is `kernel`'s (a layer reads the previous one's accumulator rows as its A operand through the
scale unit: config_ex act / acc_scale), used twice: the depthwise reads the expand's rows with the expand's
requantization, the project reads the depthwise's with the depthwise's.  The depthwise needs windows of the
expanded tensor, so the expand writes its rows where the depthwise's taps read them: per band of BP output rows,
the expand computes its (BP - 1) x stride + R input rows (the halo rows again in every band: recompute; keeping
them would need every channel block's halo resident, more than the accumulator holds), one block j of 16 expanded
channels at a time, laid out at full padded width in `stride` phases (pixels w = phase, phase + stride, ...: a
tap's pixels for consecutive output columns are consecutive accumulator rows, as `dw_kernel` lays out its input).
Padding stays zero: the expand's accumulator rows at padding pixels are set to 0 (a zero-fill mvin) and its
products cover interior pixels only (runs of consecutive rows), so the scale unit reads 0 there.

Per band and per block j, two calls (each opened by a config_ex): (1) config_ex(act1, M1); on the band's first
block its input rows (every input-channel block, phases) and the project's bias rows; the expand's rows <- bias /
0, the expand's products over the input-channel blocks; the depthwise's rows <- its bias, its taps (a diagonal
weight block each) with A read from the expand's rows; (2) config_ex(act2, M2); the project's products over block
j with A read from the depthwise's rows, accumulating; after the last block the band's rows leave by mvout
(config_st: M3, act3).  Weights are resident when all fit the scratchpad (each block's loaded in the first band's
call of that block, under its work, and kept), else each block's (its expand column block, its diagonal blocks,
its project row block) is loaded per band and block into one of two alternating slots.  The input arrives in NCHW; the kernel copies it into a zero-padded NHWC copy in its
workspace and writes its output through an NHWC copy.
Parameters: (I, W_p, bias_p, out, workspace): W_p = per block j, DIM rows of NB x DIM columns (NB = the expand's
input-channel blocks, then R x S diagonal blocks, then the project's output-channel blocks: block b of row i at
column b x DIM); bias_p = b1[Cp] (expand), b2[Cp] (depthwise), b3[K2p] (project).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from tileplan.fusion.dw_kernel import c_prelude, ceil_to, in_rows, phase_cols, project_store_tail
from tileplan.fusion.staging import stage_acc_reads


@dataclass(frozen=True)
class IrShape:
    N: int
    C1: int  # the expand's input channels
    C: int  # expanded channels (the depthwise's)
    H: int  # the expand's (and the depthwise's input) height and width
    W: int
    R: int
    S: int
    stride: int
    pad_h: int
    pad_w: int
    P: int
    Q: int
    K2: int  # the project's output channels

    @property
    def Hp(self) -> int:
        return self.H + 2 * self.pad_h

    @property
    def Wp(self) -> int:
        return self.W + 2 * self.pad_w


def shape_of(s1: Any, s2: Any, s3: Any) -> IrShape | None:
    """The group's shape, or None unless s1 is a pointwise conv (1x1, stride 1, unpadded, one group) feeding all
    its channels to s2, a depthwise conv that `dw_kernel` pairs with the pointwise s3, all in NCHW."""
    from tileplan.fusion import dw_kernel
    from tileplan.fusion.kernel import pointwise

    a, b = s1.layer, s2.layer
    if getattr(a, "op", "") == "matmul" or not pointwise(s1) or s1.abi.layout != "NCHW":
        return None
    d = dw_kernel.shape_of(s2, s3)
    if d is None:
        return None
    if a.out_channels != b.in_channels or (a.out_h, a.out_w) != (b.in_h, b.in_w) or a.batch != b.batch:
        return None
    return IrShape(d.N, a.in_channels, d.C, d.H, d.W, d.R, d.S, d.stride, d.pad_h, d.pad_w, d.P, d.Q, d.K2)


@dataclass(frozen=True)
class IrTiling:
    band: int  # BP: output rows per band
    resident: bool  # every block's weights loaded once (else per band and block, two alternating slots)
    out_slots: int  # the project's accumulator regions (2: a band drains while the next fills)
    spad_rows: int
    acc_rows: int


def _blocks(sh: IrShape, dim: int) -> tuple[int, int, int, int]:
    """(input-channel blocks n1, expanded-channel blocks nj, output-channel blocks nk2, weight blocks per j)."""
    n1, nj, nk2 = ceil_to(sh.C1, dim) // dim, ceil_to(sh.C, dim) // dim, ceil_to(sh.K2, dim) // dim
    return n1, nj, nk2, n1 + sh.R * sh.S + nk2


def footprint(sh: IrShape, dim: int, bp: int, resident: bool, out_slots: int) -> tuple[int, int]:
    """(scratchpad rows, accumulator rows) at this band size."""
    n1, nj, nk2, nb = _blocks(sh, dim)
    wrow = sum(phase_cols(sh))
    hb = in_rows(sh, bp)
    sp = (nj if resident else 2) * nb * dim + 2 * n1 * hb * wrow
    ac = out_slots * nk2 * bp * sh.Q + bp * sh.Q + hb * wrow
    return sp, ac


def candidates(sh: IrShape, dim: int, spad_rows: int, acc_rows: int) -> list[IrTiling]:
    """Every band size that fits, each with resident weights when they fit (else streamed) and two project
    regions when they fit (else one)."""
    out: list[IrTiling] = []
    for bp in range(1, sh.P + 1):
        best = None
        for resident in (True, False):
            for slots in (2, 1):
                sp, ac = footprint(sh, dim, bp, resident, slots)
                if sp <= spad_rows and ac <= acc_rows:
                    best = IrTiling(bp, resident, slots, sp, ac)
                    break
            if best is not None:
                break
        if best is not None:
            out.append(best)
    return out


def choose(sh: IrShape, dim: int, spad_rows: int, acc_rows: int, timing: Any, max_bytes: int) -> IrTiling | None:
    """The fitting tiling with the fewest modelled cycles (None if not even one output row fits)."""
    best: tuple[float, IrTiling] | None = None
    for t in candidates(sh, dim, spad_rows, acc_rows):
        c = model_cycles(sh, t, timing, dim, max_bytes)
        if best is None or c < best[0]:
            best = (c, t)
    return best[1] if best else None


def prelay(s1: Any, s2: Any, s3: Any, sh: IrShape, dim: int) -> tuple[np.ndarray, np.ndarray]:
    n1, nj, nk2, nb = _blocks(sh, dim)
    cp, k2p, c1p = nj * dim, nk2 * dim, n1 * dim
    w1 = np.zeros((c1p, cp), np.int8)
    w1[:sh.C1, :sh.C] = np.asarray(s1.weights).reshape(sh.C1, sh.C)
    wd = np.asarray(s2.weights).reshape(sh.C, sh.R, sh.S)  # [G, R, S, 1, 1]
    w3 = np.zeros((cp, k2p), np.int8)
    w3[:sh.C, :sh.K2] = np.asarray(s3.weights).reshape(sh.C, sh.K2)
    out = np.zeros((nj, dim, nb, dim), np.int8)  # per j: row i, block b, column
    for j in range(nj):
        for cb in range(n1):
            out[j, :, cb, :] = w1[cb * dim:(cb + 1) * dim, j * dim:(j + 1) * dim]
        for c in range(j * dim, min(sh.C, (j + 1) * dim)):
            out[j, c - j * dim, n1:n1 + sh.R * sh.S, c - j * dim] = wd[c].reshape(-1)
        for kb in range(nk2):
            out[j, :, n1 + sh.R * sh.S + kb, :] = w3[j * dim:(j + 1) * dim, kb * dim:(kb + 1) * dim]
    b = np.zeros(2 * cp + k2p, np.int32)
    b[:sh.C] = np.asarray(s1.bias).reshape(-1)
    b[cp:cp + sh.C] = np.asarray(s2.bias).reshape(-1)
    b[2 * cp:2 * cp + sh.K2] = np.asarray(s3.bias).reshape(-1)
    return out.reshape(-1), b


def _stage_rows(sh: IrShape, t: IrTiling) -> int:
    """Rows the staged build (TILEPLAN_STAGE_ACC_READS) moves through DRAM at once: a band's expand rows (its
    padded input rows at full padded width), at least the depthwise's rows of a band."""
    return max(in_rows(sh, t.band) * sum(phase_cols(sh)), t.band * sh.Q)


def workspace_bytes(sh: IrShape, dim: int, t: IrTiling) -> int:
    """The padded NHWC input copy, the NHWC output copy, and the staged build's DRAM buffer (tileplan.fusion.staging:
    the expand's band halo rows included, which no consumed part of the input copy always holds; unused by the fused
    program as compiled)."""
    n1, _, nk2, _ = _blocks(sh, dim)
    return (ceil_to(sh.N * sh.Hp * sh.Wp * n1 * dim, 64) + ceil_to(sh.N * sh.P * sh.Q * nk2 * dim, 64)
            + ceil_to(_stage_rows(sh, t) * dim, 64))


def _row_runs(sh: IrShape) -> list[tuple[int, int, int]]:
    """(offset, rows, bias?) runs of one interior input row of the expand's region: padding pixels 0, the others
    the bias; adjacent zero runs merged."""
    runs: list[tuple[int, int, int]] = []
    off = 0
    for ph, cols in enumerate(phase_cols(sh)):
        lo = max(0, min(cols, -(-(sh.pad_w - ph) // sh.stride)))
        hi = max(lo, min(cols, -(-(sh.pad_w + sh.W - ph) // sh.stride)))
        for a, b, kind in ((0, lo, 0), (lo, hi, 1), (hi, cols, 0)):
            if b <= a:
                continue
            if runs and runs[-1][2] == kind == 0 and runs[-1][0] + runs[-1][1] == off + a:
                runs[-1] = (runs[-1][0], runs[-1][1] + b - a, 0)
            else:
                runs.append((off + a, b - a, kind))
        off += cols
    return runs


def _f32(x: float) -> str:
    return f"{float(np.float32(x)).hex()}f"


def generate(name: str, sh: IrShape, t: IrTiling, *, dim: int, spad_rows: int, acc_rows: int, max_bytes: int,
             scale1: float, relu1: bool, scale2: float, relu2: bool, scale3: float, relu3: bool, hw_name: str) -> str:
    n1, nj, nk2, nb = _blocks(sh, dim)
    c1p, cp, k2p = n1 * dim, nj * dim, nk2 * dim
    bp = t.band
    bm = bp * sh.Q
    mvc = max(1, max_bytes // dim) * dim
    phases = phase_cols(sh)
    ph_off = [sum(phases[:i]) for i in range(sh.stride)]
    wrow = sum(phases)
    hb = in_rows(sh, bp)
    wj = nb * dim  # scratchpad rows of one block's weights
    in_base = (nj if t.resident else 2) * wj
    slot_rows = n1 * hb * wrow
    mid, e_base = t.out_slots * nk2 * bm, t.out_slots * nk2 * bm + bm
    o_off = ceil_to(sh.N * sh.Hp * sh.Wp * c1p, 64)
    st_off = o_off + ceil_to(sh.N * sh.P * sh.Q * k2p, 64)
    runs = _row_runs(sh)
    acts = ["RELU" if r else "NO_ACTIVATION" for r in (relu1, relu2, relu3)]
    tab = lambda xs: ", ".join(str(x) for x in xs)  # noqa: E731
    return f"""/* Generated by tileplan.fusion.ir_kernel for {hw_name}: a fused inverted residual, expand 1x1 ({sh.C1} -> {sh.C}
   channels at {sh.H}x{sh.W}) -> depthwise {sh.R}x{sh.S}/{sh.stride} (-> {sh.P}x{sh.Q}) -> project 1x1 ({sh.C} -> {sh.K2}), bands of
   {bp} output rows ({"resident" if t.resident else "streamed"} weights); the expanded tensor and the depthwise output stay in
   the accumulator, each read by the next layer as its A operand through the scale unit (config_ex: {acts[0]},
   acc_scale {float(np.float32(scale1))!r}; then {acts[1]}, {float(np.float32(scale2))!r}). Layouts: I NCHW int8, W_p per channel block
   [{dim}][{nb}x{dim}] int8, bias_p b1[{cp}] b2[{cp}] b3[{k2p}] int32, out NCHW int8. */
{c_prelude(dim=dim, spad_rows=spad_rows, acc_rows=acc_rows, max_bytes=max_bytes, hw_name=hw_name)}
static const int32_t tp_phase_off[{sh.stride}] = {{{tab(ph_off)}}};
/* one interior input row of the expand's region: runs of accumulator rows set to 0 (padding) or to the bias */
static const int32_t tp_run_off[{len(runs)}] = {{{tab(r[0] for r in runs)}}};
static const int32_t tp_run_len[{len(runs)}] = {{{tab(r[1] for r in runs)}}};
static const int32_t tp_run_bias[{len(runs)}] = {{{tab(r[2] for r in runs)}}};

/* accumulator rows acc .. acc + n - 1 (ch columns) <- the broadcast row src, or 0 (src NULL: a zero-fill) */
static void tp_fill(const int32_t *src, uint32_t acc, int32_t n, int32_t ch) {{
  for (int32_t r = 0; r < n; r += {dim})
    gemmini_extended_mvin3(src, TP_ACC_ADDR | (acc + r), ch, tp_min({dim}, n - r));
}}

/* block j's weights (its expand columns, diagonal blocks, project rows) into scratchpad rows from wb */
static void tp_load_w(const int8_t *W_p, int32_t j, uint32_t wb) {{
  for (int32_t c = 0; c < {nb * dim}; c += {mvc})
    gemmini_extended_mvin2(W_p + j * {dim * nb * dim} + c, wb + c, tp_min({mvc}, {nb * dim} - c), {dim});
}}

/* The two accumulator reads (tileplan.fusion.staging): the depthwise's windows over the expand's rows (act1, M1),
   the project's over the depthwise's (act2, M2); staged through the idle input slot and the workspace's last
   region, the mvin2 of the weights restored after each. */
{stage_acc_reads(dim=dim, band=_stage_rows(sh, t), act1=acts[0], scale1=scale1, st_stride=k2p, act2=acts[2],
                 scale2=scale3, free_rows=slot_rows, fn="tp_expand_operand", ld1=(nb * dim, dim))}
{stage_acc_reads(dim=dim, band=bm, act1=acts[1], scale1=scale2, st_stride=k2p, act2=acts[2], scale2=scale3,
                 free_rows=slot_rows, fn="tp_dw_operand", ld1=(nb * dim, dim))}
#define {name.upper()}_WORKSPACE_BYTES {workspace_bytes(sh, dim, t)}
void {name}(const int8_t *I, const int8_t *W_p, const int32_t *bias_p, int8_t *out, uint8_t *workspace) {{
  int8_t *I_p = (int8_t *)(workspace + 0);
  int8_t *O_p = (int8_t *)(workspace + {o_off});
  int8_t *stage = (int8_t *)(workspace + {st_off});
  memset(I_p, 0, {sh.N * sh.Hp * sh.Wp * c1p});
  for (int32_t n = 0; n < {sh.N}; n++)
    for (int32_t c = 0; c < {sh.C1}; c++)
      for (int32_t h = 0; h < {sh.H}; h++)
        for (int32_t w = 0; w < {sh.W}; w++)
          I_p[((n * {sh.Hp} + h + {sh.pad_h}) * {sh.Wp} + w + {sh.pad_w}) * {c1p} + c] = I[((n * {sh.C1} + c) * {sh.H} + h) * {sh.W} + w];
  TP_MEMORY_BARRIER();
  const int32_t *b1 = bias_p, *b2 = bias_p + {cp}, *b3 = bias_p + {2 * cp};
  gemmini_extended4_config_ld({nb * dim}, MVIN_SCALE_IDENTITY, false, {dim}, 1);
  /* input pixels: every stride-th pixel of a row (one phase) into consecutive rows, channel block cb at
     slot + cb * {hb * wrow} */
  gemmini_extended4_config_ld({sh.stride * c1p}, MVIN_SCALE_IDENTITY, false, {hb * wrow}, 0);
  gemmini_extended4_config_ld(0, MVIN_SCALE_IDENTITY, false, {dim}, 2);
  gemmini_extended_config_st({k2p}, {acts[2]}, {_f32(scale3)});
  int32_t slot = 0, oslot = 0, wslot = 0;
  for (int32_t n = 0; n < {sh.N}; n++)
    for (int32_t p0 = 0; p0 < {sh.P}; p0 += {bp}, slot ^= 1, oslot = (oslot + 1) % {t.out_slots}) {{
      const int32_t vp = tp_min({bp}, {sh.P} - p0), rows = vp * {sh.Q};
      const int32_t hin = (vp - 1) * {sh.stride} + {sh.R}, ih0 = p0 * {sh.stride};
      const uint32_t sp = {in_base} + slot * {slot_rows}, acc = oslot * {nk2 * bm};
      const uint32_t sp_free = {in_base} + (slot ^ 1) * {slot_rows};  /* the idle input slot (staged build) */
      for (int32_t j = 0; j < {nj}; j++) {{
        const int32_t ch = tp_min({dim}, {sh.C} - j * {dim});
        const uint32_t wb = {f"j * {wj}" if t.resident else f"(wslot ^= 1) * {wj}"};
        gemmini_extended3_config_ex(WEIGHT_STATIONARY, {acts[0]}, 0, {_f32(scale1)}, 1, 1, false, false, false);
        if (j == 0) {{
          for (int32_t h = 0; h < hin; h++)
            for (int32_t ph = 0; ph < {sh.stride}; ph++) {{
              const int32_t cols = ({sh.Wp} - ph + {sh.stride} - 1) / {sh.stride};
              for (int32_t c = 0; c < {sh.C1}; c += {mvc})
                for (int32_t w = 0; w < cols; w += {dim})
                  gemmini_extended_mvin(I_p + ((n * {sh.Hp} + ih0 + h) * {sh.Wp} + ph + w * {sh.stride}) * {c1p} + c,
                                        sp + (c / {dim} * {hb} + h) * {wrow} + tp_phase_off[ph] + w,
                                        tp_min({mvc}, {sh.C1} - c), tp_min({dim}, cols - w));
            }}
          for (int32_t kb = 0; kb < {nk2}; kb++)
            tp_fill(b3 + kb * {dim}, acc + kb * {bm}, rows, tp_min({dim}, {sh.K2} - kb * {dim}));
        }}
{"        if (n == 0 && p0 == 0) tp_load_w(W_p, j, wb);  /* resident: loaded in the first band, under its work */" if t.resident else "        tp_load_w(W_p, j, wb);"}
        /* the expand's rows of this band: 0 at padding pixels, its bias elsewhere; then its products */
        for (int32_t h = 0; h < hin; h++) {{
          const int32_t ih = ih0 + h;
          if (ih < {sh.pad_h} || ih >= {sh.pad_h + sh.H}) {{
            tp_fill(0, {e_base} + h * {wrow}, {wrow}, ch);
          }} else {{
            for (int32_t k = 0; k < {len(runs)}; k++)
              tp_fill(tp_run_bias[k] ? b1 + j * {dim} : 0, {e_base} + h * {wrow} + tp_run_off[k], tp_run_len[k], ch);
          }}
        }}
        /* (interior pixels only: the padding rows stay 0) */
        for (int32_t cb = 0; cb < {n1}; cb++) {{
          const int32_t crows = tp_min({dim}, {sh.C1} - cb * {dim});
          int first = 1;
          for (int32_t h = 0; h < hin; h++) {{
            if (ih0 + h < {sh.pad_h} || ih0 + h >= {sh.pad_h + sh.H}) continue;
            for (int32_t k = 0; k < {len(runs)}; k++) {{
              if (!tp_run_bias[k]) continue;
              const int32_t base = h * {wrow} + tp_run_off[k];
              for (int32_t r = 0; r < tp_run_len[k]; r += {dim}) {{
                const int32_t rr = tp_min({dim}, tp_run_len[k] - r);
                const uint32_t c = TP_ACC_ADDR | TP_ACCUMULATE | ({e_base} + base + r);
                if (first) {{
                  gemmini_extended_preload(wb + cb * {dim}, c, ch, crows, ch, rr);
                  gemmini_extended_compute_preloaded(sp + cb * {hb * wrow} + base + r, GARBAGE_ADDR, crows, rr, {dim}, {dim});
                }} else {{
                  gemmini_extended_preload(GARBAGE_ADDR, c, ch, crows, ch, rr);
                  gemmini_extended_compute_accumulated(sp + cb * {hb * wrow} + base + r, GARBAGE_ADDR, crows, rr, {dim}, {dim});
                }}
                first = 0;
              }}
            }}
          }}
        }}
        /* the depthwise: its bias, then one diagonal block per tap, A the expand's rows (scaled by M1) */
        tp_fill(b2 + j * {dim}, {mid}, rows, ch);
        const uint32_t a_ex = tp_expand_operand({e_base}, sp_free, stage, ch, hin * {wrow});
        for (int32_t r = 0; r < {sh.R}; r++)
          for (int32_t s = 0; s < {sh.S}; s++) {{
            const uint32_t wblk = wb + ({n1} + r * {sh.S} + s) * {dim};
            int fresh = 1;
            for (int32_t p = 0; p < vp; p++)
              for (int32_t q = 0; q < {sh.Q}; q += {dim}) {{
                const int32_t rr = tp_min({dim}, {sh.Q} - q);
                const uint32_t a = a_ex + (p * {sh.stride} + r) * {wrow} + tp_phase_off[s % {sh.stride}] + s / {sh.stride} + q;
                const uint32_t c = TP_ACC_ADDR | TP_ACCUMULATE | ({mid} + p * {sh.Q} + q);
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
        /* the project over block j, A the depthwise's rows (scaled by M2) */
        gemmini_extended3_config_ex(WEIGHT_STATIONARY, {acts[1]}, 0, {_f32(scale2)}, 1, 1, false, false, false);
        const uint32_t a_dw = tp_dw_operand({mid}, sp_free, stage, ch, rows);
        for (int32_t kb = 0; kb < {nk2}; kb++) {{
          const int32_t kcols = tp_min({dim}, {sh.K2} - kb * {dim});
          for (int32_t r = 0; r < rows; r += {dim}) {{
            const int32_t rr = tp_min({dim}, rows - r);
            const uint32_t c = TP_ACC_ADDR | TP_ACCUMULATE | (acc + kb * {bm} + r);
            if (r == 0) {{
              gemmini_extended_preload(wb + ({n1 + sh.R * sh.S} + kb) * {dim}, c, kcols, ch, kcols, rr);
              gemmini_extended_compute_preloaded(a_dw + r, GARBAGE_ADDR, ch, rr, {dim}, {dim});
            }} else {{
              gemmini_extended_preload(GARBAGE_ADDR, c, kcols, ch, kcols, rr);
              gemmini_extended_compute_accumulated(a_dw + r, GARBAGE_ADDR, ch, rr, {dim}, {dim});
            }}
          }}
        }}
      }}
{project_store_tail(name=name, sh=sh, dim=dim, nk2=nk2, bm=bm, k2p=k2p)}"""


def _requests(offsets: np.ndarray, row_bytes: int, req: int) -> float:
    """DMA requests of rows of `row_bytes` starting at these byte offsets (64-byte blocks touched, at least one
    a row: the emulator's row_requests)."""
    o = offsets % req
    return float(np.maximum(1, (o + row_bytes + req - 1) // req).sum())


def _store_chain(rows: int, row_bytes: int, stride: int, block: float) -> float:
    if rows == 0 or stride >= block:
        return 0.0
    span = (rows - 1) * stride + row_bytes
    blocks = 1.0 + (span - 1.0 if span > 1.0 else 0.0) / block
    return max(0.0, rows / blocks - 1.0)


def model_cycles(sh: IrShape, t: IrTiling, timing: Any, dim: int, max_bytes: int) -> float:
    """The calibrated per-call formula over the kernel's instructions as `generate` issues them: per band and
    block two calls (each opened by a config_ex), a block's weights loaded in its first call; DMA requests
    counted per row and 64-byte block as the emulator counts them (the buffers 64-byte aligned), stores waiting
    behind others to their block, plus the run's fill and overhead.  Not counted: the emulator's extra request
    cost on strided rows of buffers larger than the L2 (the kernel's copies are at most a few hundred KiB)."""
    req = int(timing.dma_request_bytes)
    n1, nj, nk2, nb = _blocks(sh, dim)
    c1p, k2p = n1 * dim, nk2 * dim
    mvc = max(1, max_bytes // dim) * dim
    phases = phase_cols(sh)
    wrow = sum(phases)
    runs = _row_runs(sh)
    floor = timing.compute_floor_cycles
    calls: list[tuple[float, float, float, float, float, float, float, float]] = []

    def add(f: list[float]) -> None:
        calls.append((f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]))

    def rows_time(n: int) -> float:  # array rows of computes covering n rows in pieces of DIM
        full, part = divmod(n, dim)
        return full * max(dim, floor) + (max(part, floor) if part else 0.0)

    def fill_req(n: int, ch: int) -> tuple[float, float]:  # (requests, bytes) of tp_fill over n rows
        pieces = math.ceil(n / dim)
        return float(n * max(1, math.ceil(ch * 4 / req))), float(pieces)

    # one block's weights: DIM rows of nb*DIM bytes, in mvin2 pieces of mvc columns
    j_stride = dim * nb * dim
    w_rows_off = np.arange(dim) * nb * dim
    w_req_j = [sum(_requests(j * j_stride + w_rows_off + c, min(mvc, nb * dim - c), req)
                   for c in range(0, nb * dim, mvc)) for j in range(nj)]
    w_bytes_j = float(dim * nb * dim)
    bp = t.band
    for n in range(sh.N):
        for p0 in range(0, sh.P, bp):
            vp = min(bp, sh.P - p0)
            rows = vp * sh.Q
            hin = (vp - 1) * sh.stride + sh.R
            ih0 = p0 * sh.stride
            # the band's input: per row, phase, channel chunk and DIM columns one mvin (stride x c1p apart)
            in_req = in_bytes = 0.0
            for h in range(hin):
                for ph, cols in enumerate(phases):
                    for c in range(0, sh.C1, mvc):
                        rb = min(mvc, sh.C1 - c)
                        base = ((n * sh.Hp + ih0 + h) * sh.Wp + ph) * c1p + c
                        offs = base + np.arange(cols) * sh.stride * c1p
                        in_req += _requests(offs, rb, req)
                        in_bytes += cols * rb
            b3_req = b3_bytes = 0.0
            for kb in range(nk2):
                r_, b_ = fill_req(rows, min(dim, sh.K2 - kb * dim))
                b3_req += r_
                b3_bytes += b_ * min(dim, sh.K2 - kb * dim) * 4
            interior = [ih for ih in range(ih0, ih0 + hin) if sh.pad_h <= ih < sh.pad_h + sh.H]
            for j in range(nj):
                ch = min(dim, sh.C - j * dim)
                ld_req = ld_bytes = 0.0
                if j == 0:
                    ld_req += in_req + b3_req
                    ld_bytes += in_bytes + b3_bytes
                if not t.resident or (n == 0 and p0 == 0):
                    ld_req += w_req_j[j]
                    ld_bytes += w_bytes_j
                # the expand's rows: every row a request; bytes only for the bias pieces (a zero-fill reads none)
                ld_req += hin * wrow * max(1, math.ceil(ch * 4 / req))
                ld_bytes += len(interior) * sum(math.ceil(ln / dim) for _, ln, bias in runs if bias) * ch * 4
                r_, b_ = fill_req(rows, ch)
                ld_req += r_
                ld_bytes += b_ * ch * 4
                ex_rows = n1 * len(interior) * sum(rows_time(ln) for _, ln, bias in runs if bias)
                ops = n1 * len(interior) * sum(math.ceil(ln / dim) for _, ln, bias in runs if bias)
                qb = math.ceil(sh.Q / dim)
                ex_rows += sh.R * sh.S * vp * rows_time(sh.Q)
                ops += sh.R * sh.S * vp * qb
                pre = n1 + sh.R * sh.S
                add([ld_req, ld_bytes, 0, 0, ex_rows, ops, pre, 0])
                # the project's call (and the band's mvouts after the last block)
                st_req = st_bytes = block = 0.0
                if j == nj - 1:
                    for kb in range(nk2):
                        kc = min(dim, sh.K2 - kb * dim)
                        for r in range(0, rows, dim):
                            rr = min(dim, rows - r)
                            offs = (((n * sh.P + p0) * sh.Q + r) * k2p + kb * dim) + np.arange(rr) * k2p
                            st_req += _requests(offs + ceil_to(sh.N * sh.Hp * sh.Wp * c1p, 64), kc, req)
                            st_bytes += rr * kc
                            block += _store_chain(rr, kc, k2p, float(req))
                add([0, 0, st_req, st_bytes, nk2 * rows_time(rows), nk2 * math.ceil(rows / dim), nk2, block])
    total = dma_sum = ex_sum = 0.0
    for ldr, ldb, str_, stb, exr, n_ops, n_pre, waits in calls:
        dma = (ldr + str_) * timing.dma_request_cycles + (ldb + stb) / timing.dram_bytes_per_cycle \
            + waits * timing.block_wait_cycles
        ex = exr + n_ops * timing.compute_op_cycles + n_pre * timing.preload_cycles
        work = max(dma, ex) + timing.overlap_loss * min(dma, ex)
        total += max(work, timing.call_floor_cycles) + timing.call_cycles
        dma_sum += dma
        ex_sum += ex
    fill = (1.0 - timing.overlap_loss) * min(dma_sum / len(calls), ex_sum / len(calls))
    return float(total + fill + timing.run_cycles)
