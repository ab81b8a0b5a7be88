"""What a group moves and costs, fused vs per-layer.

Bytes are counted from the tensors (each read or written once, the least any program moves): per-layer, every
member reads its input, weights and bias and writes its output (int32 accumulators where the host requantizes);
fused, only the first member's input, every member's weights and bias, and the last member's output.  Modelled
cycles start from the per-layer kernels' calibrated cost-model cycles (what each member's code runs): the fused
estimate removes the DMA time of the intermediates' bytes at the calibrated DRAM bandwidth (the most fusion can
save when the member is DMA-bound) and adds the array time of recomputed halo MACs; it never drops below the
members' array time.  That estimate is a bound for groups no kernel runs; a pointwise chain's fused cycles are
its kernel's own (`kernel.model_cycles`, set by the planner).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class GroupCost:
    bytes_unfused: int
    bytes_fused: int
    intermediate_bytes: int  # written and read back per-layer, kept on chip fused
    cycles_model_unfused: float
    cycles_model_fused: float

    def doc(self) -> dict[str, Any]:
        return {"bytes_unfused": self.bytes_unfused, "bytes_fused": self.bytes_fused,
                "intermediate_bytes": self.intermediate_bytes,
                "cycles_model_unfused": round(self.cycles_model_unfused, 1),
                "cycles_model_fused": round(self.cycles_model_fused, 1)}


def tensor_bytes(spec: Any) -> tuple[int, int, int, int]:
    """(input, weights, bias, output) bytes of one member as its per-layer kernel moves them at least."""
    layer = spec.layer
    d = layer.dims()
    if getattr(layer, "op", "") in ("matmul", "dense"):
        inp, out = d["P"] * d["C"], d["P"] * d["K"]
    else:
        inp = layer.batch * layer.in_channels * layer.in_h * layer.in_w
        out = layer.batch * layer.out_channels * layer.out_h * layer.out_w
    weights = int(spec.weights.size)
    bias = int(spec.bias.size) * 4
    return inp, weights, bias, out * (4 if spec.abi.acc_output else 1)


def group_cost(specs: list[Any], model_cycles: list[float], macs: list[int], recompute_macs: int, dim: int,
               dram_bytes_per_cycle: float) -> GroupCost:
    parts = [tensor_bytes(s) for s in specs]
    unfused = sum(sum(p) for p in parts)
    inter = sum(p[3] for p in parts[:-1]) + sum(p[0] for p in parts[1:])
    fused = unfused - inter
    array = (sum(macs) + recompute_macs) / (dim * dim)
    base = float(sum(model_cycles))
    est = max(array, base - inter / dram_bytes_per_cycle + recompute_macs / (dim * dim))
    return GroupCost(unfused, fused, inter, base, est)
