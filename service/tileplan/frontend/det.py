# mypy: disable-error-code="valid-type"
# (TVMScript parameter annotations, T.Buffer((shape), dtype), are calls that TVM parses, not Python types)
"""ONNX Det on the host (TVM's importer has no converter: the compile refused it, 'operator Det ... is not
supported'). onnxruntime's kernel takes each matrix's Eigen determinant (a dynamic-size row-major Map), which is
PartialPivLU's: for k = 0 .. N-1 the row of the largest |a_rk| (r >= k, the first of equal ones) swapped into row
k, the column below the pivot divided by it (only if the pivot is not 0), then a_rc -= a_rk * a_kc below and right
of it (Eigen's unblocked_lu, which it takes for N <= 16); the determinant is the diagonal's product, left to
right, times -1 per swap. One PrimFunc doing exactly that in the input's type, so N <= 16 is onnxruntime's result
bit for bit; a larger matrix Eigen factorises in blocks (its GEMM sums in another order), where this is within
float rounding of it."""

from __future__ import annotations

import math
from typing import Any


def _det_func(batch: int, n: int, dtype: str) -> Any:
    from tvm.script import tirx as T

    B, N = batch, n  # the operator's letters

    @T.prim_func(private=True)
    def det(x: T.Buffer((B, N, N), dtype), y: T.Buffer((B,), dtype)) -> None:
        T.func_attr({"op_pattern": 8})
        lu = T.alloc_buffer((N, N), dtype)
        piv = T.alloc_buffer((1,), "int32")
        swaps = T.alloc_buffer((1,), "int32")
        best = T.alloc_buffer((1,), dtype)
        tmp = T.alloc_buffer((1,), dtype)
        for b in range(B):
            for i, j in T.grid(N, N):
                lu[i, j] = x[b, i, j]
            swaps[0] = 0
            for k in range(N):
                piv[0] = k
                best[0] = T.abs(lu[k, k])
                for r in range(k + 1, N):
                    if T.abs(lu[r, k]) > best[0]:
                        best[0] = T.abs(lu[r, k])
                        piv[0] = r
                if best[0] != T.Cast(dtype, 0):
                    if piv[0] != k:
                        for j in range(N):
                            tmp[0] = lu[k, j]
                            lu[k, j] = lu[piv[0], j]
                            lu[piv[0], j] = tmp[0]
                        swaps[0] = swaps[0] + 1
                    for r in range(k + 1, N):
                        lu[r, k] = lu[r, k] / lu[k, k]
                for r, c in T.grid(N - k - 1, N - k - 1):
                    lu[k + 1 + r, k + 1 + c] = lu[k + 1 + r, k + 1 + c] - lu[k + 1 + r, k] * lu[k, k + 1 + c]
            tmp[0] = lu[0, 0]
            for i in range(N - 1):
                tmp[0] = tmp[0] * lu[i + 1, i + 1]
            if swaps[0] % 2 == 1:
                y[b] = T.Cast(dtype, -1) * tmp[0]
            else:
                y[b] = T.Cast(dtype, 1) * tmp[0]

    return det


def det_call(bb: Any, x: Any) -> Any:
    """ONNX Det of `x` ([..., N, N], float32 or float64) as _det_func computes it: [...] (a scalar for 2-d x)."""
    from tvm import relax

    shape = [int(d) for d in x.ty.shape]
    dtype = str(x.ty.dtype)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise ValueError(f"an input of shape {shape} (Det takes square matrices, [..., N, N])")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"a {dtype} input (onnxruntime's Det takes float32 only; Tileplan computes float32 and "
                         "float64)")
    n, batch = shape[-1], math.prod(shape[:-2])
    gv = bb.add_func(_det_func(batch, n, dtype), "det")
    flat = bb.emit(relax.op.reshape(x, (batch, n, n)))
    y = bb.emit(relax.call_tir(gv, relax.Tuple([flat]), relax.TensorType((batch,), dtype)))
    return relax.op.reshape(y, shape[:-2])
