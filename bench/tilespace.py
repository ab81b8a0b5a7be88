"""How far is cosa from the cost model's own optimum on library-executed hardware?

    PYTHONPATH=service python bench/tilespace.py [--hw gemmini-16x16] [--workload FILE] [--out FILE]

On Gemmini-like hardware the calibrated model's cycles depend only on each call's tile (per dimension), on double
buffering and on the DRAM loop order that decides which tile Tileplan's code keeps between calls (picked per tile
by `mappers.retile.dram_order`; tileplan.cost.gemmini), so the model's optimum can be found by enumerating call tiles:
every tile size of `mappers.retile.tile_options` per dimension (each tile count's least padding, and whole
array blocks on the array axes), double buffered as the library does, pruned by what one call may hold (the
accumulator keeps the call's outputs, the scratchpad its inputs and weights, both halved for double buffering),
ranked by the library cycle model; the fastest candidates are built as mappings and checked until one is legal.
Latency only (objective 1/0/0), for cosa and for the enumeration alike. Writes bench/results/tilespace.md.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from tileplan.check import check_arch
from tileplan.cost.gemmini import call_features, cycles_from_calls, execution_from_mapping, nominal_dram_bandwidth
from tileplan.cost.model import evaluate_mapping
from tileplan.cost.params import CostParams
from tileplan.dims import DIMS
from tileplan.hardware.catalog import get_hardware
from tileplan.mappers.base import MapperOptions, Objective, get_mapper
from tileplan.mappers.gemmini_auto import gemmini_shape
from tileplan.mappers.retile import mapping_for_tiles, tile_options
from tileplan.problem import Problem
from tileplan.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
LATENCY = Objective(latency=1, energy=0, memory_utilization=0)


def optimum(problem: Problem, hw_name: str) -> tuple[float, dict[str, int], int, float]:
    """(best legal cycles, its tiles, candidates ranked, seconds)."""
    t0 = time.perf_counter()
    hw = get_hardware(hw_name)
    arch = hw.resolve("weight_stationary")
    shape = gemmini_shape(arch)
    assert shape is not None
    params = CostParams.for_descriptor(hw)
    bw = nominal_dram_bandwidth(arch)
    d = problem.dims
    dim = shape.dim
    acc, spad = arch.levels[shape.acc], arch.levels[shape.spad]
    acc_room = acc.capacity * acc.instances / 2 / 4  # int32 partial sums, double buffered (capacity is per instance)
    spad_room = spad.capacity * spad.instances / 2  # bytes of I + W, double buffered
    db = {arch.levels[shape.acc].name: ["O"], arch.levels[shape.spad].name: ["I", "W"]}
    opts = {x: tile_options(d[x], dim if x in ("K", "C") else None) if d[x] > 1 else [1] for x in DIMS}
    sh, sw = problem.stride
    dh, dw = problem.dilation
    ranked: list[tuple[float, tuple[int, ...]]] = []
    n = 0
    for tn, tg, tk, tc, tr, ts in itertools.product(opts["N"], [1], opts["K"], opts["C"], opts["R"], opts["S"]):
        w_bytes = tg * tk * tc * tr * ts
        if w_bytes > spad_room:
            continue
        for tp in opts["P"]:
            if tn * tp * tk > acc_room:
                break
            for tq in opts["Q"]:
                if tn * tp * tq * tk > acc_room:
                    break
                ih, iw = (tp - 1) * sh + (tr - 1) * dh + 1, (tq - 1) * sw + (ts - 1) * dw + 1
                if tn * ih * iw * tc + w_bytes > spad_room:
                    break
                tiles = {"N": tn, "G": 1, "K": tk, "C": tc, "P": tp, "Q": tq, "R": tr, "S": ts}
                mp = mapping_for_tiles(problem, shape, tiles, db)
                c = cycles_from_calls(call_features(execution_from_mapping(problem, arch, mp, "tileplan"), bw), params).cycles
                ranked.append((c, tuple(tiles[x] for x in DIMS)))
                n += 1
    ranked.sort()
    for _, key in ranked:
        tiles = dict(zip(DIMS, key))
        mp = mapping_for_tiles(problem, shape, tiles, db)
        if not check_arch(problem, arch, mp):
            return evaluate_mapping(problem, arch, mp, "tileplan").cycles, tiles, n, time.perf_counter() - t0
    raise RuntimeError(f"no legal tile for {problem.name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hw", default="gemmini-16x16")
    ap.add_argument("--workload", type=Path, default=ROOT / "examples" / "workloads" / "resnet50_unique.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "tilespace.md")
    args = ap.parse_args()
    hw = get_hardware(args.hw)
    net, layers = load_workload(args.workload)
    cosa = get_mapper("cosa")
    lines = [
        f"# cosa vs the cost model's optimum over call tiles ({net} on {args.hw})",
        "",
        f"`PYTHONPATH=service python bench/tilespace.py --hw {args.hw}`; latency-only objective for both. "
        "Enumeration: every tile option per dimension (bench/tilespace.py docstring), double buffered, pruned by "
        "what one call may hold, ranked by the library cycle model, the fastest legal one reported.",
        "",
        "| layer | x | cosa cycles | optimum cycles | cosa / optimum | optimum tile (N,G,K,C,P,Q,R,S) | candidates | enumeration s | cosa s |",
        "|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    tot_c = tot_o = 0.0
    worst = 1.0
    for layer in layers:
        problem = Problem.from_layer(layer)
        t0 = time.perf_counter()
        res = cosa.map(problem, hw, MapperOptions(objective=LATENCY))
        cs = time.perf_counter() - t0
        cc = evaluate_mapping(problem, hw.resolve(res.mapping.dataflow), res.mapping, "tileplan").cycles
        oc, tiles, n, secs = optimum(problem, args.hw)
        best = min(cc, oc)  # cosa may use single buffering or a split the enumeration does not try
        worst = max(worst, cc / best)
        tot_c += cc * layer.count
        tot_o += best * layer.count
        lines.append(
            f"| {layer.name} | {layer.count} | {cc:,.0f} | {oc:,.0f} | {cc / oc:.3f} | "
            f"{','.join(str(tiles[x]) for x in DIMS)} | {n:,} | {secs:.1f} | {cs:.2f} |"
        )
        print(lines[-1], flush=True)
    lines += [
        f"| **total (x count)** |  | {tot_c:,.0f} | {tot_o:,.0f} | **{tot_c / tot_o:.3f}** |  |  |  |  |",
        "",
        f"Worst layer: cosa at {worst:.3f}x the better of the two. (Where cosa is below the enumeration, it used a "
        "choice the enumeration does not try.)",
    ]
    text = "\n".join(lines) + "\n"
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
