"""From a solved CosaModel to contract Mappings: factors per level, padded bounds, double buffering,
and candidate loop orders (one per choice of stationary tensor at each level) for re-ranking."""

from __future__ import annotations

import itertools
from collections import defaultdict

from tileplan.dims import DIMS, TENSORS
from tileplan.mappers.build import build_mapping, stationary_order
from tileplan.mappers.cosa.model import CosaModel
from tileplan.mappers.cosa.solve import value
from tileplan.mapping import Mapping


def decode_factors(model: CosaModel) -> tuple[list[dict[str, int]], list[dict[str, int]], dict[str, int], dict[str, list[str]]]:
    """Temporal and spatial factor per level and dimension, padded bounds, double-buffered tensors."""
    spec, m = model.spec, model.m
    n = spec.n_levels
    temporal: list[defaultdict[str, int]] = [defaultdict(lambda: 1) for _ in range(n)]
    spatial: list[defaultdict[str, int]] = [defaultdict(lambda: 1) for _ in range(n)]
    for key in model.x_keys:
        copies = round(value(m.X[key]))
        if copies:
            d, _a, f, i, s = key
            (spatial if s == 0 else temporal)[i][d] *= f**copies
    padded: dict[str, int] = {}
    for d in DIMS:
        for a, alt in enumerate(spec.alternatives[d]):
            if value(m.u[d, a]) > 0.5 and alt.bound != spec.problem.dims[d]:
                padded[d] = alt.bound
    db: dict[str, list[str]] = defaultdict(list)
    for (i, v) in m.db:
        if value(m.db[i, v]) > 0.5:
            db[spec.arch.levels[i].name].append(v)
    return [dict(t) for t in temporal], [dict(s) for s in spatial], padded, dict(db)


def candidate_mappings(
    model: CosaModel,
    temporal: list[dict[str, int]],
    spatial: list[dict[str, int]],
    padded: dict[str, int],
    double_buffered: list[dict[str, list[str]]],
) -> list[Mapping]:
    """Every combination of per-level stationary orders (levels with one loop have one order) and of
    the given double-buffering choices, deduplicated, in a deterministic order."""
    arch = model.spec.arch
    per_level = []
    for t in temporal:
        orders = {tuple(stationary_order(t, v)) for v in TENSORS} if sum(f > 1 for f in t.values()) > 1 else {
            tuple(stationary_order(t, None))
        }
        per_level.append(sorted(orders))
    sp = [sorted((d, f) for d, f in s.items() if f > 1) for s in spatial]
    # Level 0's unrolled loops in the orders that put one tensor's irrelevant dimensions first (innermost along the
    # mesh): timeloop-model hands an operand over the link from a neighbouring MAC that held it the iteration
    # before, and neighbours share an operand only along its irrelevant dimensions when those run fastest (weights
    # streamed past a K2 Q2 fan-out: read once per K step with Q innermost, once per MAC iteration with K innermost).
    first = [sp[0]] + ([stationary_order(dict(sp[0]), v) for v in TENSORS] if len(sp[0]) > 1 and model.timeloop else [])
    spatial_orders = sorted({tuple(o) for o in first})
    out, seen = [], set()
    for db in double_buffered:
        for combo, s0 in itertools.product(itertools.product(*per_level), spatial_orders):
            mp = build_mapping(arch, [list(c) for c in combo], [list(s0)] + sp[1:], padded, db)
            sig = mp.model_dump_json()
            if sig not in seen:
                seen.add(sig)
                out.append(mp)
    return out

