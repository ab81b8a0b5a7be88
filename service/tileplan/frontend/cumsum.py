# mypy: disable-error-code="valid-type"
# (TVMScript parameter annotations, T.Buffer((shape), dtype), are calls that TVM parses, not Python types)
"""ONNX CumSum on the host (TVM's Relax has `relax.cumsum` but no legalization of it: the program refused it with
"unsupported binding", e.g. timm's EdgeNeXt, whose Fourier positional encoding is the cumulative sum of a mask of
ones, and HF models that number positions by `attention_mask.cumsum(-1)`). One PrimFunc over the input viewed as
[outer, n, inner]: a running sum along n in the output's type, each output the previous one plus the next input
(exclusive: before adding it), as onnxruntime's CumSum adds, so float sums round the same. TVM's importer flips the
axis around it for `reverse`."""

from __future__ import annotations

import math
from typing import Any


def _cumsum_func(outer: int, n: int, inner: int, dtype: str, out_dtype: str, exclusive: bool) -> Any:
    from tvm.script import tirx as T

    O, N, I = outer, n, inner  # the operator's letters
    excl = 1 if exclusive else 0

    @T.prim_func(private=True)
    def cumsum(x: T.Buffer((O, N, I), dtype), y: T.Buffer((O, N, I), out_dtype)) -> None:
        T.func_attr({"op_pattern": 8})
        acc = T.alloc_buffer((1,), out_dtype)
        for o, i in T.grid(O, I):
            for t in range(N):
                if t == 0:
                    if excl == 1:
                        y[o, t, i] = T.Cast(out_dtype, 0)
                        acc[0] = T.Cast(out_dtype, x[o, t, i])
                    else:
                        acc[0] = T.Cast(out_dtype, x[o, t, i])
                        y[o, t, i] = acc[0]
                else:
                    if excl == 1:
                        y[o, t, i] = acc[0]
                        acc[0] = acc[0] + T.Cast(out_dtype, x[o, t, i])
                    else:
                        acc[0] = acc[0] + T.Cast(out_dtype, x[o, t, i])
                        y[o, t, i] = acc[0]

    return cumsum


def legalize_cumsum(bb: Any, call: Any) -> Any:
    """relax.cumsum (a constant axis; an axis of None: over the flattened input) computed by _cumsum_func, its
    input reshaped to [outer, n, inner] around the axis and the result back."""
    from tvm import relax

    x = call.args[0]
    shape = [int(d) for d in x.ty.shape]
    dtype = str(x.ty.dtype)
    out_dtype = str(call.attrs.dtype) if call.attrs.dtype is not None and str(call.attrs.dtype) else dtype
    if call.attrs.axis is None:
        shape, axis = [math.prod(shape)], 0
    else:
        axis = int(call.attrs.axis) % len(shape)
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    gv = bb.add_func(_cumsum_func(outer, shape[axis], inner, dtype, out_dtype, bool(call.attrs.exclusive)), "cumsum")
    flat = bb.emit(relax.op.reshape(x, (outer, shape[axis], inner)))
    y = bb.emit(relax.call_tir(gv, relax.Tuple([flat]), relax.TensorType((outer, shape[axis], inner), out_dtype)))
    return relax.op.reshape(y, [int(d) for d in call.ty.shape])
