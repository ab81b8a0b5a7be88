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
  generates that chain of two; a 3x3 or depthwise consumer would need its windows (halo rows, padding) gathered
  from the accumulator, which no kernel generates yet.
"""

from __future__ import annotations

from typing import Any


def requant_on_chip(name: str, spec: Any) -> str | None:
    """None if `spec`'s output is requantized on the array's side exactly (int8 out of mvout), else why not."""
    rq = spec.requant
    if rq is not None:
        why = []
        if rq.zero_point:
            why.append(f"output zero point {rq.zero_point}")
        if rq.multipliers.size > 1:
            why.append(f"{rq.multipliers.size} per-channel scales")
        return (f"{name}: {' and '.join(why) or 'int32 output'}: its int32 accumulators are requantized on the "
                "host (Gemmini's mvout has one scale and no zero point); quantize activations symmetrically "
                "(ActivationSymmetric) for an on-chip int8 intermediate")
    if spec.clamp is not None:
        return f"{name}: its activation is a host clamp to {list(spec.clamp)} after the mvout"
    return None


def route(name: str, spec: Any) -> str | None:
    """Why a group that is not a pointwise chain of two keeps the per-layer program (`spec` is a member whose
    output would stay on chip)."""
    return (f"{name}: its output is requantized exactly on chip only when the next layer reads it as its A operand "
            "from the accumulator (config_ex acc_scale); fused kernels exist for two pointwise (1x1 conv / "
            "matmul) members only, and this group's consumer needs a window of rows (3x3 or depthwise) or has "
            "more members")
