"""Compiled models on Spike with Gemmini's ISA functional model (libgemmini), judged against Tileplan's emulator and
onnxruntime.

    python bench/spike.py --spike DIR --pk PATH --gemmini-include INC --judges TEXT   # writes bench/results/spike.md
    python bench/spike.py ... --models cnn_small,mlp --out -                          # a quick look
    python bench/spike.py ... --onnx resnet18.qdq.onnx,mobilenet_v2.qdq.onnx          # exported files as well

DIR is Spike's install prefix (bin/spike, and lib/libgemmini.so, which `spike --extension=gemmini` loads: the
runs get LD_LIBRARY_PATH=DIR/lib); PATH is the proxy kernel (riscv-pk's `pk`); INC the GEMMINI_INCLUDE of
`make riscv`: Gemmini's own gemmini.h with the gemmini_params.h libgemmini was built with (it must define
ACC_READ_FULL_WIDTH). None of them ships with Tileplan (README: "A compiled model as a RISC-V program"). TEXT
names the judges' versions (e.g. their commits), copied into the table. Per model (the test models of Tileplan's
zoo, random weights, onnxruntime's static quantizer, QDQ, per-tensor int8; and any --onnx file as exported):

1. `tileplan compile MODEL --hw HW` (the CLI, a fresh process) gives the tar; its own `make riscv
   GEMMINI_INCLUDE=INC` gives build/riscv/model.riscv, its `make host-main` the same main.c over Tileplan's
   emulator (build/host/model);
2. one seeded random input file (main.c's format: the inputs' raw bytes) goes through both:
   `spike --extension=gemmini PATH build/riscv/model.riscv in.bin spike.bin` and `build/host/model in.bin emu.bin`;
3. Spike's outputs are compared with the emulator's (bytes, and output elements differing) and with onnxruntime's
   default session on the same input (elements equal, within one quantisation step (LSB: the scale of the output's
   DequantizeLinear), largest difference in LSB); every step's cycles printed by main.c are kept: on Spike the
   rdcycle difference around the step (Spike's cycle CSR counts retired instructions of its functional model,
   and a RoCC instruction retires at once: not a Gemmini SoC's cycles), in the host build the emulated cycles.

A program with fused-layer groups (tileplan.fusion; their kernels need symmetric activations: --symmetric) is
built for Spike with `make riscv TILEPLAN_STAGE_ACC_READS=1`: libgemmini does not model a compute reading its A
operand from the accumulator, which the fused kernels do; with the define each such read is an mvout with the
read's activation and scale plus an mvin back (tileplan/fusion/staging.py).  The emulator runs the program as
compiled, so byte equality checks the fused kernels' other instructions on Spike and the emulator's accumulator
read against libgemmini's mvout.

Rows are kept in <out>.json between runs (a run of a --models subset replaces only its own rows).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "service"))

from tileplan.frontend import zoo  # noqa: E402

# The zoo's test models: label -> zoo name and sizes (resnet18 at 224: ResNet-18's full topology and input)
DEFAULT_MODELS: dict[str, dict[str, Any]] = {
    "cnn_small": {}, "resnet_block": {}, "mobilenet_block": {}, "mlp": {}, "attention": {},
    "resnet18_64": {"name": "resnet18", "size": 64, "classes": 100, "width": 16},
    "resnet18_224": {"name": "resnet18"},
    "bert_encoder": {},
}
# main.c's per-step lines: index, kind, cycles, step name
ROW = re.compile(r"^\s*(\d+) (accel|host)\s+(\d+)\s+(\S.*?)\s*$", re.MULTILINE)


def steps(stdout: str) -> list[tuple[str, str, int]]:
    """main.c's step table: (step name, accel | host, cycles) in graph order."""
    return [(name, kind, int(cyc)) for _, kind, cyc, name in ROW.findall(stdout)]


def decode(raw: bytes, outputs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """main.c's output file (tensors back to back, raw little-endian) as arrays, per tileplan.json's outputs."""
    got, at = {}, 0
    for o in outputs:
        dt = np.dtype(o["dtype"]).newbyteorder("<")
        n = int(np.prod(o["shape"], dtype=np.int64))
        if at + n * dt.itemsize > len(raw):
            raise ValueError(f"output file has {len(raw)} bytes, {o['name']!r} needs {at + n * dt.itemsize}")
        got[o["name"]] = np.frombuffer(raw, dt, n, at).reshape(o["shape"])
        at += n * dt.itemsize
    if at != len(raw):
        raise ValueError(f"output file has {len(raw)} bytes, the outputs {at}")
    return got


def differing(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> int:
    """Output elements whose bits differ (NaN payloads included: the arrays are compared as bytes)."""
    total = 0
    for k, x in a.items():
        y = b[k]
        if x.shape != y.shape or x.dtype != y.dtype:
            return -1
        xb = x.reshape(-1).view(np.dtype(f"u{x.dtype.itemsize}"))
        yb = y.reshape(-1).view(np.dtype(f"u{y.dtype.itemsize}"))
        total += int(np.count_nonzero(xb != yb))
    return total


def compile_cli(onnx_path: Path, hw: str, out: Path, fusion: str = "auto") -> tuple[float, Path | str]:
    cmd = [sys.executable, "-m", "tileplan.cli", "compile", str(onnx_path), "--hw", hw, "--out", str(out),
           "--fusion", fusion]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if run.returncode:
        return wall, "compile failed: " + ((run.stderr.strip().splitlines() or ["?"])[-1])[:200]
    tars = sorted(out.glob("*.tar"))
    return wall, tars[0] if tars else "compile wrote no tar"


def run_one(label: str, onnx_path: Path, args: argparse.Namespace, spike: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"model": label, "hw": args.hw}
    data = onnx_path.read_bytes()
    with tempfile.TemporaryDirectory(prefix="tp-spike-") as tmp:
        wall, tar = compile_cli(onnx_path, args.hw, Path(tmp) / "out", args.fusion)
        row["compile_s"] = round(wall, 1)
        if isinstance(tar, str):
            row["verdict"] = tar
            return row
        with tarfile.open(fileobj=io.BytesIO(tar.read_bytes())) as tf:
            tf.extractall(Path(tmp) / "src", filter="data")
        root = next((Path(tmp) / "src").iterdir())
        meta = json.loads((root / "tileplan.json").read_text())
        row["steps"] = len(meta["steps"])
        row["accel_steps"] = sum(1 for s in meta["steps"] if s["kind"] == "accel")
        # fused groups' kernels (tileplan.fusion): Spike's program stages their accumulator reads through DRAM
        # (libgemmini does not model the read: tileplan/fusion/staging.py); the emulator runs the fused program
        fused = [s for s in meta["steps"] if str(s.get("function", "")).startswith("tpf_")]
        row["fused_steps"] = len(fused)
        # of them whole inverted residuals (expand+dw+project: fusion/ir_kernel), the others pairs
        row["fused_three"] = sum(1 for s in fused if str(s.get("name", "")).count("+") == 2)
        stage = ["TILEPLAN_STAGE_ACC_READS=1"] if row["fused_steps"] else []
        for make in (["make", "-s", "-j2", "riscv", f"GEMMINI_INCLUDE={args.gemmini_include}", *stage],
                     ["make", "-s", "-j2", "host-main"]):
            proc = subprocess.run(make, cwd=root, capture_output=True, text=True)
            if proc.returncode:
                row["verdict"] = "build failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1][:200]
                return row
        feeds = zoo.sample_inputs(data, seed=args.seed)
        (root / "in.bin").write_bytes(b"".join(np.ascontiguousarray(x).tobytes() for x in feeds.values()))
        emu = subprocess.run([str(root / "build/host/model"), "in.bin", "emu.bin"], cwd=root, capture_output=True,
                             text=True)
        if emu.returncode:
            row["verdict"] = "emulator run failed: " + emu.stderr.strip()[:200]
            return row
        libs = (str(args.libgemmini or args.spike / "lib"), os.environ.get("LD_LIBRARY_PATH", ""))
        env = {**os.environ, "LD_LIBRARY_PATH": ":".join(p for p in libs if p)}
        cmd = [str(spike), "--extension=gemmini", str(args.pk), "build/riscv/model.riscv", "in.bin", "spike.bin"]
        t0 = time.perf_counter()
        try:
            sp = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            row["verdict"] = f"Spike timed out after {args.timeout:.0f} s"
            return row
        row["spike_s"] = round(time.perf_counter() - t0, 1)
        if sp.returncode or not (root / "spike.bin").exists():
            row["verdict"] = f"Spike run failed (exit {sp.returncode}): " + (sp.stderr or sp.stdout).strip()[-200:]
            return row
        a, b = (root / "emu.bin").read_bytes(), (root / "spike.bin").read_bytes()
        got_emu, got_spike = decode(a, meta["outputs"]), decode(b, meta["outputs"])
        row["elements"] = sum(int(x.size) for x in got_spike.values())
        row["differ_emu"] = differing(got_spike, got_emu)
        row["bytes_equal"] = a == b
        row["verdict"] = "bit-exact" if a == b else f"{row['differ_emu']} elements differ"
        row["spike_steps"], row["emu_steps"] = steps(sp.stdout), steps(emu.stdout)
        row["ort"] = judge_ort(onnx_path, feeds, got_spike)
        row["ort_int8"] = judge_ort(onnx_path, feeds, got_spike, "ort-int8")
    return row


def judge_ort(onnx_path: Path, feeds: dict[str, np.ndarray], got: dict[str, np.ndarray],
              reference: str = "ort") -> dict[str, Any]:
    """Spike's outputs against an onnxruntime session (tileplan.frontend.reference: `ort` the default session,
    `ort-int8` the integer reference a QDQ model is held to): elements differing, equal / within 1 LSB, max."""
    from tileplan.frontend.reference import agreement, output_steps, reference_outputs

    want = reference_outputs(str(onnx_path), feeds, reference)
    names = list(want)
    res = agreement({k: got[k] for k in names}, want, output_steps(str(onnx_path)))
    res["differ"] = sum(int(np.count_nonzero(got[k] != want[k])) for k in names)
    return dict(res)


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def write(args: argparse.Namespace, rows: list[dict[str, Any]], runs: list[str]) -> str:
    lines = ["# Compiled models on Spike + libgemmini", "",
             "Command: `python bench/spike.py --spike DIR --pk PATH --gemmini-include INC --judges TEXT --hw HW "
             f"[--libgemmini LIB] --models M --onnx FILES` on {platform.machine()}; runs: " + "; ".join(runs) + ".",
             "", "Hardware other than gemmini-16x16 (libgemmini's own configuration): libgemmini rebuilt with its "
             "gemmini_params.h's DIM / BANK_ROWS / ACC_ROWS set to the target's (--libgemmini), and INC's "
             "gemmini_params.h the same file.", "",
             f"Judges: {args.judges or '(not given)'}.", "",
             "Per model: `tileplan compile`, the tar's `make riscv GEMMINI_INCLUDE=INC` (Gemmini's own gemmini.h, "
             "libgemmini's gemmini_params.h) run as `spike --extension=gemmini pk build/riscv/model.riscv in.bin "
             "out.bin`, and `make host-main` (the same main.c over Tileplan's emulator) on the same seeded random "
             "input. `Spike = emulator`: the output files equal byte for byte (elements differing). `vs ort`: "
             "Spike's outputs against onnxruntime's default session on the same file and input: elements "
             "differing, equal / within 1 LSB / max LSB; `vs ort-int8` the same against onnxruntime with "
             "session.qdqisint8allowed=1 (every int8 QDQ unit as its integer QLinear kernel: the reference a QDQ "
             "model is held to, tileplan.frontend.reference; on a QOperator file the default session's kernels; "
             "'-': a row measured before this column). Cycles: the sums of main.c's per-step lines; on Spike "
             "rdcycle (Spike's cycle CSR follows retired instructions; each RoCC instruction retires at once, so "
             "this is not a Gemmini SoC's cycle count), on the host Tileplan's emulated cycles. Rows named "
             "`<model>.qdq` / `<model>.qoperator`: bench/zoo_export.py's torchvision exports (seeded random weights, "
             "224 x 224, onnxruntime quantize_static per-tensor int8), compiled as exported. Rows `<model>.sym`: the "
             "test model quantized with symmetric activations (--symmetric); `<name>_224_sym`: `bench/torch_models.py "
             "--symmetric` exports (torchvision's architecture, ActivationSymmetric); `pointwise_32_128_32_28`: "
             "`bench/fusion_pointwise.py`'s model(32, 128, 32, 28). Wall times were measured on a shared machine. "
             "`N fused` in the steps column: steps "
             "running a fused-layer group's kernel (tileplan.fusion; `(K of 3 ops)`: K of them a whole inverted "
             "residual, expand -> depthwise -> project, fusion/ir_kernel, the others pairs); libgemmini does not model their consumer's "
             "read of the producer's accumulator rows, so Spike's program is built with "
             "`TILEPLAN_STAGE_ACC_READS=1` (each such read replaced by an mvout with the read's activation and "
             "scale and an mvin back: tileplan/fusion/staging.py) while the emulator runs the fused program as "
             "compiled: `Spike = emulator` then holds every other instruction of the fused kernels, and the "
             "emulator's accumulator read, to libgemmini's mvout; Spike's cycles of those steps include the "
             "staging.", "",
             "| model | hardware | steps (accelerator) | output elements | Spike = emulator | vs ort: differ, equal / within 1 "
             "LSB / max | vs ort-int8 | Spike rdcycle all / accelerator steps | emulated cycles (accelerator) | "
             "Spike wall s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "spike_steps" not in r:
            lines.append(f"| {r['model']} | {r['hw']} | {r.get('steps', '')} ({r.get('accel_steps', '')}) | | "
                         f"no: {r['verdict']} | | | | | |")
            continue
        o, o8 = r["ort"], r.get("ort_int8")
        vs8 = (f"{o8['differ']}, {_pct(o8['equal'])} / {_pct(o8['within1'])} / {o8['max']:.0f}" if o8 else "-")
        sp_all = sum(c for _, _, c in r["spike_steps"])
        sp_acc = sum(c for _, k, c in r["spike_steps"] if k == "accel")
        emu_acc = sum(c for _, k, c in r["emu_steps"] if k == "accel")
        eq = f"yes ({r['differ_emu']})" if r["bytes_equal"] else f"no ({r['differ_emu']})"
        fused = f", {r['fused_steps']} fused" if r.get("fused_steps") else ""
        fused += f" ({r['fused_three']} of 3 ops)" if r.get("fused_three") else ""
        lines.append(f"| {r['model']} | {r['hw']} | {r['steps']} ({r['accel_steps']}{fused}) | {r['elements']} | {eq} | "
                     f"{o['differ']}, {_pct(o['equal'])} / {_pct(o['within1'])} / {o['max']:.0f} | {vs8} | "
                     f"{sp_all} / {sp_acc} | {emu_acc} | {r['spike_s']} |")
    lines += ["", "## Per step: Spike rdcycle and emulated cycles", ""]
    for r in rows:
        if "spike_steps" not in r:
            continue
        emu = {n: c for n, _, c in r["emu_steps"]}
        lines += [f"### {r['model']} on {r['hw']}", "", "| step | kind | Spike rdcycle | emulated cycles |", "|---|---|---|---|"]
        lines += [f"| {n} | {k} | {c} | {emu.get(n, '') if k == 'accel' else ''} |" for n, k, c in r["spike_steps"]]
        lines.append("")
    return "\n".join(lines) + "\n"


def save(args: argparse.Namespace, rows: list[dict[str, Any]], run: str, stamp: str) -> None:
    """Merge this run's rows into <out>.json (replacing the same model on the same hardware) and rewrite <out>."""
    out = Path(args.out)
    store = out.with_suffix(".json")
    old = json.loads(store.read_text()) if store.exists() else {"rows": [], "runs": []}
    mine = {(r["model"], r["hw"]) for r in rows}
    merged = [r for r in old["rows"] if (r["model"], r.get("hw", "gemmini-16x16")) not in mine] + rows
    for r in merged:
        r.setdefault("hw", "gemmini-16x16")
    runs = [x for x in old["runs"] if not x.startswith(f"[{stamp}]")] + [run]
    store.write_text(json.dumps({"rows": merged, "runs": runs}, indent=1))
    out.write_text(write(args, merged, runs))


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--spike", type=Path, required=True, help="Spike's install prefix (bin/spike, lib/libgemmini.so)")
    ap.add_argument("--pk", type=Path, required=True, help="the proxy kernel (riscv-pk's pk)")
    ap.add_argument("--gemmini-include", type=Path, required=True,
                    help="GEMMINI_INCLUDE for make riscv: gemmini.h and libgemmini's gemmini_params.h")
    ap.add_argument("--judges", default="", help="the judges' versions, written into the table")
    ap.add_argument("--hw", default="gemmini-16x16",
                    help="the configuration libgemmini is built for (its gemmini_params.h: gemmini-16x16)")
    ap.add_argument("--libgemmini", type=Path,
                    help="directory of a libgemmini.so built for --hw (default: DIR/lib; Spike's RUNPATH comes "
                    "after LD_LIBRARY_PATH)")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS),
                    help=f"comma-separated test models, of {','.join(DEFAULT_MODELS)} ('' for none)")
    ap.add_argument("--onnx", default="", help="comma-separated ONNX files, compiled as they are")
    ap.add_argument("--symmetric", action="store_true",
                    help="quantize the test models with symmetric activations (onnxruntime's ActivationSymmetric: "
                    "no zero points, what fused groups need); rows <model>.sym")
    ap.add_argument("--fusion", choices=["auto", "off"], default="auto",
                    help="tileplan compile --fusion (default auto, the CLI's); rows of 'off' say so")
    ap.add_argument("--tag", default="", help="appended to every row's name in parentheses (rows of a tagged run "
                    "sit beside the untagged rows of the same models)")
    ap.add_argument("--seed", type=int, default=3, help="seed of the random input")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per Spike run")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spike.md"), help="'-': print only")
    args = ap.parse_args()
    spike = args.spike / "bin" / "spike"
    if not spike.exists() or not args.pk.exists():
        print(f"bench/spike.py: no bin/spike under {args.spike} or no pk at {args.pk}", file=sys.stderr)
        return 2
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in DEFAULT_MODELS]
    if unknown:
        print(f"bench/spike.py: unknown model {unknown[0]!r}; one of {', '.join(DEFAULT_MODELS)}", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    files = ",".join(Path(f).name for f in args.onnx.split(",") if f) or "-"
    rows: list[dict[str, Any]] = []
    flags = (" --symmetric" if args.symmetric else "") + (" --fusion off" if args.fusion == "off" else "")
    flags += f" --tag '{args.tag}'" if args.tag else ""
    run = f"[{stamp}] --hw {args.hw}{flags} --models {args.models or '-'} --onnx {files}: no model"
    with tempfile.TemporaryDirectory(prefix="tp-spike-models-") as work:
        jobs: list[tuple[str, Path]] = []
        for n in names:
            params = dict(DEFAULT_MODELS[n])
            path = Path(work) / f"{n}.onnx"
            path.write_bytes(zoo.build(str(params.pop("name", n)), "qdq", symmetric=args.symmetric, **params))
            jobs.append((n + (".sym" if args.symmetric else ""), path))
        jobs += [(Path(f).name.removesuffix(".onnx"), Path(f)) for f in args.onnx.split(",") if f]
        if args.fusion == "off":
            jobs = [(label + " (fusion off)", path) for label, path in jobs]
        if args.tag:
            jobs = [(f"{label} ({args.tag})", path) for label, path in jobs]
        for i, (label, path) in enumerate(jobs):
            try:
                rows.append(run_one(label, path, args, spike))
            except (OSError, ValueError, RuntimeError) as e:  # a broken model is a row, not the end of the run
                rows.append({"model": label, "hw": args.hw,
                             "verdict": f"bench error: {type(e).__name__}: {e}"[:200]})
            print(json.dumps({k: v for k, v in rows[-1].items() if not k.endswith("_steps")}), flush=True)
            done = "" if i + 1 == len(jobs) else f" ({i + 1} of {len(jobs)} models so far)"
            run = (f"[{stamp}] --hw {args.hw}{flags} --models {args.models or '-'} --onnx {files}: "
                   f"{time.perf_counter() - t_start:.0f} s{done}")
            if args.out != "-":
                save(args, rows, run, stamp)  # after every model: a long run keeps what it has measured
    if args.out == "-":
        print(write(args, rows, [run]))
    return 0 if all(r.get("bytes_equal") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
