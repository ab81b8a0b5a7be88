"""How much of the library's miss is loop_conv_ws's two call slots: the calls in their order, replayed.

    PYTHONPATH=service python bench/loopconv_slots.py [--out bench/results/loopconv_slots.md]

Gemmini's conv FSM (LoopConv.scala, ucb-bar/gemmini) holds two calls (`concurrent_loops = 2`, a head and a tail
slot). A call is configured into the free slot only, and a slot is freed only when its call has issued all its
commands (its loads, computes and stores: `all_completed`, head first). So call i's loads cannot start before call
i - 2 has issued its last compute and store, and call i's computes wait for call i's loads and call i - 1's
computes. With calls of one size that is the model's max(DMA, compute) per call; when a large call is followed by a
small one (the library's reduction loop ending with a channel tile of 1-60 channels: 256 in tiles of 125 is
125 + 125 + 6, in tiles of 240 is 240 + 16), the next large call's loads wait for the large call's computes, and
its DMA is no longer hidden.

This bench replays each 16x16 FireSim run's calls in the order the harness issued them (`execution.order`,
reductions innermost; the library's CRSKPQN), each call's DMA and compute time from the model with the shipped
parameters and the slots off (`_cycle_terms`, `call_slots` 0: the model's own pairing is what this replays), through that two-slot pipeline, and reports the time it adds over the same calls
overlapped one by one (sum of max(DMA, compute) and the first call's loads): the exposure. The model itself is
unchanged: nothing is refitted, so the figures say where the mechanism points, not what a fit with it reaches.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import time
from pathlib import Path

import numpy as np

from tileplan.cost.calibrate import artifact_dataset, predict
from tileplan.cost.firesim import FireSimRun
from tileplan.cost.gemmini import (
    FEATURE_COLUMNS,
    ITERATOR_BITS,
    REQUEST_BYTES,
    Execution,
    _axis_table,
    _chunk_table,
    _cycle_terms,
    conv_calls,
    execution_from_mapping,
    nominal_dram_bandwidth,
)
from tileplan.cost.params import DEFAULT_PARAMS

# the shipped parameters, each call overlapping its own DMA (the model's slots, on by default, are what is replayed here)
ONE_BY_ONE = DEFAULT_PARAMS.model_copy(update={"call_slots": 0.0})

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_ARTIFACT = ROOT / "bench" / "data" / "dosa_artifact"
MAX_CALLS = 20000  # runs with more calls are skipped (a few U-Net mappings; their calls are all alike)


def _axis_key(out: int, tile_o: int, kdim: int, tile_k: int, stride: int, pad: int, in_dim: int, dil: int,
              po: int, kr: int) -> tuple[float, ...]:
    """The key `_axis` gives the tile at output `po`, kernel tap `kr` (same arithmetic)."""
    o, kk = min(tile_o, out - po), min(tile_k, kdim - kr)
    start, n = po * stride + kr * dil - pad, o * stride + (kk - 1) * dil
    unpadded = n - max(0, -start) - max(0, start + n - in_dim)
    if unpadded < 0:
        unpadded += 1 << ITERATOR_BITS
    return tuple(float(v) for v in (o, kk, unpadded, kr + tile_k >= kdim, kr == 0, po == 0))


def _chunk_key(total: int, step: int, tile: int, elem_bytes: float, s0: int) -> tuple[float, ...]:
    off = float((s0 * elem_bytes) % REQUEST_BYTES) if elem_bytes else 0.0
    return tuple(float(v) for v in (min(tile, total - s0), s0 + tile >= total, s0 == 0, off))


def _index(table: np.ndarray, key: tuple[float, ...]) -> int | None:
    for i, row in enumerate(table):
        if tuple(row[1:1 + len(key)]) == key:
            return i
    return None


def call_sequence(e: Execution) -> list[int]:
    """The row of `conv_calls(e)` each call is, in the order the calls run (the DRAM loops of `e.order`, outermost
    first; conv_calls' rows are the product of its loop tables: output rows, output columns, K, C, batch)."""
    h = _axis_table(e.out_h, e.t_h, e.r, e.t_r, e.stride[0], e.pad[0], e.in_h, e.dilation[0])
    w = _axis_table(e.out_w, e.t_w, e.s, e.t_s, e.stride[1], e.pad[1], e.in_w, e.dilation[1])
    k = _chunk_table(e.k, e.k_step, e.t_k, e.in_bytes)
    c = _chunk_table(e.c, e.c_step, e.t_c, e.in_bytes)
    n = _chunk_table(e.batch, e.t_n, e.t_n)
    steps = {"P": (e.out_h, e.t_h), "R": (e.r, e.t_r), "Q": (e.out_w, e.t_w), "S": (e.s, e.t_s),
             "K": (e.k, e.k_step), "C": (e.c, e.c_step), "N": (e.batch, e.t_n)}
    order = [d for d in e.order if d in steps]
    order = [d for d in "NPQKRSC" if d not in order] + order
    seq = []
    for vals in itertools.product(*[range(0, steps[d][0], steps[d][1]) for d in order]):
        v = dict(zip(order, vals))
        ih = _index(h, _axis_key(e.out_h, e.t_h, e.r, e.t_r, e.stride[0], e.pad[0], e.in_h, e.dilation[0], v["P"],
                                 v["R"]))
        if ih is None:  # a full tile of an unpadded axis: `_axis` keeps one class for all of them
            ih = _index(h, _axis_key(e.out_h, e.t_h, e.r, e.t_r, e.stride[0], e.pad[0], e.in_h, e.dilation[0],
                                     e.t_h, v["R"]))
        iw = _index(w, _axis_key(e.out_w, e.t_w, e.s, e.t_s, e.stride[1], e.pad[1], e.in_w, e.dilation[1], v["Q"],
                                 v["S"]))
        if iw is None:
            iw = _index(w, _axis_key(e.out_w, e.t_w, e.s, e.t_s, e.stride[1], e.pad[1], e.in_w, e.dilation[1],
                                     e.t_w, v["S"]))
        ik = _index(k, _chunk_key(e.k, e.k_step, e.t_k, e.in_bytes, v["K"]))
        ic = _index(c, _chunk_key(e.c, e.c_step, e.t_c, e.in_bytes, v["C"]))
        i_n = _index(n, _chunk_key(e.batch, e.t_n, e.t_n, 0.0, v["N"]))
        found = [ih, iw, ik, ic, i_n]
        if any(i is None for i in found):
            raise ValueError(f"no call class for {v} of {e}")
        row = 0
        for i, table in zip(found, (h, w, k, c, n)):
            row = row * len(table) + int(i or 0)
        seq.append(row)
    return seq


def two_slot_cycles(dma: np.ndarray, ex: np.ndarray, seq: list[int]) -> float:
    """The calls through loop_conv_ws's two slots: call j's loads start when the DMA is free and call j - 2 has
    issued everything (its slot is free); its computes when its loads are in and call j - 1's computes are done."""
    loads_end = ex_end = 0.0
    slot_free = [0.0, 0.0]
    for j, i in enumerate(seq):
        loads_end = max(loads_end, slot_free[j % 2]) + dma[i]
        ex_end = max(loads_end, ex_end) + ex[i]
        slot_free[j % 2] = ex_end
    return ex_end


def exposure(run: FireSimRun, library_tile: bool) -> tuple[float, int] | None:
    """(cycles the two slots add over the calls overlapped one by one, calls) of a conv run; None if not replayed.
    `library_tile`: the library's runs with the channel tiles it recorded (125, not the 128 the literal grid reads)."""
    if run.op != "conv":
        return None
    arch = run.hardware.resolve(run.mapping.dataflow)
    e = execution_from_mapping(run.problem, arch, run.mapping)
    if library_tile and run.library_tile:
        t = run.library_tile
        e = dataclasses.replace(e, t_c=min(t["kchs"], e.c), c_step=min(t["kchs"], e.c), t_k=min(t["ochs"], e.k),
                                k_step=min(t["ochs"], e.k))
    calls = 1
    for total, step in ((e.out_h, e.t_h), (e.r, e.t_r), (e.out_w, e.t_w), (e.s, e.t_s), (e.k, e.k_step),
                        (e.c, e.c_step), (e.batch, e.t_n)):
        calls *= -(-total // step)
    if calls > MAX_CALLS:
        return None
    x = conv_calls(e, nominal_dram_bandwidth(arch))
    col = {name: x[:, j] for j, name in enumerate(FEATURE_COLUMNS)}
    _, dma, ex, _ = _cycle_terms(col, ONE_BY_ONE.as_dict())
    dma, ex = dma / col["count"], ex / col["count"]
    seq = call_sequence(e)
    one_by_one = float(np.maximum(dma[seq], ex[seq]).sum() + min(dma[seq[0]], ex[seq[0]]))
    return two_slot_cycles(dma, ex, seq) - one_by_one, len(seq)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--artifact", type=Path, default=DEFAULT_ARTIFACT)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "loopconv_slots.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    art = artifact_dataset(sorted(args.artifact.glob("*.csv")))
    pred = predict(art.x, ONE_BY_ONE)
    y = art.y
    readings = {"the model's tiles": False, "the library's own channel tiles": True}
    replayed = {name: [exposure(r, lib) for r in art.runs] for name, lib in readings.items()}
    ok = [all(replayed[name][i] is not None for name in readings) for i in range(len(art.runs))]
    extra = {name: np.array([got[0] if got else 0.0 for got in replayed[name]]) for name in readings}
    calls = [got[1] if got else 0 for got in replayed["the library's own channel tiles"]]
    lines = [
        "# loop_conv_ws's two call slots, replayed on the 16x16 FireSim runs",
        "",
        f"Generated by `PYTHONPATH=service python bench/loopconv_slots.py` (load average "
        f"{os.getloadavg()[0]:.1f} on 2 cores; {{elapsed}} s). In-sample, the shipped parameters with call_slots 0, nothing refitted: "
        "the model's prediction, and the same plus the exposure the two slots add to the run's calls in their order "
        "(module docstring). Convolutions only (tiled_matmul's loop_ws is another FSM).",
        "",
        "| runs | n | runs exposed (> 1% of measured) | model MAPE | + exposure, the model's tiles | + exposure, the "
        "library's own channel tiles |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for kind in ("mapping", "library"):
        idx = [i for i, r in enumerate(art.runs) if r.kind == kind and ok[i]]
        meas, base = y[idx], pred[idx]
        cells = []
        for name in readings:
            add = extra[name][idx]
            cells.append(f"{100 * np.mean(np.abs((base + add) / meas - 1)):.2f}%")
        exposed = int(np.sum(extra["the library's own channel tiles"][idx] > 0.01 * y[idx]))
        lines.append(f"| {kind} conv | {len(idx)} | {exposed} | {100 * np.mean(np.abs(base / meas - 1)):.2f}% | "
                     + " | ".join(cells) + " |")
    lines += [
        "",
        "Library runs the two slots expose most (the library's own channel tiles; ratio = predicted / measured):",
        "",
        "| network | layer | configuration | tile (K x C) | calls | measured | model ratio | exposure / measured | "
        "ratio with it |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    rows = []
    for i, r in enumerate(art.runs):
        got = float(extra["the library's own channel tiles"][i])
        if r.kind != "library" or not ok[i] or got < 0.05 * y[i]:
            continue
        t = r.library_tile or {}
        rows.append((r.network, r.layer_key, r.config, f"{t.get('ochs')} x {t.get('kchs')}", calls[i], y[i],
                     pred[i] / y[i], got / y[i], (pred[i] + got) / y[i]))
    for net, layer, cfg, tile, n, meas, ratio, share, with_it in sorted(rows, key=lambda z: (z[0], z[1], z[2])):
        lines.append(f"| {net} | {layer} | {cfg} | {tile} | {n} | {meas:,.0f} | {ratio:.2f}x | {share:.2f} | "
                     f"{with_it:.2f}x |")
    text = "\n".join(lines).replace("{elapsed}", f"{time.perf_counter() - t0:.0f}") + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
