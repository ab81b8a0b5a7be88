"""The zoo: the models people actually run, compiled as exported (issue 24).

    python bench/zoo.py --torch-python PY --work DIR [--models resnet18,vit_b_16]
                        [--hw gemmini-16x16] [--formats qdq,qoperator] [--out bench/results/zoo.md]
    python bench/zoo.py --no-export --work DIR --models ...     # the exports already in DIR, no torch
    python bench/zoo.py --no-export --work DIR --hw gemmini-32x32  # -> bench/results/zoo_gemmini-32x32.md

Every model is exported and quantized by bench/zoo_export.py in the bench-only Python (torch is never a Tileplan
dependency), into DIR (kept between runs). Per model and format, Tileplan's CLI compiles it twice, each time in
a fresh process (`tileplan compile --jobs 2`): cold (empty kernel and build caches, a new plan store) and warm
(the same caches again); the artifact then runs on one seeded random input (`tileplan.frontend.runner`) and its
outputs are judged against references built from onnxruntime, each named in the table:

- `ort-int8` (the judge of QDQ rows): onnxruntime on the same file with `session.qdqisint8allowed=1`
  (tileplan.frontend.reference): every int8 QDQ unit its selectors accept runs as its integer QLinear* kernel,
  with the file's own scales: the QDQ model converted to QOperator form by onnxruntime itself, no second export.
  (On x86 the default session does this only for some units.)  QOperator rows are judged against `ort`.
- `ort`: onnxruntime's default session on the same file (QOperator: integer QLinear* kernels; QDQ: the
  session fuses what its QDQ selectors accept into integer kernels and runs the rest in float).
- `ort-noopt`: onnxruntime with every graph optimisation off (ORT_DISABLE_ALL) on a QDQ file: each
  DequantizeLinear / float op / QuantizeLinear as the ONNX definition reads, the QDQ model's own semantics.
- `ort-qop` (QDQ rows): onnxruntime's default session on the QOperator export of the same float model quantized
  on the same calibration data (the same scales and zero points): the QDQ model converted to QOperator form by
  onnxruntime's own quantizer, run by its integer QLinear* kernels (its cell empty, the record's `unjudged` saying
  why, where onnxruntime cannot run that file: an int8 cubic Resize).

Agreement: the share of output elements equal, and within 1 quantisation step (LSB: the scale of the output's
DequantizeLinear, or 1 for an integer output), and the largest difference; top-1: the argmax agrees (image
classifiers). Cycles: modelled cycles of the offloaded ops against the library's tiling of the same ops (the
summary's ratio), and the emulated cycles of the compile-time run. A file onnxruntime itself cannot run (its
session fails on the input) is compiled and run all the same; its row says `yes (not judged: <the error>)`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT = ("resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,efficientnet_b0,regnet_x_400mf,squeezenet1_0,"
           "shufflenet_v2_x1_0,densenet121,googlenet,convnext_tiny,vit_b_16,swin_t,bert_layer,gpt2_block")
# no class scores: the transformer blocks, the segmentation nets (a mask), gpt_tiny (next-token logits per position),
# gan_decoder (an image), attn_rope (a sequence of features), held-out set 6's encoders, LM and segmenter, and
# held-out set 7's detection heads, decoder, LM, per-column text recogniser and super-resolution net, and held-out
# set 8's LMs, held-out set 9's encoders, LMs and optical flow, held-out set 10's encoders, LMs and detectors
CLASSIFIERS_EXCEPT = {"bert_layer", "gpt2_block", "unet_small", "gpt_tiny", "lraspp_mobilenet_v3_large",
                      "deeplabv3_mobilenet_v3_large", "fcn_resnet50", "gan_decoder", "attn_rope", "hf_bert", "hf_gpt2",
                      "hf_t5_encoder", "hf_wav2vec2", "hf_whisper_encoder", "hf_segformer", "hf_clip_vision",
                      "ssdlite_head", "fcos_head", "tfm_decoder", "llama_block", "crnn_ocr", "sr_edsr", "hf_qwen2",
                      "hf_llama", "hf_albert", "hf_deberta_v2", "hf_roberta", "hf_bart", "hf_gemma2", "hf_mamba",
                      "hf_squeezebert", "hf_dinov2", "hf_swin", "tv_raft_small", "hf_electra", "hf_mobilebert",
                      "hf_yolos", "hf_bloom", "hf_opt", "hf_phi", "yolo_tiny"}


def export(torch_python: str, work: Path, models: list[str]) -> dict[str, dict[str, Path] | str]:
    run = subprocess.run([torch_python, str(ROOT / "bench" / "zoo_export.py"), "--out", str(work), *models],
                         capture_output=True, text=True)
    got: dict[str, dict[str, Path] | str] = {}
    for line in run.stdout.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[1] == "FAILED":
            got[parts[0]] = f"export failed: {parts[2]}"
        elif len(parts) >= 2:
            name, *paths = line.split()
            got[name] = dict(zip(("float", "qdq", "qoperator"), map(Path, paths)))
    for m in models:
        got.setdefault(m, f"export failed: {run.stderr.strip().splitlines()[-1] if run.stderr.strip() else '?'}")
    return got


def existing(work: Path, models: list[str]) -> dict[str, dict[str, Path] | str]:
    """The exports already in `work` (`--no-export`): NAME.{float,qdq,qoperator,dynamic}.onnx, whichever exist
    (NAME may be `model@variant`, bench/zoo_export.py --variant; `dynamic`: onnxruntime's quantize_dynamic)."""
    got: dict[str, dict[str, Path] | str] = {}
    for m in models:
        paths = {f: work / f"{m}.{f}.onnx" for f in ("float", "qdq", "qoperator", "dynamic")}
        found = {f: p for f, p in paths.items() if p.exists()}
        got[m] = found if found else f"no export of {m} in {work}"
    return got


def symbolic_inputs(model: Path) -> dict[str, list[int]]:
    """The model inputs with a symbolic dimension (a dynamic batch), that dimension 1: the shapes a user compiling
    such an export gives (`--input-shape`; without it the compile refuses, naming the input)."""
    import onnx

    m = onnx.load(str(model), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    return {i.name: [d.dim_value or 1 for d in i.type.tensor_type.shape.dim] for i in m.graph.input
            if i.name not in inits and any(not d.HasField("dim_value") for d in i.type.tensor_type.shape.dim)}


def input_shapes(model: Path) -> list[str]:
    """`--input-shape NAME=1x3x224x224` for each of symbolic_inputs(model)."""
    return [a for n, s in symbolic_inputs(model).items() for a in ("--input-shape", f"{n}={'x'.join(map(str, s))}")]


def compile_once(model: Path, hw: str, out: Path, cache: Path, jobs: int) -> tuple[float, dict[str, Any] | str]:
    """`tileplan compile` in a fresh process with its caches in `cache`: (wall seconds, summary or error)."""
    env = {**os.environ, "TMPDIR": str(cache)}
    cmd = [sys.executable, "-m", "tileplan.cli", "compile", str(model), "--hw", hw, "--out", str(out),
           "--plans-db", f"sqlite:///{cache}/plans.db", "--jobs", str(jobs), "--json", *input_shapes(model)]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if run.returncode != 0:
        lines = run.stderr.strip().splitlines() or ["?"]
        # the CLI's one-line error, not a warning TVM prints after it (its BlockBuilder's, at exit)
        return wall, next((x for x in reversed(lines) if x.startswith("tileplan: error:")), lines[-1])
    return wall, json.loads(run.stdout)


def model_feeds(sess: Any, seed: int) -> dict[str, np.ndarray]:
    """The seeded random input of an onnxruntime session's model, as bench/zoo_export.py's random_feeds makes its
    calibration inputs: a float input standard normal (a symbolic dimension 1), integer ones token ids or a
    padded attention mask."""
    from zoo_export import random_feeds

    return random_feeds([(i.name, tuple(d if isinstance(d, int) else 1 for d in i.shape), "int" in i.type)
                         for i in sess.get_inputs()], np.random.default_rng(seed))


def judge(path: Path, artifact: Path, fmt: str, classifier: bool, seed: int) -> dict[str, Any]:
    from tileplan.frontend.reference import agreement, output_steps, reference_outputs, session
    from tileplan.frontend.runner import run_artifact

    sess = session(str(path), "ort")
    feeds = model_feeds(sess, seed)
    got = run_artifact(artifact.read_bytes(), feeds).outputs
    names = [o.name for o in sess.get_outputs()]
    refs = {"ort": dict(zip(names, sess.run(None, feeds)))}
    unjudged = ""
    if fmt == "qdq":
        refs["ort-int8"] = reference_outputs(str(path), feeds, "ort-int8")
        refs["ort-noopt"] = reference_outputs(str(path), feeds, "ort-noopt")
        qop = path.with_name(path.name.replace(".qdq.", ".qoperator."))
        if qop.exists():  # the same float model and calibration in QOperator form: the same scales, integer ops
            try:
                refs["ort-qop"] = reference_outputs(str(qop), feeds, "ort")
            except Exception as exc:  # noqa: BLE001 - onnxruntime cannot run the other file: only that cell is empty
                unjudged = f"ort-qop: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    steps = output_steps(str(path))
    res: dict[str, Any] = {k: agreement(got, v, steps) for k, v in refs.items()}
    if unjudged:
        res["unjudged"] = unjudged[:300]
    if classifier:
        first = names[0]
        res["top1"] = {k: bool(np.argmax(got[first]) == np.argmax(v[first])) for k, v in refs.items()}
    return res


def emulation_gaps(summary: dict[str, Any], tolerance: float = 0.15) -> dict[str, Any]:
    """Offloaded ops whose emulated cycles differ from their modelled cycles by more than `tolerance` (issue 24:
    within 15% on every offloaded op): count, ops compared, and the worst (name, emulated / modelled)."""
    ratios = [(o["name"], o["cycles_emulated"] / o["cycles_model"]) for o in summary["ops"]
              if o.get("kernel") and o.get("cycles_emulated") and o.get("cycles_model")]
    bad = [(n, r) for n, r in ratios if abs(r - 1.0) > tolerance]
    worst = max(ratios, key=lambda t: abs(t[1] - 1.0), default=None)
    return {"ops": len(ratios), "over": len(bad), "worst": worst}


def partition_only(path: Path) -> dict[str, Any]:
    """What the compile's first steps decide, without planning, code generation or a run (`--partition-only`: the
    whole zoo in minutes on a shared machine): the model read and folded as `tileplan compile` reads it, its
    quantized ops matched and each offloaded or given its host reason; the share of MACs offloaded and the MACs
    of every kind of op left on the host. The compile may still leave an op on the host later (no plan or no
    code for it): the full rows above say what runs."""
    from tileplan.frontend import compile as c
    from tileplan.frontend import onnx_graph, onnx_import, partition, patterns

    try:
        imported = onnx_import.load_model(path.read_bytes(), symbolic_inputs(path) or None, False, None, 8, 0)
        mod, onnx_nodes = onnx_import.to_relax(imported)
        reasons: dict[str, str] = {}

        def decide(q: Any) -> bool:
            r = partition.offload_reason(q)
            if r:
                reasons[q.name] = r
            return r is None

        _, comps = patterns.fuse(mod, onnx_nodes, decide)
    except Exception as exc:  # noqa: BLE001 - a refusal is the row's result
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    index, shapes = onnx_graph.index(imported.model.graph), onnx_graph.tensor_shapes(imported.model.graph)
    ops = [*comps.values(), *(t for q in comps.values() for t in getattr(q, "twins", ()))]
    main = {q.name for q in ops}
    fused = {n for q in ops for n in q.nodes}
    total = acc = 0
    host: dict[str, list[int]] = {}
    for node in imported.model.graph.node:
        macs = c._node_macs(node, shapes)
        total += macs
        if node.name in main:
            acc += macs
        elif node.name not in fused and node.op_type not in c.QDQ_NODES and node.op_type != "Constant":
            key = f"{node.op_type}: {c._host_reason(node, index, shapes, reasons)}"
            host.setdefault(key, [0, 0])
            host[key][0] += 1
            host[key][1] += macs
    return {"share": acc / total if total else 0.0, "macs": total, "host": host}


def write_partition(out: Path, command: str, rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    lines = ["# Zoo, import and partition only", "", f"`{command}`: every export read as `tileplan compile` reads it "
             "(shape arithmetic folded), its quantized ops matched and each offloaded or given the reason it stays on "
             "the host; no planning, code or run (bench/results/zoo.md has the full rows). Bar (issue 24): >= 95% "
             "of MACs on every CNN, >= 90% on the transformers.", "",
             "| model | fmt | imports | MACs offloaded | GMAC | host ops with MACs (count, GMAC, reason) |",
             "|---|---|---|---|---|---|"]
    for name, fmt, r in rows:
        if r.get("error") == f"no {fmt} export" and "@" in name:
            continue  # a variant made in other formats (quantize_dynamic's only, the others' QDQ / QOperator)
        if "error" in r:
            lines.append(f"| {name} | {fmt} | no: {r['error'][:200]} | | | |")
            continue
        heavy = "; ".join(f"{n} x {k[:150]} ({m / 1e9:.3f})" for k, (n, m) in
                          sorted(r["host"].items(), key=lambda t: -t[1][1]) if m) or "-"
        lines.append(f"| {name} | {fmt} | yes | {_pct(r['share'])} | {r['macs'] / 1e9:.2f} | {heavy} |")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def host_summary(summary: dict[str, Any]) -> tuple[str, dict[str, int]]:
    kinds: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for o in summary["ops"]:
        if o["where"] == "host":
            kinds[o["onnx_op"]] = kinds.get(o["onnx_op"], 0) + 1
            r = f"{o['onnx_op']}: {o['reason']}"
            reasons[r] = reasons.get(r, 0) + 1
    return ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda t: -t[1])), reasons


def _cell(judged: dict[str, Any], ref: str) -> str:
    if ref not in judged:
        return "-"
    a = judged[ref]
    return f"{_pct(a['equal'])} / {_pct(a['within1'])} / {a['max']:.0f}"


def _gaps(e: dict[str, Any] | None) -> str:
    if not e:
        return "not measured"
    worst = f" ({e['worst'][0]}: {e['worst'][1]:.2f}x)" if e.get("worst") else ""
    return f"{e['over']} of {e['ops']}{worst}"


def _warm(r: dict[str, Any]) -> str:
    return f"{r['warm_s']:.1f}" if r.get("warm_s") is not None else "not run"


def _load(r: dict[str, Any]) -> str:
    parts = [f"load {r['load']:.1f}"] if r.get("load") is not None else []
    if not r.get("hw"):  # (rows of runs before records named their hardware)
        parts.append("earlier code")
    return f" ({', '.join(parts)})" if parts else ""


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--torch-python", default="", help="a Python with torch, torchvision, onnxruntime")
    ap.add_argument("--work", type=Path, default=Path("zoo-models"), help="exported models are kept here")
    ap.add_argument("--models", default=DEFAULT, help=f"comma-separated (default: all: {DEFAULT})")
    ap.add_argument("--formats", default="qdq,qoperator")
    ap.add_argument("--hw", default="gemmini-16x16")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None,
                    help="default: bench/results/zoo.md on gemmini-16x16, bench/results/zoo_<hw>.md on others")
    ap.add_argument("--rewrite", action="store_true", help="only rewrite the table from <out>.json")
    ap.add_argument("--no-export", action="store_true",
                    help="use the exports already in --work (no torch needed; a missing format is reported)")
    ap.add_argument("--no-warm", action="store_true",
                    help="skip the warm compile (a shared machine's time goes to the rows; the cell says so)")
    ap.add_argument("--partition-only", action="store_true",
                    help="only import and partition (no compile): bench/results/zoo_partition.md")
    args = ap.parse_args()
    if args.out is None:
        args.out = ROOT / "bench" / "results" / ("zoo.md" if args.hw == "gemmini-16x16" else f"zoo_{args.hw}.md")
    if args.partition_only:
        models = [m for m in args.models.split(",") if m]
        exported = existing(args.work, models) if args.no_export else export(args.torch_python, args.work, models)
        rows = []
        for name in models:
            for fmt in [f for f in args.formats.split(",") if f]:
                ex = exported[name]
                r = ({"error": ex if isinstance(ex, str) else f"no {fmt} export"}
                     if isinstance(ex, str) or fmt not in ex else partition_only(ex[fmt]))
                print(name, fmt, json.dumps({k: v for k, v in r.items() if k != "host"}), flush=True)
                rows.append((name, fmt, r))
        own = args.out.name != "zoo.md" and not args.out.name.startswith("zoo_gemmini")  # e.g. zoo_exports.md
        write_partition(args.out.with_name(f"{args.out.stem}_partition.md" if own else "zoo_partition.md"),
                        f"python bench/zoo.py --partition-only --no-export "
                        f"--work DIR --models {args.models} --formats {args.formats}"
                        + (f" --out {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}"
                           if own else ""), rows)
        return
    if args.rewrite:
        write(args, [], None)
        return
    models = [m for m in args.models.split(",") if m]
    formats = [f for f in args.formats.split(",") if f]
    args.work.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    exported = existing(args.work, models) if args.no_export else export(args.torch_python, args.work, models)
    records: list[dict[str, Any]] = []
    for name in models:
        ex = exported[name]
        for fmt in formats:
            rec: dict[str, Any] = {"model": name, "format": fmt, "hw": args.hw}
            records.append(rec)
            if isinstance(ex, str) or fmt not in ex:
                rec["error"] = ex if isinstance(ex, str) else f"no {fmt} export"
                continue
            rec["load"] = round(os.getloadavg()[0], 1)
            rec["loaded"] = rec["load"] > (os.cpu_count() or 1)
            with tempfile.TemporaryDirectory(prefix="tp-zoo-") as cache, \
                    tempfile.TemporaryDirectory(prefix="tp-zoo-out-") as out:
                cold, s = compile_once(ex[fmt], args.hw, Path(out), Path(cache), args.jobs)
                rec["cold_s"] = cold
                if isinstance(s, str):
                    rec["error"] = s
                    print(name, fmt, "refused:", s, flush=True)
                    continue
                if not args.no_warm:
                    warm, _ = compile_once(ex[fmt], args.hw, Path(out), Path(cache), args.jobs)
                    rec["warm_s"] = warm
                t = s["total"]
                rec.update(share=t["accelerator_mac_share"], macs=t["macs"], speedup=t["speedup_model"],
                           cycles_model=t["cycles_model"], base=t["baseline_cycles_model"],
                           cycles_emulated=t["cycles_emulated"],
                           slower=sum(1 for o in s["ops"] if o.get("speedup") is not None and o["speedup"] < 0.9999),
                           emulation=emulation_gaps(s), phases=t.get("phase_seconds"))
                rec["host"], rec["reasons"] = host_summary(s)
                artifact = next(Path(out).glob("*.tar"))
                try:
                    rec["judge"] = judge(ex[fmt], artifact, fmt, name.split("@")[0] not in CLASSIFIERS_EXCEPT,
                                         args.seed)
                except Exception as exc:  # noqa: BLE001 - a reference that cannot run the file is the row's result
                    rec["judge"] = {}
                    rec["judge_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(name, fmt, json.dumps({k: v for k, v in rec.items() if k != "phases"}), flush=True)
            write(args, records, None)  # the table so far (a long run on a shared machine can be stopped)
    write(args, records, time.perf_counter() - t_start)


def write(args: argparse.Namespace, records: list[dict[str, Any]], seconds: float | None) -> None:
    """The table, merged with the rows of earlier runs kept in <out>.json (a run of a --models subset replaces
    only its own rows: the whole zoo need not run at once on a shared machine)."""
    store = args.out.with_suffix(".json")
    runs = [f"--models {args.models} --formats {args.formats}: {seconds:.0f} s"] if seconds is not None else []
    if store.exists():
        old = json.loads(store.read_text())
        mine = {(r["model"], r["format"], r.get("hw")) for r in records}
        records = [r for r in old["records"] if (r["model"], r["format"], r.get("hw")) not in mine] + records
        runs = old["runs"] + runs
    reasons: dict[str, int] = {}
    for rec in records:
        for r, n in rec.get("reasons", {}).items():
            reasons[r] = reasons.get(r, 0) + n
    store.write_text(json.dumps({"records": records, "runs": runs}, indent=1, default=str))
    lines = ["# Zoo: the models people run, compiled as exported", "",
             f"`python bench/zoo.py --torch-python PY --work DIR --hw {args.hw} --models M --formats F`, runs: "
             + "; ".join(runs) + ". Models: bench/zoo_export.py (torchvision, seeded random "
             "weights, opset 17, batch 1, onnxruntime quantize_static per-tensor int8)"
             + (". Rows `model@variant`: other exports of the same model and seed, `PY bench/zoo_export.py --out DIR "
                "--any --variant V,... MODEL` (VARIANTS in bench/zoo_export.py: the exporter and its opset, the input's "
                "batch, size and layout, the quantizer's options; `dynamic` = quantize_dynamic, its own format), run "
                "with `--no-export --no-warm --out bench/results/zoo_exports.md` (a dynamic batch compiled with `--input-shape` at "
                "batch 1)"
                if any("@" in r["model"] for r in records) else "") + ".", "",
             "Judges: `ort-int8` (QDQ rows; the judge they are held to, except a model with a Q/DQ scale of inf, "
             "GPT-2's, held to `ort-noopt`: README, \"Infinite scales\") = onnxruntime on the same file with "
             "`session.qdqisint8allowed=1`, every int8 QDQ unit run as its integer QLinear* kernel (onnxruntime's "
             "own QDQ -> QOperator fusion, the file's scales); `ort` = onnxruntime's default session on the same "
             "file (the judge of QOperator rows); `ort-noopt` = onnxruntime with "
             "graph optimisations off (the QDQ file's own float-between-Q/DQ semantics); `ort-qop` (QDQ rows) = "
             "onnxruntime on the QOperator export of the same model and calibration (same scales; integer "
             "QLinear* kernels). Cells: equal / within 1 "
             "LSB / max LSB. Cycles: modelled cycles of the offloaded ops, library's tiling of the same ops / "
             "Tileplan's (ops slower than the library: count). Emulated vs modelled: offloaded ops whose emulated "
             "cycles differ from the modelled by more than 15%, of the ops compared, and the worst ratio. Compile: "
             "`tileplan compile --jobs 2` wall seconds, cold (empty caches) / warm, and the 1-minute load average when "
             f"the row started on this {os.cpu_count()}-core machine (above the core count: other work shared it, "
             "so the times are an upper bound of an idle machine's); `earlier code`: a row kept from a run before "
             "the cost model's changes of this table's last run (its modelled and emulated cycles are that code's).",
             "",
             "| model | fmt | compiles | MACs offloaded | vs ort-int8 | vs ort | vs ort-noopt | vs ort-qop | top-1 | "
             "library / Tileplan cycles (slower ops) | emulated cycles | emulated vs modelled: ops off by > 15% "
             "(worst) | compile cold / warm s | host ops |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        if r.get("error") == f"no {r['format']} export" and r["model"].partition("@")[2]:
            continue  # a variant made in other formats (quantize_dynamic's only, the others' QDQ / QOperator)
        if "error" in r:
            lines.append(f"| {r['model']} | {r['format']} | no: {r['error'][:160]} | | | | | | | | | | "
                         f"{r.get('cold_s', 0):.1f}{_load(r)} | |")
            continue
        j = r["judge"]

        top1 = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in j.get("top1", {}).items()) or "-"
        sp = f"{r['speedup']:.2f}x ({r['slower']})" if r.get("speedup") else "-"
        ok = f"yes (not judged: {r['judge_error'][:200]})" if r.get("judge_error") else "yes"
        lines.append(f"| {r['model']} | {r['format']} | {ok} | {_pct(r['share'])} | {_cell(j, 'ort-int8')} | "
                     f"{_cell(j, 'ort')} | "
                     f"{_cell(j, 'ort-noopt')} | {_cell(j, 'ort-qop')} | {top1} | {sp} | {r['cycles_emulated'] or '-'} | "
                     f"{_gaps(r.get('emulation'))} | {r['cold_s']:.1f} / {_warm(r)}{_load(r)} "
                     f"| {r['host']} |")
    lines += ["", "## Why ops stay on the host (count over the rows that kept their reasons)", ""]
    lines += [f"- {n} x {r}" for r, n in sorted(reasons.items(), key=lambda t: -t[1])]
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
