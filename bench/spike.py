"""Compiled models on Spike with Gemmini's ISA functional model (libgemmini), compared with Tileplan's emulator.

    python bench/spike.py --spike DIR --pk PATH                    # writes bench/results/spike.md
    python bench/spike.py --spike DIR --pk PATH --models resnet_block,mlp --out -   # a quick look
    python bench/spike.py --spike DIR --pk PATH --gemmini-include DIR   # the kernels against Gemmini's own header

DIR is Spike's install prefix (bin/spike, and lib/libgemmini.so, which `spike --extension=gemmini` loads); PATH
is the proxy kernel (riscv-pk's `pk`).  Neither ships with Tileplan (README: "A compiled model as a RISC-V
program" says how to build them).  For every model of Tileplan's zoo (random weights, onnxruntime's static
quantizer, QDQ, per-tensor int8) compiled for --hw with `compile_model`:

1. the artifact's own `make riscv` (Debian's riscv64-linux-gnu-gcc; GEMMINI_INCLUDE when given) gives
   build/riscv/model.riscv, and its `make host-main` the same main.c over Tileplan's emulator;
2. one random input file (main.c's format: the inputs' raw bytes) goes through both:
   `spike --extension=gemmini PATH model.riscv in.bin out.bin` and `build/host/model in.bin out.bin`;
3. the two output files must be equal byte for byte; the table gives each run's per-step cycle sums (Spike's
   rdcycle counts instructions retired by its in-order model, not a Gemmini SoC's cycles: the column is what the
   program prints, not a timing claim) and the wall time of the Spike run.
"""

from __future__ import annotations

import argparse
import io
import platform
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "service"))

from tileplan.frontend import zoo  # noqa: E402
from tileplan.frontend.compile import CompileOptions, compile_model  # noqa: E402
from tileplan.hardware.catalog import get_hardware  # noqa: E402

# zoo models and sizes a functional simulator runs in minutes (ResNet-18 at 224 takes far longer on Spike)
DEFAULT_MODELS = {
    "cnn_small": {}, "resnet_block": {}, "mobilenet_block": {}, "mlp": {}, "attention": {},
    "resnet18_64": {"name": "resnet18", "size": 64, "classes": 100, "width": 16},
}
ROW = re.compile(r"^\s*(\d+) (accel|host)\s+(\d+)\s+(.*)$", re.MULTILINE)


def _cycles(stdout: str) -> tuple[int, int]:
    """(all steps, accelerator steps) of main.c's table."""
    rows = ROW.findall(stdout)
    return sum(int(r[2]) for r in rows), sum(int(r[2]) for r in rows if r[1] == "accel")


def run_one(label: str, spec: dict[str, object], hw_name: str, spike: Path, pk: Path, include: Path | None,
            timeout: float) -> dict[str, object]:
    params = dict(spec)
    name = str(params.pop("name", label))
    data = zoo.build(name, "qdq", **params)  # type: ignore[arg-type]
    res = compile_model(data, get_hardware(hw_name), CompileOptions(time_limit_s=5.0))
    row: dict[str, object] = {"model": label, "steps": res.summary["total"]["steps"],
                              "accel_ops": res.summary["total"]["accelerator_ops"]}
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=io.BytesIO(res.artifact)) as tar:
            tar.extractall(tmp, filter="data")
        root = next(Path(tmp).iterdir())
        make = ["make", "-s", "-j2", "riscv", "host-main"] + ([f"GEMMINI_INCLUDE={include}"] if include else [])
        proc = subprocess.run(make, cwd=root, capture_output=True, text=True)
        if proc.returncode:
            row["verdict"] = "build failed: " + proc.stderr.strip().splitlines()[-1][:160]
            return row
        feeds = zoo.sample_inputs(data, seed=3)
        (root / "in.bin").write_bytes(b"".join(np.ascontiguousarray(x).tobytes() for x in feeds.values()))
        emu = subprocess.run([str(root / "build/host/model"), "in.bin", "emu.bin"], cwd=root, capture_output=True,
                             text=True)
        if emu.returncode:
            row["verdict"] = "emulator run failed: " + emu.stderr.strip()[:160]
            return row
        t0 = time.perf_counter()
        try:
            sp = subprocess.run([str(spike), "--extension=gemmini", str(pk), "build/riscv/model.riscv", "in.bin",
                                 "spike.bin"], cwd=root, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            row["verdict"] = f"Spike timed out after {timeout:.0f} s"
            return row
        row["spike_s"] = round(time.perf_counter() - t0, 1)
        if sp.returncode or not (root / "spike.bin").exists():
            row["verdict"] = f"Spike run failed (exit {sp.returncode}): " + (sp.stderr or sp.stdout).strip()[-160:]
            return row
        a, b = (root / "emu.bin").read_bytes(), (root / "spike.bin").read_bytes()
        differ = sum(x != y for x, y in zip(a, b)) + abs(len(a) - len(b))
        row["bytes"] = len(a)
        row["verdict"] = "bit-exact" if differ == 0 else f"{differ} bytes differ"
        row["spike_cycles"], row["spike_accel_cycles"] = _cycles(sp.stdout)
        row["emu_cycles"], row["emu_accel_cycles"] = _cycles(emu.stdout)
    return row


def table(rows: list[dict[str, object]], args: argparse.Namespace) -> str:
    head = ("| model | steps | accelerator ops | output bytes | Spike vs emulator | Spike rdcycle (all / accelerator "
            "steps) | emulated cycles (all / accelerator) | Spike wall s |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        lines.append(f"| {r['model']} | {r['steps']} | {r['accel_ops']} | {r.get('bytes', '')} | {r['verdict']} | "
                     f"{r.get('spike_cycles', '')} / {r.get('spike_accel_cycles', '')} | "
                     f"{r.get('emu_cycles', '')} / {r.get('emu_accel_cycles', '')} | {r.get('spike_s', '')} |")
    exact = sum(r["verdict"] == "bit-exact" for r in rows)
    return (f"# Compiled models on Spike + libgemmini\n\n`python bench/spike.py --spike DIR --pk PATH"
            f"{' --gemmini-include DIR' if args.gemmini_include else ''}` on {platform.machine()}, hardware "
            f"{args.hw}: {exact} of {len(rows)} models bit-exact against Tileplan's emulator (main.c's output "
            "files compared byte for byte; same random input file).\n\n" + "\n".join(lines) + "\n\n"
            "Spike's rdcycle column is what main.c prints on Spike (its cycle CSR follows retired instructions); "
            "it is not a Gemmini SoC's cycle count.\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spike", type=Path, required=True, help="Spike's install prefix (bin/spike, lib/libgemmini.so)")
    ap.add_argument("--pk", type=Path, required=True, help="the proxy kernel (riscv-pk's pk)")
    ap.add_argument("--gemmini-include", type=Path, help="GEMMINI_INCLUDE for make riscv (Gemmini's own header)")
    ap.add_argument("--hw", default="gemmini-16x16")
    ap.add_argument("--models", help=f"comma-separated, of {','.join(DEFAULT_MODELS)}")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per Spike run")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spike.md"), help="'-': print only")
    args = ap.parse_args()
    spike = args.spike / "bin" / "spike" if (args.spike / "bin" / "spike").exists() else args.spike / "spike"
    if not spike.exists() or not args.pk.exists():
        print(f"bench/spike.py: no spike under {args.spike} or no pk at {args.pk}", file=sys.stderr)
        return 2
    names = args.models.split(",") if args.models else list(DEFAULT_MODELS)
    unknown = [n for n in names if n not in DEFAULT_MODELS]
    if unknown:
        print(f"bench/spike.py: unknown model {unknown[0]!r}; one of {', '.join(DEFAULT_MODELS)}", file=sys.stderr)
        return 2
    rows = []
    for n in names:
        rows.append(run_one(n, DEFAULT_MODELS[n], args.hw, spike, args.pk, args.gemmini_include, args.timeout))
        print(rows[-1], flush=True)
    text = table(rows, args)
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    return 0 if all(r["verdict"] == "bit-exact" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
