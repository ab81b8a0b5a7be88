"""Code generation benchmark: plans -> TVM -> C -> Gemmini emulator, Tileplan (CoSA) vs gemmini-auto.

For each layer, the gemmini-auto plan (standing for Gemmini's hand-written library: its tiled_matmul_auto /
tiled_conv_auto tiles run call by call, each call's loads in the baseline order) and Tileplan's CoSA plan
(Tileplan's stream: tiles kept between calls that share them) go through the same code path (one library-style
call per DRAM iteration), run on the emulator
(timing derived from the calibrated cost model, `tileplan.codegen.pipeline.timing_for`), are checked bit-exact
against NumPy, and are set against the cost model:
`model(plan)` = evaluate_mapping of the plan's Mapping, `model(code)` = the same model for the tiles the code runs
(they differ only where the plan had to be shrunk to fit half the local memories).  Every kernel is also compiled
for RISC-V (Debian's riscv64-linux-gnu-gcc -c -O2 -Wall -Werror) against the stand-in gemmini.h, whose macros emit
Gemmini's RoCC custom-3 instructions there; the table counts them in each object.

    python bench/codegen.py                  # the benchmark set, writes bench/results/codegen.md
    python bench/codegen.py --all            # plus every ResNet-50 and BERT-base layer
    python bench/codegen.py --out -          # print instead of writing
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "service"))

from tileplan.codegen.emulator.build import cross_compile_object, rocc_words  # noqa: E402
from tileplan.codegen.pipeline import Epilogue, build_module, random_inputs, reference, run, timing_for  # noqa: E402
from tileplan.hardware.catalog import get_hardware  # noqa: E402
from tileplan.mappers.base import MapperOptions, get_mapper  # noqa: E402
from tileplan.plan import evaluate, executor_for  # noqa: E402
from tileplan.problem import Problem  # noqa: E402
from tileplan.workload import load_workload, parse_layer  # noqa: E402

WORKLOADS = Path(__file__).resolve().parents[1] / "examples" / "workloads"
MAPPERS = ("gemmini-auto", "cosa")
# The order of each call's loads (codegen.schedule.STREAMS): the hand-written library keeps the baseline order,
# in which every bias row is loaded after the call's input and weight tiles.  In the emulator that order is at
# least as fast as the ones Gemmini's loop_ws FSM can issue (all bias rows first, and no compute before the last
# of them), so the baseline is not handicapped by it.
STREAM = {"gemmini-auto": "baseline", "cosa": "tileplan"}


def benchmark_set() -> list:
    _, resnet = load_workload(WORKLOADS / "resnet50_unique.yaml")
    by_name = {layer.name: layer for layer in resnet}
    return [
        parse_layer({"op": "matmul", "name": "matmul_64", "M": 64, "K": 64, "N": 64}),
        parse_layer({"op": "matmul", "name": "matmul_128", "M": 128, "K": 128, "N": 128}),
        parse_layer({"op": "matmul", "name": "matmul_512", "M": 512, "K": 512, "N": 512}),
        by_name["conv_3_64_7x7_s2_112"],
        by_name["conv_256_64_1x1_s1_56"],
        by_name["conv_64_64_3x3_s1_56"],
        parse_layer({"op": "conv2d", "name": "dwconv_128_3x3_s1_56", "in_channels": 128, "out_channels": 128,
                     "groups": 128, "in_h": 56, "in_w": 56, "kernel": 3, "padding": 1}),
    ]


def run_one(layer, hw, mapper: str, epi: Epilogue, cosa_time: float, seed: int) -> dict:
    problem = Problem.from_layer(layer)
    t0 = time.perf_counter()
    res = get_mapper(mapper).map(problem, hw, MapperOptions(time_limit_s=cosa_time))
    t_map = time.perf_counter() - t0
    ev = evaluate(layer, hw, res.mapping, executor_for(mapper))
    t0 = time.perf_counter()
    art = build_module(res.mapping, layer, hw, epilogue=epi, name=layer.name, stream=STREAM[mapper])
    t_build = time.perf_counter() - t0
    inputs = random_inputs(art.geometry, seed)
    t0 = time.perf_counter()
    out = run(art, inputs)
    t_run = time.perf_counter() - t0
    exact = bool(np.array_equal(out.buffers["out"], reference(art.geometry, epi, **inputs)))
    with tempfile.TemporaryDirectory() as tmp:  # the same C for the chip: Gemmini's instructions in the object
        riscv = len(rocc_words(cross_compile_object(art.c_source, Path(tmp), art.config)))
    return dict(layer=layer.name, mapper=mapper, macs=problem.macs, emu=out.cycles, timeline=out.timeline_cycles,
                model_plan=ev.metrics.cycles if ev.valid else float("nan"), model_code=art.model_cycles,
                exact=exact, instr=out.instructions, t_map=t_map, t_build=t_build, t_run=t_run, notes=art.notes,
                tile=art.realization.tile, calls=art.realization.calls, db=art.realization.double_buffer,
                busy=out.busy, riscv=riscv)


def one_call_orders(hw) -> list[str]:
    """matmul_64 as one call (gemmini-auto's tile, the whole 64 x 64 x 64 problem), so the orders differ only in
    the order of the call's instructions.  The same instructions (64 B input / weight rows, one bias row per DIM outputs, DIM-wide stores)
    in the orders Gemmini's loop_ws FSM can issue (LdD outranks LdA / LdB and Ex waits for all of D; Ex runs k, j,
    i), the baseline order and Tileplan's, run on the emulator; plus the DMA-only bound (the call plus every
    transfer once, nothing else)."""
    from tileplan.codegen.emulator import Emulator, isa
    from tileplan.codegen.emulator.isa import GARBAGE_ADDR, Dram, acc_addr

    d, nb, scale = 16, 4, 0.0025  # DIM, blocks per 64-element dimension
    t = timing_for(hw, matmul=True)
    emu = Emulator(d, 16384, 1024, max_mvin_blocks=nb, timing=t)
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-128, 128, (64, 64), dtype=np.int8) for _ in range(2))
    bias = rng.integers(-5000, 5000, 64, dtype=np.int32)
    want = np.clip(np.maximum(np.rint((a.astype(np.int64) @ b + bias).astype(np.float32) * np.float32(scale)), 0),
                   -128, 127).astype(np.int8)
    ld_a = [isa.mvin(Dram("A", i * d * 64), i * nb * d, 64, d, 0) for i in range(nb)]  # A(i, all k) per mvin
    ld_b = [isa.mvin(Dram("B", k * d * 64), (nb + k) * nb * d, 64, d, 1) for k in range(nb)]  # B(k, all j)

    def ld_d(j: int) -> list:
        return [isa.mvin(Dram("bias", j * d * 4), acc_addr((i * nb + j) * d), d, d, 2) for i in range(nb)]

    def ex(k: int, j: int, i: int) -> list:
        out = acc_addr((i * nb + j) * d, accumulate=True)
        if i == 0:  # one weight preload per (k, j), then the i blocks stream through
            return [isa.preload(((nb + k) * nb + j) * d, out, d, d, d, d),
                    isa.compute_preloaded((i * nb + k) * d, GARBAGE_ADDR, d, d, d, d)]
        return [isa.preload(GARBAGE_ADDR, out, d, d, d, d),
                isa.compute_accumulated((i * nb + k) * d, GARBAGE_ADDR, d, d, d, d)]

    def program(loads: list, outer_k: bool) -> list:
        loops = [(k, j, i) for k in range(nb) for j in range(nb) for i in range(nb)]
        if not outer_k:
            loops.sort(key=lambda kji: (kji[1], kji[0], kji[2]))
        head = [isa.config_ex(isa.WEIGHT_STATIONARY), isa.config_ld(64, block_mvin_stride=d, id=0),
                isa.config_ld(64, block_mvin_stride=d, id=1), isa.config_ld(0, id=2),
                isa.config_st(64, isa.RELU, scale)]
        stores = [isa.mvout(Dram("C", i * d * 64 + j * d), acc_addr((i * nb + j) * d), d, d)
                  for j in range(nb) for i in range(nb)]
        return head + loads + [x for kji in loops for x in ex(*kji)] + stores + [isa.fence()]

    all_d = [x for j in range(nb) for x in ld_d(j)]
    orders = [
        ("loop_ws: bias rows, A and B interleaved, computes k-j-i",
         all_d + [x for ab in zip(ld_a, ld_b) for x in ab], True),
        ("loop_ws: bias rows, A, B, computes k-j-i", all_d + ld_a + ld_b, True),
        ("baseline (gemmini-auto): A, B, bias rows, computes j-k-i", ld_a + ld_b + all_d, False),
        ("Tileplan (cosa): bias rows of j=0, A, B, other bias rows, computes j-k-i",
         ld_d(0) + ld_a + ld_b + [x for j in range(1, nb) for x in ld_d(j)], False),
    ]
    intro = one_call_orders.__doc__.split("\n\n")[0].replace("\n    ", " ")
    lines = ["## One call, four orders (matmul_64)", "", intro, "", "| order | emulated cycles | bit-exact |",
             "|---|---:|---|"]
    for name, loads, outer_k in orders:
        c = np.zeros((64, 64), np.int8)
        res = emu.run(program(loads, outer_k), {"A": a, "B": b, "bias": bias, "C": c}, readonly=("A", "B", "bias"))
        lines.append(f"| {name} | {res.cycles:,} | {'yes' if np.array_equal(res.buffers['C'], want) else 'NO'} |")
    requests, nbytes = 64 + 64 + 256 + 256, 3 * 64 * 64 + 16 * 64  # A, B, bias (one 64 B row per mvin), C
    bound = t.call_cycles + requests * t.dma_request_cycles + nbytes / t.dram_bytes_per_cycle
    return lines + [f"| DMA-only bound | {bound:,.0f} | |", ""]


def fmt_tile(t: dict) -> str:
    return " ".join(f"{d.upper()}{t[d]}" for d in "npqkrsc" if t[d] > 1) or "1"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hardware", nargs="+", default=["gemmini-8x8", "gemmini-16x16", "gemmini-32x32"])
    ap.add_argument("--all", action="store_true", help="also every ResNet-50 and BERT-base layer")
    ap.add_argument("--cosa-time", type=float, default=30.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "codegen.md"))
    args = ap.parse_args()

    t_all = time.time()
    sections, summary = [], []
    for hw_name in args.hardware:
        lines, within, n, shrunk = hardware_section(hw_name, args)
        sections += lines
        summary.append(f"| {hw_name} | {within} / {n} | {shrunk} |")
    total = time.time() - t_all
    lines = ["# Code generation: plans -> TVM -> C -> Gemmini emulator", "",
             f"Command: `python bench/codegen.py{' --all' if args.all else ''} --hardware {' '.join(args.hardware)}` "
             f"({platform.machine()}, Python {platform.python_version()}, {total:.0f} s wall, CoSA time limit "
             f"{args.cosa_time:g} s, shared machine).", "",
             "**One Gemmini timing.** The emulator's reported cycles are the calibrated cost model's per-call timing "
             "(`tileplan.cost.gemmini`, `_cycle_terms` / `_totals`) applied to the instructions the program actually "
             "issued: per call (config_ex) the DMA requests and bytes of its loads and stores, the rows its computes "
             "streamed (at least the compute floor each), its compute instructions and weight preloads, and the "
             "requests on strided rows of buffers larger than the L2 (and, counted again, than the LLC); the "
             "parameters are the descriptor's "
             "`CostParams` (`tileplan.codegen.pipeline.timing_for`). So emulated / model(code) measures whether the "
             "model counts what the code does; the instruction-level timeline (three units, hazards, DMA/array "
             "contention) is kept beside it (`RunResult.timeline_cycles`, column `timeline`).", "",
             "**Emittable plans.** The planner ranks only tilings the code generator emits as they are "
             "(`tileplan.emittable`: a call fits half the scratchpad and accumulator in DIM-wide rows), so "
             "`tiles shrunk` notes should not appear for cosa's plans.", "",
             "| hardware | emulated within 10% of model(code) | plans shrunk by the code generator |",
             "|---|---:|---:|", *summary, "", *sections]
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


def hardware_section(hw_name: str, args: argparse.Namespace) -> tuple[list[str], int, int, int]:
    hw = get_hardware(hw_name)
    epi = Epilogue(scale=0.0025, relu=True)
    groups = {"Benchmark set": benchmark_set()}
    if args.all:
        for wl in ("resnet50_unique.yaml", "bert_base_matmuls.yaml"):
            net, layers = load_workload(WORKLOADS / wl)
            groups[net] = layers
    rows, failures = {}, []
    t_all = time.time()
    for gname, layers in groups.items():
        for layer in layers:
            for m in MAPPERS:
                key = (gname, layer.name, m)
                try:
                    r = run_one(layer, hw, m, epi, args.cosa_time, seed=len(rows))
                except Exception as exc:  # noqa: BLE001 -- recorded in the table, not hidden
                    failures.append(f"{gname} / {layer.name} / {m}: {type(exc).__name__}: {str(exc)[:200]}")
                    print("FAIL", failures[-1], flush=True)
                    continue
                r["count"] = getattr(layer, "count", 1)
                rows[key] = r
                print(f"{gname[:14]:14s} {layer.name:26s} {m:12s} emu {r['emu']:>10,d} model(code) "
                      f"{r['model_code']:>12,.0f} ratio {r['emu'] / r['model_code']:.3f} exact {r['exact']} "
                      f"build {r['t_build']:.2f}s", flush=True)
    total = time.time() - t_all

    t = timing_for(hw)
    lines = [f"# {hw_name}", "",
             f"{total:.0f} s wall. Emulator timing derived from the calibrated cost model "
             "(`tileplan.codegen.pipeline.timing_for`): " + ", ".join(f"{k}={v:g}" for k, v in t.__dict__.items())
             + f" (matmuls: overlap_loss={timing_for(hw, matmul=True).overlap_loss:g}, the model's loop_ws value).",
             "",
             "Both plans run through the same code path: one library-style call per DRAM iteration (Gemmini's "
             "`tiled_conv`/`tiled_matmul` execution, see `tileplan.cost.gemmini`), clipped edge tiles, input and "
             "weight rows of up to 64 B per mvin, rows of a compute = up to DIM output columns of one output row, "
             "two calls in flight. gemmini-auto = the tiles Gemmini's hand-written `tiled_*_auto` picks, each "
             "call's loads in the baseline order (every bias row after the input and weight tiles), every tile "
             "loaded by every call as `tiled_conv` does (a matmul keeps a whole-matrix operand, as `tiled_matmul` "
             "does); cosa = Tileplan's plan (`get_mapper('cosa')`) in Tileplan's stream (the first output-channel "
             "block's bias rows ahead of the tiles, the other blocks' loading while it computes; an input or weight "
             "tile the previous call loaded is kept, not loaded again). Each is set against the cost model of the "
             "same execution (executor 'library' or 'tileplan'). In the emulator the baseline "
             "order is at least as fast as the orders Gemmini's own loop_ws FSM can issue (last section), so it "
             "does not handicap the library.", "",
             "Epilogue: bias, scale 0.0025, ReLU, int8; random int8 inputs. `model(plan)` = `evaluate_mapping` of "
             "the plan; `model(code)` = the same cost model for the tiles the code runs (equal unless the plan was "
             "shrunk to fit half the local memories). `emu/model` = emulated / model(code) cycles. build = "
             "`build_module` wall time (TE -> schedule -> tensorize -> TVMScript + C).", ""]
    allr = list(rows.values())
    n_exact = sum(r["exact"] for r in allr)
    n_rv = sum(r["riscv"] > 0 for r in allr)
    lines += [f"**{n_exact} / {len(allr)} runs bit-exact** against NumPy; {len(failures)} failed to plan, build "
              f"or run; {n_rv} / {len(allr)} kernels compiled for RISC-V (`-O2 -Wall -Werror`, stand-in gemmini.h) "
              "into objects with Gemmini's RoCC instructions.", ""]
    for gname, layers in groups.items():
        lines += [f"## {gname} ({hw_name})", "",
                  "| layer | mapper | call tile | calls | emulated cycles | model(code) | emu/model | timeline | "
                  "model(plan) | speed-up vs gemmini-auto (emulated) | build s | exact | RISC-V: RoCC instrs in object |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
        wins = 0
        pairs = 0
        for layer in layers:
            base = rows.get((gname, layer.name, "gemmini-auto"))
            for m in MAPPERS:
                r = rows.get((gname, layer.name, m))
                if r is None:
                    continue
                sp = f"{base['emu'] / r['emu']:.2f}x" if base else "-"
                lines.append(f"| {r['layer']} | {m} | {fmt_tile(r['tile'])}{'' if r['db'] else ' (single buf.)'} | "
                             f"{r['calls']:,} | {r['emu']:,} | {r['model_code']:,.0f} | "
                             f"{r['emu'] / r['model_code']:.3f} | {r['timeline']:,} | {r['model_plan']:,.0f} | "
                             f"{sp if m != 'gemmini-auto' else ''} | {r['t_build']:.2f} | "
                             f"{'yes' if r['exact'] else 'NO'} | {r['riscv']} |")
            c = rows.get((gname, layer.name, "cosa"))
            if base and c:
                pairs += 1
                wins += c["emu"] < base["emu"]
        ratios = np.array([r["emu"] / r["model_code"] for (g, _, _), r in rows.items() if g == gname])
        builds = [r["t_build"] for (g, _, _), r in rows.items() if g == gname]
        lines.append("")
        if len(ratios):
            lines.append(f"- emulated / model(code) cycles: median {np.median(ratios):.3f}, range "
                         f"{ratios.min():.3f}-{ratios.max():.3f}; {int(np.sum(np.abs(ratios - 1) <= 0.1))} / "
                         f"{len(ratios)} within 10%")
            off = [f"{n} / {m} {r['emu'] / r['model_code']:.3f}" for (g, n, m), r in rows.items()
                   if g == gname and abs(r["emu"] / r["model_code"] - 1) > 0.1]
            if off:
                lines.append(f"- outside 10%: {', '.join(off)}")
        if pairs:
            a = sum(rows[(gname, n, "gemmini-auto")]["emu"] * rows[(gname, n, "gemmini-auto")]["count"]
                    for (g, n, m) in rows if g == gname and m == "cosa" and (g, n, "gemmini-auto") in rows)
            b = sum(rows[(gname, n, "cosa")]["emu"] * rows[(gname, n, "cosa")]["count"]
                    for (g, n, m) in rows if g == gname and m == "cosa" and (g, n, "gemmini-auto") in rows)
            lines.append(f"- Tileplan (cosa) faster than gemmini-auto on {wins} / {pairs} layers; total "
                         f"(weighted by layer count) {a / b:.2f}x")
            same = [n for (g, n, m) in rows if g == gname and m == "cosa" and (g, n, "gemmini-auto") in rows
                    and rows[(g, n, m)]["tile"] == rows[(g, n, "gemmini-auto")]["tile"]]
            if same:
                lines.append(f"- same call tile in both plans (they differ only in the order of each call's "
                             f"loads): {', '.join(same)}")
        if builds:
            lines.append(f"- build_module: max {max(builds):.2f} s, median {np.median(builds):.2f} s")
        lines.append("")
    lines += one_call_orders(hw)
    notes = [(k, r["notes"]) for k, r in rows.items() if r["notes"]]
    if notes:
        lines += ["## Realisation notes (what the code changed in the plan)", ""]
        lines += [f"- {g} / {n} / {m}: {'; '.join(ns)}" for (g, n, m), ns in notes] + [""]
    if failures:
        lines += ["## Failures", ""] + [f"- {f}" for f in failures] + [""]
    ratios_all = [r["emu"] / r["model_code"] for r in rows.values()]
    within = sum(abs(x - 1) <= 0.1 for x in ratios_all)
    shrunk = sum(any("shrunk" in n for n in r["notes"]) for (_, _, m), r in rows.items() if m == "cosa")
    return lines, within, len(ratios_all), shrunk


if __name__ == "__main__":
    main()
