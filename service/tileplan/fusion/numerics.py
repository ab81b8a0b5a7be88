"""Can a group's intermediate be requantized on chip, bit-exactly, with the instructions the kernels use?

onnxruntime's requantisation of a conv's int32 accumulator is `sat8(round_half_even(acc * M) + z_y)` (then the
activation's clamp).  On Gemmini:
- mvout (config_st's scale, RELU, saturation) computes exactly that when z_y = 0 and M is one per-tensor scale:
  the per-layer kernels store int8 then.  An output zero point or per-channel scales make the kernel store int32
  accumulators for the host to requantize (folding z_y into the bias is off by one step near rounding
  boundaries: frontend/README.md), so the int8 intermediate never exists on chip.  onnxruntime's QDQ quantizer
  gives activations zero points by default; `ActivationSymmetric` gives z = 0.
- A clamp that survived quantisation (a ReLU6 whose 6.0 is below the int8 range) is a host clamp after the mvout.
- Even an exact mvout writes to memory only.  The instructions the kernels use move accumulator rows into the
  scratchpad only as a compute's output, through config_ex's power-of-two rounding shift with no bias (in the
  weight-stationary dataflow the bias lives in the accumulator), and exact only when one compute covers the whole
  reduction and M is 2^-k; Gemmini's other route, the execute unit reading A from the accumulator with
  config_ex's float `acc_scale`, is not among the instructions the kernels use (the emulator traps on a scale
  other than 1, and its rounding has not been checked against Gemmini's).  So on this target an intermediate
  cannot stay on chip bit-exactly; `route` says so and the planner keeps the per-layer program.
"""

from __future__ import annotations

import math
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


def power_of_two(m: float) -> bool:
    return m > 0 and math.frexp(m)[0] == 0.5


def route(name: str, spec: Any) -> str | None:
    """None if the kernels' instructions can move `spec`'s requantized output from the accumulator into the
    scratchpad exactly, else why not (see the module's docstring)."""
    m = float(spec.multiplier)
    d = spec.layer.dims()
    one_compute = d["C"] * d["R"] * d["S"] <= 16 and not bool(spec.bias.any())
    if power_of_two(m) and one_compute:
        return (f"{name}: M = 2^{int(math.log2(m))} would be exact through a compute's shift into the scratchpad, "
                "but no fused kernel is generated for that case")
    return (f"{name}: requantized exactly only by mvout (x{m:.4g}), which writes to memory; the kernels' way from "
            "the accumulator to the scratchpad is a compute's power-of-two shift without bias (M is not 2^-k), and "
            "the execute unit's scaled accumulator read is not among the instructions the kernels use")
