"""Random Gemmini mappings (contract form) for code generation tests."""

from __future__ import annotations

import random

from tileplan.mapping import LevelMapping, Mapping
from tileplan.problem import prime_factors

LEVELS = ("Registers", "Accumulator", "Scratchpad", "DRAM")


def random_mapping(dims: dict[str, int], rng: random.Random, dim: int = 16, dataflow: str = "weight_stationary",
                   double_buffer: bool | None = None) -> Mapping:
    """Spread every dimension's prime factors over the levels; C spatial at the accumulator and K spatial at the
    scratchpad take up to DIM (the array), with padding when the bound is not a multiple."""
    temporal = {lv: {} for lv in LEVELS}
    spatial = {"Accumulator": {}, "Scratchpad": {}}
    padded = {}
    for d, n in dims.items():
        rest = n
        if d in ("C", "K"):
            sp = min(dim, n)
            if n % sp:
                # pad to a multiple of the spatial factor
                padded[d] = -(-n // sp) * sp
                rest = padded[d]
            spatial["Accumulator" if d == "C" else "Scratchpad"][d] = sp
            rest //= sp
        for p in prime_factors(rest):
            lv = rng.choice(LEVELS[1:])
            temporal[lv][d] = temporal[lv].get(d, 1) * p
    levels = []
    for lv in LEVELS:
        items = list(temporal[lv].items())
        rng.shuffle(items)
        levels.append(LevelMapping(name=lv, temporal=items, spatial=list(spatial.get(lv, {}).items())))
    db = rng.random() < 0.6 if double_buffer is None else double_buffer
    return Mapping(levels=levels, padded_dims=padded, double_buffered={"Scratchpad": ["I", "W"]} if db else {},
                   dataflow=dataflow)
