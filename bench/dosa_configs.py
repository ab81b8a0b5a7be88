"""cosa against DOSA's published mappings and Gemmini's own tiler, on the 16x16 configurations DOSA measured.

    PYTHONPATH=service python bench/dosa_configs.py [--out bench/results/dosa_configs.md]

For each ResNet-50 / BERT file of bench/data/dosa_artifact (one 16x16 Gemmini configuration each), every layer:
FireSim cycles of Gemmini's tiler and of DOSA's mapping as measured, the calibrated model's prediction for
both, and the model's prediction for Tileplan's cosa plan on the same configuration (its scratchpad and
accumulator sizes; default objective). Totals weight ResNet-50 layers by how often they occur. Reading: the
model predicts DOSA's mappings and the tiler with some error (bench/results/costmodel.md); cosa vs DOSA under
the same model is the like-for-like comparison.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from tileplan.cost.firesim import FireSimRun, load_artifact
from tileplan.cost.model import evaluate_mapping
from tileplan.mappers.base import MapperOptions, get_mapper
from tileplan.workload import Conv2dLayer

ROOT = Path(__file__).resolve().parents[1]
ARTIFACT = ROOT / "bench" / "data" / "dosa_artifact"
WORKLOADS = ROOT / "examples" / "workloads"


def resnet_counts() -> dict[str, int]:
    """ResNet-50 occurrence counts by the artifact's layer key (C, K, P, Q, R, S, stride)."""
    out = {}
    for layer in yaml.safe_load((WORKLOADS / "resnet50_unique.yaml").read_text())["layers"]:
        if layer["op"] != "conv2d":
            out["C2048_K1000_P1_Q1_R1_S1_s1x1"] = layer.get("count", 1)
            continue
        lay = Conv2dLayer(**{k: v for k, v in layer.items() if k not in ("op", "count")})
        d = lay.dims()
        out["C{C}_K{K}_P{P}_Q{Q}_R{R}_S{S}".format(**d) + f"_s{lay.stride[0]}x{lay.stride[1]}"] = layer.get("count", 1)
    return out


def predicted(run: FireSimRun) -> float:
    """The model's cycles for a measured run, sent as a user would (the run's hardware, layer and mapping)."""
    return evaluate_mapping(run.problem, run.hardware.resolve(run.mapping.dataflow), run.mapping).cycles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "dosa_configs.md")
    args = ap.parse_args()
    counts = resnet_counts()
    cosa = get_mapper("cosa")
    lines = [
        "# cosa vs DOSA's mappings and Gemmini's tiler on DOSA's 16x16 configurations",
        "",
        "`PYTHONPATH=service python bench/dosa_configs.py`. Measured = FireSim (bench/data/dosa_artifact); model = "
        "Tileplan's calibrated cost model (the same parameters as everywhere). ResNet-50 totals weight layers by "
        "occurrence. cosa: default objective, planned on each file's scratchpad and accumulator sizes, as DOSA's "
        "mappings ran; the tiler's runs ran on the buffers in their own column (the artifact's), so where those differ "
        "`cosa vs tiler` compares plans on different buffer sizes.",
        "",
        "| file | scratchpad / accumulator | tiler ran on | tiler measured | DOSA measured | tiler model | DOSA model | cosa model | "
        "cosa vs DOSA (model) | cosa vs tiler (model) | DOSA vs tiler (measured) | cosa s (max) |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for path in sorted(ARTIFACT.glob("*.csv")):
        if not (path.stem.endswith("resnet50") or path.stem.endswith("bert")):
            continue
        runs = load_artifact(path)
        hw = runs[0].hardware  # the configuration's own buffers (DOSA's mapping runs)
        tot = dict.fromkeys(("lib_m", "dosa_m", "lib_p", "dosa_p", "cosa_p"), 0.0)
        slowest = 0.0
        for lib, dosa in zip(runs[1::2], runs[0::2]):
            n = counts.get(dosa.layer_key, 1) if path.stem.endswith("resnet50") else 1
            problem = dosa.problem  # the layer as the harness ran it (square input P x stride, padding R/2)
            t0 = time.perf_counter()
            plan = cosa.map(problem, hw, MapperOptions()).mapping
            slowest = max(slowest, time.perf_counter() - t0)
            runs_as = plan.executor or "tileplan"
            tot["cosa_p"] += n * evaluate_mapping(problem, hw.resolve(plan.dataflow), plan, runs_as).cycles
            tot["lib_m"] += n * lib.cycles
            tot["dosa_m"] += n * dosa.cycles
            tot["lib_p"] += n * predicted(lib)
            tot["dosa_p"] += n * predicted(dosa)
        spad = hw.memory_levels[2].capacity
        acc = hw.memory_levels[1].capacity
        lib_hw = runs[1].hardware
        t = tot
        lines.append(
            f"| {path.stem} | {spad / 1024:.0f} / {acc / 1024:.0f} KiB | {lib_hw.memory_levels[2].capacity / 1024:.0f} / "
            f"{lib_hw.memory_levels[1].capacity / 1024:.0f} KiB | {t['lib_m']:,.0f} | {t['dosa_m']:,.0f} | "
            f"{t['lib_p']:,.0f} | {t['dosa_p']:,.0f} | {t['cosa_p']:,.0f} | {t['dosa_p'] / t['cosa_p']:.2f}x | "
            f"{t['lib_p'] / t['cosa_p']:.2f}x | {t['lib_m'] / t['dosa_m']:.2f}x | {slowest:.2f} |"
        )
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
