"""Can a group's intermediate be requantized on chip, bit-exactly, with the instructions the kernels use?

onnxruntime's requantisation of a conv's int32 accumulator is `sat8(round_half_even(acc * M) + z_y)` (then the
activation's clamp).  On Gemmini:
- mvout (config_st's scale, RELU, saturation) computes exactly that when z_y = 0 and M is one per-tensor scale:
  the per-layer kernels store int8 then.  An output zero point or per-channel scales make the kernel store int32
  accumulators for the host to requantize (folding z_y into the bias is off by one step near rounding
  boundaries: frontend/README.md), so the int8 intermediate never exists on chip.  onnxruntime's QDQ quantizer
  gives activations zero points by default; `ActivationSymmetric` gives z = 0.
- A clamp that survived quantisation (a ReLU6 whose 6.0 is below the int8 range) is a host clamp after the mvout.
- Even an exact mvout writes to memory only (Gemmini's mvout always goes to DRAM).  On chip, the one exact route
  is the execute unit reading its A operand from the accumulator (`ex_read_from_acc`): the read passes the same
  scale unit as an mvout, with config_ex's activation and float `acc_scale`, so the next layer multiplies the very
  int8 values the mvout would have stored (tileplan/fusion/README.md, "Keeping an intermediate on chip").  The
  execute unit writing the array's output into the scratchpad (`ex_write_to_spad`) only clips (weight-stationary)
  or shifts by a power of two (output-stationary): not the float requantization.  A consumer that reads its A
  operand row by row (a 1x1 conv or a matmul) can take the accumulator rows directly: `tileplan.fusion.kernel`
  generates that chain of two; a depthwise consumer reads its windows (halo rows, padding) from accumulator rows
  laid out for it (`tileplan.fusion.ir_kernel`); a full 3x3 consumer has no fused kernel.

An output zero point z on chip.  The scale unit computes `sat8(round_half_even(float(acc + c) * M'))` for an integer
c the bias can carry; onnxruntime's `sat(round_half_even(float(acc) * M) + z, lo, hi)`.  Folding z into the consumer
instead (reading `round(acc * M)` and correcting its bias) needs the int8 window [-128, 127] to be [lo - z, hi - z]:
never for z != 0 (after a ReLU6, z = -128 and the values the consumer needs are 0..255).  So the only candidate is
the offset c ~ z / M with M' = M, and it is exact only if shifting every rounding boundary (k + 1/2) / M by z / M
moves none of them across an integer: `offset_mismatches` counts, over every accumulator whose result is not
saturated, those the best such offset requantizes differently.  A multiplier M' != M does not help: with t = acc + c
(the unsaturated t span [-128 / M, 127 / M], centred on 0) the read is off the host's value by delta + (M' - M) t,
delta = c M - z, which is at least |delta| over half the span (measured on three of the export below's multipliers,
every M' within 3000 float steps of M with the best offsets: 3 -> 2, 12 -> 12 and 70 -> 70 accumulators off).  Nor
do several reads combined by the consumer (it is linear in its operand, so it could sum reads of the same rows with
different scales, offsets and weights): each read is a step function of acc with its steps where (acc + c) s crosses
a half-integer, and the sum needs exactly the host's 255 steps, acc M = k + 1/2 for k = 0..254 (q - z spans 256
values).  A read with scale M and no offset has the first 127 and saturates; any offset places its steps off by the
same fraction delta; scales M / m without offset (m odd) give only every m-th step, so steps 128..254 would take
about one read, i.e. one pass of the consumer, per prime in 255..509.

Measured on the zoo's MobileNetV2 (bench/zoo_export.py: torchvision, random weights, onnxruntime's default QDQ
export, 17 candidate groups): all 34 intermediates (the first two members' outputs) have z = -128 (the ReLU6 folded
into the zero point: 0 at the bottom of the int8 range, so q - z spans 0..255); one (features.8's expand, M =
0.0068552, offset -18672) has an exact offset, the other 33 requantize 3-123 accumulators differently (`python
bench/fusion.py` reports each group's count), so no group has every intermediate exact and asymmetric intermediates
stay int32 and host-requantized.  The projects' outputs also have zero points (-8..7): a fused kernel would store
them as int32 accumulators too, as the per-layer kernels do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_CHUNK = 1 << 20
MAX_OFFSET_SPAN = 1 << 24
"""Accumulators `offset_mismatches` enumerates at most (for each of 3 offsets): ~2 / M of them, so M >= ~2^-16
(a model's multipliers: ~10^-4..10^-1); a smaller M (a model's absurd output scale: 3e38 gave ~1e-40) is not checked."""


def offset_mismatches(multiplier: float, zero_point: int, lo: int, hi: int) -> tuple[int, int] | None:
    """(accumulators requantized differently, offset c) for the best integer accumulator offset c near z / M:
    the scale unit's sat8(rint(f32(acc + c) * M)) against the host's sat(rint(f32(acc) * M) + z, lo, hi), over
    every accumulator for which either result is not saturated (beyond that both are -128 / 127 iff lo / hi are).
    None (not checked) for an M that is not a positive finite number or would take more than MAX_OFFSET_SPAN
    accumulators."""
    m = np.float32(multiplier)
    if not (np.isfinite(m) and m > 0):
        return None
    span = (max(130, hi - zero_point + 2) - min(-130, lo - zero_point - 2)) / float(m)
    if not span <= MAX_OFFSET_SPAN:
        return None
    c0 = int(round(zero_point / float(m)))
    first = int(np.floor((min(-130, lo - zero_point - 2)) / float(m))) - 2
    last = int(np.ceil((max(130, hi - zero_point + 2)) / float(m))) + 2
    best: tuple[int, int] | None = None
    for c in (c0, c0 - 1, c0 + 1):
        bad = 0
        for start in range(min(first, first - c), max(last, last - c) + 1, _CHUNK):
            acc = np.arange(start, min(start + _CHUNK, max(last, last - c) + 1), dtype=np.int64)
            want = np.clip(np.rint(acc.astype(np.float32) * m) + zero_point, lo, hi)
            got = np.clip(np.rint((acc + c).astype(np.float32) * m), -128, 127)
            bad += int(np.count_nonzero(got != want))
        if best is None or bad < best[0]:
            best = (bad, c)
        if bad == 0:
            break
    assert best is not None
    return best


def requant_on_chip(name: str, spec: Any) -> str | None:
    """None if `spec`'s output is requantized on the array's side exactly (int8 out of mvout), else why not."""
    rq = spec.requant
    if rq is not None:
        why = []
        if rq.zero_point:
            why.append(f"output zero point {rq.zero_point}")
        if rq.multipliers.size > 1:
            why.append(f"{rq.multipliers.size} per-channel scales")
        offset = ""
        if rq.zero_point and rq.multipliers.size == 1 and not getattr(rq, "float_output", False):
            found = offset_mismatches(float(rq.multipliers[0]), int(rq.zero_point), int(rq.lo), int(rq.hi))
            if found is None:
                offset = (f"; its multiplier {float(rq.multipliers[0]):g} is too small for an accumulator offset to "
                          "be checked")
            else:
                bad, c = found
                offset = (f"; no accumulator offset reproduces the zero point (the best, {c}, requantizes {bad} "
                          "accumulators differently)" if bad else
                          f"; an accumulator offset of {c} would reproduce it exactly, which no fused kernel applies")
        return (f"{name}: {' and '.join(why) or 'int32 output'}: its int32 accumulators are requantized on the "
                f"host (Gemmini's mvout has one scale and no zero point){offset}; quantize activations "
                "symmetrically (ActivationSymmetric) for an on-chip int8 intermediate")
    if spec.clamp is not None:
        return f"{name}: its activation is a host clamp to {list(spec.clamp)} after the mvout"
    return None


def route(name: str, spec: Any) -> str | None:
    """Why a group that is not a pointwise chain of two keeps the per-layer program (`spec` is a member whose
    output would stay on chip)."""
    return (f"{name}: its output is requantized exactly on chip only when the next layer reads it as its A operand "
            "from the accumulator (config_ex acc_scale); fused kernels exist for two pointwise (1x1 conv / "
            "matmul) members, a depthwise -> pointwise pair and a whole inverted residual (expand -> depthwise -> "
            "project), and this group's consumer needs a window of rows of a full (not depthwise) convolution or "
            "the group has another shape")
