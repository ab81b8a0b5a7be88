"""Timeloop loop constraints (a file's `temporal` / `spatial` architecture constraints: exact and largest factors,
permutations, spatial splits): the check timeloop-model makes of every map against them, and how a mapper's answer
is brought to keep them.

timeloop-model (`Constraints::SatisfiedBy` at the commit CoSA pins) derives, per tiling level of the map, the factor
of every dimension, the loop order (loops with a factor above 1, innermost first, then the unit dimensions in the
problem shape's order; a spatial level's X loops before its Y loops) and the spatial split (its X loops), and refuses
the map ("mapping violates architecture constraints") when a constrained factor differs, a factor exceeds its
largest, a split differs, or the permutation does not match. Its permutation walk skips a map loop when the factor of
the map's loop at the *constraint's* position is 1 (it indexes the map's list with the constraint's index), which is
reproduced here as it is. A spatial constraint on a level where the map unrolls nothing has no derived entry to
compare with, which timeloop-model asserts against: such a map is refused too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tileplan.hardware import Architecture
from tileplan.hardware.model import LoopConstraint, mesh_split
from tileplan.mapping import LevelMapping, Mapping

# the order of dimensions in the problem shape Tileplan writes for Timeloop (interop.timeloop_map.to_timeloop_problem)
SHAPE_DIMS = ("C", "K", "R", "S", "N", "P", "Q")
VIOLATES = "violates the architecture constraints"


def shape_dims(bounds: dict[str, int]) -> tuple[str, ...]:
    return SHAPE_DIMS + (("G",) if bounds.get("G", 1) > 1 else ())


def x_loops(arch: Architecture, i: int, spatial: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The loops of level i's fan-out that go along the mesh's X, as the exporter writes them: all of them on a
    one-axis fan-out; on a 2-D one the fullest X part that fits (`mesh_split`), with as many loops as the file's
    spatial split asks where one such fits."""
    fx, fy = arch.fanout_xy(i)
    if fy <= 1:
        return list(spatial)
    con = arch.hardware.constraints.loops.get(arch.levels[i].name, {}).get("spatial")
    if con is not None and con.split is not None:
        best: tuple[int, list[tuple[str, int]]] | None = None
        for mask in range(1 << len(spatial)):
            xs = [x for j, x in enumerate(spatial) if mask >> j & 1]
            px = math.prod(f for _, f in xs)
            py = math.prod(f for _, f in spatial) // px
            if sum(f > 1 for _, f in xs) == con.split and px <= fx and py <= fy and (best is None or px > best[0]):
                best = (px, xs)
        if best is not None:
            return best[1]
    split = mesh_split(list(spatial), fx, fy)
    return split[0] if split is not None else list(spatial)


_split_xs = x_loops


def _derived(loops: Sequence[tuple[str, int]], dims: tuple[str, ...]) -> tuple[dict[str, int], list[str]]:
    factors = dict.fromkeys(dims, 1)
    for d, f in loops:
        factors[d] = factors.get(d, 1) * f
    order = [d for d, f in loops if f > 1]
    return factors, order + [d for d in dims if factors[d] == 1]


def _permutation_ok(want: Sequence[str], factors: dict[str, int], other: list[str]) -> bool:
    idx = oidx = 0
    while idx < len(want) and oidx < len(other):
        if want[idx] == other[oidx]:
            idx, oidx = idx + 1, oidx + 1
            continue
        if idx < len(other) and factors.get(other[idx], 1) == 1:  # (timeloop-model's index, reproduced)
            oidx += 1
            continue
        return False
    return True


def level_problems(con: LoopConstraint, loops: Sequence[tuple[str, int]], bounds: dict[str, int], dims: tuple[str, ...],
                   split: int | None = None) -> list[str]:
    """What breaks one constraint, for a level's loops (innermost first; spatial: X loops first, `split` of them
    with a factor above 1 along X)."""
    out: list[str] = []
    factors, other = _derived(loops, dims)
    for d, n in con.factors.items():
        want = bounds.get(d, 1) if n == 0 or n > bounds.get(d, 1) else n
        if factors.get(d, 1) != want:
            out.append(f"factor {d}={factors.get(d, 1)}, the constraint says {want}")
    for d, n in con.max_factors.items():
        if factors.get(d, 1) > n:
            out.append(f"factor {d}={factors.get(d, 1)} above the constraint's {n}")
    if con.permutation is not None and not _permutation_ok(con.permutation, factors, other):
        out.append(f"loop order {''.join(other)} does not follow the permutation {''.join(con.permutation)}")
    if con.split is not None and split is not None and split != con.split:
        out.append(f"{split} loops along X, the constraint's split is {con.split}")
    return out


def violations(arch: Architecture, mapping: Mapping, bounds: dict[str, int],
               along_x: dict[str, list[tuple[str, int]]] | None = None) -> list[str]:
    """Why timeloop-model refuses `mapping` under the hardware's loop constraints (empty: it does not). `bounds`:
    the problem's bounds Timeloop is given (0 and over-large factors mean them); `along_x`: each level's X loops as the
    map file states them (default: as the exporter splits them)."""
    cons = arch.hardware.constraints.loops
    if not cons:
        return []
    dims = shape_dims(bounds)
    out: list[str] = []
    for i, (lv, m) in enumerate(zip(arch.levels, mapping.levels)):
        per = cons.get(lv.name)
        if not per:
            continue
        if "temporal" in per:
            out += [f"{lv.name} (temporal): {p}; the map {VIOLATES}"
                    for p in level_problems(per["temporal"], m.temporal, bounds, dims)]
        if "spatial" in per:
            spatial: list[tuple[str, int]] = [(d, f) for d, f in m.spatial if f > 1]
            if not spatial:
                out.append(f"{lv.name} (spatial): the map unrolls nothing there, and timeloop-model has nothing to "
                           f"check the constraint against (it asserts); the map {VIOLATES}")
                continue
            if along_x is not None and lv.name in along_x:
                xs = [(d, f) for d, f in along_x[lv.name] if f > 1]
            else:
                xs = [(d, f) for d, f in _split_xs(arch, i, spatial) if f > 1]
            rest = list(spatial)
            for x in xs:
                rest.remove(x)
            out += [f"{lv.name} (spatial): {p}; the map {VIOLATES}"
                    for p in level_problems(per["spatial"], xs + rest, bounds, dims, split=len(xs))]
    return out


# ------------------------------------------------------------------------------------------------------------
# Bringing a mapping to keep them


def _divisor_at_most(n: int, cap: int) -> int:
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


def conform(arch: Architecture, mapping: Mapping, bounds: dict[str, int]) -> Mapping | None:
    """`mapping` moved to keep the loop constraints, or None when this cannot do it: constrained factors are set and
    every other factor kept where it still divides what is left (at most its largest), what remains going to the
    outermost temporal loops; a constrained level's loops are put in its permutation's order, and loops a
    permutation (or a spatial split on a one-axis fan-out) cannot take there move to the outermost level's temporal
    loops (which only shrinks the tiles in between). Capacities are not looked at (the caller checks the result)."""
    cons = arch.hardware.constraints.loops
    if not cons:
        return mapping
    out: Mapping | None = mapping
    for _ in range(3):  # factors, then orders (whose moves may need the factors set again)
        assert out is not None
        out = _set_factors(arch, out, bounds)
        if out is None:
            return None
        out = _reorder(arch, out, bounds)
        if out is None:
            return None
        if not violations(arch, out, bounds):
            return out
    return out


def _set_factors(arch: Architecture, mapping: Mapping, bounds: dict[str, int]) -> Mapping | None:
    cons = arch.hardware.constraints.loops
    n = len(mapping.levels)
    slots = [(i, k) for i in range(n) for k in ("temporal", "spatial")]
    fixed: dict[tuple[int, str], dict[str, int]] = {}
    cap: dict[tuple[int, str], dict[str, int]] = {}
    for i, lv in enumerate(arch.levels):
        for kind, con in cons.get(lv.name, {}).items():
            fixed[(i, kind)] = {d: (bounds.get(d, 1) if v == 0 or v > bounds.get(d, 1) else v)
                                for d, v in con.factors.items()}
            cap[(i, kind)] = {str(d): v for d, v in con.max_factors.items()}
    new: dict[tuple[int, str], dict[str, int]] = {s: {} for s in slots}
    for d, bound in bounds.items():
        pinned = math.prod(fixed[s][d] for s in fixed if d in fixed[s])
        if bound % pinned:
            return None
        left = bound // pinned
        free = []
        for i, k in slots:
            if d in fixed.get((i, k), {}):
                new[(i, k)][d] = fixed[(i, k)][d]
                continue
            m = mapping.levels[i]
            f = m.temporal_factor(d) if k == "temporal" else m.spatial_factor(d)
            keep = _divisor_at_most(math.gcd(f, left), cap.get((i, k), {}).get(d, f))
            new[(i, k)][d] = keep
            left //= keep
            free.append((i, k))
        for s in reversed([s for s in free if s[1] == "temporal"]):  # what is left: outermost first
            if left == 1:
                break
            room = cap.get(s, {}).get(d)
            take = left if room is None else _divisor_at_most(left, max(1, room // new[s][d]))
            new[s][d] *= take
            left //= take
        if left > 1:
            return None
    levels = [LevelMapping(name=m.name, temporal=_ordered(m.temporal, new[(i, "temporal")]),  # type: ignore[arg-type]
                           spatial=_ordered(m.spatial, new[(i, "spatial")]))  # type: ignore[arg-type]
              for i, m in enumerate(mapping.levels)]
    return mapping.model_copy(update={"levels": levels})


def _ordered(old: list[tuple[str, int]], factors: dict[str, int]) -> list[tuple[str, int]]:
    """The new factors in the old loops' order (dimensions the old list lacked go outermost)."""
    seen: list[str] = []
    for d in [d for d, _ in old] + list(factors):
        if d not in seen:
            seen.append(d)
    return [(d, factors[d]) for d in seen if factors.get(d, 1) > 1]


def _kept_prefix(perm: Sequence[str], loops: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """The loops a level can keep under a permutation, in its order: timeloop-model's walk accepts a level whose
    loops (factor > 1, innermost first) begin with the permutation's first dimensions, in order, for as many as
    either has; the rest of the permutation may be missing from the level only if nothing else is there."""
    have = {d: f for d, f in loops if f > 1}
    kept: list[tuple[str, int]] = []
    for d in perm:
        if d not in have:
            return kept
        kept.append((d, have[d]))
    return kept + [(d, f) for d, f in loops if f > 1 and d not in perm]


def _pull_into_fanout(arch: Architecture, levels: list[LevelMapping], i: int, con: LoopConstraint,
                      bounds: dict[str, int]) -> list[LevelMapping] | None:
    """`levels` with the smallest prime factor of some temporal loop (outermost level first) moved into level i's
    fan-out, of a dimension the constraint lets it unroll (alone, under its permutation: PCQ takes a P loop, not a C
    or Q one), or None when none fits the fan-out."""
    fanout = arch.levels[i].fanout
    dims = shape_dims(bounds)
    for j in range(len(levels) - 1, -1, -1):
        for d, f in levels[j].temporal:
            want = con.factors.get(d)
            if f <= 1 or want == 1 or d not in arch.levels[i].spatial_dims:
                continue
            p = next(q for q in range(2, f + 1) if f % q == 0)
            if p > fanout or p > con.max_factors.get(d, p):
                continue
            if level_problems(LoopConstraint(permutation=con.permutation), [(d, p)], bounds, dims):
                continue
            new = list(levels)
            new[j] = new[j].model_copy(update={"temporal": [(dd, ff // p if dd == d else ff) for dd, ff in
                                                            new[j].temporal if (ff // p if dd == d else ff) > 1]})
            new[i] = new[i].model_copy(update={"spatial": [(d, p)]})
            return new
    return None


def _reorder(arch: Architecture, mapping: Mapping, bounds: dict[str, int]) -> Mapping | None:
    """Each constrained level's loops in an order its permutation accepts, those it cannot take (and, on a one-axis
    fan-out, spatial loops beyond the split) moved to the temporal loops of the outermost level whose constraints
    take them (outermost there); None when no level does, or when a spatial level is left without loops."""
    cons = arch.hardware.constraints.loops
    dims = shape_dims(bounds)
    levels = list(mapping.levels)
    top = len(levels) - 1
    moved: list[tuple[str, int]] = []
    for i, lv in enumerate(arch.levels):
        for kind, con in cons.get(lv.name, {}).items():
            m = levels[i]
            loops: list[tuple[str, int]] = [(d, f) for d, f in (m.temporal if kind == "temporal" else m.spatial) if f > 1]
            keep = loops
            if con.permutation is not None:
                keep = _kept_prefix(con.permutation, loops)
            if kind == "spatial" and con.split is not None and arch.fanout_xy(i)[1] <= 1 and len(keep) > con.split:
                keep = sorted(keep, key=lambda x: -x[1])[:con.split]
                keep = [x for x in loops if x in keep]
            if kind == "spatial" and not keep:
                # a spatial constraint binds only a level that unrolls something: one prime factor of a dimension it
                # allows comes in from the temporal loops (outermost first)
                pulled = _pull_into_fanout(arch, levels, i, con, bounds)
                if pulled is None:
                    return None
                levels = pulled
                m = levels[i]
                keep = [(d, f) for d, f in m.spatial if f > 1]
            if len(keep) != len(loops):
                moved += [x for x in loops if x not in keep]
            if kind == "spatial":
                cand = keep
                xs = [(d, f) for d, f in _split_xs(arch, i, cand) if f > 1]
                ordered = xs + [x for x in cand if x not in xs]
                if level_problems(LoopConstraint(permutation=con.permutation), ordered, bounds, dims):
                    return None
            levels[i] = m.model_copy(update={kind: keep})
    if moved:
        # (the outermost level's temporal loops only shrink the tiles in between; where its own permutation refuses
        # them, as DRAM's NK does every loop when N = K = 1, a level further in takes them, its tiles grown: the
        # caller checks capacities)
        for j in range(top, -1, -1):
            t: dict[str, int] = {str(d): f for d, f in levels[j].temporal}
            for d, f in moved:
                t[d] = t.get(d, 1) * f
            loops = [(d, t[d]) for d in [d for d, _ in levels[j].temporal] +
                     [d for d in t if d not in dict(levels[j].temporal)]]
            sink = cons.get(arch.levels[j].name, {}).get("temporal")
            if sink is None or not level_problems(sink, loops, bounds, dims):
                levels[j] = levels[j].model_copy(update={"temporal": loops})
                break
        else:
            return None
    return mapping.model_copy(update={"levels": levels})
