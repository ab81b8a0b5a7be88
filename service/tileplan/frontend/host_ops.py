"""The host part of a model: everything not offloaded, compiled by TVM to TIR and printed as plain C.

    mod = offload(mod, {composite name: op symbol})   # offloaded composites -> opaque call_dps_packed
    mod = lower_host(mod)                              # LegalizeOps, FoldConstant, FuseOps, FuseTIR
    fn = emit_host_function(prim_func, "tp_host_3")    # C source, workspace bytes, parameter dtypes

Host ops run in the model's own layout (NCHW) and in float32 between dequantize and quantize, as onnxruntime's
reference kernels do; `relax.quantize` is legalized here with round-half-to-even (ONNX QuantizeLinear's rounding;
TVM's own legalization rounds half away from zero).  TVM's `target="c"` output needs TVM's runtime, so the
lowered PrimFuncs are printed by Tileplan's CEmitter (tileplan.codegen.emit_c) as standalone C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tileplan.codegen.emit_c import CEmitter, lower
from tileplan.codegen.registry import CodegenError

# relax ops whose fused groups are only (de)quantisation
QDQ_OPS = {"relax.quantize", "relax.dequantize"}


def _scalar_or_tensor(e: Any) -> Any:
    """A scalar constant as a Python number (embedded in the code), else the expression (a tensor argument)."""
    from tvm.ir.expr import GenericConst

    if isinstance(e, GenericConst):
        a = e.value.numpy()
        if a.size == 1:
            return a.reshape(()).item()
    return e


def _legalize_quantize(bb: Any, call: Any) -> Any:
    """relax.quantize -> clamp(nearbyint(x / scale) + zero_point): ONNX QuantizeLinear, half to even."""
    from tvm import te, tirx

    data, scale, zp = call.args
    axis = int(call.attrs.axis)
    out_dtype = str(call.attrs.out_dtype)
    info = np.iinfo(np.dtype(out_dtype))
    lo, hi = tirx.const(float(info.min), "float32"), tirx.const(float(info.max), "float32")
    s, z = _scalar_or_tensor(scale), _scalar_or_tensor(zp)
    tensors = [data] + [t for t in (s, z) if not isinstance(t, (int, float))]
    ndim = len(data.ty.shape)
    ax = axis % ndim if ndim else 0

    def compute(x: Any, *rest: Any) -> Any:
        it = iter(rest)
        st = s if isinstance(s, (int, float)) else next(it)
        zt = z if isinstance(z, (int, float)) else next(it)

        def value(t: Any, idx: tuple[Any, ...], dtype: str) -> Any:
            if isinstance(t, (int, float)):
                return tirx.const(float(t), dtype)
            v = t[idx[ax]] if len(t.shape) == 1 else t[()]
            return v.astype(dtype) if dtype != t.dtype else v

        def f(*idx: Any) -> Any:
            q = tirx.nearbyint(x(*idx) / value(st, idx, "float32")) + value(zt, idx, "float32")
            return tirx.Cast(out_dtype, tirx.max(tirx.min(q, hi), lo))

        return te.compute(x.shape, f, name="quantized")

    return bb.call_te(compute, *tensors, primfunc_name_hint="quantize")


def offload(mod: Any, symbols: dict[str, str]) -> Any:
    """Replace every call of a composite function named in `symbols` by an opaque `call_dps_packed(symbol)`
    (the accelerator op), and drop the composite functions."""
    from tvm import relax

    gvs = {gv.name_hint: gv for gv in mod.functions}

    @relax.expr_functor.mutator
    class _Offload(relax.PyExprMutator):  # type: ignore[misc]
        def visit_call_(self, call: Any) -> Any:
            call = super().visit_call_(call)
            op = call.op
            if isinstance(op, relax.GlobalVar) and op.name_hint in symbols:
                return relax.op.call_dps_packed(symbols[op.name_hint], relax.Tuple(list(call.args)), call.ty)
            return call

    main = _Offload().visit_expr(mod["main"])
    out = tvm_module({"main": main}, mod)
    for name, gv in gvs.items():
        if name != "main" and name not in symbols:
            out[gv] = mod[gv]
    return out


def tvm_module(funcs: dict[str, Any], like: Any) -> Any:
    import tvm

    new = tvm.IRModule(funcs)
    if like.attrs is not None:
        new = new.with_attrs(like.attrs)
    for k, v in like.global_infos.items():
        new.update_global_info(k, v)
    return new


def lower_host(mod: Any) -> Any:
    """Legalize the host ops to TIR (quantize with ONNX's rounding), fold constant subgraphs (dequantized weights
    of host ops), fuse elementwise chains into their producers, and make every fused group one PrimFunc."""
    import tvm
    from tvm import relax

    seq = tvm.transform.Sequential([
        relax.transform.LegalizeOps({"relax.quantize": _legalize_quantize}),
        relax.transform.FoldConstant(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
        relax.transform.DeadCodeElimination(["main"]),
    ])
    with tvm.transform.PassContext(opt_level=3):
        return seq(mod)


@dataclass
class HostFunction:
    name: str
    source: str
    workspace_bytes: int
    params: list[tuple[str, tuple[int, ...]]]  # (dtype, shape) of each parameter, inputs then outputs


def emit_host_function(func: Any, name: str, outputs: int = 1) -> HostFunction:
    """One lowered PrimFunc as standalone C: `void name(const T *in..., T *out..., uint8_t *workspace)`."""
    func = func.with_attr("global_symbol", name)
    import tvm

    low = lower(tvm.IRModule({"main": func}))["main"]
    params = []
    for p in func.params:
        if not hasattr(p, "dtype"):
            raise CodegenError(f"host function {name}: a non-buffer parameter {p}")
        params.append((str(p.dtype), tuple(int(d) for d in p.shape)))
    names = [f"p{i}" for i in range(len(params))]
    em = CEmitter(dim=16, spad_rows=0, acc_rows=0).emit(
        low, name, names, workspace=0, prologue=[], epilogue=[], outputs=outputs, includes=(), entry=False,
        header_comment=f"{name}: host op, TVM-legalized and lowered TIR printed as C by Tileplan")
    return HostFunction(name, em.source, em.workspace_bytes, params)
