"""Where a compiled model first disagrees with its judge: every int8 activation of the model compared, in graph
order, between Tileplan's program and onnxruntime.

    python bench/zoo_trace.py MODEL.onnx [--judge ort-int8|ort|ort-noopt] [--seed 1] [--work DIR]
                              [--show 20] [--compile-arg=--mapper=gemmini-auto ...]

The model is rewritten with every quantized activation added as a graph output: the output of each
QuantizeLinear (QDQ files) or QLinear* / QGemm / QuantizeLinear node (QOperator files), int8 or uint8, shapes from
onnx's shape inference after Tileplan's folding of Shape subgraphs (`onnx_import.fold_shapes`). Adding a QuantizeLinear's output to the graph outputs leaves onnxruntime's QDQ fusion as
it was (its selectors refuse a unit whose DequantizeLinear or target op produces a graph output, not one whose
QuantizeLinear does), and it leaves Tileplan's op groups as they were (the same tensor is already a group's
output). The rewritten model is compiled by Tileplan's CLI (`tileplan compile`, in a fresh process), run on the
emulator on the input `bench/zoo.py` judges with (standard normal, `--seed`), and run by the judge (default:
`ort-int8` for a QDQ file, `ort` for a QOperator one, as tileplan.frontend.reference names them). Printed: each
tensor that differs, in graph order (equal share, largest difference in codes, the producing node and op), the
first one marked; the model's own outputs are compared too. `--json` prints the same as one JSON document.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

QUANTIZED_OUTPUT_OPS = {"QuantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm", "QLinearAdd", "QLinearMul",
                        "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSoftmax", "QLinearSigmoid",
                        "QLinearLeakyRelu", "QLinearConcat"}
INT8 = (2, 3)  # TensorProto.UINT8, TensorProto.INT8


def traced_model(path: Path) -> tuple[Any, list[dict[str, Any]]]:
    """The model with every quantized activation as an extra graph output, and those tensors in graph order
    ({name, node, op, consumer ops})."""
    import onnx
    from onnx import shape_inference

    from tileplan.frontend.onnx_import import fold_shapes

    model = onnx.load(str(path))
    # shapes as `tileplan compile` sees them: Shape subgraphs folded first (Swin-T computes most of its shapes)
    folded, _ = fold_shapes(onnx.load(str(path)))
    inferred = shape_inference.infer_shapes(folded, data_prop=True)
    types = {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
    consts = {t.name for t in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    consumers: dict[str, list[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.op_type)
    untyped = ort_types(model, [o for n in model.graph.node if n.op_type in QUANTIZED_OUTPUT_OPS
                                for o in n.output[:1] if o not in types and o not in consts and o not in outputs])
    traced = []
    qoperator = any(n.op_type.startswith("QLinear") or n.op_type == "QGemm" for n in model.graph.node)
    for n in model.graph.node:
        if n.op_type not in QUANTIZED_OUTPUT_OPS or not n.output or n.output[0] in outputs:
            continue
        name = n.output[0]
        if name in consts or any(i in consts for i in n.input[:1]):  # a weight's quantization
            continue
        t = types.get(name)
        if t is None or not t.tensor_type.HasField("shape"):  # contrib ops (com.microsoft): onnx cannot infer
            t = untyped.get(name)
        if t is None or t.tensor_type.elem_type not in INT8 or not t.tensor_type.HasField("shape"):
            continue
        if any(not d.HasField("dim_value") for d in t.tensor_type.shape.dim):
            continue
        # the float op a QuantizeLinear quantizes (QDQ files), or the integer op itself
        src = n.op_type
        if n.op_type == "QuantizeLinear" and not qoperator:
            prod = next((m for m in model.graph.node if n.input[0] in m.output), None)
            src = f"{prod.op_type} -> Q" if prod is not None else "input -> Q"
        traced.append({"name": name, "node": n.name, "op": src, "consumers": consumers.get(name, [])})
        vi = onnx.ValueInfoProto()
        vi.name = name
        vi.type.CopyFrom(t)
        model.graph.output.append(vi)
    return model, traced


def ort_types(model: Any, names: list[str]) -> dict[str, Any]:
    """The types of tensors onnx's shape inference leaves unknown (the outputs of com.microsoft ops: QLinearSoftmax,
    QLinearAdd, ...), from one onnxruntime run of the model (graph optimisations off, so every tensor exists as the
    file names it) with those tensors added as untyped graph outputs, on a zero input."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    if not names:
        return {}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for name in names:
        probe.graph.output.append(helper.make_empty_tensor_value_info(name))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        dtype = np.float32 if i.type == "tensor(float)" else np.int64
        feeds[i.name] = np.zeros([int(d) if isinstance(d, int) else 1 for d in i.shape], dtype)
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    out = {}
    for name in names:
        a = got[name]
        out[name] = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
    return out


def compile_model(path: Path, out: Path, hw: str, extra: list[str]) -> Path:
    cmd = [sys.executable, "-m", "tileplan.cli", "compile", str(path), "--hw", hw, "--out", str(out),
           "--no-cache", *extra]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"tileplan compile failed:\n{run.stderr.strip()}")
    return next(out.glob("*.tar"))


def compare(got: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return {"elements": int(d.size), "equal": float(np.mean(d == 0)), "max": float(d.max(initial=0.0)),
            "differ": int(np.count_nonzero(d))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path)
    ap.add_argument("--judge", default=None, help="ort-int8 (default for QDQ files), ort (QOperator), ort-noopt")
    ap.add_argument("--seed", type=int, default=1, help="the input (bench/zoo.py's judge uses seed 1)")
    ap.add_argument("--hw", default="gemmini-16x16")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the traced model, the artifact and the report (trace.json) here")
    ap.add_argument("--show", type=int, default=20, help="differing tensors printed (0: all)")
    ap.add_argument("--compile-arg", action="append", default=[],
                    help="passed to `tileplan compile` (default: --mapper gemmini-auto --no-baseline --no-emulate: "
                         "the tiling does not change the numbers)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from tileplan.frontend.reference import agreement, output_steps, session
    from tileplan.frontend.runner import run_artifact

    model, traced = traced_model(args.model)
    qoperator = any(t["op"].startswith("QLinear") or t["op"] == "QGemm" for t in traced)
    judge = args.judge or ("ort" if qoperator else "ort-int8")
    extra = args.compile_arg or ["--mapper", "gemmini-auto", "--no-baseline", "--no-emulate"]
    with tempfile.TemporaryDirectory(prefix="tp-trace-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        path = work / args.model.name.replace(".onnx", ".trace.onnx")
        import onnx

        onnx.save(model, str(path))
        artifact = compile_model(path, work / "out", args.hw, extra)
        sess = session(str(path), judge)
        from zoo import model_feeds  # bench/zoo.py, beside this script: the input its rows are judged on

        feeds = model_feeds(sess, args.seed)
        names = [o.name for o in sess.get_outputs()]
        want = dict(zip(names, sess.run(None, feeds)))
        got = run_artifact(artifact.read_bytes(), feeds).outputs
    rows = []
    first = None
    for t in traced:
        c = compare(got[t["name"]], want[t["name"]])
        rows.append({**t, **c})
        if c["differ"] and first is None:
            first = t["name"]
    model_outputs = [o for o in names if o not in {t["name"] for t in traced}]
    steps = output_steps(str(args.model))
    finals = {o: agreement({o: got[o]}, {o: want[o]}, steps) for o in model_outputs}
    report = {"model": str(args.model), "judge": judge, "seed": args.seed, "tensors": len(rows),
              "differing": sum(1 for r in rows if r["differ"]), "first": first, "rows": rows, "outputs": finals}
    if args.work is not None:
        (args.work / "trace.json").write_text(json.dumps(report, indent=1))
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"{args.model.name}: {len(rows)} quantized activations, judge {judge}, seed {args.seed}; "
          f"{report['differing']} differ")
    shown = 0
    for i, r in enumerate(rows):
        if not r["differ"]:
            continue
        if args.show and shown >= args.show:
            print("  ...")
            break
        mark = "FIRST " if r["name"] == first else "      "
        print(f"{mark}#{i:4d} {r['node']} ({r['op']}; consumed by {', '.join(r['consumers']) or '-'}): "
              f"{r['differ']} of {r['elements']} differ ({100 * r['equal']:.2f}% equal), max {r['max']:g} codes")
        shown += 1
    for o, c in finals.items():
        print(f"model output {o}: {100 * c['equal']:.2f}% equal, {100 * c['within1']:.2f}% within 1 LSB, "
              f"max {c['max']:g} LSB")


if __name__ == "__main__":
    main()
