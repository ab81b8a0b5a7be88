"""nest.analyse against a plain transcription of its rules (the one it was written as before it was made faster)."""

import math
import random

from tileplan.dims import RELEVANT, TENSORS
from tileplan.hardware.catalog import get_hardware
from tileplan.mappers.random_search import sample_mapping
from tileplan.mappers.space import MappingSpace
from tileplan.nest import analyse
from tileplan.problem import Problem
from tileplan.workload import parse_layer


def _transfers(problem, arch, mapping, tile_elems):  # type: ignore[no-untyped-def]
    levels, n, out = mapping.levels, len(mapping.levels), []
    for t in TENSORS:
        chain = [-1] + [i for i in range(n) if t in arch.levels[i].keeps]
        rel = RELEVANT[t]
        for lower, upper in zip(chain, chain[1:]):
            loops = [(d, f) for j in range(lower + 1, n) for d, f in levels[j].temporal if f > 1]
            if lower == -1:
                refills = math.prod(f for _, f in loops)
            else:
                refills, seen_relevant = 1, False
                for d, f in loops:
                    seen_relevant = seen_relevant or d in rel
                    if seen_relevant:
                        refills *= f
            distinct = math.prod(f for d, f in loops if d in rel)
            tile = 1 if lower == -1 else tile_elems[lower][t]
            between = math.prod(f for j in range(lower + 1, upper + 1) for d, f in levels[j].spatial if d in rel)
            between_all = math.prod(f for j in range(lower + 1, upper + 1) for _, f in levels[j].spatial)
            above = math.prod(f for j in range(upper + 1, n) for _, f in levels[j].spatial)
            moved = tile * refills * between * above
            row = {"tensor": t, "upper": upper, "lower": lower, "lower_copies": tile * refills * between_all * above}
            if t == "O":
                row.update(updates=moved, fills=tile * (refills - distinct) * between * above,
                           final_updates=tile * distinct * between * above)
            else:
                row.update(fills=moved)
            out.append(row)
    return out


def test_analyse_moves_what_the_rules_say_on_random_mappings():
    rng = random.Random(15)
    layers = [
        {"op": "conv2d", "in_channels": 64, "out_channels": 128, "in_h": 28, "in_w": 28, "kernel": 3, "padding": 1},
        {"op": "conv2d", "in_channels": 3, "out_channels": 64, "in_h": 56, "in_w": 56, "kernel": 7, "stride": 2},
        {"op": "matmul", "M": 96, "K": 768, "N": 256},
    ]
    checked = 0
    for name in ("gemmini-16x16", "simba", "eyeriss-os"):
        hw = get_hardware(name)
        for spec in layers:
            problem = Problem.from_layer(parse_layer(spec))
            for df in hw.dataflow_names:
                arch = hw.resolve(df)
                space = MappingSpace(problem, arch)
                for _ in range(15):
                    mapping = sample_mapping(space, rng)
                    nest = analyse(problem, arch, mapping)
                    assert nest.bounds == mapping.bounds()
                    want = _transfers(problem, arch, mapping, nest.tile_elems)
                    got = [{k: getattr(tr, k) for k in row} for tr, row in zip(nest.transfers, want)]
                    assert len(nest.transfers) == len(want) and got == want
                    checked += 1
    assert checked >= 100


def test_spatial_used_is_every_levels_unrolling():
    rng = random.Random(3)
    hw = get_hardware("simba")
    problem = Problem.from_layer(parse_layer({"op": "matmul", "M": 64, "K": 256, "N": 128}))
    arch = hw.resolve()
    space = MappingSpace(problem, arch)
    for _ in range(20):
        mapping = sample_mapping(space, rng)
        assert analyse(problem, arch, mapping).spatial_used == math.prod(lv.spatial_total for lv in mapping.levels)
