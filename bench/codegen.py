"""Code generation benchmark: plans -> TVM -> C -> Gemmini emulator, on ResNet-50 and BERT-base layers.

For each layer and mapper (the gemmini-auto baseline and CoSA) the plan is turned into C, run on the emulator
(16x16 Gemmini, default timing: 8 B/cycle DRAM, Gemmini's reservation-station sizes), checked bit-exact against
NumPy, and its emulated cycles set against the cost model's prediction for the same mapping.

    python bench/codegen.py                      # all layers, writes bench/results/codegen.md
    python bench/codegen.py --limit 4 --out -    # a quick look, printed
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "service"))

from tileplan.codegen.emulator import TimingParams  # noqa: E402
from tileplan.codegen.pipeline import Epilogue, generate, random_inputs, reference, run  # noqa: E402
from tileplan.hardware.catalog import get_hardware  # noqa: E402
from tileplan.mappers.base import MapperOptions, get_mapper  # noqa: E402
from tileplan.plan import evaluate  # noqa: E402
from tileplan.problem import Problem  # noqa: E402
from tileplan.workload import load_workload  # noqa: E402

WORKLOADS = Path("/work/shared/data/workloads")


def spearman(a: list[float], b: list[float]) -> float:
    ra = np.argsort(np.argsort(a)).astype(float)
    rb = np.argsort(np.argsort(b)).astype(float)
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hardware", default="gemmini-16x16")
    ap.add_argument("--mappers", default="gemmini-auto,cosa")
    ap.add_argument("--limit", type=int, default=0, help="first N layers of each network (0: all)")
    ap.add_argument("--cosa-time", type=float, default=5.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "codegen.md"))
    args = ap.parse_args()

    hw = get_hardware(args.hardware)
    timing = TimingParams.for_dim(hw.pe_array.rows)
    epi = Epilogue(scale=0.0025, relu=True)
    rows, failures = [], []
    nets = {}
    for wl in ("bert_base_matmuls.yaml", "resnet50_unique.yaml"):
        net, layers = load_workload(WORKLOADS / wl)
        nets[net] = layers[: args.limit] if args.limit else layers
    t_all = time.time()
    for net, layers in nets.items():
        for layer in layers:
            problem = Problem.from_layer(layer)
            for mname in args.mappers.split(","):
                t0 = time.time()
                try:
                    res = get_mapper(mname).map(problem, hw, MapperOptions(time_limit_s=args.cosa_time))
                    t_map = time.time() - t0
                    ev = evaluate(layer, hw, res.mapping)
                    model = ev.metrics.cycles if ev.valid else float("nan")
                    t0 = time.time()
                    art = generate(layer, hw, res.mapping, epi, name=layer.name)
                    t_gen = time.time() - t0
                    inputs = random_inputs(art.geometry, seed=len(rows))
                    t0 = time.time()
                    out = run(art, inputs, timing=timing)
                    t_run = time.time() - t0
                    exact = bool(np.array_equal(out.buffers["out"], reference(art.geometry, epi, **inputs)))
                except Exception as exc:  # recorded, not hidden
                    failures.append(f"{net}/{layer.name}/{mname}: {type(exc).__name__}: {str(exc)[:200]}")
                    print("FAIL", failures[-1], flush=True)
                    continue
                ideal = problem.macs / hw.pe_array.macs
                rows.append(dict(net=net, layer=layer.name, count=layer.count, mapper=mname, macs=problem.macs,
                                 ideal=ideal, model=model, emu=out.cycles, util=ideal / out.cycles, exact=exact,
                                 instr=out.instructions, t_map=t_map, t_gen=t_gen, t_run=t_run,
                                 c_lines=art.c_source.count("\n"), deviations=len(art.notes),
                                 padded_macs=out.macs))
                r = rows[-1]
                print(f"{net:18s} {layer.name:28s} {mname:12s} emu {r['emu']:>10d} model {model:>12.0f} "
                      f"util {r['util']:.3f} exact {exact} gen {t_gen:.2f}s run {t_run:.2f}s", flush=True)
    total = time.time() - t_all

    lines = ["# Code generation: plans -> TVM -> C -> Gemmini emulator", "",
             f"Command: `python bench/codegen.py{' --limit ' + str(args.limit) if args.limit else ''}` "
             f"({platform.machine()}, Python {platform.python_version()}, {total:.0f} s wall).", "",
             f"Hardware `{args.hardware}`; emulator timing {timing}.",
             "Epilogue: bias, scale 0.0025, ReLU, int8. Inputs random int8, bias random int32.",
             "util = layer MACs / (256 x emulated cycles). model = the cost model's cycles for the same mapping.", ""]
    n_exact = sum(r["exact"] for r in rows)
    lines += [f"**{n_exact} / {len(rows)} runs bit-exact** against NumPy; {len(failures)} plans failed to generate "
              f"or run.", ""]
    for net in nets:
        lines += [f"## {net}", "", "| layer | x | mapper | emulated cycles | util | model cycles | model/emu | "
                  "instructions | padded MAC overhead | codegen s | emulate s | exact |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in (r for r in rows if r["net"] == net):
            lines.append(f"| {r['layer']} | {r['count']} | {r['mapper']} | {r['emu']:,} | {r['util']:.3f} | "
                         f"{r['model']:,.0f} | {r['model'] / r['emu']:.2f} | {r['instr']:,} | "
                         f"{r['padded_macs'] / r['macs']:.2f}x | {r['t_gen']:.2f} | {r['t_run']:.2f} | "
                         f"{'yes' if r['exact'] else 'NO'} |")
        lines.append("")
        for m in args.mappers.split(","):
            sel = [r for r in rows if r["net"] == net and r["mapper"] == m]
            if sel:
                emu = sum(r["emu"] * r["count"] for r in sel)
                ideal = sum(r["ideal"] * r["count"] for r in sel)
                lines.append(f"- {m}: {len(sel)} layers, network total {emu:,.0f} emulated cycles "
                             f"(weighted by count), utilization {ideal / emu:.3f}")
        ms = args.mappers.split(",")
        if len(ms) == 2:
            pairs = {}
            for r in rows:
                if r["net"] == net:
                    pairs.setdefault(r["layer"], {})[r["mapper"]] = r
            both = [p for p in pairs.values() if len(p) == 2]
            if both:
                a = sum(p[ms[0]]["emu"] * p[ms[0]]["count"] for p in both)
                b = sum(p[ms[1]]["emu"] * p[ms[1]]["count"] for p in both)
                lines.append(f"- emulated speed-up of {ms[1]} over {ms[0]} on the {len(both)} layers both ran: "
                             f"{a / b:.2f}x")
        lines.append("")
    valid = [r for r in rows if not math.isnan(r["model"])]
    if len(valid) > 2:
        ratio = np.array([r["model"] / r["emu"] for r in valid])
        lines += ["## Cost model vs emulator", "",
                  f"Spearman rank correlation of model and emulated cycles over {len(valid)} runs: "
                  f"{spearman([r['model'] for r in valid], [r['emu'] for r in valid]):.3f}; model/emulated cycles "
                  f"median {np.median(ratio):.2f}, range {ratio.min():.2f}-{ratio.max():.2f}.", "",
                  "The emulator is not RTL: it is an instruction-level model (see the emulator's header comment). "
                  "Agreement is a consistency check between two models, not a validation.", ""]
    if failures:
        lines += ["## Failures", ""] + [f"- {f}" for f in failures] + [""]
    lines += ["## Notes", "",
              "- Host-side stages of the generated kernel (padding copies of the operands, un-padding of the output) "
              "run on the CPU and are not in the emulated cycles.",
              "- Rows of a block are output columns (Q, or M for a matmul) only, padded to DIM: small Q tiles "
              "(e.g. 7x7 layers, Q tiles of 19-23) waste array rows; the 'padded MAC overhead' column shows it.",
              "- Depthwise layers run one channel per DIM x DIM block (1/DIM^2 of the array).",
              "- Strided 1x1 convolutions are subsampled by the host copy (the array sees stride 1); strided kxk "
              "convolutions load the input tile's whole bounding box and step through it with Gemmini's A stride."]
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
