"""Which call tiles Tileplan's code generator can emit as they are: one rule for the planner and the code generator.

The generated code (tileplan.codegen) runs a plan as one library-style call per DRAM iteration, with two calls in
flight: each call's input and weight tiles take one half of the scratchpad, its output tile one half of the
accumulator. A tile that does not fit its halves is shrunk by the code generator (`schedule.fit`), and then the code
that runs is not the plan that was scored. So the planner asks the same question before it ranks a tiling
(`tileplan.mappers.retile`, the cosa mapper's final choice), and the code generator counts its memory with the same
functions (`tileplan.codegen.targets.gemmini.CallLayout`).

Rows, not bytes: the scratchpad and the accumulator are DIM elements wide. A call's input tile takes one row per
(input-channel block of DIM, batch, input row, input column) of its window (or, with kernel columns folded into
the array rows, one row per kernel-column block, batch, input row and output column); its weight tile one row per
(output-channel block, kernel row, kernel column, input channel); its output tile one accumulator row per
(output-channel block, batch, output row, output column). A channel tile of 48 on a 32-wide array therefore takes
two whole blocks, which a byte count (the checker's capacity rule) does not see.

Pure arithmetic (no TVM): the mappers import it.
"""

from __future__ import annotations

import collections.abc as abc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ACC_ELEMENT_BYTES = 4  # an accumulator element (int32)
# A matmul's internal dimensions in the generated code come in whole DIM blocks (tiled_matmul's tiles)
MATMUL_BLOCKED = ("P", "K", "C")


@dataclass(frozen=True)
class MemoryRows:
    """An array's size and its local memories in DIM-wide rows."""

    dim: int
    spad_rows: int
    acc_rows: int


def memory_rows(arch: Any) -> MemoryRows | None:
    """DIM and the scratchpad / accumulator rows of a Gemmini-like architecture (None: not one)."""
    levels = [lv for lv in arch.levels if not lv.is_backing_store]
    acc = next((lv for lv in levels if "O" in lv.keeps and (lv.index > 0 or lv.word_bytes == 4)), None)
    spad = next((lv for lv in levels if {"I", "W"} <= set(lv.keeps)), None)
    if acc is None or spad is None or acc.capacity is None or spad.capacity is None:
        return None
    dim = arch.hardware.pe_array.rows
    return MemoryRows(dim, int(spad.capacity * spad.instances) // dim,
                      int(acc.capacity * acc.instances) // (dim * ACC_ELEMENT_BYTES))


def kernel_fold(dim: int, c: int, t_c: int, t_s: int, dilation_w: int) -> int:
    """Kernel columns the generated code folds into one weight block (1: none): with every input channel in the
    call and adjacent kernel columns, f columns' channels are one contiguous run of the (padded, NHWC) input row,
    so one mvin row carries them and one preload covers f x C array rows (conv1's 3 channels x 5 columns fill 15
    of 16 rows instead of 3)."""
    if dilation_w != 1 or t_c < c or t_s < 2 or 2 * c > dim:
        return 1
    return min(t_s, dim // c)


def input_rows(dim: int, n: int, p: int, q: int, r: int, s: int, c: int, stride: tuple[int, int],
               dilation: tuple[int, int], fold: int = 1) -> int:
    """Scratchpad rows of a call's input tile (its window on the array's input; `stride` as the array steps)."""
    h_win = (p - 1) * stride[0] + (r - 1) * dilation[0] + 1
    if fold > 1:
        return -(-s // fold) * n * h_win * q
    w_win = (q - 1) * stride[1] + (s - 1) * dilation[1] + 1
    return -(-c // dim) * n * h_win * w_win


def weight_rows(dim: int, k: int, r: int, s: int, c: int) -> int:
    """Scratchpad rows of a call's weight tile."""
    return -(-k // dim) * r * s * c


def acc_rows(dim: int, n: int, p: int, q: int, k: int) -> int:
    """Accumulator rows of a call's output tile."""
    return -(-k // dim) * n * p * q


def array_stride(r: int, s: int, stride: tuple[int, int]) -> tuple[int, int]:
    """The stride the array's loop nest uses: a strided 1x1 conv reads every stride-th pixel, which the host
    copy subsamples, so the array sees stride 1 (and the call's window is its output tile)."""
    return (1, 1) if r == 1 and s == 1 and tuple(stride) != (1, 1) else tuple(stride)  # type: ignore[return-value]


def call_tile(problem: Any, tile: dict[str, int], dim: int) -> dict[str, int]:
    """The tile the generated code runs for a call tile of the planner's (canonical dimensions, the product of
    every factor below DRAM): clipped to the layer, a matmul's dimensions rounded up to whole DIM blocks."""
    d = problem.dims
    matmul = _is_matmul(problem)
    out = {}
    for name, bound in d.items():
        t = tile.get(name, 1)
        if matmul and name in MATMUL_BLOCKED:
            t = -(-t // dim) * dim
        out[name] = max(1, min(t, bound))
    return out


def call_memory(problem: Any, tile: dict[str, int], dim: int, fold_ok: bool = True) -> tuple[int, int]:
    """(scratchpad rows, accumulator rows) one call of this tile takes in the generated code."""
    t = call_tile(problem, tile, dim)
    d = problem.dims
    if _is_matmul(problem):
        # rows stream along the array (the code's q axis), the reduction is C, output channels K
        return (input_rows(dim, t["N"], 1, t["P"], 1, 1, t["C"], (1, 1), (1, 1))
                + weight_rows(dim, t["K"], 1, 1, t["C"]), acc_rows(dim, t["N"], 1, t["P"], t["K"]))
    stride = array_stride(d["R"], d["S"], problem.stride)
    fold = kernel_fold(dim, d["C"], t["C"], t["S"], problem.dilation[1]) if fold_ok else 1
    spad = (input_rows(dim, t["N"], t["P"], t["Q"], t["R"], t["S"], t["C"], stride, problem.dilation, fold)
            + weight_rows(dim, t["K"], t["R"], t["S"], t["C"]))
    return spad, acc_rows(dim, t["N"], t["P"], t["Q"], t["K"])


def _is_matmul(problem: Any) -> bool:
    """A matmul / dense layer (the code generator runs it as tiled_matmul); a conv states its input size."""
    d = problem.dims
    return problem.in_hw is None and d["Q"] == 1 and d["R"] == 1 and d["S"] == 1


def overfill(spad: int, acc: int, memory: MemoryRows, halves: int = 2) -> float:
    """How full the fuller memory is with `halves` calls in flight (<= 1: fits)."""
    return max(halves * spad / memory.spad_rows, halves * acc / memory.acc_rows)


def fits_halves(problem: Any, tile: dict[str, int], memory: MemoryRows, fold_ok: bool = True) -> bool:
    """Whether the code generator emits a call of this tile as it is: it fits half the scratchpad and half the
    accumulator (two calls in flight), so `schedule.fit` shrinks nothing."""
    spad, acc = call_memory(problem, tile, memory.dim, fold_ok)
    return overfill(spad, acc, memory) <= 1.0


def halves_rule(problem: Any, memory: MemoryRows, fold_ok: bool = True) -> Callable[[abc.Mapping[str, int]], bool]:
    """`fits_halves(problem, tile, memory, fold_ok)` as a function of the tile alone: what depends on the problem
    (matmul or conv, the array's stride, the bounds) worked out once, the call tile clipped without building its
    dict; the same arithmetic (`input_rows`, `weight_rows`, `acc_rows`, `kernel_fold`, `overfill`). The retile
    search asks it of ~1,500 candidate tilings per layer (ResNet-50: 34k calls, 1 CPU s as `fits_halves`)."""
    dim = memory.dim
    d = problem.dims
    bn, bp, bq, bk, bc, br, bs = (d[k] for k in ("N", "P", "Q", "K", "C", "R", "S"))
    if _is_matmul(problem):
        def fits_matmul(tile: abc.Mapping[str, int]) -> bool:
            get = tile.get
            n = max(1, min(get("N", 1), bn))
            p = max(1, min(-(-get("P", 1) // dim) * dim, bp))
            k = max(1, min(-(-get("K", 1) // dim) * dim, bk))
            c = max(1, min(-(-get("C", 1) // dim) * dim, bc))
            spad = input_rows(dim, n, 1, p, 1, 1, c, (1, 1), (1, 1)) + weight_rows(dim, k, 1, 1, c)
            return overfill(spad, acc_rows(dim, n, 1, p, k), memory) <= 1.0

        return fits_matmul
    stride = array_stride(br, bs, problem.stride)
    dilation = problem.dilation

    def fits_conv(tile: abc.Mapping[str, int]) -> bool:
        get = tile.get
        n, p, q = max(1, min(get("N", 1), bn)), max(1, min(get("P", 1), bp)), max(1, min(get("Q", 1), bq))
        k, c = max(1, min(get("K", 1), bk)), max(1, min(get("C", 1), bc))
        r, s = max(1, min(get("R", 1), br)), max(1, min(get("S", 1), bs))
        fold = kernel_fold(dim, bc, c, s, dilation[1]) if fold_ok else 1
        spad = input_rows(dim, n, p, q, r, s, c, stride, dilation, fold) + weight_rows(dim, k, r, s, c)
        return overfill(spad, acc_rows(dim, n, p, q, k), memory) <= 1.0

    return fits_conv


def mapping_tile(mapping: Any, top: int) -> dict[str, int]:
    """The call tile of a mapping: per dimension, the product of every factor below level `top` (DRAM)."""
    tile: dict[str, int] = {}
    for lv in mapping.levels[:top]:
        for d, f in (*lv.temporal, *lv.spatial):
            tile[d] = tile.get(d, 1) * f
    return tile


def emittable_memory(arch: Any) -> MemoryRows | None:
    """The memory rows the code generator fills on `arch`, None where it generates no code (nothing to shrink), or
    where plans are judged by Timeloop's semantics: Timeloop runs the loop nest as mapped, no generated call, so a
    tile the code generator would shrink is no reason to prefer a slower plan there."""
    from tileplan.cost.model import model_for

    if model_for(arch) == "timeloop":
        return None
    pe = arch.hardware.pe_array
    if pe.rows != pe.cols:
        return None
    from tileplan.execution import library_levels

    if library_levels(arch) is None:
        return None
    return memory_rows(arch)


def emittable(problem: Any, arch: Any, mapping: Any) -> bool:
    """Whether Tileplan's code generator runs `mapping` on `arch` with the tiles it was scored with (True where no
    code is generated: nothing to shrink). Grouped plans with `group_pack` are judged on the packed layer."""
    memory = emittable_memory(arch)
    if memory is None:
        return True
    pack = getattr(mapping, "group_pack", 1) or 1
    if pack > 1 and hasattr(problem, "packed"):
        problem = problem.packed(pack)
    top = len(mapping.levels) - 1
    return fits_halves(problem, mapping_tile(mapping, top), memory)


__all__ = ["MemoryRows", "acc_rows", "array_stride", "call_memory", "call_tile", "emittable", "emittable_memory", "fits_halves",
           "halves_rule", "input_rows", "kernel_fold", "mapping_tile", "memory_rows", "overfill", "weight_rows"]
