"""The judges a compiled model's outputs are compared with: onnxruntime sessions on the same model file, each
named for what it computes.

    want = reference_outputs(model_bytes, feeds, "ort-int8")      # {output name: array}
    agreement(got, want, output_steps(model_bytes))                # equal / within 1 LSB / max LSB

- `ort-int8`: onnxruntime's session with `session.qdqisint8allowed=1` (onnxruntime's own session option,
  kOrtSessionOptionsQDQIsInt8Allowed; on by default only on ARM): its QDQ transformer rewrites every int8
  DequantizeLinear -> op -> QuantizeLinear unit its selectors accept into the integer operator (QLinearConv,
  QLinearMatMul, QLinearAdd, QLinearGlobalAveragePool, QGemm, ...), with the file's own scales and zero points.
  On x86 the default session does this only for some units and computes the rest (often a ResNet's residual
  adds and the convs feeding them) in float, so that its results depend on which units it fused.  This is the
  integer reference of a QDQ export: the model as QOperator, converted by onnxruntime itself, from the same file.
- `ort`: the default session (on a QOperator export: its integer kernels, the same as `ort-int8`).
- `ort-noopt`: every graph optimisation off (ORT_DISABLE_ALL): each DequantizeLinear / float op /
  QuantizeLinear as the ONNX definitions read, in float.

Every session sets `session.x64quantprecision=1` (kOrtSessionOptionsAvx2PrecisionMode): on x86 CPUs without VNNI
(AVX2, AVX-512 without VNNI) onnxruntime's default U8S8 integer kernels add pairs of u8 x s8 products in a
saturating 16-bit register, so a QLinearConv / QLinearMatMul whose pair sums pass 32,767 comes out a few LSB off,
and the same file gives different results on different machines. The option makes onnxruntime use its exact U8U8
kernels there; on VNNI CPUs and elsewhere it changes nothing. A judge that depends on the CPU is not a judge.
One exception, onnxruntime's own: the option turns int8 weights into uint8, and some of its kernels have no such
type combination (QGemm, com.microsoft.QLinearConv with int8 activations, QLinearMatMul of two activations), and
its weight conversion fails on some graphs (DenseNet-121), so the session cannot be made; then it is made without the option, a warning says so, and `exact_kernels(session)` is
False (on an AVX2 CPU such a judge may be a few LSB off where its 16-bit pair sums saturate).

`judge_for(model)` names the reference a model's numbers are held to: `ort-int8` for every quantized model (for a
QOperator export it equals `ort`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger("tileplan.frontend")

REFERENCES = ("ort-int8", "ort", "ort-noopt")
INT8_ALLOWED = "session.qdqisint8allowed"
EXACT_X64 = "session.x64quantprecision"


def session(model: bytes | str, reference: str = "ort-int8") -> Any:
    """An onnxruntime CPU session on `model` (bytes or a path) computing as `reference` names."""
    import onnxruntime as ort

    if reference not in REFERENCES:
        raise ValueError(f"unknown reference {reference!r}; one of {', '.join(REFERENCES)}")

    def options(exact: bool) -> Any:
        so = ort.SessionOptions()
        # (a failed exact try is expected on some models: onnxruntime would print it as an error)
        so.log_severity_level = 4 if exact else 3
        if reference == "ort-noopt":
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if reference == "ort-int8":
            so.add_session_config_entry(INT8_ALLOWED, "1")
        if exact:
            so.add_session_config_entry(EXACT_X64, "1")
        return so

    try:
        s = ort.InferenceSession(model, options(True), providers=["CPUExecutionProvider"])
        s._tileplan_exact = True
        return s
    except Exception as e:  # noqa: BLE001  onnxruntime's own errors: NotImplemented (no uint8-weight QGemm
        # kernel), or Fail from the weight conversion itself (DenseNet-121's shared initializers: "Attempt to
        # replace the existing tensor"); a model onnxruntime cannot load at all fails again below, as itself
        why = str(e).split("(node:")[0].split("] :")[-1].strip().splitlines()[0][:200]
        log.warning("%s: onnxruntime cannot make its exact (uint8-weight) kernels for this model (%s); judging with "
                    "its default int8 kernels, which can saturate with uint8 activations on x86 CPUs without VNNI",
                    reference, why)
    s = ort.InferenceSession(model, options(False), providers=["CPUExecutionProvider"])
    s._tileplan_exact = False
    return s


def exact_kernels(sess: Any) -> bool:
    """Whether `sess` (from `session`) runs onnxruntime's exact integer kernels on this CPU."""
    return bool(getattr(sess, "_tileplan_exact", False))


def reference_outputs(model: bytes | str, feeds: dict[str, np.ndarray], reference: str = "ort-int8"
                      ) -> dict[str, np.ndarray]:
    s = session(model, reference)
    names = [o.name for o in s.get_outputs()]
    return dict(zip(names, s.run(None, feeds)))


def output_steps(model: bytes | str) -> dict[str, float]:
    """Output name -> its quantisation step (LSB): the scale of the DequantizeLinear producing it, 1 for an
    integer output or one no DequantizeLinear produces."""
    import onnx
    from onnx import numpy_helper

    m = (onnx.load_model_from_string(model) if isinstance(model, bytes)
         else onnx.load(model, load_external_data=False))
    inits = {t.name: t for t in m.graph.initializer}
    made = {o: n for n in m.graph.node for o in n.output}
    out = {}
    for o in m.graph.output:
        p = made.get(o.name)
        if p is not None and p.op_type == "DequantizeLinear" and p.input[1] in inits:
            out[o.name] = float(numpy_helper.to_array(inits[p.input[1]]).reshape(-1)[0])
        else:
            out[o.name] = 1.0
    return out


def agreement(got: dict[str, np.ndarray], want: dict[str, np.ndarray], steps: dict[str, float]) -> dict[str, Any]:
    """Share of output elements equal and within one quantisation step of `want`, and the largest difference
    in steps (every output flattened together)."""
    errs = np.concatenate([np.abs(got[k].astype(np.float64) - want[k].astype(np.float64)).ravel() / steps[k]
                           for k in want])
    return {"elements": int(errs.size), "equal": float(np.mean(errs <= 1e-3)),
            "within1": float(np.mean(errs <= 1.0 + 1e-3)), "max": float(errs.max(initial=0.0))}


def meets_bar(a: dict[str, Any]) -> bool:
    """The bar Tileplan holds itself to against its judge: >= 99.9% of the elements within 1 LSB."""
    return bool(a["within1"] >= 0.999)
