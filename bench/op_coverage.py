"""Which ONNX operators Tileplan compiles, and whether its programs compute what onnxruntime computes (issue 24).

    PYTHONPATH=service python bench/op_coverage.py [--jobs 2] [--cases 2] [--ops Col2Im,TopK]
                                                   [--out bench/results/op_coverage.md]

Every operator of ONNX's default domain that the installed onnx package defines at an opset from 13 to 21
(`onnx.defs.get_all_schemas_with_history()`), and the com.microsoft operators onnxruntime's quantizer and
optimizer write (COM_MICROSOFT). The default domain's models are ONNX's own node tests for that operator
(`onnx.backend.test.case.node.collect_testcases`: one node, its inputs' values given), up to --cases of them per
operator, rewritten the way an exporter writes that node:

- the first input is the model's input; the others (weights, axes, shapes, indices, scales) are constants of the
  model, as an exporter stores them;
- a float32 first input goes through QuantizeLinear -> DequantizeLinear (int8, scale max|x| / 127) and every
  float32 output through QuantizeLinear -> DequantizeLinear (scale from onnxruntime's float result), as
  onnxruntime's static quantizer leaves a float op between them; integer, boolean and shape ops as they are;
- the opset is lowered to 21 where the operator's definition at 21 is the one the test was written for.

Each model is compiled by `compile_model` (what `tileplan compile` runs) for gemmini-16x16 and its program run by
the emulator (`run_artifact`) on the test's inputs, against onnxruntime's default session on the same file
(`ort`). Cells: `compiles`, `refused` (the error, which names the node and the reason), `error` (an exception that
is not an InputError: a Tileplan bug) or `crash`; agreement: equal / within 1 LSB (the output's DequantizeLinear
scale; 1 for integer outputs) / the largest difference in LSB. An operator onnxruntime cannot run in that form
(no kernel, or a type it has no kernel for) is `not ort` and not judged. Random operators (RandomNormal, ...) are
compared by shape only. Each worker process compiles its share of operators; one that dies is restarted after
the operator it was on, which is recorded as `crash`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OPSET_LO, OPSET_HI = 13, 21
RANDOM = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"}
# refused by name: not what an inference compiler meets in an exported model (training ops, sequence / optional
# values and control flow over them)
OUT_OF_SCOPE = {
    "Gradient": "training", "Momentum": "training", "Adagrad": "training", "Adam": "training",
    "SequenceAt": "sequence type", "SequenceConstruct": "sequence type", "SequenceEmpty": "sequence type",
    "SequenceErase": "sequence type", "SequenceInsert": "sequence type", "SequenceLength": "sequence type",
    "SequenceMap": "sequence type", "SplitToSequence": "sequence type", "ConcatFromSequence": "sequence type",
    "Optional": "optional type", "OptionalGetElement": "optional type", "OptionalHasElement": "optional type",
}
# operators whose first operand is a shape or a size (a Loop's: its trip count): an exporter writes it as a constant
SHAPE_FIRST = {"ConstantOfShape", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix", "Range",
               "EyeLike", "Loop"}
# (operator, the opset a test was written at) whose later definitions compute that test's model the same (Scan 11
# adds negative axes to 9's; 16 and later add types): the test is run at a later opset, QuantizeLinear's too
SAME_SINCE = {("Scan", 9)}
# operators that move values: onnxruntime's quantizer gives their output their input's scale and zero point
SAME_QPARAMS = {"Transpose", "Squeeze", "Unsqueeze", "Reshape", "Flatten", "Identity", "Expand", "Slice", "Gather",
                "Tile", "DepthToSpace", "SpaceToDepth", "Split", "Concat", "MaxPool", "Pad", "Resize"}
# operators exporters write with their first output alone (ONNX's tests read the others too)
FIRST_OUTPUT_ONLY = {"LayerNormalization"}
# why an operator still refused is left so (shown before its reason)
LEFT = {
    "Bernoulli": "random: a different value at every run, nothing to compile once",
    "Multinomial": "random", "RandomNormal": "random", "RandomNormalLike": "random", "RandomUniform": "random",
    "RandomUniformLike": "random",
    "If": "control flow: its condition computed at run time (the tests feed it); an If with a constant condition "
          "is replaced by its branch at import",
    "Loop": "control flow: a Loop with a constant trip count whose condition stays true, and a Scan over static "
            "shapes, are unrolled at import",
    "Scan": "control flow: a Scan over static shapes is unrolled at import",
    "NegativeLogLikelihoodLoss": "a training loss", "SoftmaxCrossEntropyLoss": "a training loss",
    "RegexFullMatch": "string tensors", "StringConcat": "string tensors", "StringNormalizer": "string tensors",
    "StringSplit": "string tensors", "TfIdfVectorizer": "text features (n-gram counts), not a network's op",
    "ImageDecoder": "image decoding (onnxruntime's CPU session has no kernel either)",
    "NonZero": "output shape depends on values", "NonMaxSuppression": "output shape depends on values",
    "Unique": "output shape depends on values",
    "Compress": "output shape depends on values unless its condition is a constant (the tests feed it)",
    "ConvInteger": "with padding in an opset-10 model: Tileplan's rewrite pads with Pad's input form (opset 11+), "
                   "which opset 10 lacks; opset 11+ exports compile",
    "MeanVarianceNormalization": "onnx's own shape inference fails on the test's form (its function body)",
    "EyeLike": "a dtype attribute different from its input's: TVM's converter refuses it",
    "OneHot": "TVM's converter takes only constant depth and values of its own form",
    "ms:NhwcMaxPool": "onnxruntime's internal layout op (its NHWC transformer's, not saved by its quantizer)",
}
PER_CASE_S = 240.0  # a worker with no result for this long is killed and the operator recorded as `timeout`


def default_domain_ops() -> dict[str, dict[str, Any]]:
    """op -> {since: the since_version of its definition at opset 21, deprecated}, every op with a definition at
    an opset <= 21 that is not deprecated before 13."""
    import onnx.defs

    best: dict[str, Any] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain not in ("", "ai.onnx") or s.since_version > OPSET_HI:
            continue
        if s.name not in best or s.since_version > best[s.name].since_version:
            best[s.name] = s
    return {name: {"since": s.since_version, "deprecated": bool(s.deprecated)} for name, s in sorted(best.items())}


# ----------------------------------------------------------------------------------------------------- models


def _qdq_input(nodes: list, inits: list, name: str, x: np.ndarray, tag: str) -> str:
    from onnx import helper, numpy_helper

    scale = np.float32(max(float(np.nanmax(np.abs(x[np.isfinite(x)]))) if np.isfinite(x).any() else 1.0, 1e-3)
                       / 127)
    inits += [numpy_helper.from_array(np.asarray(scale), f"{tag}_s"),
              numpy_helper.from_array(np.asarray(np.int8(0)), f"{tag}_z")]
    nodes += [helper.make_node("QuantizeLinear", [name, f"{tag}_s", f"{tag}_z"], [f"{tag}_q"], name=f"{tag}_quant"),
              helper.make_node("DequantizeLinear", [f"{tag}_q", f"{tag}_s", f"{tag}_z"], [f"{tag}_dq"],
                               name=f"{tag}_dequant")]
    return f"{tag}_dq"


def _ort_outputs(data: bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from tileplan.frontend.reference import reference_outputs

    return reference_outputs(data, feeds, "ort")


def exporters_form(case_model: Any, inputs: list[np.ndarray], op: str, since: int) -> tuple[bytes, dict, dict]:
    """(model bytes, feeds, {output: LSB}) of a node test's model as an exporter writes it (module docstring);
    a float64 test (many of ONNX's are) as float32, an exporter's type, where onnxruntime runs it so."""
    import onnx

    if _has_double(case_model):
        single = onnx.ModelProto()
        single.CopyFrom(case_model)
        for v in [*single.graph.input, *single.graph.output]:
            if v.type.tensor_type.elem_type == 11:
                v.type.tensor_type.elem_type = 1
        ins = [v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v for v in inputs]
        try:
            form = _exporters_form(single, ins, op)
            _ort_outputs(*form[:2])
            return form
        except Exception:  # noqa: BLE001 - onnxruntime cannot run it in float32: the test as written
            pass
    return _exporters_form(case_model, inputs, op)


def _exporters_form(case_model: Any, inputs: list[np.ndarray], op: str) -> tuple[bytes, dict, dict]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    g = case_model.graph
    node = g.node[0]
    original = next((o.version for o in case_model.opset_import if o.domain in ("", "ai.onnx")), OPSET_HI)
    # opset 21 (at least 13: the QuantizeLinear around it), else 17 (onnxruntime's QDQ rewrites of some ops
    # between QuantizeLinear / DequantizeLinear fail at 21), else the test's own, whichever onnxruntime runs
    tries = []
    for v in (min(max(original, 13), OPSET_HI), 17, original):
        try:
            same = onnx.defs.get_schema(op, v).since_version == onnx.defs.get_schema(op, min(original, OPSET_HI)
                                                                                   ).since_version
        except onnx.defs.SchemaError:
            same = False
        same = same or (op, original) in SAME_SINCE
        if v not in tries and (same or v == original):
            tries.append(v)
    opset = tries[0]
    graph_inputs = [i for i in g.input]
    nodes: list = []
    inits: list = []
    feeds: dict[str, np.ndarray] = {}
    renames: dict[str, str] = {}
    new_inputs = []
    for k, (vi, value) in enumerate(zip(graph_inputs, inputs)):
        if not isinstance(value, np.ndarray):
            new_inputs.append(vi)  # a sequence / optional: left as the test has it (refused by name)
            continue
        if (k == 0 and op not in SHAPE_FIRST) or value.dtype == object:
            feeds[vi.name] = value
            new_inputs.append(vi)
            if value.dtype == np.float32 and value.size:
                renames[vi.name] = _qdq_input(nodes, inits, vi.name, value, "in0")
        else:
            inits.append(numpy_helper.from_array(value, vi.name))
    if not feeds:  # every operand a constant (a window's size, a shape): an activation beside it, as in a model
        feeds["x_beside"] = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
        new_inputs.append(helper.make_tensor_value_info("x_beside", TensorProto.FLOAT, [1, 8]))
        nodes.append(helper.make_node("Relu", [_qdq_input(nodes, inits, "x_beside", feeds["x_beside"], "beside")],
                                      ["y_beside"], name="beside_relu"))
        extra_out = [helper.make_tensor_value_info("y_beside", TensorProto.FLOAT, [1, 8])]
    else:
        extra_out = []
    body = onnx.NodeProto()
    body.CopyFrom(node)
    body.name = body.name or "op"
    for i, name in enumerate(body.input):
        if name in renames:
            body.input[i] = renames[name]
    nodes.append(body)
    outputs = list(g.output) + extra_out
    if op in FIRST_OUTPUT_ONLY:  # the tests read every output; exporters write the first alone
        outputs = outputs[:1]
        del body.output[1:]
    float_outs = [o for o in outputs if o.type.tensor_type.elem_type == TensorProto.FLOAT]

    def build(with_out_qdq: dict[str, float]) -> bytes:
        last = onnx.NodeProto()
        last.CopyFrom(nodes[-1])
        ns, its, outs = [*nodes[:-1], last], list(inits), []
        for o in outputs:
            if o.name in with_out_qdq and o.name in last.output:
                raw = f"{o.name}_float"
                for i, name in enumerate(last.output):
                    if name == o.name:
                        last.output[i] = raw
                its += [numpy_helper.from_array(np.asarray(np.float32(with_out_qdq[o.name])), f"{o.name}_s"),
                        numpy_helper.from_array(np.asarray(np.int8(0)), f"{o.name}_z")]
                ns += [helper.make_node("QuantizeLinear", [raw, f"{o.name}_s", f"{o.name}_z"], [f"{o.name}_q"],
                                        name=f"{o.name}_quant"),
                       helper.make_node("DequantizeLinear", [f"{o.name}_q", f"{o.name}_s", f"{o.name}_z"],
                                        [o.name], name=f"{o.name}_dequant")]
            outs.append(o)
        graph = helper.make_graph(ns, f"{op}_case", new_inputs, outs, its)
        imports = [helper.make_opsetid("", opset)] + [o for o in case_model.opset_import
                                                      if o.domain not in ("", "ai.onnx")]
        model = helper.make_model(graph, opset_imports=imports)
        # initializers need not be graph inputs from IR 4; an opset needs its IR version
        model.ir_version = max(case_model.ir_version, 4, helper.find_min_ir_version_for(imports, True))
        return model.SerializeToString()

    steps: dict[str, float] = {}
    try:
        floats: dict[str, np.ndarray] | None = _ort_outputs(build({}), feeds)
    except Exception:  # noqa: BLE001 - onnxruntime cannot run it at that opset (e.g. an attribute added later)
        floats = None
        for v in tries[1:]:
            opset = v
            try:
                floats = _ort_outputs(build({}), feeds)
                break
            except Exception:  # noqa: BLE001 - nor at the next: judged as such in run_case
                floats = None
    if float_outs and op not in RANDOM:
        if floats is not None:
            for o in float_outs:
                y = floats[o.name]
                fin = y[np.isfinite(y)] if y.size else y
                steps[o.name] = float(np.float32(max(float(np.abs(fin).max()) if fin.size else 1.0, 1e-3) / 127))
                scale_in = next((numpy_helper.to_array(t) for t in inits if t.name == "in0_s"), None)
                if op in SAME_QPARAMS and scale_in is not None:
                    steps[o.name] = float(scale_in)  # the quantizer gives a data move its input's scale
            # the float result goes through Q -> DQ only where all of it is finite (a NaN / inf is not quantized)
            if all(np.isfinite(floats[o.name]).all() for o in float_outs):
                return build(steps), feeds, steps
            steps = {}
    return build({}), feeds, {o.name: 1.0 for o in outputs}


def agreement(got: dict[str, np.ndarray], want: dict[str, np.ndarray], steps: dict[str, float]
              ) -> tuple[float, float, float, str]:
    """(share equal, share within 1 LSB, largest difference in LSB, note); NaN equals NaN."""
    errs, notes = [], []
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            return 0.0, 0.0, float("inf"), f"output {name} missing"
        if g.shape != w.shape:
            return 0.0, 0.0, float("inf"), f"{name}: shape {list(g.shape)} for {list(w.shape)}"
        if g.dtype != w.dtype:
            notes.append(f"{name}: {g.dtype} for {w.dtype}")
        if w.dtype == bool or g.dtype == bool:
            e = (g.astype(bool) != w.astype(bool)).astype(np.float64)
        elif w.dtype.kind in "iu" and g.dtype.kind in "iu":
            e = np.abs(g.astype(np.int64) - w.astype(np.int64)).astype(np.float64)
        else:
            gf, wf = g.astype(np.float64), w.astype(np.float64)
            same = (gf == wf) | (np.isnan(gf) & np.isnan(wf))
            with np.errstate(invalid="ignore"):
                e = np.where(same, 0.0, np.abs(gf - wf) / steps.get(name, 1.0))
            e = np.where(np.isnan(e), np.inf, e)
        errs.append(e.ravel())
    e = np.concatenate(errs) if errs else np.zeros(0)
    if not e.size:
        return 1.0, 1.0, 0.0, "; ".join(notes)
    return float(np.mean(e == 0)), float(np.mean(e <= 1)), float(e.max()), "; ".join(notes)


# -------------------------------------------------------------------------------- com.microsoft (onnxruntime)


def _ms_models() -> dict[str, tuple[bytes, dict[str, np.ndarray], dict[str, float]]]:
    """The com.microsoft operators onnxruntime's quantizer (QOperator format) and its graph optimizer (the
    models it saves) write, each as that tool writes it: (model bytes, feeds, {output: LSB})."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    out: dict[str, tuple[bytes, dict[str, np.ndarray], dict[str, float]]] = {}
    x4 = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    x2 = rng.standard_normal((4, 16)).astype(np.float32)

    def model(op: str, nodes: list, inputs: dict[str, tuple[int, list[int]]], outputs: dict[str, tuple[int, list]],
              consts: dict[str, np.ndarray], opset: int = 17) -> bytes:
        graph = helper.make_graph(nodes, op, [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
                                  [helper.make_tensor_value_info(k, t, s) for k, (t, s) in outputs.items()],
                                  [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
        m.ir_version = 8
        return m.SerializeToString()

    q = {"xs": np.float32(0.03), "xz": np.int8(1), "ys": np.float32(0.05), "yz": np.int8(-2),
         "bs": np.float32(0.04), "bz": np.int8(3)}
    f, i8 = TensorProto.FLOAT, TensorProto.INT8
    xq4 = rng.integers(-128, 128, (1, 8, 6, 6)).astype(np.int8)
    ms = "com.microsoft"

    def unary_q(op: str, **attrs: Any) -> None:
        nodes = [helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=ms, name="op", **attrs)]
        out[op] = (model(op, nodes, {"x": (i8, [1, 8, 6, 6])}, {"y": (i8, None)}, q), {"x": xq4}, {"y": 1.0})

    unary_q("QLinearSigmoid")
    unary_q("QLinearLeakyRelu", alpha=0.1)
    unary_q("QLinearGlobalAveragePool", channels_last=0)
    unary_q("QLinearAveragePool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for op in ("QLinearAdd", "QLinearMul"):
        nodes = [helper.make_node(op, ["x", "xs", "xz", "b", "bs", "bz", "ys", "yz"], ["y"], domain=ms, name="op")]
        cons = dict(q, b=rng.integers(-128, 128, (8, 1, 1)).astype(np.int8))
        out[op] = (model(op, nodes, {"x": (i8, [1, 8, 6, 6])}, {"y": (i8, None)}, cons), {"x": xq4}, {"y": 1.0})
    nodes = [helper.make_node("QLinearConcat", ["ys", "yz", "x", "xs", "xz", "b", "bs", "bz"], ["y"], axis=1,
                              domain=ms, name="op")]
    cons = dict(q, b=rng.integers(-128, 128, (1, 4, 6, 6)).astype(np.int8))
    out["QLinearConcat"] = (model("QLinearConcat", nodes, {"x": (i8, [1, 8, 6, 6])}, {"y": (i8, None)}, cons),
                            {"x": xq4}, {"y": 1.0})
    nodes = [helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], axis=-1, opset=13,
                              domain=ms, name="op")]
    cons = dict(q, ys=np.float32(1 / 256), yz=np.int8(-128))
    out["QLinearSoftmax"] = (model("QLinearSoftmax", nodes, {"x": (i8, [1, 8, 6, 6])}, {"y": (i8, None)}, cons),
                             {"x": xq4}, {"y": 1.0})
    nodes = [helper.make_node("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], ["y"], axes=[2, 3], keepdims=1,
                              domain=ms, name="op")]
    out["QLinearReduceMean"] = (model("QLinearReduceMean", nodes, {"x": (i8, [1, 8, 6, 6])}, {"y": (i8, None)}, q),
                                {"x": xq4}, {"y": 1.0})
    nodes = [helper.make_node("QLinearWhere", ["c", "x", "xs", "xz", "b", "bs", "bz", "ys", "yz"], ["y"],
                              domain=ms, name="op")]
    cons = dict(q, c=rng.integers(0, 2, (1, 8, 6, 6)).astype(bool),
                b=rng.integers(-128, 128, (1, 8, 6, 6)).astype(np.int8))
    out["QLinearWhere"] = (model("QLinearWhere", nodes, {"x": (i8, [1, 8, 6, 6])}, {"y": (i8, None)}, cons),
                           {"x": xq4}, {"y": 1.0})
    w = rng.integers(-100, 100, (16, 16)).astype(np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QGemm", ["xq", "xs", "xz", "w", "ws", "wz", "bias", "ys", "yz"], ["yq"], transB=1,
                              domain=ms, name="op"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    cons = dict(q, w=w, ws=np.float32(0.01), wz=np.int8(0),
                bias=rng.integers(-500, 500, (16,)).astype(np.int32), ys=np.float32(0.2))
    out["QGemm"] = (model("QGemm", nodes, {"x": (f, [4, 16])}, {"y": (f, None)}, cons), {"x": x2}, {"y": 0.2})
    # the optimizer's fusions (float; between Q / DQ as the quantizer leaves them)

    def float_op(name: str, op_nodes: list, consts: dict[str, np.ndarray], x: np.ndarray, y_lsb: float) -> None:
        nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
                 helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]), *op_nodes,
                 helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
                 helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"])]
        cons = dict(q, ys=np.float32(y_lsb), **consts)
        out[name] = (model(name, nodes, {"x": (f, list(x.shape))}, {"y": (f, None)}, cons), {"x": x}, {"y": y_lsb})

    for op in ("QuickGelu", "Gelu", "FastGelu"):
        float_op(op, [helper.make_node(op, ["xd"], ["t"], domain=ms, name="op")], {}, x2, 0.03)
    float_op("BiasGelu", [helper.make_node("BiasGelu", ["xd", "b16"], ["t"], domain=ms, name="op")],
             {"b16": rng.standard_normal(16).astype(np.float32)}, x2, 0.03)
    float_op("FusedMatMul", [helper.make_node("FusedMatMul", ["xd", "w16"], ["t"], alpha=0.5, transB=1,
                                              domain=ms, name="op")],
             {"w16": rng.standard_normal((16, 16)).astype(np.float32)}, x2, 0.05)
    float_op("FusedConv", [helper.make_node("FusedConv", ["xd", "wc", "bc"], ["t"], activation="Relu",
                                            kernel_shape=[3, 3], pads=[1, 1, 1, 1], domain=ms, name="op")],
             {"wc": rng.standard_normal((4, 8, 3, 3)).astype(np.float32), "bc": np.zeros(4, np.float32)}, x4, 0.1)
    from onnxruntime.capi._pybind_state import quantize_matmul_4bits

    nb = {"nb_b": np.zeros((16, 2, 8), np.uint8), "nb_s": np.zeros((16, 2), np.float32),
          "nb_z": np.zeros((16, 1), np.uint8)}
    quantize_matmul_4bits(nb["nb_b"], rng.standard_normal((32, 16)).astype(np.float32), nb["nb_s"], nb["nb_z"], 16,
                          16, 32, False)  # onnxruntime's MatMulNBitsQuantizer's kernel: K 32, N 16, blocks of 16
    float_op("MatMulNBits", [helper.make_node("MatMulNBits", ["xd", "nb_b", "nb_s", "nb_z"], ["t"], K=32, N=16, bits=4,
                                              block_size=16, domain=ms, name="op")],
             {k: v.reshape(-1) if k != "nb_b" else v for k, v in nb.items()}, x2.reshape(2, 32), 0.1)
    float_op("SkipLayerNormalization",
             [helper.make_node("SkipLayerNormalization", ["xd", "skip", "gamma", "beta"], ["t"], epsilon=1e-5,
                               domain=ms, name="op")],
             {"skip": rng.standard_normal((4, 16)).astype(np.float32).reshape(1, 4, 16),
              "gamma": np.ones(16, np.float32), "beta": np.zeros(16, np.float32)}, x2.reshape(1, 4, 16), 0.03)
    float_op("SkipSimplifiedLayerNormalization",
             [helper.make_node("SkipSimplifiedLayerNormalization", ["xd", "skip", "gamma", "bias"], ["t"],
                               epsilon=1e-6, domain=ms, name="op")],
             {"skip": rng.standard_normal((1, 4, 16)).astype(np.float32),
              "gamma": rng.standard_normal(16).astype(np.float32), "bias": rng.standard_normal(16).astype(np.float32)},
             x2.reshape(1, 4, 16), 0.03)
    float_op("Attention", [helper.make_node("Attention", ["xd", "wqkv", "bqkv"], ["t"], num_heads=2, domain=ms,
                                            name="op")],
             {"wqkv": (rng.standard_normal((16, 48)) * 0.3).astype(np.float32),
              "bqkv": rng.standard_normal(48).astype(np.float32)}, x2.reshape(1, 4, 16), 0.03)
    emb = {"word": rng.standard_normal((30, 16)).astype(np.float32),
           "pos": rng.standard_normal((8, 16)).astype(np.float32), "seg": rng.standard_normal((2, 16)).astype(np.float32),
           "gamma": rng.standard_normal(16).astype(np.float32), "beta": rng.standard_normal(16).astype(np.float32),
           "segs": np.asarray([[0, 0, 1, 1, 1, 0]], np.int32), "ys": np.float32(0.03), "yz": np.int8(0)}
    nodes = [helper.make_node("EmbedLayerNormalization", ["ids", "segs", "word", "pos", "seg", "gamma", "beta"],
                              ["t", "mask_index"], epsilon=1e-12, domain=ms, name="op"),
             helper.make_node("QuantizeLinear", ["t", "ys", "yz"], ["tq"]),
             helper.make_node("DequantizeLinear", ["tq", "ys", "yz"], ["y"])]
    out["EmbedLayerNormalization"] = (model("EmbedLayerNormalization", nodes, {"ids": (TensorProto.INT32, [1, 6])},
                                            {"y": (f, None)}, emb),
                                      {"ids": np.asarray([[3, 29, 0, 7, 7, 12]], np.int32)}, {"y": 0.03})
    float_op("BiasAdd", [helper.make_node("BiasAdd", ["xd", "b16", "skip"], ["t"], domain=ms, name="op")],
             {"b16": rng.standard_normal(16).astype(np.float32),
              "skip": rng.standard_normal((1, 4, 16)).astype(np.float32)}, x2.reshape(1, 4, 16), 0.04)
    nodes = [helper.make_node("NhwcMaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], domain=ms, name="op")]
    out["NhwcMaxPool"] = (model("NhwcMaxPool", nodes, {"x": (i8, [1, 6, 6, 8])}, {"y": (i8, None)}, {}),
                          {"x": xq4.reshape(1, 6, 6, 8)}, {"y": 1.0})
    # quantize_dynamic + optimizer: the fused dynamic products
    nodes = [helper.make_node("DynamicQuantizeMatMul", ["x", "w", "ws", "wz"], ["y"], domain=ms, name="op")]
    out["DynamicQuantizeMatMul"] = (model("DynamicQuantizeMatMul", nodes, {"x": (f, [4, 16])}, {"y": (f, None)},
                                          {"w": w, "ws": np.float32(0.01), "wz": np.int8(0)}), {"x": x2}, {"y": 1e-6})
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "s", "z"]),
             helper.make_node("MatMulIntegerToFloat", ["xq", "wu", "s", "ws", "z", "wz"], ["y"], domain=ms,
                              name="op")]
    out["MatMulIntegerToFloat"] = (model("MatMulIntegerToFloat", nodes, {"x": (f, [4, 16])}, {"y": (f, None)},
                                         {"wu": (w.astype(np.int16) + 128).astype(np.uint8), "ws": np.float32(0.01),
                                          "wz": np.uint8(128)}), {"x": x2}, {"y": 1e-6})
    for op in ("QuantizeLinear", "DequantizeLinear"):
        if op == "QuantizeLinear":
            nodes = [helper.make_node(op, ["x", "xs", "xz"], ["y"], domain=ms, name="op")]
            out[f"{op} (com.microsoft)"] = (model(op, nodes, {"x": (f, [4, 16])}, {"y": (i8, None)}, q), {"x": x2},
                                            {"y": 1.0})
        else:
            nodes = [helper.make_node(op, ["x", "xs", "xz"], ["y"], domain=ms, name="op")]
            out[f"{op} (com.microsoft)"] = (model(op, nodes, {"x": (i8, [1, 8, 6, 6])}, {"y": (f, None)}, q),
                                            {"x": xq4}, {"y": 0.03})
    for name, (data, feeds, steps) in list(out.items()):  # the outputs' shapes, as an exporter writes them
        import onnx

        m = onnx.load_model_from_string(data)
        try:
            got = _ort_outputs(data, feeds)
        except Exception:  # noqa: BLE001 - onnxruntime cannot run it: left without shapes (judged as such)
            continue
        for o in m.graph.output:
            for d in got[o.name].shape:
                o.type.tensor_type.shape.dim.add().dim_value = int(d)
        out[name] = (m.SerializeToString(), feeds, steps)
    return out


# ---------------------------------------------------------------------------------------------------- worker


def run_case(data: bytes, feeds: dict[str, np.ndarray], steps: dict[str, float], op: str) -> dict[str, Any]:
    from tileplan.errors import InputError
    from tileplan.frontend.compile import CompileOptions, compile_model
    from tileplan.frontend.runner import run_artifact
    from tileplan.hardware.catalog import get_hardware

    rec: dict[str, Any] = {}
    try:
        want = _ort_outputs(data, feeds)
    except Exception as exc:  # noqa: BLE001 - onnxruntime's refusal, recorded
        want = None
        rec["ort"] = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
    t0 = time.perf_counter()
    try:
        res = compile_model(data, get_hardware("gemmini-16x16"), CompileOptions(time_limit_s=2.0))
    except InputError as exc:
        rec.update(status="refused", reason=str(exc)[:400])
        return rec
    except Exception as exc:  # noqa: BLE001 - a Tileplan bug: recorded as such
        rec.update(status="error", reason=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
                   if str(exc).strip() else type(exc).__name__)
        return rec
    rec["compile_s"] = round(time.perf_counter() - t0, 2)
    try:
        got = run_artifact(res.artifact, feeds).outputs
    except Exception as exc:  # noqa: BLE001
        rec.update(status="run error", reason=f"{type(exc).__name__}: {str(exc)[:300]}")
        return rec
    rec["status"] = "compiles"
    if want is None:
        return rec
    if op in RANDOM:
        rec["agree"] = [1.0, 1.0, 0.0, "random: shapes only"] if all(
            got[k].shape == v.shape for k, v in want.items() if k in got) else [0.0, 0.0, float("inf"), "shape"]
        return rec
    rec["agree"] = list(agreement(got, want, steps))
    return rec


PLAIN = {1, 2, 3, 4, 5, 6, 7, 9, 11}  # TensorProto float, (u)int8, (u)int16, int32, int64, bool, double


def _plain_types(model: Any) -> bool:
    """Whether every input and output of a test is a tensor of a type exported models have."""
    return all(v.type.HasField("tensor_type") and v.type.tensor_type.elem_type in PLAIN
               for v in [*model.graph.input, *model.graph.output])


def _has_double(model: Any) -> bool:
    return any(v.type.tensor_type.elem_type == 11 for v in [*model.graph.input, *model.graph.output])


def _array(v: Any) -> Any:
    """A test's input value as a numpy array (the tests store some as TensorProto); other values as they are."""
    from onnx import TensorProto, numpy_helper

    if isinstance(v, np.generic):
        return np.asarray(v)
    return numpy_helper.to_array(v) if isinstance(v, TensorProto) else v


def worker(ops: list[str], max_cases: int, out: Path) -> None:
    """Appends one JSON line per case of each op (and a line {"op", "done"} after each op) to `out`."""
    import warnings

    warnings.filterwarnings("ignore")
    from onnx.backend.test.case.node import collect_testcases

    schemas = default_domain_ops()
    by_op: dict[str, list] = {}
    ms = {}
    if any(op.startswith("ms:") for op in ops):
        ms = _ms_models()
    if any(not op.startswith("ms:") for op in ops):
        with open(os.devnull, "w") as null:
            old, sys.stderr = sys.stderr, null
            try:
                cases = collect_testcases(None)
            finally:
                sys.stderr = old
        for c in cases:
            if c.kind != "node" or c.name.endswith("_expanded") or "_expanded_" in c.name:
                continue
            by_op.setdefault(c.model.graph.node[0].op_type, []).append(c)
    with out.open("a") as fh:
        def emit(rec: dict[str, Any]) -> None:
            fh.write(json.dumps(rec) + "\n")
            fh.flush()

        for op in ops:
            emit({"op": op, "start": True})
            if op.startswith("ms:"):
                name = op[3:]
                data, feeds, steps = ms[name]
                emit({"op": op, "case": name, **run_case(data, feeds, steps, name)})
            else:
                done = 0
                tests = by_op.get(op, [])
                # the tests of the types an exported model has first (float16, float8, 4-bit ... after)
                tests = sorted(tests, key=lambda c: not _plain_types(c.model))
                for k, c in enumerate(tests):
                    if done >= max_cases:
                        break
                    try:
                        inputs = [_array(v) for v in c.data_sets[0][0]]
                        data, feeds, steps = exporters_form(c.model, inputs, op, schemas[op]["since"])
                    except Exception as exc:  # noqa: BLE001 - a test the rewrite cannot take: said so
                        emit({"op": op, "case": c.name, "status": "skipped", "reason": f"rewrite: {exc}"})
                        continue
                    if k < len(tests) - 1 and (done or k < 8):
                        try:  # a form onnxruntime cannot run (a type it has no kernel for): the next test
                            _ort_outputs(data, feeds)
                        except Exception:  # noqa: BLE001
                            continue
                    emit({"op": op, "case": c.name, **run_case(data, feeds, steps, op)})
                    done += 1
            emit({"op": op, "done": True})


# ------------------------------------------------------------------------------------------------------ main


def run_all(ops: list[str], jobs: int, max_cases: int, work: Path) -> list[dict[str, Any]]:
    """The worker processes over `ops` (split round-robin), restarted after a crash or a hang."""
    shares = [ops[i::jobs] for i in range(jobs)]
    procs: list[tuple[subprocess.Popen | None, list[str], Path, float, int]] = []
    env = dict(os.environ, PYTHONPATH=str(ROOT / "service") + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def start(share: list[str], path: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, __file__, "--worker", ",".join(share), "--cases", str(max_cases),
                                 "--records", str(path)], env=env, stdout=subprocess.DEVNULL,
                                stderr=open(path.with_suffix(".log"), "a"))

    for k, share in enumerate(shares):
        if share:
            path = work / f"worker{k}.jsonl"
            path.write_text("")
            procs.append((start(share, path), share, path, time.time(), 0))
    while any(p is not None for p, *_ in procs):
        time.sleep(1.0)
        for k, (p, share, path, last, size) in enumerate(procs):
            if p is None:
                continue
            now_size = path.stat().st_size
            if now_size != size:
                last, size = time.time(), now_size
            rc = p.poll()
            hung = rc is None and time.time() - last > PER_CASE_S
            if rc is None and not hung:
                procs[k] = (p, share, path, last, size)
                continue
            if hung:
                p.kill()
                p.wait()
            recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            done = {r["op"] for r in recs if r.get("done")}
            rest = [op for op in share if op not in done]
            if not rest:
                procs[k] = (None, share, path, last, size)
                continue
            with path.open("a") as fh:  # the op it was on: crashed or hung
                fh.write(json.dumps({"op": rest[0], "case": "-", "status": "timeout" if hung else "crash",
                                     "reason": (f"no result in {PER_CASE_S:.0f} s" if hung else
                                                f"the worker died (exit {rc})")}) + "\n")
                fh.write(json.dumps({"op": rest[0], "done": True}) + "\n")
            rest = rest[1:]
            procs[k] = ((start(rest, path), rest, path, time.time(), path.stat().st_size) if rest
                        else (None, share, path, last, size))
    recs = []
    for k in range(len(procs)):
        recs += [json.loads(line) for line in (work / f"worker{k}.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in recs if "case" in r]


def op_verdict(op: str, recs: list[dict[str, Any]], info: dict[str, Any] | None) -> dict[str, Any]:
    """One row per operator: the worst of its cases."""
    cases = recs
    statuses = [r.get("status") for r in cases]
    judged = [r for r in cases if "agree" in r]
    row: dict[str, Any] = {"op": op, "cases": len(cases)}
    ort_runs = any("ort" not in r for r in cases)
    if not cases:
        row["verdict"] = "no test"
    elif op in OUT_OF_SCOPE:
        row["verdict"] = "refused: out of scope" if "compiles" not in statuses else "compiles"
    elif all(s == "compiles" for s in statuses):
        row["verdict"] = "compiles"
    elif any(s in ("error", "crash", "timeout", "run error") for s in statuses):
        row["verdict"] = "error"
    elif all(s == "refused" for s in statuses):
        row["verdict"] = "refused"
    else:
        row["verdict"] = "partly"
    if not ort_runs:
        row["ort"] = "not ort"
    if judged:
        row["equal"] = min(r["agree"][0] for r in judged)
        row["within1"] = min(r["agree"][1] for r in judged)
        row["maxdiff"] = max(r["agree"][2] for r in judged)
    worst = next((r for r in cases if r.get("status") not in ("compiles", None)), None)
    if worst is not None:
        row["reason"] = f"{worst['case']}: {worst.get('reason', '')}"
    elif judged and row["maxdiff"] > 1:
        bad = max(judged, key=lambda r: r["agree"][2])
        row["reason"] = f"{bad['case']}: max {bad['agree'][2]:.3g} LSB {bad['agree'][3]}".strip()
    not_ort = [r for r in cases if "ort" in r]
    if not_ort and "reason" not in row:
        row["reason"] = f"{not_ort[0]['case']}: onnxruntime: {not_ort[0]['ort']}"
    if op in LEFT and row["verdict"] != "compiles":
        row["reason"] = f"left: {LEFT[op]}. " + row.get("reason", "")
    if info and info.get("deprecated"):
        row["reason"] = ("deprecated before opset 13. " + row.get("reason", "")).strip()
    return row


def _cell(v: float | None, pct: bool = True) -> str:
    if v is None:
        return ""
    return f"{100 * v:.1f}%" if pct else ("inf" if v == float("inf") else f"{v:.3g}")


def write(out: Path, rows: list[dict[str, Any]], runs: list[str]) -> None:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    judged = [r for r in rows if "equal" in r]
    exact = sum(1 for r in judged if r["maxdiff"] == 0)
    lsb1 = sum(1 for r in judged if 0 < r["maxdiff"] <= 1)
    worse = sum(1 for r in judged if r["maxdiff"] > 1)
    lines = [
        "# Operator coverage: what Tileplan compiles, against onnxruntime",
        "",
        "Runs (bench/op_coverage.py's docstring says how each operator's models are made): " + "; ".join(runs)
        + ".",
        "",
        f"{len(rows)} operators: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + "; "
        f"of the {len(judged)} judged against onnxruntime: {exact} equal everywhere, {lsb1} within 1 LSB, "
        f"{worse} further apart.",
        "",
        "Verdict: `compiles` (every case compiled and ran), `partly` (some cases refused), `refused` (every case; "
        "the reason names the node), `refused: out of scope` (training, sequence and optional types), `error` "
        "(a Tileplan failure that is not a refusal: a bug). `ort`: `not ort` where onnxruntime runs none of the "
        "cases (no kernel for the op or its types). Agreement over the judged cases, worst case: share equal, "
        "share within 1 LSB (the output's quantisation step; 1 for integer outputs; float outputs with NaN / inf "
        "compared as floats, in units of 1), largest difference.",
        "",
        "| op | since | cases | verdict | ort | equal | within 1 LSB | max diff | reason / case |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        reason = r.get("reason", "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['op']} | {r.get('since', '')} | {r['cases']} | {r['verdict']} | {r.get('ort', '')} | "
                     f"{_cell(r.get('equal'))} | {_cell(r.get('within1'))} | {_cell(r.get('maxdiff'), False)} | "
                     f"{reason} |")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--cases", type=int, default=2, help="node tests per operator (default 2)")
    ap.add_argument("--ops", default="", help="comma-separated (ms:NAME for com.microsoft); default: all")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/op_coverage.md")
    ap.add_argument("--rewrite", action="store_true", help="only rewrite the table from <out>.json")
    ap.add_argument("--merge", action="store_true", help="replace these operators' rows in <out>.json's table")
    ap.add_argument("--work", type=Path, default=None, help="worker records (default: a temporary directory)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--records", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rewrite:  # the table again from <out>.json (its notes as this file has them)
        stored = json.loads(args.out.with_suffix(".json").read_text())
        for r in stored["rows"]:
            r["reason"] = r.get("reason", "").split("left: ", 1)[-1].split(". ", 1)[-1] if r.get(
                "reason", "").startswith("left: ") else r.get("reason", "")
            if r["op"] in LEFT and r["verdict"] != "compiles":
                r["reason"] = f"left: {LEFT[r['op']]}. " + r["reason"]
        write(args.out, stored["rows"], stored["runs"])
        args.out.with_suffix(".json").write_text(json.dumps(stored, indent=1) + "\n")
        return
    if args.worker is not None:
        worker([o for o in args.worker.split(",") if o], args.cases, args.records)
        return
    import tempfile

    schemas = default_domain_ops()
    ops = [o for o in args.ops.split(",") if o] or (list(schemas) + [f"ms:{k}" for k in _ms_models()])
    load = os.getloadavg()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        recs = run_all(ops, args.jobs, args.cases, work)
    rows = []
    for op in ops:
        info = schemas.get(op)
        row = op_verdict(op, [r for r in recs if r["op"] == op], info)
        row["since"] = info["since"] if info else "ms"
        if op in OUT_OF_SCOPE:
            row["reason"] = (f"{OUT_OF_SCOPE[op]}: out of scope. " + row.get("reason", "")).strip()
        rows.append(row)
    store = args.out.with_suffix(".json")
    # the work folder is this machine's: shown as DIR (the value after --work, or in --work=PATH)
    shown = [("DIR" if sys.argv[k - 1] == "--work" else "--work=DIR" if a.startswith("--work=") else a)
             for k, a in enumerate(sys.argv[1:], 1)]
    run = (f"`python bench/op_coverage.py {' '.join(shown)}`, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())}"
           f" UTC, {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {load[0]:.1f} / "
           f"{load[1]:.1f} / {load[2]:.1f} at the start, {time.time() - t0:.0f} s wall")
    runs = [run]
    if args.merge and store.exists():  # this run's operators replace theirs in the stored table
        old = json.loads(store.read_text())
        mine = {r["op"] for r in rows}
        rows = [r for r in old["rows"] if r["op"] not in mine] + rows
        rows.sort(key=lambda r: (r["op"].startswith("ms:"), r["op"]))
        runs = old["runs"] + [f"{run} (its operators' rows replace the earlier run's)"]
    write(args.out, rows, runs)
    store.write_text(json.dumps({"rows": rows, "runs": runs}, indent=1) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
