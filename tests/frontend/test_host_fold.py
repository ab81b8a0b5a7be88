"""Host lowering folds constant (de)quantisation and shape arithmetic in NumPy (host_ops.fold_constants_numpy)
instead of letting TVM's FoldConstant JIT-compile one LLVM function per distinct call: each fold must give the
bytes FoldConstant gives, and lowering a model must leave FoldConstant nothing to compile."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tvm  # a dependency of Tileplan: never skipped
from tvm import relax
from tvm.ir.expr import GenericConst

from tileplan.frontend import host_ops


def _module(calls: list[Any]) -> Any:
    """main() returning a tuple of `calls` (functions of the block builder), every argument a constant."""
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        with bb.dataflow():
            outs = [bb.emit(c(bb)) for c in calls]
            gv = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(gv)
    return bb.get()


def _outputs(mod: Any) -> list[np.ndarray]:
    """The constants main returns (each output must have been folded)."""
    main = mod["main"]
    values = {b.var: b.value for blk in main.body.blocks for b in blk.bindings}

    def value(e: Any) -> Any:
        while isinstance(e, relax.Var) and e in values:
            e = values[e]
        return e

    tup = value(main.body.body)
    out = []
    for f in tup.fields:
        v = value(f)
        assert isinstance(v, GenericConst), f"not folded: {v}"
        out.append(v.value.numpy())
    return out


def _fold_constant(mod: Any) -> list[np.ndarray]:
    seq = tvm.transform.Sequential([relax.transform.LegalizeOps({"relax.quantize": host_ops._legalize_quantize}),
                                    relax.transform.FoldConstant()])
    with tvm.transform.PassContext(opt_level=3):
        return _outputs(seq(mod))


def _same_bytes(calls: list[Any]) -> None:
    mod = _module(calls)
    want = _fold_constant(mod)
    got = _outputs(host_ops.fold_constants_numpy(mod))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert g.tobytes() == w.tobytes()


def _c(a: Any, dtype: str | None = None) -> Any:
    a = np.asarray(a, dtype)
    return relax.const(a, str(a.dtype))


def test_dequantize_folds_as_fold_constant() -> None:
    rng = np.random.default_rng(0)
    w8 = rng.integers(-128, 128, (4, 6, 5), dtype=np.int8)
    w32 = rng.integers(-2**31, 2**31 - 1, (7,), dtype=np.int64).astype(np.int32)  # int32 -> float32 rounds
    s = rng.uniform(1e-4, 0.1, 6).astype(np.float32)
    z = rng.integers(-128, 128, 6, dtype=np.int8)
    deq = relax.op.dequantize
    _same_bytes([
        lambda bb: deq(_c(w8), _c(np.float32(0.0173)), _c(np.int8(-7)), 1, "float32"),
        lambda bb: deq(_c(w8), _c(s), _c(z), 1, "float32"),                           # per channel
        lambda bb: deq(_c(w8), _c(s[:1]), _c(z[:1]), 1, "float32"),                   # one element, shape (1,)
        lambda bb: deq(_c(w32), _c(np.array([3.3e-5], np.float32)), _c(np.int32(0)), 0, "float32"),
        lambda bb: deq(_c(w32), _c(np.float32(0.5)), _c(np.int32(-2**31 + 5)), 0, "float32"),  # int32 wraps
        lambda bb: deq(_c(np.uint8(200)), _c(np.float32(0.1)), _c(np.uint8(128)), 0, "float32"),
        lambda bb: deq(_c(np.array([-7, 0, 5], np.int8)), _c(np.float32(np.inf)), _c(np.int8(-7)), 0,
                       "float32"),                                                # 0 * inf: NaN
    ])


def test_quantize_folds_as_fold_constant() -> None:
    rng = np.random.default_rng(1)
    s = np.float32(0.0625)
    x = np.concatenate([rng.normal(0, 4, 40), (np.arange(-20, 20) + 0.5) * s,  # ties: half to even
                        [np.inf, -np.inf, np.nan, 1e30, -1e30, 0.0, -0.0]]).astype(np.float32)
    per = rng.normal(0, 1, (3, 4)).astype(np.float32)
    q = relax.op.quantize
    _same_bytes([
        lambda bb: q(_c(x), _c(s), _c(np.int8(3)), 0, "int8"),
        lambda bb: q(_c(x), _c(np.float32(0.0173)), _c(np.uint8(128)), 0, "uint8"),
        lambda bb: q(_c(x), _c(np.float32(np.inf)), _c(np.int8(0)), 0, "int8"),    # x / inf, inf / inf: NaN
        lambda bb: q(_c(per), _c(np.array([0.1, 0.02, 0.3, 0.04], np.float32)), _c(np.array([1, -2, 3, 0], np.int8)),
                     1, "int8"),
        lambda bb: q(relax.op.dequantize(_c(np.arange(-128, 128, dtype=np.int8)), _c(np.float32(0.03)),
                                         _c(np.int8(5)), 0, "float32"), _c(np.float32(0.07)), _c(np.int8(-3)), 0,
                     "int8"),                                                      # a chain of folds
    ])


def test_shape_arithmetic_folds_as_fold_constant() -> None:
    """ONNX Gather on a Shape (what the importer makes of torch's `x[0]`): shape_of -> shape_to_tensor -> take ->
    add -> where, with static shapes."""
    def chain(index: int, mode: str) -> Any:
        def build(bb: Any) -> Any:
            x = bb.emit(relax.op.zeros(relax.ShapeExpr([3, 197, 1, 8]), "float32"))
            t = bb.emit(relax.op.shape_to_tensor(bb.emit(relax.op.shape_of(x))))
            e = bb.emit(relax.op.take(t, _c(np.int64(index)), axis=0, mode=mode))
            e = bb.emit(relax.op.add(_c(np.int64(2)), e))
            e = bb.emit(relax.op.subtract(e, _c(np.int64(1))))
            e = bb.emit(relax.op.multiply(e, _c(np.int64(3))))
            c = bb.emit(relax.op.less(e, _c(np.int64(0))))
            return relax.op.where(c, e, _c(np.int64(7)))
        return build

    _same_bytes([chain(0, "wrap"), chain(-1, "wrap"), chain(5, "wrap"), chain(3, "fast"), chain(1, "clip")])


def _constant_calls(mod: Any) -> int:
    """call_tir bindings of main whose arguments are all constants: what FoldConstant would JIT-compile."""
    n = 0
    for blk in mod["main"].body.blocks:
        for b in blk.bindings:
            v = b.value
            if isinstance(v, relax.Call) and getattr(v.op, "name", "") == "relax.call_tir":
                args = v.args[1]
                fields = list(args.fields) if isinstance(args, relax.Tuple) else [args]
                n += all(isinstance(a, (GenericConst, relax.ShapeExpr)) for a in fields)
    return n


def test_lowering_leaves_fold_constant_nothing_to_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model's host part as the compiler hands it to lower_host: FoldConstant's input has no call whose arguments
    are all constants (before the NumPy folds: one per dequantized host-op constant, each JIT-compiled)."""
    from tileplan.frontend import zoo

    seen: list[int] = []
    fold = relax.transform.FoldConstant

    def counting_fold() -> Any:
        real = fold()

        @tvm.transform.module_pass(opt_level=0, name="CountingFoldConstant")
        def run(mod: Any, ctx: Any) -> Any:
            seen.append(_constant_calls(mod))
            return real(mod)
        return run

    monkeypatch.setattr(relax.transform, "FoldConstant", counting_fold)
    lowered = host_ops.lower_host(_host_module(zoo.build("attention", "qdq")))
    assert seen == [0]
    assert any(isinstance(f, tvm.tirx.PrimFunc) for f in lowered.functions.values())


def _host_module(model: bytes) -> Any:
    """The module compile_model gives lower_host for `model`, every op on the host."""
    from tileplan.frontend import onnx_import, patterns

    imported = onnx_import.load_model(model, None, False, None, 8, 0)
    mod, nodes = onnx_import.to_relax(imported)
    fused, _ = patterns.fuse(mod, nodes, lambda q: False)
    compat, _ = host_ops.onnxruntime_compatible(host_ops.offload(fused, {}))
    return compat
