# mypy: disable-error-code="valid-type"
# (TVMScript parameter annotations, T.Buffer((shape), dtype), are calls that TVM parses, not Python types)
"""ONNX TopK on the host (TVM's Relax has `relax.topk` but no legalization of it: the program refused it with
"unsupported binding"). One PrimFunc over the input viewed as [outer, n, inner]: for each of the k results, a scan
for the best element after the previous result in TopK's order, which is ONNX's (values descending for
largest=1, ascending for largest=0; equal values by lower index first, as onnxruntime returns them). O(k n) per
row, for the small k of a classifier's head."""

from __future__ import annotations

import math
from typing import Any


def _topk_func(outer: int, n: int, inner: int, k: int, dtype: str, index_dtype: str, largest: bool) -> Any:
    from tvm.script import tirx as T

    O, N, I, K = outer, n, inner, k  # the operator's letters
    big = 1 if largest else 0

    @T.prim_func(private=True)
    def topk(x: T.Buffer((O, N, I), dtype), values: T.Buffer((O, K, I), dtype),
             indices: T.Buffer((O, K, I), index_dtype)) -> None:
        T.func_attr({"op_pattern": 8})
        best = T.alloc_buffer((1,), "int64")
        for o, i in T.grid(O, I):
            for j in range(K):
                best[0] = T.int64(-1)
                for t in range(N):
                    v = x[o, t, i]
                    # after the previous result in TopK's order (value first, then the lower index)
                    after = (j == 0) or (T.Select(big == 1, v < values[o, j - 1, i], v > values[o, j - 1, i])
                                         or (v == values[o, j - 1, i] and T.int64(t) > indices[o, j - 1, i]))
                    if after:
                        if best[0] < T.int64(0):
                            best[0] = T.int64(t)
                        elif T.Select(big == 1, v > x[o, best[0], i], v < x[o, best[0], i]):
                            best[0] = T.int64(t)
                values[o, j, i] = x[o, best[0], i]
                indices[o, j, i] = T.Cast(index_dtype, best[0])

    return topk


def legalize_topk(bb: Any, call: Any) -> Any:
    """relax.topk -> (values, indices) (ret_type "both"; "values" / "indices" take one of them) computed by
    _topk_func, its input reshaped to [outer, n, inner] around the axis and the results back."""
    from tvm import relax

    x = call.args[0]
    shape = [int(d) for d in x.ty.shape]
    axis = int(call.attrs.axis) % len(shape)
    k = int(call.attrs.k)
    outer, inner = math.prod(shape[:axis]), math.prod(shape[axis + 1:])
    dtype, index_dtype = str(x.ty.dtype), str(call.attrs.dtype)
    gv = bb.add_func(_topk_func(outer, shape[axis], inner, k, dtype, index_dtype, bool(call.attrs.largest)), "topk")
    flat = bb.emit(relax.op.reshape(x, (outer, shape[axis], inner)))
    both = bb.emit(relax.call_tir(gv, relax.Tuple([flat]), [relax.TensorType((outer, k, inner), dtype),
                                                            relax.TensorType((outer, k, inner), index_dtype)]))
    out_shape = (*shape[:axis], k, *shape[axis + 1:])
    vals = bb.emit(relax.op.reshape(relax.TupleGetItem(both, 0), out_shape))
    idx = bb.emit(relax.op.reshape(relax.TupleGetItem(both, 1), out_shape))
    ret = str(call.attrs.ret_type)
    if ret == "values":
        return vals
    if ret == "indices":
        return idx
    return relax.Tuple([vals, idx])
