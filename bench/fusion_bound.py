"""How much can fusing layers gain on a network at most? A bound from the calibrated cost model.

Fusion keeps intermediate activations on chip: it removes DRAM traffic and nothing else (the array streams the same
rows and preloads the same weights). So a network compiled on a copy of the hardware whose DRAM costs nothing
(every DRAM term of the descriptor's calibrated `cost_params` set to free: no per-byte, per-request or blocking
cost) runs no slower than any fused program of it could: `unfused / free-DRAM` bounds the gain of fusion from above,
for every fusion strategy, on that hardware and cost model.

A tighter estimate: fusion cannot remove the weights' traffic (each weight is read at least once). Each offloaded
op's DRAM-attributable cycles (its cycles minus its free-DRAM cycles) are shared between weight and activation bytes
in proportion to the bytes it moved, and the whole activation share counts as removable (generous: a fused program
still reads the model's input and writes its output, and the traffic next to host ops stays).

    python bench/fusion_bound.py --hw gemmini-16x16 MODEL.onnx [MODEL.onnx ...]   # writes bench/results/fusion_bound.md
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "service"))

from tileplan.hardware.catalog import catalog_dir  # noqa: E402

# The calibrated model's DRAM terms (tileplan.cost.gemmini): sustained bytes per cycle (16 B x dram_efficiency),
# cycles per DMA request, per request on DRAM beyond the L2 (and beyond the LLC), DRAM's own cycles per byte beyond
# the LLC, per store that waits for its block, and the memory bus's beat (a hardware fact, not in the catalog's
# fitted parameters: a wide bus moves a block in no time).
FREE_DRAM = {"dram_efficiency": 1.0e6, "dma_request_cycles": 0.0, "dram_request_cycles": 0.0, "llc_miss_cycles": 0.0,
             "dram_byte_cycles": 0.0, "block_wait_cycles": 0.0, "mem_bus_bytes": 1.0e9}
HARDWARE_FACTS = ("mem_bus_bytes",)


def free_dram_descriptor(hw: str, out: Path) -> Path:
    data = yaml.safe_load((catalog_dir() / f"{hw}.yaml").read_text())
    missing = [k for k in FREE_DRAM if k not in data.get("cost_params", {}) and k not in HARDWARE_FACTS]
    if missing:
        raise SystemExit(f"{hw}: cost_params lacks {', '.join(missing)}: no calibrated DRAM terms to free")
    data["name"] = f"{hw}-free-dram"
    data["cost_params"].update(FREE_DRAM)
    path = out / f"{hw}-free-dram.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def compile_summary(model: Path, hw: str, out: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "tileplan.cli", "compile", "--hw", hw, "--out", str(out), "--fusion", "off", str(model)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return dict(json.loads(next(out.glob("*.summary.json")).read_text()))


def weight_bytes(op: dict[str, Any]) -> int:
    layer = op["layer"]
    if layer["op"] == "conv2d":
        k, c, (r, s), g = layer["out_channels"], layer["in_channels"], layer["kernel"], layer["groups"]
        return k * (c // g) * r * s + 4 * k
    if "two int8 activations" in op["reason"]:
        return 0  # both operands are activations (attention): no weights
    return int(layer["K"] * layer["N"] + 4 * layer["N"])  # a matmul's constant K x N operand and its bias


def bound(model: Path, hw: str, work: Path) -> dict[str, Any]:
    real = compile_summary(model, hw, work / "real")
    free = compile_summary(model, str(free_dram_descriptor(hw, work)), work / "free")
    ops = real["ops"]
    total = real["total"]["cycles_emulated"]
    dram_cycles = 0.0
    removable = 0.0
    for op, fop in zip(ops, free["ops"], strict=True):
        if op["where"] != "accelerator":
            continue
        extra = op["cycles_emulated"] - fop["cycles_emulated"]
        dram_cycles += extra
        moved = op["dram_bytes_emulated"] or 1
        removable += extra * max(0, moved - weight_bytes(op)) / moved
    return {
        "model": model.name,
        "hw": hw,
        "unfused": total,
        "free_dram": free["total"]["cycles_emulated"],
        "dram_cycles": dram_cycles,
        "removable": removable,
        "dram_bytes": real["total"]["dram_bytes_emulated"],
        "weights_bytes": real["total"]["weights_bytes"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--hw", default="gemmini-16x16")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fusion_bound.md")
    args = ap.parse_args()
    start = time.time()
    rows = []
    for model in args.models:
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(bound(model, args.hw, Path(tmp)))
    lines = [
        "# Upper bound on what fusing layers can gain (calibrated cost model)",
        "",
        f"`python bench/fusion_bound.py --hw {args.hw} {' '.join(m.name for m in args.models)}` "
        f"({platform.machine()}, {time.time() - start:.0f} s): each model compiled with `fusion: off` on `{args.hw}` "
        f"and on a copy whose calibrated DRAM terms are free ({', '.join(f'{k}={v:g}' for k, v in FREE_DRAM.items())}), "
        "both emulated. Cycles do not depend on the machine's load. See the script's docstring for the argument.",
        "",
        "*free-DRAM bound* = unfused / free-DRAM cycles: no program that only removes DRAM traffic (any fusion) gains "
        "more. *activation-share bound* = unfused / (unfused - removable): removable = the activation share (by bytes) "
        "of every offloaded op's DRAM-attributable cycles (weights are read at least once).",
        "",
        "| model | unfused cycles | free-DRAM cycles | free-DRAM bound | DRAM-attributable cycles | removable | "
        "activation-share bound | DRAM bytes | weight bytes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['unfused']:,} | {r['free_dram']:,} | {r['unfused'] / r['free_dram']:.3f}x | "
            f"{r['dram_cycles']:,.0f} | {r['removable']:,.0f} | {r['unfused'] / (r['unfused'] - r['removable']):.3f}x | "
            f"{r['dram_bytes']:,} | {r['weights_bytes']:,} |"
        )
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
