"""Differential fuzz of Gemmini's two timings: the emulator's cycles vs the cost model's, on random layers.

Random but plausible layers (convolutions: 1..1024 channels, tiny and not multiples of 16, 1..160 pixels, 1x1 to
7x7 and 1xk / kx1 kernels, strides 1 and 2, dilation, grouped and depthwise, a video net's frames as the batch, a
quarter of them with tensors beyond the L2 or the LLC; matmuls: M = 1, N = 1, K not a multiple of 16, classifier-
and MLP-sized weights; activation x activation products, one batch element) go through what `tileplan compile` does
with each offloaded op: a KernelSpec with the whole-model ABI (NCHW convolutions with prelaid weights, the input
zero point as padding value, int8 or int32-accumulator outputs; matmuls row-major; an activation B read in place),
planned with Tileplan's planner (`make_plan`, cosa, the compile's defaults but the time limit), its kernel generated,
and the library's tiling kept where it is modelled faster (`frontend.compile._plan_and_generate_serially` and
`_keep_library_tiling`, the compile's own functions); then the kernel runs on the emulator as a program step does
(its input, weights and workspace buffers registered as tensors) and its emulated cycles are set against the
modelled cycles the kernel carries (`model_cycles`, what a compile's summary reports as `cycles_model`). Per run, the call features each
side counted (DMA requests and bytes, rows and computes, preloads, waits on DRAM) say where the two part.

    python bench/emu_vs_model.py                      # 120 layers x gemmini-8x8/16x16/32x32, bench/results/emu_vs_model.md
    python bench/emu_vs_model.py --n 40 --out -       # a quick look
    python bench/emu_vs_model.py --only 17            # one case, every feature of both sides printed
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import platform
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "service"))

HARDWARE = ("gemmini-8x8", "gemmini-16x16", "gemmini-32x32")
MAX_MACS = 60e6  # keeps one emulated run to a second or so


def _conv(rng: random.Random) -> dict[str, Any]:
    while True:
        shape = rng.choice(["square", "square", "square", "1xk", "kx1"])
        k = rng.choice([1, 1, 3, 3, 5, 7])
        kernel = [k, k] if shape == "square" else ([1, rng.choice([3, 5, 7])] if shape == "1xk"
                                                   else [rng.choice([3, 5, 7]), 1])
        groups_kind = rng.choice(["dense"] * 6 + ["depthwise"] * 2 + ["grouped"])
        ch = lambda: rng.choice([rng.randint(1, 8), rng.randint(9, 96), 16 * rng.randint(1, 16),  # noqa: E731
                                 rng.randint(97, 1024), 16 * rng.randint(17, 64)])
        c, kout, groups = ch(), ch(), 1
        if groups_kind == "depthwise":
            c = kout = groups = rng.choice([rng.randint(2, 64), 16 * rng.randint(1, 60), rng.randint(65, 960)])
        elif groups_kind == "grouped":
            groups = rng.choice([2, 4, 8, 32])
            c, kout = groups * max(1, c // groups), groups * max(1, kout // groups)
        hw_ = rng.choice([1, 2, 3, 4, 7, 7, 8, 13, 14, 14, 19, 28, 28, 35, 56, 56, 112])
        batch = rng.choice([1] * 8 + [2, 4, 8])  # a video net's frames (frontend.conv3d: frames as the batch)
        if rng.random() < 0.25:  # tensors beyond the L2 (512 KiB) or the LLC (4 MiB) at few MACs per byte
            hw_, batch = rng.choice([56, 64, 112, 128, 160]), rng.choice([1, 1, 2, 4, 8])
            if groups_kind == "dense":
                kout = rng.choice([1, 2, 3, 8, 16, rng.randint(1, 64)])
                c = rng.choice([c, rng.randint(1, 8), rng.randint(16, 512)])
        stride = rng.choice([1, 1, 1, 2])
        dil = rng.choice([1] * 6 + [2, 3]) if max(kernel) > 1 else 1
        pad = [rng.choice([0, (kernel[0] - 1) * dil // 2]), rng.choice([0, (kernel[1] - 1) * dil // 2])]
        if rng.random() < 0.7:  # "same" padding, as most networks have
            pad = [(kernel[0] - 1) * dil // 2, (kernel[1] - 1) * dil // 2]
        layer = {"op": "conv2d", "batch": batch, "in_channels": c, "out_channels": kout, "in_h": hw_,
                 "in_w": rng.choice([hw_, hw_, hw_, max(1, hw_ // 2), 2 * hw_]), "kernel": kernel, "stride": stride,
                 "padding": pad, "dilation": dil, "groups": groups}
        span = [(kernel[i] - 1) * dil + 1 for i in (0, 1)]
        if span[0] > layer["in_h"] + 2 * pad[0] or span[1] > layer["in_w"] + 2 * pad[1]:
            continue
        out_h = (layer["in_h"] + 2 * pad[0] - span[0]) // stride + 1
        out_w = (layer["in_w"] + 2 * pad[1] - span[1]) // stride + 1
        macs = batch * out_h * out_w * kout * (c // groups) * kernel[0] * kernel[1]
        if macs <= MAX_MACS:
            return layer


def _matmul(rng: random.Random) -> dict[str, Any]:
    while True:
        dim = lambda: rng.choice([1, rng.randint(2, 15), rng.randint(17, 200), 16 * rng.randint(1, 64),  # noqa: E731
                                  rng.randint(201, 3072)])
        m = rng.choice([1, 1, dim(), dim(), rng.choice([49, 64, 128, 196, 197, 225, 256])])
        k, n = dim(), dim()
        if rng.random() < 0.15:
            n = 1
        if rng.random() < 0.2:  # operands beyond the L2 / the LLC: a classifier's or an MLP's weights
            k, n = rng.choice([(1280, 1000), (4096, 1000), (768, 3072), (3072, 768), (2048, 2048), (512, 4100)])
        if m * k * n <= MAX_MACS:
            return {"op": "matmul", "M": m, "K": k, "N": n}


def random_case(seed: int, i: int) -> dict[str, Any]:
    """Case `i` of the seeded set: a layer and how a compiled model would run it (epilogue and ABI)."""
    rng = random.Random(f"{seed}:{i}")
    kind = rng.choice(["conv"] * 6 + ["matmul"] * 3 + ["act"])
    layer = _conv(rng) if kind == "conv" else _matmul(rng)
    if kind == "act":  # attention's QK^T / AV: both operands activations (one batch element), no bias
        layer["M"] = rng.choice([layer["M"], 49, 64, 128, 197])
        layer["K"] = min(layer["K"], 512)
        layer["N"] = min(layer["N"], 512) if layer["N"] > 1 else rng.choice([49, 64, 197])
    # QDQ exports with zero points store int32 accumulators for the host to requantize (acc_output); an
    # activation-symmetric export lets mvout requantize (int8 out)
    acc = rng.random() < 0.6
    pad_value = rng.choice([0, -128, -3, 17]) if kind == "conv" else 0
    return {"i": i, "kind": kind, "layer": layer, "acc_output": acc, "pad_value": pad_value,
            "bias": kind != "act" and rng.random() < 0.9, "relu": not acc and rng.random() < 0.5,
            "scale": 1.0 if acc else rng.choice([0.0025, 0.004, 0.05])}


def _spec(case: dict[str, Any]) -> Any:
    from tileplan.codegen.targets.gemmini import Epilogue, KernelABI
    from tileplan.frontend.partition import KernelSpec
    from tileplan.workload import parse_layer

    layer = parse_layer({**case["layer"], "name": f"case{case['i']}"}).model_copy(update={"bias": case["bias"]})
    if case["kind"] == "conv":
        pad = case["pad_value"] if any(layer.padding) else 0
        abi = KernelABI("NCHW", pad, prelaid=True, acc_output=case["acc_output"])
    else:
        abi = KernelABI("NHWC", 0, prelaid=True, acc_output=case["acc_output"], b_in_place=case["kind"] == "act")
    d = layer.dims()
    epi = Epilogue(scale=case["scale"], relu=case["relu"], bias=case["bias"])
    return KernelSpec(layer, epi, abi, np.zeros((d["G"], d["R"], d["S"], d["C"], d["K"]), np.int8),
                      np.zeros(d["G"] * d["K"], np.int32), None, case["scale"])


_EMUS: dict[Any, Any] = {}


def _emulate(code: Any, spec: Any, seed: int, program: bool) -> Any:
    """Run a compiled op's kernel (frontend.compile.KernelCode) with the whole-model ABI's buffers (prelaid W_p and
    bias_p).  `program=False`: each buffer a DRAM region and a tensor of its own (as tests and bench/codegen.py run
    one kernel); `program=True`: as a program step runs (frontend/templates/tp_emulate.c.j2): the input, the output
    and the workspace lie in one arena (placed as program.plan_arena places tensors live at once: largest first,
    64-byte aligned, here beside another live tensor of random size), the weights and bias in one weights blob
    after other layers' weights, and only the input, the weights and the kernel's workspace buffers are registered
    as tensors (an activation x activation product registers none; its B lies in the arena)."""
    from tileplan.codegen.emulator import Emulator
    from tileplan.codegen.pipeline import gemmini_config
    from tileplan.codegen.schedule import TargetSpec

    cfg = gemmini_config(TargetSpec(*code.target))
    key = (cfg, code.timing)
    if key not in _EMUS:
        _EMUS[key] = Emulator(cfg.dim, cfg.spad_rows, cfg.acc_rows, max_mvin_blocks=cfg.max_block_len,
                              timing=code.timing)
    layer, abi, pd = spec.layer, spec.abi, code.padded
    rng = np.random.default_rng(seed)
    d = layer.dims()
    if spec.layer.op == "conv2d":
        i_shape = (layer.batch, layer.in_channels, layer.in_h, layer.in_w)
        o_shape = (layer.batch, layer.out_channels, layer.out_h, layer.out_w)
    else:
        i_shape, o_shape = (d["P"], d["C"]), (d["P"], d["K"])
    w = (rng.integers(-128, 128, (d["C"], d["K"]), dtype=np.int8) if abi.b_in_place else
         rng.integers(-128, 128, (pd["G"], pd["R"], pd["S"], pd["C"], pd["K"]), dtype=np.int8))
    arrays = {"I": rng.integers(-128, 128, i_shape, dtype=np.int8), "W_p": w,
              "bias_p": np.zeros((pd["G"], pd["K"]), np.int32),
              "out": np.zeros(o_shape, np.int32 if abi.acc_output else np.int8),
              "workspace": np.zeros(max(64, code.workspace_bytes), np.uint8)}
    order = ("I", "W_p", "bias_p", "out", "workspace")
    emu = _EMUS[key]
    if not program:
        return emu.run(code.c_source, arrays, entry=code.entry, readonly=("I", "W_p", "bias_p"))
    align = lambda n: -(-n // 64) * 64  # noqa: E731  (program.ALIGN)
    in_arena = ["I", "out", "workspace"] + (["W_p"] if abi.b_in_place else [])
    sizes = {n: arrays[n].nbytes for n in in_arena}
    sizes["other"] = int(rng.choice([0, 64 * int(rng.integers(1, 40_000))]))  # another live activation
    offsets, top = {}, 0
    for n in sorted(sizes, key=lambda n: -align(max(1, sizes[n]))):
        offsets[n], top = top, top + align(max(1, sizes[n]))
    arena = np.zeros(max(64, top), np.uint8)
    blob_names = [n for n in ("W_p", "bias_p") if n not in in_arena]
    woff = {"other": 64 * int(rng.integers(0, 20_000))}  # other layers' weights first
    wtop = woff["other"]
    for n in blob_names:
        woff[n], wtop = wtop, wtop + align(arrays[n].nbytes)
    blob = np.zeros(max(64, wtop), np.uint8)
    for n, a in arrays.items():
        buf, off = (arena, offsets[n]) if n in offsets else (blob, woff[n])
        buf[off:off + a.nbytes] = a.reshape(-1).view(np.uint8)
    where = {n: ("arena", offsets[n]) if n in offsets else ("weights", woff[n]) for n in order}
    tensors = [] if abi.b_in_place else [(*where[n], arrays[n].nbytes) for n in ("I", "W_p")]
    if not abi.b_in_place:  # and the DRAM buffers the kernel carves from its workspace
        tensors += [("arena", offsets["workspace"] + off, size) for off, size in code.workspace_pieces]
    return emu.run(code.c_source, {"arena": arena, "weights": blob}, entry=code.entry, readonly=("weights",),
                   args=[where[n] for n in order], tensors=tensors)


def _model_features(spec: Any, hw: Any, mapping: Any, stream: str) -> tuple[float, dict[str, float]]:
    """The modelled cycles and call features (summed over the calls) of the code a kernel runs."""
    from tileplan.codegen.pipeline import target_spec
    from tileplan.codegen.schedule import realise_layer
    from tileplan.cost.gemmini import FEATURE_COLUMNS
    from tileplan.cost.params import CostParams

    rl = realise_layer(spec.layer, mapping, hw.resolve(mapping.dataflow), spec.epilogue, target_spec(hw),
                       stream=stream, abi=spec.abi)
    x = rl.model_calls
    col = {k: x[:, i] for i, k in enumerate(FEATURE_COLUMNS)}
    p = CostParams.for_descriptor(hw)
    # the emulator's ex_rows already count a short compute as the floor's rows
    short = np.maximum(col["part_rows"], p.compute_floor_dims * col["dim"]) - col["part_rows"]
    col["ex_rows"] = col["ex_rows"] + col["part_ops"] * short
    feats = {k: float((col[k] * col["count"]).sum()) for k in
             ("ld_req", "ld_bytes", "st_req", "st_bytes", "ex_rows", "ex_ops", "preloads", "dram_req", "block_req",
              "far_req", "far_bytes")}
    feats["calls"] = float(col["count"].sum())
    return rl.model_cycles, feats


def run_one(args: tuple[dict[str, Any], str, float]) -> dict[str, Any]:
    """Plan, generate and emulate one case on one hardware, as a compile does."""
    case, hw_name, time_limit = args
    from tileplan.frontend import compile as C
    from tileplan.hardware.catalog import get_hardware
    from tileplan.plan import ScheduleOptions

    hw = get_hardware(hw_name)
    spec = _spec(case)
    row: dict[str, Any] = {"i": case["i"], "hw": hw_name, "case": case, "desc": describe(case)}
    t0 = time.perf_counter()
    a = C._Accel(SimpleNamespace(name=spec.layer.name), spec)
    opts = ScheduleOptions(time_limit_s=time_limit)
    try:
        C._plan_and_generate_serially([a], [spec.layer.model_dump_json(exclude={"name", "count"})], hw, opts,
                                      "tileplan", C.default_planner, lambda i: None, lambda n: None)
        if a.art is not None:
            C._keep_library_tiling([a], hw, "tileplan")
    except Exception as exc:  # noqa: BLE001 -- recorded in the table
        row["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
        return row
    if a.art is None:
        row["error"] = a.reason[:200]
        return row
    how = a.library_tiling
    mapping = a.plan.mapping if not how else a.plan.baseline.mapping
    stream = "baseline" if "library's load order" in how else "tileplan"
    row.update(kernel="plan" if not how else ("library" if stream == "baseline" else "library tiling, Tileplan stream"),
               mapping=mapping.describe(), group_pack=mapping.group_pack or 1, notes=list(a.art.notes))
    try:
        alone = _emulate(a.art, spec, case["i"], program=False)
        res = _emulate(a.art, spec, case["i"], program=True)
    except Exception as exc:  # noqa: BLE001
        row["error"] = f"emulator: {type(exc).__name__}: {str(exc)[:160]}"
        return row
    mc, mf = _model_features(spec, hw, mapping, stream)
    if not math.isclose(mc, a.art.model_cycles, rel_tol=1e-9):
        row["error"] = f"model of the code re-derived as {mc:.0f}, the kernel carries {a.art.model_cycles:.0f}"
        return row
    ef = dict(res.features, calls=float(res.calls))
    row.update(emu=float(res.cycles), model=float(a.art.model_cycles), ratio=res.cycles / a.art.model_cycles,
               ratio_alone=alone.cycles / a.art.model_cycles, emu_f=ef, model_f=mf,
               emu_alone_f=dict(alone.features, calls=float(alone.calls)), seconds=time.perf_counter() - t0)
    return row


def describe(case: dict[str, Any]) -> str:
    lay = case["layer"]
    if lay["op"] == "matmul":
        s = f"{'act ' if case['kind'] == 'act' else ''}matmul M{lay['M']} K{lay['K']} N{lay['N']}"
    else:
        k = lay["kernel"]
        batch = f"N{lay['batch']} " if lay["batch"] > 1 else ""
        s = (f"conv {batch}C{lay['in_channels']} K{lay['out_channels']} {lay['in_h']}x{lay['in_w']} k{k[0]}x{k[1]} "
             f"s{lay['stride']} p{lay['padding'][0]},{lay['padding'][1]}")
        if lay["dilation"] > 1:
            s += f" d{lay['dilation']}"
        if lay["groups"] > 1:
            s += f" g{lay['groups']}"
        if case["pad_value"] and any(lay["padding"]):
            s += f" padval{case['pad_value']}"
    return s + (" acc32" if case["acc_output"] else " int8") + ("" if case["bias"] else " nobias")


def tags(row: dict[str, Any]) -> list[str]:
    """The features of a case a miss may cluster on."""
    case, lay = row["case"], row["case"]["layer"]
    t = [case["kind"], row["hw"], "acc32 out" if case["acc_output"] else "int8 out"]
    if lay["op"] == "matmul":
        t += ["M=1"] if lay["M"] == 1 else []
        t += ["N=1"] if lay["N"] == 1 else []
        t += ["K % 16 != 0"] if lay["K"] % 16 else []
        t += ["N % 16 != 0"] if lay["N"] % 16 else []
    else:
        g = lay["groups"]
        cg, kg = lay["in_channels"] // g, lay["out_channels"] // g
        t += ["depthwise"] if g > 1 and cg == 1 and kg == 1 else (["grouped"] if g > 1 else [])
        t += ["C < 16"] if cg < 16 else []
        t += ["K % 16 != 0"] if kg % 16 else []
        k = lay["kernel"]
        t += ["1x1"] if k == [1, 1] else (["1xk / kx1"] if 1 in k else [f"{k[0]}x{k[1]}"])
        t += ["stride 2"] if lay["stride"] == 2 else []
        t += ["dilated"] if lay["dilation"] > 1 else []
        t += ["padding read"] if case["pad_value"] and any(lay["padding"]) else []
        t += ["map <= 4"] if lay["in_h"] <= 4 else []
        t += ["map >= 56"] if lay["in_h"] >= 56 else []
        t += ["batch > 1"] if lay["batch"] > 1 else []
        in_bytes = lay["batch"] * lay["in_channels"] * lay["in_h"] * lay["in_w"]
        t += ["input > LLC"] if in_bytes > 4 << 20 else (["input > L2"] if in_bytes > 512 << 10 else [])
    if row.get("group_pack", 1) > 1:
        t.append("groups packed")
    if row.get("kernel") != "plan":
        t.append("library tiling kept")
    if row.get("emu_f", {}).get("calls", 0) == 1:
        t.append("one call")
    return t


FEATS = ("calls", "ld_req", "ld_bytes", "st_req", "st_bytes", "ex_rows", "ex_ops", "preloads", "dram_req",
         "block_req", "far_req", "far_bytes")


def feature_diffs(row: dict[str, Any], tol: float = 0.02) -> list[str]:
    """The call features the emulator and the model counted differently (emulated / modelled)."""
    out = []
    for k in FEATS:
        e, m = row["emu_f"].get(k, 0.0), row["model_f"].get(k, 0.0)
        if abs(e - m) > tol * max(abs(e), abs(m)) and abs(e - m) >= 1:
            out.append(f"{k} {e:,.0f}/{m:,.0f}")
    return out


def fmt_ratio_dist(rs: list[float]) -> str:
    a = np.array(rs)
    return (f"{len(a)} | {np.mean(np.abs(a - 1) <= 0.10):.1%} | {np.mean(np.abs(a - 1) <= 0.15):.1%} | "
            f"{np.percentile(a, 5):.3f} | {np.median(a):.3f} | {np.percentile(a, 95):.3f} | {a.min():.3f} | "
            f"{a.max():.3f}")


def report(rows: list[dict[str, Any]], args: argparse.Namespace, wall: float) -> str:
    ok = [r for r in rows if "ratio" in r]
    errs = [r for r in rows if "error" in r]
    lines = ["# Emulator vs cost model: differential fuzz", "",
             f"Command: `python bench/emu_vs_model.py --n {args.n} --seed {args.seed} --time-limit {args.time_limit:g}"
             f" --hardware {' '.join(args.hardware)}` ({platform.machine()}, Python {platform.python_version()}, "
             f"{wall:.0f} s wall with {args.jobs} processes on a shared 2-core machine).", "",
             (__doc__ or "").split("\n\n")[1].replace("\n", " "), "",
             "ratio = emulated / modelled cycles of the kernel the compile would run, emulated as a program step "
             "(its operands in the arena and the weights blob) and alone (each operand a buffer of its own, as "
             "tests and bench/codegen.py run one kernel); the clusters and the worst runs below are of the program "
             "step's. The planner's time limit is "
             f"{args.time_limit:g} s per layer (a compile's default is 10 s: a plan may differ, the comparison of "
             "the code it gives does not depend on that).", "",
             "## Distribution per array size", "",
             "| hardware | runs | within 10% | within 15% | p5 | median | p95 | min | max |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for which, key in (("program step", "ratio"), ("alone", "ratio_alone")):
        for hw in args.hardware:
            rs = [r[key] for r in ok if r["hw"] == hw]
            if rs:
                lines.append(f"| {hw}, {which} | {fmt_ratio_dist(rs)} |")
        if ok:
            lines.append(f"| all, {which} | {fmt_ratio_dist([r[key] for r in ok])} |")
    lines += ["", f"{len(errs)} of {len(rows)} runs produced no kernel (listed at the end).", ""]
    # clusters of misses
    miss = [r for r in ok if abs(r["ratio"] - 1) > 0.10]
    lines += ["## Misses beyond 10%, by feature of the case", "",
              "Each feature: misses among the runs with it (share), and the runs' median ratio. A run has several "
              "features.", "", "| feature | misses / runs | share | median ratio of its misses |", "|---|---:|---:|---:|"]
    total_by: Counter[str] = Counter(t for r in ok for t in tags(r))
    miss_by: defaultdict[str, list[float]] = defaultdict(list)
    for r in miss:
        for t in tags(r):
            miss_by[t].append(r["ratio"])
    for t, rs in sorted(miss_by.items(), key=lambda kv: -len(kv[1]) / total_by[kv[0]]):
        lines.append(f"| {t} | {len(rs)} / {total_by[t]} | {len(rs) / total_by[t]:.0%} | {np.median(rs):.3f} |")
    lines += ["", "## Misses beyond 10%, by the call feature the two sides count differently", "",
              "| feature (emulated / modelled) differs by > 2% | misses | median ratio |", "|---|---:|---:|"]
    fd: defaultdict[str, list[float]] = defaultdict(list)
    for r in miss:
        ks = [d.split()[0] for d in feature_diffs(r)] or ["(none: the formula, not the counts)"]
        for k in ks:
            fd[k].append(r["ratio"])
    for k, rs in sorted(fd.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"| {k} | {len(rs)} | {np.median(rs):.3f} |")
    worst = sorted(ok, key=lambda r: -abs(math.log(r["ratio"])))[:args.worst]
    lines += ["", f"## The {len(worst)} worst runs", "",
              "| case | hardware | layer | kernel | mapping | emulated | modelled | ratio | features that differ "
              "(emulated / modelled) |", "|---:|---|---|---|---|---:|---:|---:|---|"]
    for r in worst:
        lines.append(f"| {r['i']} | {r['hw']} | {r['desc']} | {r['kernel']} | {r['mapping']} | {r['emu']:,.0f} | "
                     f"{r['model']:,.0f} | {r['ratio']:.3f} | {'; '.join(feature_diffs(r))} |")
    if errs:
        lines += ["", "## Runs without a kernel", ""]
        reasons = Counter(r["error"][:120] for r in errs)
        lines += [f"- {n} x {why}" for why, n in reasons.most_common()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=120, help="random layers (each on every --hardware)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hardware", nargs="+", default=list(HARDWARE))
    ap.add_argument("--time-limit", type=float, default=2.0, help="the planner's time limit per layer (s)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--worst", type=int, default=25)
    ap.add_argument("--only", type=int, nargs="*", help="these cases only; print every feature of both sides")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "emu_vs_model.md"))
    args = ap.parse_args()
    os.environ.setdefault("TVM_DEVICE_BACKEND_AUTOLOAD", "0")
    ids = args.only if args.only else range(args.n)
    work = [(random_case(args.seed, i), hw, args.time_limit) for i in ids for hw in args.hardware]
    t0 = time.time()
    rows: list[dict[str, Any]] = []
    if args.jobs > 1 and len(work) > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            for r in pool.imap_unordered(run_one, work):
                rows.append(r)
                _progress(r, len(rows), len(work))
    else:
        for w in work:
            rows.append(run_one(w))
            _progress(rows[-1], len(rows), len(work))
    rows.sort(key=lambda r: (r["i"], r["hw"]))
    if args.only:
        for r in rows:
            print(r["i"], r["hw"], r["desc"], r.get("kernel"), r.get("mapping"), r.get("error", ""))
            if "ratio" in r:
                print(f"  emu {r['emu']:,.0f} model {r['model']:,.0f} ratio {r['ratio']:.3f} "
                      f"(alone {r['ratio_alone']:.3f})")
                for k in FEATS:
                    print(f"  {k:10s} emu {r['emu_f'].get(k, 0):>14,.1f} model {r['model_f'].get(k, 0):>14,.1f}"
                          f" alone {r['emu_alone_f'].get(k, 0):>14,.1f}")
        return
    text = report(rows, args, time.time() - t0)
    if args.out == "-":
        print(text)
    else:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


def _progress(r: dict[str, Any], done: int, total: int) -> None:
    tail = f"{r['ratio']:.3f} alone {r['ratio_alone']:.3f}" if "ratio" in r else f"ERROR {r['error'][:80]}"
    print(f"[{done}/{total}] {r['i']:4d} {r['hw']:14s} {r['desc'][:60]:60s} {tail}", flush=True)


if __name__ == "__main__":
    main()
