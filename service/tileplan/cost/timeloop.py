"""Timeloop-semantics access counts and cycles (timeloop-model at the commit CoSA pins).

Used for hardware imported from Timeloop YAML (and whenever a request names `"model": "timeloop"`), so a
plan is scored the way timeloop-model scores its exported map. What differs from the first-order model:
- everything is counted in words of the level that holds it (an element is one word at every level, so a
  partial sum spilled to an 8-bit DRAM moves as one 8-bit word), and bandwidths are words per cycle per
  instance with separate read and write budgets (a shared budget, Tileplan's `bandwidth`, counts both);
- an input tile is its bounding box `(p-1)*stride + (r-1)*dilation + 1` rows (and columns);
- a tile moved by the same vector as its last move (or its first move) only fetches what it did not already hold;
  a move by another vector (after an inner loop that left it in place, or a jump back when an inner loop wraps)
  fetches it whole; and each loop is extrapolated from its first two iterations, as timeloop-model's nest
  analysis does (`_fills`);
- where the innermost level fans out to the MACs, an operand a neighbouring MAC held at the previous iteration
  comes over the mesh link, not from the buffer (`_mac_accesses`); above a level that keeps inputs, a window a
  neighbouring instance fetched at the previous step comes over the link too (`_fanout_links`);
- outputs: a level holding outputs is "filled" once per tile visit (the first update of each element reads
  nothing), every update after the first of a visit is a read-modify-write, and the backing store reads
  back what a child fetches again as a partial sum;
- per level, cycles = ceil(max(reads / read words per cycle, writes / write words per cycle)), with the
  per-instance counts of the busiest instance; the answer is the largest of those and the compute cycles
  (one cycle per temporal iteration).
- inputs fed over a fan-out: instances whose windows coincide (an unrolled R next to an unrolled P) share one read
  (Timeloop multicasts equal deltas); overlapping windows do not, at every fan-out on the way (a bypassing level
  passes its children's reads up as they are);
- a level Tileplan splits where the source file does not (Gemmini's one accumulator, `source_instances`) is
  counted as the source has it: one instance over the level above's fan-out.
Counts are per instance, and `instances` is how many instances of a level the mapping uses, as in
timeloop-model's stats ("Scalar reads (per-instance)", "Utilized instances (max)"); on the 398 accepted reference
cases every count is timeloop-model's. Energy: Timeloop's built-in table on them (`cost/timeloop_energy.py`), and
the inferred networks' energies a file states on the traffic between levels (`_networks`, `cost/timeloop_network.py`).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tileplan.check import MIN_UTILIZATION, utilization_deficits
from tileplan.cost.timeloop_energy import mac_pj, storage_pj
from tileplan.cost.timeloop_network import network_pj
from tileplan.dims import DIMS, RELEVANT, TENSORS
from tileplan.hardware import Architecture
from tileplan.hardware.model import DTYPE_BITS, mesh_split
from tileplan.loop_constraints import violations as loop_violations
from tileplan.mapping import Mapping
from tileplan.problem import Problem

if TYPE_CHECKING:
    from tileplan.cost.model import Metrics


@dataclass
class TensorCounts:
    reads: float = 0.0
    fills: float = 0.0
    updates: float = 0.0
    instances: int = 1
    capacity: int = 0  # words of this tensor's tile at one instance
    ingress: float = 0.0  # words this instance sends its children over the network below (multicasts once)


@dataclass
class LevelCounts:
    name: str
    tensors: dict[str, TensorCounts] = field(default_factory=dict)
    read_words_per_cycle: float | None = None
    write_words_per_cycle: float | None = None
    shared: bool = False
    cycles: int = 0

    @property
    def reads(self) -> float:
        return sum(tc.reads for tc in self.tensors.values())

    @property
    def writes(self) -> float:
        return sum(tc.fills + tc.updates for tc in self.tensors.values())


@dataclass
class NetTraffic:
    ingress: dict[int, float]  # per multicast factor, the words one instance of the level sends its children
    fanout: int  # the map's spatial fan-out at the level (children one instance feeds)
    instances: int  # instances of the level in use
    links: float = 0.0  # words its children pass each other over mesh links, per instance of the level


@dataclass
class TimeloopCounts:
    levels: list[LevelCounts]
    compute_cycles: int
    macs_used: int
    computes: int  # MAC operations per used MAC
    # per level, per tensor: the network below it as timeloop-model's inferred network sees it (also at a level that
    # bypasses the tensor, which passes its children's traffic on): see cost/timeloop_network.py
    networks: list[dict[str, NetTraffic]] = field(default_factory=list)

    @property
    def cycles(self) -> int:
        return max([self.compute_cycles] + [lv.cycles for lv in self.levels])


def box(problem: Problem, tensor: str, tile: dict[str, int]) -> int:
    """Words of `tensor` in the bounding box of a tile (Timeloop's projection of the tile)."""
    if tensor == "I":
        h = (tile["P"] - 1) * problem.stride[0] + (tile["R"] - 1) * problem.dilation[0] + 1
        w = (tile["Q"] - 1) * problem.stride[1] + (tile["S"] - 1) * problem.dilation[1] + 1
        return tile["N"] * tile["G"] * tile["C"] * h * w
    return math.prod(tile[d] for d in RELEVANT[tensor])


def _extents(problem: Problem, tensor: str, tile: dict[str, int]) -> tuple[int, ...]:
    """The tile's extent along each coordinate of `tensor` (see `_point`)."""
    if tensor == "W":
        return (tile["G"], tile["K"], tile["C"], tile["R"], tile["S"])
    if tensor == "O":
        return (tile["N"], tile["G"], tile["K"], tile["P"], tile["Q"])
    h = (tile["P"] - 1) * problem.stride[0] + (tile["R"] - 1) * problem.dilation[0] + 1
    w = (tile["Q"] - 1) * problem.stride[1] + (tile["S"] - 1) * problem.dilation[1] + 1
    return (tile["N"], tile["G"], tile["C"], h, w)


def _fills(problem: Problem, tensor: str, tile: dict[str, int], loops: list[tuple[str, int, int]]) -> float:
    """Words fetched into one instance over the run for a tile under `loops` (innermost first: dimension, factor,
    and how far one step of the loop moves along its dimension), as timeloop-model's nest analysis counts them.

    It walks each loop's first iteration and one more that stands for all the others (so the tile's previous
    position, when a loop advances, has every inner loop at index 1), and per tile it remembers by how much the tile
    last moved: a move by the same vector (or the first move after a reset) fetches only what the tile did not
    already hold; a move by another vector (a slide after a loop that left the tile in place, a jump back after an
    inner loop wraps) fetches the whole tile and forgets the vector. The calls form a binary counter over the loops
    (a loop's advance comes with every inner loop wrapping from 1 to 0), walked here recursively, with the state
    (the last vector, or none) carried along."""
    size = box(problem, tensor, tile)
    loops = [lp for lp in loops if lp[1] > 1]
    if not loops or size == 0:
        return float(size)
    ext = _extents(problem, tensor, tile)
    moves = _first_moves(problem, tensor, loops)

    fetched = []
    for t in moves:
        kept = size
        for e, x in zip(ext, t):
            if x:
                kept = kept // e * max(0, e - abs(x))
        fetched.append(size - kept)

    def step_in(j: int, last: tuple[int, ...] | None) -> tuple[int, tuple[int, ...] | None]:
        t = moves[j]
        if last is None or last == t:
            return fetched[j], t
        return size, None

    memo: dict[tuple[int, tuple[int, ...] | None], tuple[float, tuple[int, ...] | None]] = {}

    def sweep(j: int, last: tuple[int, ...] | None) -> tuple[float, tuple[int, ...] | None]:
        """Words fetched over a sweep of loops 0..j-1 after the first call, and the state after it."""
        if j == 0:
            return 0.0, last
        key = (j, last)
        if key not in memo:
            a1, s1 = sweep(j - 1, last)
            d, s2 = step_in(j - 1, s1)
            a2, s3 = sweep(j - 1, s2)
            memo[key] = (a1 + (loops[j - 1][1] - 1) * (d + a2), s3)
        return memo[key]

    return size + sweep(len(loops), None)[0]


def _point(problem: Problem, tensor: str, c: dict[str, int]) -> tuple[int, ...]:
    """The coordinates of `tensor` an operation point `c` touches (Timeloop's projection)."""
    if tensor == "W":
        return (c["G"], c["K"], c["C"], c["R"], c["S"])
    if tensor == "O":
        return (c["N"], c["G"], c["K"], c["P"], c["Q"])
    return (c["N"], c["G"], c["C"], c["P"] * problem.stride[0] + c["R"] * problem.dilation[0],
            c["Q"] * problem.stride[1] + c["S"] * problem.dilation[1])


def _first_moves(problem: Problem, tensor: str, loops: list[tuple[str, int, int]]) -> list[tuple[int, ...]]:
    """How far `tensor`'s tile moves at each loop's first step: Timeloop extrapolates every loop from its first two
    iterations, taken with every inner loop at index 1 (the loops are listed innermost first)."""
    zero = dict.fromkeys(DIMS, 0)
    moves: list[tuple[int, ...]] = []
    for j, (d, _, step) in enumerate(loops):
        prev = dict(zero)
        for dd, _, ss in loops[:j]:
            prev[dd] += ss
        new = dict(zero)
        new[d] += step
        a, b = _point(problem, tensor, prev), _point(problem, tensor, new)
        moves.append(tuple(y - x for x, y in zip(a, b)))
    return moves


def _mac_accesses(problem: Problem, arch: Architecture, mapping: Mapping, tensor: str, iters: int,
                  loops: list[tuple[str, int, int]], distinct: float
                  ) -> tuple[float, float, dict[int, float] | None]:
    """Accesses of one innermost-level instance by its MACs for `tensor` over the run: one per distinct operand per
    temporal iteration (`iters * distinct`), less what Timeloop's link transfers serve. Where the innermost level fans
    out to the MACs, timeloop-model hands a MAC an operand over the mesh link when a neighbouring MAC (one step along
    X or Y, no wrap-around) held that very operand at the previous iteration (a partial sum reduced across an
    unrolled C or R stays in the array while the inner reduction loop runs; an input multicast over K stays while
    an inner K loop runs; a sliding window passes along an unrolled Q), and uses the links at an iteration when they
    leave fewer reads than plain multicast. Its nest analysis extrapolates each temporal loop from its first two
    iterations, so "the previous iteration" of a loop's first one is the state with every inner loop at index 1.
    `loops` are the temporal loops above the fan-out, innermost first (dimension, factor, step). Also returns the
    words the MACs of one innermost-level instance pass each other over the links in the run, and the accesses by
    multicast factor where the links leave the MACs still fed smaller groups (None: the plain multicast's)."""
    lv0 = mapping.levels[0]
    spatial: list[tuple[str, int]] = [(d, f) for d, f in lv0.spatial if f > 1]
    if not spatial or iters == 0:
        return iters * distinct, 0.0, None
    rel = RELEVANT[tensor]
    if tensor != "I" and all(d in rel for d, _ in spatial):
        return iters * distinct, 0.0, None  # distinct operands everywhere: a neighbour's previous one never matches (steps are
        # multiples of the unrolled extent)
    if tensor == "I" and all(d in ("N", "G", "C") for d, _ in spatial):
        return iters * distinct, 0.0, None
    fx, fy = arch.fanout_xy(0)
    split = mesh_split(spatial, fx, fy) if fy > 1 else (spatial, [])
    xs, ys = split if split is not None else (spatial, [])
    order = list(xs) + list(ys)  # Timeloop's spatial loops, innermost (fastest index) first
    h_size = max(fx, math.prod(f for _, f in xs))
    elements: dict[tuple[int, int], dict[str, int]] = {}
    for idx in range(math.prod(f for _, f in order)):
        coords, rest = dict.fromkeys(DIMS, 0), idx
        for d, f in order:
            coords[d], rest = rest % f, rest // f
        elements[(idx % h_size, idx // h_size)] = coords
    temporal = [(d, f, step) for d, f, step in loops if f > 1]

    def at(offsets: dict[str, int]) -> dict[tuple[int, int], tuple[int, ...]]:
        return {pos: _point(problem, tensor, {d: c[d] + offsets.get(d, 0) for d in DIMS})
                for pos, c in elements.items()}

    base = at({})
    plain = len(set(base.values()))
    total = float(plain)  # the first iteration: nothing to link from
    links = 0.0
    plain_groups = Counter(Counter(base.values()).values())  # multicast factor -> groups of MACs sharing an operand
    multicast: Counter[int] = Counter(plain_groups)
    weight_above = iters
    for j, (d, f, step) in enumerate(temporal):
        weight_above //= f
        weight = (f - 1) * weight_above  # iterations at which loop j advances (all inner loops wrapping)
        prev_off: dict[str, int] = {}
        for dd, _, ss in temporal[:j]:
            prev_off[dd] = prev_off.get(dd, 0) + ss
        prev, new = at(prev_off), at({d: step})
        kept = [pt for (h, v), pt in new.items()
                if not any(prev.get(nb) == pt for nb in ((h - 1, v), (h + 1, v), (h, v - 1), (h, v + 1)))]
        linked = len(set(kept))
        total += weight * (linked if linked < plain else plain)
        if linked < plain:
            links += weight * (len(new) - len(kept))  # each MAC served over a link receives its operand word
            groups = Counter(Counter(kept).values())  # (the MACs left share their operands in smaller groups)
        else:
            groups = plain_groups
        for m, g in groups.items():
            multicast[m] += weight * g
    scale = distinct / plain
    return total * scale, links, {m: w * scale for m, w in sorted(multicast.items())}


def _mesh_elements(arch: Architecture, level: int, spatial: list[tuple[str, int]],
                   unit: dict[str, int]) -> dict[tuple[int, int], dict[str, int]]:
    """The instances a level's fan-out feeds, at their (X, Y) mesh positions as timeloop-model lays them out (its
    spatial loops X first, the first varying fastest, row-major over the physical mesh width), each with its offset
    along every dimension (loop index x `unit`, the child's extent)."""
    fx, fy = arch.fanout_xy(level)
    split = mesh_split(spatial, fx, fy) if fy > 1 else (spatial, [])
    xs, ys = split if split is not None else (spatial, [])
    order = list(xs) + list(ys)
    h_size = max(fx, math.prod(f for _, f in xs))
    elements: dict[tuple[int, int], dict[str, int]] = {}
    for idx in range(math.prod(f for _, f in order)):
        coords, rest = dict.fromkeys(DIMS, 0), idx
        for d, f in order:
            coords[d], rest = rest % f * unit[d], rest // f
        elements[(idx % h_size, idx // h_size)] = coords
    return elements


def _fanout_links(problem: Problem, arch: Architecture, mapping: Mapping, tensor: str, child: int,
                  tile: dict[str, int], loops: list[tuple[str, int, int]]) -> tuple[float, float, int, int]:
    """Link transfers at the fan-out right above level `child` for a read-only tensor: (the share of the parent's
    plain multicast reads that remain, the words one parent instance's children pass over links in the run, the
    children of one parent instance, the child instances in use in all). A child takes its new data from a mesh
    neighbour instead of the parent when the neighbour's previous delta is exactly its current one (windows sliding
    past each other: an unrolled R under a temporal P, an unrolled Q under a temporal S); timeloop-model then charges
    the neighbour a read and the child a fill, and uses the links at a call only when they leave fewer parent reads.
    Deltas follow `_fills` (same vector: the new part; another: the whole tile; each loop from two iterations)."""
    spatial: list[tuple[str, int]] = [(d, f) for d, f in mapping.levels[child + 1].spatial if f > 1]
    loops = [lp for lp in loops if lp[1] > 1]
    size = box(problem, tensor, tile)
    if tensor != "I" or not loops or size == 0 or not any(d in ("P", "Q", "R", "S") for d, _ in spatial):
        # only windows that slide past each other can be passed along: distinct operands of W, O or of unrolled C
        # never sit where a neighbour's did (every move is a multiple of the unrolled extent), and multicast ones
        # would have to be fetched twice in a row
        return 1.0, 0.0, 1, 1
    ext = _extents(problem, tensor, tile)
    elements = _mesh_elements(arch, child + 1, spatial, tile)
    offset = {pos: _point(problem, tensor, c) for pos, c in elements.items()}
    groups = len(set(offset.values()))
    moves = _first_moves(problem, tensor, loops)

    Region = tuple[tuple[int, ...], tuple[int, ...]] | None  # one box [lo, hi) relative to the window, or none

    def region(t: tuple[int, ...], whole: bool) -> tuple[Region, int]:
        """The delta as a box relative to the new window, and its words (None, words: not one box)."""
        kept = math.prod(max(0, e - abs(x)) for e, x in zip(ext, t))
        if whole or kept == 0:
            return (tuple(0 for _ in ext), tuple(ext)), size
        moved = [a for a, x in enumerate(t) if x]
        if not moved:
            return None, 0
        if len(moved) > 1:
            return None, size - kept
        a = moved[0]
        lo, hi = [0] * len(ext), list(ext)
        if t[a] > 0:
            lo[a] = ext[a] - t[a]
        else:
            hi[a] = -t[a]
        return (tuple(lo), tuple(hi)), size - kept

    # per element, the offsets of its mesh neighbours relative to it (in the tensor's coordinates): a link needs the
    # neighbour's previous delta to sit exactly where this element's current one does
    diffs: dict[tuple[int, int], set[tuple[int, ...]]] = {}
    for (h, v), off in offset.items():
        diffs[(h, v)] = {tuple(x - y for x, y in zip(offset[nb], off)) for nb in
                         ((h - 1, v), (h + 1, v), (h, v - 1), (h, v + 1)) if nb in offset}
    any_diff = set().union(*diffs.values())

    regions = {(j, w): region(moves[j], w) for j in range(len(loops)) for w in (False, True)}
    regions[(-1, True)] = regions[(-1, False)] = regions[(0, True)]  # the first call: the whole tile

    def link_shift(j: int, whole: bool, pj: int | None, pwhole: bool) -> tuple[int, ...] | None:
        """Where a neighbour's previous delta must sit, relative to this element, to equal its current one."""
        if pj is None:
            return None
        cur, words = regions[(j, whole)]
        prev, _ = regions[(pj, pwhole)]
        if cur is None or prev is None or not words:
            return None
        if any(h1 - l1 != h2 - l2 for l1, h1, l2, h2 in zip(cur[0], cur[1], prev[0], prev[1])):
            return None
        return tuple(lo + x - plo for lo, x, plo in zip(cur[0], moves[j], prev[0]))

    # the calls that occur: loop j > 0 advances right after loop 0 did; loop 0 after the first call or any other loop
    combos = [(j, w, pj, pw) for j in range(len(loops)) for w in (False, True)
              for pj in ([0] if j else [-1, *range(1, len(loops))]) for pw in (False, True)]
    if not any(link_shift(*c) in any_diff for c in combos):
        return 1.0, 0.0, len(elements), 1  # no call can pass data over a link

    reused_at: dict[tuple[int, ...], int] = {}
    left_at: dict[tuple[int, ...], int] = {}
    calls: dict[tuple[int, bool, int | None, bool], tuple[float, float, float]] = {}

    def call(j: int, whole: bool, pj: int | None, pwhole: bool) -> tuple[float, float, float]:
        """(parent reads, link words, plain reads) of one call where loop j advanced after the call of loop pj."""
        key = (j, whole, pj, pwhole)
        if key not in calls:
            _, words = regions[(j, whole)]
            plain = groups * words
            parent, linked_words = float(plain), 0.0
            shift = link_shift(j, whole, pj, pwhole)
            if shift is not None and shift in any_diff:
                if shift not in reused_at:
                    reused = {pos for pos, ds in diffs.items() if shift in ds}
                    reused_at[shift] = len(reused)
                    left_at[shift] = len({offset[p] for p in offset if p not in reused})
                if left_at[shift] * words < plain:
                    parent, linked_words = float(left_at[shift] * words), float(reused_at[shift] * words)
            calls[key] = (parent, linked_words, float(plain))
        return calls[key]

    State = tuple[tuple[int, ...] | None, int | None, bool]  # last vector kept, last loop advanced, was it whole
    memo: dict[tuple[int, State], tuple[float, float, float, State]] = {}

    def sweep(j: int, st: State) -> tuple[float, float, float, State]:
        if j == 0:
            return 0.0, 0.0, 0.0, st
        key = (j, st)
        if key not in memo:
            p1, l1, q1, s1 = sweep(j - 1, st)
            last, pj, pwhole = s1
            t = moves[j - 1]
            whole = not (last is None or last == t)
            p, lk, q = call(j - 1, whole, pj, pwhole)
            s2: State = (None if whole else t, j - 1, whole)
            p2, l2, q2, s3 = sweep(j - 1, s2)
            w = loops[j - 1][1] - 1
            memo[key] = (p1 + w * (p + p2), l1 + w * (lk + l2), q1 + w * (q + q2), s3)
        return memo[key]

    parent, links, plain, _ = sweep(len(loops), (None, -1, True))
    first = groups * size
    parent, plain = parent + first, plain + first
    # timeloop-model spreads one parent instance's link words over every instance of the child level in use (all
    # fan-outs above it), in whole words
    used = math.prod(f for lv in mapping.levels[child + 1:] for _, f in lv.spatial)
    return (parent / plain if plain else 1.0), links, len(elements), used


def timeloop_counts(problem: Problem, arch: Architecture, mapping: Mapping) -> TimeloopCounts:
    levels = mapping.levels
    n = len(levels)
    tiles: list[dict[str, int]] = []
    running = {d: 1 for d in DIMS}
    for lv in levels:
        for d in DIMS:
            running[d] *= lv.temporal_factor(d) * lv.spatial_factor(d)
        tiles.append(dict(running))
    iters = math.prod(f for lv in levels for _, f in lv.temporal)
    spatial_above = [math.prod(m.spatial_total for m in levels[i + 1:]) for i in range(n)]
    out = [LevelCounts(name=lv.name) for lv in arch.levels]

    level_loops = [[(d, f, tiles[j][d] // levels[j].temporal_factor(d)) for d, f in levels[j].temporal if f > 1]
                   for j in range(n)]

    def loops_above(i: int) -> list[tuple[str, int, int]]:
        return [lp for j in range(i + 1, n) for lp in level_loops[j]]

    def spatial_between(lo: int, hi: int, rel: frozenset[str] | None) -> int:
        """Spatial factors of levels lo+1..hi (fan-outs between instance of hi and of lo), relevant ones only."""
        return math.prod(f for j in range(lo + 1, hi + 1) for d, f in levels[j].spatial if rel is None or d in rel)

    def split(k: int) -> bool:
        src = arch.levels[k].source_instances if k >= 0 else None
        return src is not None and src < arch.levels[k].instances

    def distinct_inputs(lo: int, hi: int) -> float:
        """How many child tiles' worth of inputs the parent `hi` reads per tile the child `lo` (-1: a MAC) takes, over
        the spatial factors of levels lo+1..hi. timeloop-model compares, at each fan-out, the working sets of the
        instances it feeds and multicasts only equal ones (offsets p * stride + r * dilation that coincide, as for an
        unrolled R next to an unrolled P), not overlapping ones; a bypassing level in between passes its children's
        accesses up as they are, so each fan-out counts its own distinct offsets. A fan-out above a level Tileplan
        splits where the source file does not (Gemmini's accumulator) belongs to that one source instance, which
        fetches the union of its slices' windows (overlaps read once)."""
        inner: list[set[int]] = [{0}, {0}]
        factor = 1.0
        groups: list[list[set[int]]] = []  # the offsets of each of Timeloop's fan-outs
        for j in range(lo + 1, hi + 1):
            step = tiles[j - 1] if j > 0 else dict.fromkeys(DIMS, 1)
            if split(j - 1) and j - 1 == lo:
                sets = inner  # lo's own source instance spans this fan-out: the union of its slices' windows
            elif split(j - 1) and groups:
                sets = groups[-1]  # with the one below, a single fan-out of the source's level j - 1
            else:
                sets = [{0}, {0}]
                groups.append(sets)
            for d, f in levels[j].spatial:
                if d not in RELEVANT["I"]:
                    continue
                if d not in ("P", "Q", "R", "S"):
                    factor *= f
                    continue
                axis = 0 if d in ("P", "R") else 1
                unit = step[d] * (problem.stride[axis] if d in ("P", "Q") else problem.dilation[axis])
                sets[axis] = {o + k * unit for o in sets[axis] for k in range(f)}
        for g in groups:
            factor *= len(g[0]) * len(g[1])
        child = tiles[lo] if lo >= 0 else dict.fromkeys(DIMS, 1)
        for axis, (p, r) in enumerate((("P", "R"), ("Q", "S"))):
            extent = (child[p] - 1) * problem.stride[axis] + (child[r] - 1) * problem.dilation[axis] + 1
            covered, end = 0, None
            for o in sorted(inner[axis]):  # length of the union of the windows [o, o + extent)
                start = o if end is None else max(o, end)
                covered += o + extent - start
                end = o + extent
            factor *= covered / extent
        return factor

    level0_loops: list[tuple[str, int, int]] = [lp for j in range(n) for lp in level_loops[j]]
    link_words: dict[tuple[int, str], float] = {}
    mac_multicast: dict[str, dict[int, float] | None] = {}
    for t in TENSORS:
        rel = RELEVANT[t]
        chain = [i for i in range(n) if t in arch.levels[i].keeps]
        fills: dict[int, float] = {}
        for i in chain:
            tc = TensorCounts(instances=spatial_above[i], capacity=box(problem, t, tiles[i]))
            out[i].tensors[t] = tc
            fills[i] = 0.0 if i == n - 1 else _fills(problem, t, tiles[i], loops_above(i))
            tc.fills = fills[i]
        for k, i in enumerate(chain):
            tc = out[i].tensors[t]
            child = chain[k - 1] if k > 0 else -1
            distinct = distinct_inputs(child, i) if t == "I" else spatial_between(child, i, rel)
            if child == -1:  # the MACs keep nothing: one operand per iteration per child, less link transfers
                accesses, link_words[(0, t)], mac_multicast[t] = _mac_accesses(problem, arch, mapping, t, iters,
                                                                               level0_loops, distinct)
            else:
                accesses = fills[child] * distinct
                if not split(child) and not split(child + 1):
                    share, links, fed, used = _fanout_links(problem, arch, mapping, t, child, tiles[child],
                                                            loops_above(child))
                    link_words[(child + 1, t)] = links
                    if links:
                        # what comes over a link is read from the neighbour and filled into the child; timeloop-model
                        # spreads it (in whole words) over every child instance in use, while the parent's share of
                        # the fills drops per child it feeds
                        peer = float(int(links) // used)
                        accesses *= share
                        out[child].tensors[t].reads += peer
                        out[child].tensors[t].fills += peer - links / fed
            tc.ingress = accesses
            if t == "O":
                tc.updates = accesses
                # Read-modify-write: every update but the first one an element ever gets reads the old value.
                relevant_visits = math.prod(f for d, f, _ in loops_above(i) if d in rel)
                tc.reads = accesses - relevant_visits * tc.capacity
            else:
                tc.reads = accesses
    networks = _networks(problem, arch, mapping, tiles, out, link_words, mac_multicast, spatial_above)
    for i in range(n - 1):
        if split(i):
            # Timeloop's view of a level Tileplan splits (Gemmini's one accumulator over the columns): one instance
            # spans the level above's fan-out, so it holds the union of the slices' tiles (the relevant spatial
            # factors times one slice's) and partial sums of an irrelevant factor arrive reduced on the way
            above = levels[i + 1]
            for t, c in out[i].tensors.items():
                f = math.prod(ff for d, ff in above.spatial if d in RELEVANT[t])
                c.reads, c.fills, c.updates, c.capacity = c.reads * f, c.fills * f, c.updates * f, c.capacity * f
                c.instances = max(1, c.instances // above.spatial_total)
    for rl, lc in zip(arch.levels, out):
        wb = rl.word_bytes
        lc.read_words_per_cycle = rl.read_bandwidth / wb if rl.read_bandwidth else None
        lc.write_words_per_cycle = rl.write_bandwidth / wb if rl.write_bandwidth else None
        lc.shared = rl.shared_bandwidth
        # As timeloop-model computes it (in floating point, so its rounding is reproduced): the demand per compute
        # cycle is a sum of per-datatype quotients, in Timeloop's datatype order (60/9 + 18/9 rounds above 78/9,
        # and the ceil below then gives one cycle more); the slowdown is the budget over the demand, and the level
        # takes ceil(compute / slowdown) cycles.
        slowdown = 1.0
        if iters:
            read = sum(tc.reads / iters for tc in lc.tensors.values())
            write = sum((tc.fills + tc.updates) / iters for tc in lc.tensors.values())
            demands = [(read + write, lc.read_words_per_cycle)] if lc.shared else [
                (read, lc.read_words_per_cycle), (write, lc.write_words_per_cycle)]
            for demand, budget in demands:
                if budget and demand:
                    slowdown = min(slowdown, budget / demand)
        lc.cycles = math.ceil(iters / slowdown)
    macs_used = math.prod(lv.spatial_total for lv in levels)
    return TimeloopCounts(levels=out, compute_cycles=iters, macs_used=macs_used, computes=iters, networks=networks)


def _multicasts(problem: Problem, mapping: Mapping, tiles: list[dict[str, int]], j: int, tensor: str) -> dict[int, float]:
    """Per multicast factor, the share of the words level j sends its children (its fan-out's spatial factors over
    child tiles of level j - 1, a MAC's one operand for j = 0): children whose tiles are equal share one multicast
    word, as timeloop-model groups equal deltas. Weights and outputs: the factors along dimensions the tensor does not
    index multicast; inputs: K, and unrolled P next to R (Q next to S) whose windows start at the same offset."""
    spatial = [(d, f) for d, f in mapping.levels[j].spatial if f > 1]
    rel = RELEVANT[tensor]
    same = math.prod(f for d, f in spatial if d not in rel)
    if tensor != "I":
        return {same: 1.0}
    step = tiles[j - 1] if j > 0 else dict.fromkeys(DIMS, 1)
    axes: list[dict[int, int]] = [{0: 1}, {0: 1}]
    for d, f in spatial:
        if d not in ("P", "Q", "R", "S"):
            continue
        axis = 0 if d in ("P", "R") else 1
        unit = step[d] * (problem.stride[axis] if d in ("P", "Q") else problem.dilation[axis])
        grown: dict[int, int] = {}
        for o, c in axes[axis].items():
            for k in range(f):
                grown[o + k * unit] = grown.get(o + k * unit, 0) + c
        axes[axis] = grown
    hist: dict[int, int] = {}
    for c0 in axes[0].values():
        for c1 in axes[1].values():
            hist[same * c0 * c1] = hist.get(same * c0 * c1, 0) + 1
    groups = sum(hist.values())
    return {m: c / groups for m, c in sorted(hist.items())}


def _networks(problem: Problem, arch: Architecture, mapping: Mapping, tiles: list[dict[str, int]],
              out: list[LevelCounts], link_words: dict[tuple[int, str], float],
              mac_multicast: dict[str, dict[int, float] | None], spatial_above: list[int]) -> list[dict[str, NetTraffic]]:
    """Per level, per tensor, the traffic of the network below it, as timeloop-model's inferred networks count it:
    a level that keeps the tensor sends its children what they read from it (multicast words once); a level between
    it and the next level below that keeps the tensor carries that traffic on, per instance its share (the words
    above, less the multicast and over the fan-out of the level above); outputs sent to or from a level that cannot
    reduce (a DRAM, or a level stating reduction_supported false) travel twice, less the first update of each
    word. Where the MACs pass operands over links, the innermost level's multicast groups are those the links leave."""
    n = len(arch.levels)
    nets: list[dict[str, NetTraffic]] = [{} for _ in range(n)]
    for t in TENSORS:
        chain = [i for i in range(n) if t in arch.levels[i].keeps]
        for k, i in enumerate(chain):
            child = chain[k - 1] if k > 0 else -1
            words = out[i].tensors[t].ingress
            for j in range(i, child, -1):
                shares = _multicasts(problem, mapping, tiles, j, t)
                by_mac = mac_multicast.get(t) if j == 0 else None
                if by_mac:  # the MACs' links leave smaller multicast groups (_mac_accesses)
                    shares = {m: w / sum(by_mac.values()) for m, w in by_mac.items()}
                fan = mapping.levels[j].spatial_total
                ingress = {m: words * s for m, s in shares.items()}
                if t == "O" and not arch.levels[j].reduces:
                    # less each word's first update: the outputs an instance ever holds (its partition; none
                    # where the level bypasses them)
                    part = out[j].tensors[t].updates - out[j].tensors[t].reads if j in chain else 0.0
                    ingress = {m: 2 * w - part for m, w in ingress.items()}
                nets[j][t] = NetTraffic(ingress=ingress, fanout=fan, instances=spatial_above[j],
                                        links=link_words.get((j, t), 0.0))
                words = words * sum(m * s for m, s in shares.items()) / fan
    return nets




def timeloop_metrics(problem: Problem, arch: Architecture, mapping: Mapping) -> Metrics:
    """Metrics of a legal mapping under timeloop-model's semantics. Energy: per block access, at the descriptor's
    energy where it states one, else Timeloop's built-in table (`cost/timeloop_energy.py`) on the level's geometry."""
    from tileplan.cost.model import LevelTraffic, Metrics

    problem = problem.for_hardware("bounding_box")
    tc = timeloop_counts(problem, arch, mapping)
    cycles = tc.cycles
    top = len(arch.levels) - 1
    rows: list[LevelTraffic] = []
    energy_levels: dict[str, float] = {}
    by_tensor_pj: dict[str, dict[str, float]] = {}
    bound, slowest = "compute", tc.compute_cycles
    dram_bytes = 0.0
    for i, (lv, lc) in enumerate(zip(arch.levels, tc.levels)):
        wb = lv.word_bytes
        per: dict[str, dict[str, float]] = {}
        pj: dict[str, float] = {}
        for t, c in lc.tensors.items():
            r = c.reads * c.instances * wb
            w = (c.fills + c.updates) * c.instances * wb
            per[t] = {"reads": r, "writes": w}
            pj[t] = storage_pj(lv, c.reads, c.fills, c.updates, c.instances, read_write=t == "O")
        for t, traffic in tc.networks[i].items():  # the network below the level (Timeloop's inferred network)
            e = network_pj(traffic, lv.hop_pj, lv.router_pj)
            if e:
                pj[t] = pj.get(t, 0.0) + e
        r_all = sum(v["reads"] for v in per.values())
        w_all = sum(v["writes"] for v in per.values())
        if i == top:
            dram_bytes = r_all + w_all
        energy_levels[lv.name] = sum(pj.values())
        by_tensor_pj[lv.name] = pj
        if lc.cycles > slowest:
            slowest, bound = lc.cycles, lv.name
        rows.append(LevelTraffic(level=lv.name, reads_bytes=r_all, writes_bytes=w_all,
                                 cycles=lc.cycles if lc.cycles > tc.compute_cycles else 0.0,
                                 energy_pj=energy_levels[lv.name], by_tensor=per))
    pe = arch.hardware.pe_array
    per_mac = mac_pj(DTYPE_BITS[pe.input_dtype], DTYPE_BITS[pe.weight_dtype]) if pe.mac_energy_pj is None \
        else pe.mac_energy_pj
    padded_macs = math.prod(mapping.bounds().values())
    energy_levels["MAC"] = padded_macs * per_mac
    by_tensor_pj["MAC"] = {"MAC": energy_levels["MAC"]}
    return Metrics(
        cycles=float(cycles),
        energy_pj=sum(energy_levels.values()),
        utilization=problem.useful_macs / (cycles * arch.macs),
        dram_bytes=dram_bytes,
        ideal_cycles=math.ceil(problem.useful_macs / arch.macs),
        bound=bound,
        compute_cycles=float(tc.compute_cycles),
        stall_cycles=float(cycles - tc.compute_cycles),
        macs=problem.useful_macs,
        padded_macs=padded_macs,
        spatial_utilization=tc.macs_used / arch.macs,
        energy_breakdown_pj=energy_levels,
        energy_by_tensor_pj=by_tensor_pj,
        model="timeloop",
        levels=rows,
        notes=[
            f"Timeloop semantics: {tc.macs_used} of {arch.macs} MACs used, {tc.compute_cycles} compute cycles; "
            f"bound by {bound}"
        ],
    )


def backing_store_overflow(problem: Problem, arch: Architecture) -> str | None:
    """Why no map of `problem` fits a backing store with a size (a Timeloop file's SRAM `MainMemory`: its
    `source_entries`): the whole tensors it keeps exceed it, and timeloop-model refuses every map; else None."""
    top = arch.levels[-1]
    if top.source_entries is None:
        return None
    full = problem.for_hardware("bounding_box")
    words = sum(box(full, t, dict(full.dims)) for t in TENSORS if t in top.keeps)
    if words <= top.source_entries:
        return None
    return (f"{top.name}: the layer's tensors need {words} words there and it holds {top.source_entries} "
            "(timeloop-model refuses every map: 'mapped tile size exceeds buffer capacity')")


def timeloop_violations(
    problem: Problem, arch: Architecture, mapping: Mapping, along_x: dict[str, list[tuple[str, int]]] | None = None
) -> list[str]:
    """Why timeloop-model would reject `mapping` (empty: it accepts it), by Timeloop's own rules: factors multiply
    to the problem's bounds exactly (Timeloop has no padding), the spatial expansions, cumulative over the levels
    above, fit each level's mesh: along X (`along_x` per level, Timeloop's `split`; by default the best split) its
    meshX and the rest its Y (a level without a fan-out takes no spatial factor), and the tiles a level keeps, in
    words and as bounding boxes, fit its entries (no double buffering, unless the file states Timeloop's
    multiple-buffering, which leaves floor(entries / it); the backing store too where the source file gives it a
    size) and fill at least the file's min-utilization share of them. Tileplan-only limits (spatial dimensions a
    level may unroll, library calls) are not Timeloop's business and are not checked here."""
    out: list[str] = []
    names = [lv.name for lv in arch.levels]
    if [m.name for m in mapping.levels] != names:
        return [f"levels must be {names} (innermost first), got {[m.name for m in mapping.levels]}"]
    bounds = mapping.bounds()
    for d in DIMS:
        if bounds[d] != problem.dims[d]:
            out.append(f"factors of {d} multiply to {bounds[d]}, the problem's bound is {problem.dims[d]} "
                       "(Timeloop has no padding: export the padded problem)")
    out += loop_violations(arch, mapping, problem.dims, along_x)
    expansion_x = expansion_y = 1
    for i in range(len(arch.levels) - 1, -1, -1):
        lv, m = arch.levels[i], mapping.levels[i]
        if m.spatial_total > 1 and lv.fanout == 1:
            out.append(f"no spatial tiling level for storage level {lv.name}: the level below it has as many "
                       "instances (no fan-out to unroll across)")
            continue
        # no check of a level's own fan-out: timeloop-model checks the expansions, cumulative over the levels above,
        # against each level's mesh, so a factor larger than a level's fan-out passes where those above use less
        fx, fy = arch.fanout_xy(i)
        if along_x is not None and lv.name in along_x:
            xs = along_x[lv.name]
        else:
            split = mesh_split(list(m.spatial), fx, fy)
            xs = split[0] if split else list(m.spatial)
        px = math.prod(f for _, f in xs)
        expansion_x *= px
        expansion_y *= m.spatial_total // px
        child_x = arch.mac_mesh_x if i == 0 else arch.levels[i - 1].mesh_x
        child_n = arch.macs if i == 0 else arch.levels[i - 1].instances
        below = "the MACs" if i == 0 else arch.levels[i - 1].name
        if expansion_x > child_x:
            out.append(f"spatial X expansion {expansion_x} at {below} exceeds its mesh X {child_x}")
        if expansion_y > child_n // child_x:
            out.append(f"spatial Y expansion {expansion_y} at {below} exceeds its mesh Y {child_n // child_x}")
    if out:
        return out
    problem = problem.for_hardware("bounding_box")
    deficits = utilization_deficits(problem, arch, mapping)  # (the checker's rule, Timeloop's)
    over: set[int] = set()
    running = {d: 1 for d in DIMS}
    for i, (lv, m) in enumerate(zip(arch.levels, mapping.levels)):
        for d in DIMS:
            running[d] *= m.temporal_factor(d) * m.spatial_factor(d)
        if lv.capacity is None and lv.source_entries is None:
            continue
        tile = dict(running)
        entries = lv.capacity / lv.word_bytes if lv.capacity is not None else float(lv.source_entries or 0)
        source = arch.hardware.memory_levels[i].source_instances
        if source is not None and i + 1 < len(arch.levels):
            # the source file's level spans the level above's fan-out (Gemmini's one accumulator, split per column)
            for d, f in mapping.levels[i + 1].spatial:
                tile[d] *= f
            entries *= lv.instances // source
        words = sum(box(problem, t, tile) for t in TENSORS if t in lv.keeps)
        if words > entries + 1e-9:
            out.append(f"{lv.name}: mapped tile size {words} exceeds buffer capacity {int(entries)}")
            over.add(i)
    return out + [f"{arch.levels[i].name}: mapped tile size {words:g} is {MIN_UTILIZATION} {need:g}"
                  for i, (words, need) in deficits.items() if i not in over]
