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


def random_layer(rng: random.Random, kind: str) -> dict:
    """A random small matmul or convolution (valid by construction)."""
    if kind == "matmul":
        return {"op": "matmul", "M": rng.randint(1, 96), "K": rng.randint(1, 96), "N": rng.randint(1, 96)}
    while True:
        groups = rng.choice([1, 1, 1, 2, "dw"])
        c = rng.randint(1, 40)
        k = rng.randint(1, 40)
        if groups == "dw":
            groups = c = k = rng.randint(2, 24)
        elif groups == 2:
            c, k = 2 * rng.randint(1, 20), 2 * rng.randint(1, 20)
        kh, kw = rng.randint(1, 3), rng.randint(1, 3)
        layer = {"op": "conv2d", "batch": rng.choice([1, 1, 2]), "in_channels": c, "out_channels": k,
                 "in_h": rng.randint(3, 14), "in_w": rng.randint(3, 14), "kernel": [kh, kw],
                 "stride": [rng.randint(1, 2), rng.randint(1, 2)], "padding": [rng.randint(0, 1), rng.randint(0, 1)],
                 "dilation": [rng.choice([1, 1, 2]), 1], "groups": groups}
        span = (layer["dilation"][0] * (kh - 1) + 1, kw)
        if span[0] <= layer["in_h"] + 2 * layer["padding"][0] and span[1] <= layer["in_w"] + 2 * layer["padding"][1]:
            return layer


def random_case(seed: int) -> tuple:
    """(layer, mapping, epilogue) number `seed` of the random code generation set: a matmul or convolution (grouped,
    depthwise, strided, dilated, padded), a random mapping of either dataflow, a random requantize epilogue."""
    from tileplan.codegen.pipeline import Epilogue
    from tileplan.workload import parse_layer

    rng = random.Random(seed)
    kind = "matmul" if rng.random() < 0.55 else "conv"
    layer = parse_layer(random_layer(rng, kind))
    mapping = random_mapping(layer.dims(), rng, dataflow=rng.choice(["weight_stationary", "output_stationary"]))
    epi = Epilogue(scale=rng.choice([1.0, 0.5, 0.05, 0.0031, 1 / 3, 2.5e-4]), relu=rng.random() < 0.5,
                   bias=rng.random() < 0.7)
    return layer, mapping, epi


def random_packed_case(rng: random.Random) -> tuple:
    """A random grouped or depthwise convolution and a random mapping of it with its groups packed onto the array
    (Mapping.group_pack: a random mapping of the packed problem, C / K padding included)."""
    from tileplan.problem import Problem
    from tileplan.workload import parse_layer

    dw = rng.random() < 0.6
    c, k = (1, 1) if dw else (rng.randint(1, 4), rng.randint(1, 4))
    pack = rng.choice([b for b in (2, 3, 4, 8, 16) if b * c <= 16 and b * k <= 16])
    groups = pack * rng.randint(1, 3)
    layer = parse_layer(dict(op="conv2d", in_channels=groups * c, out_channels=groups * k, in_h=rng.randint(3, 12),
                             in_w=rng.randint(3, 12), kernel=rng.choice([1, 3]), stride=rng.randint(1, 2),
                             padding=rng.randint(0, 1), groups=groups, batch=rng.choice([1, 1, 2])))
    packed = Problem.from_layer(layer).packed(pack)
    return layer, random_mapping(packed.dims, rng).model_copy(update={"group_pack": pack})
