"""Tile-space refinement for hardware that runs mappings as library calls (Gemmini-like, tileplan.execution).

There the cost model's cycles depend only on each call's tile (per dimension, the product of every factor
below DRAM, edge tiles clipped) and on double buffering, not on how the factors are spread over the levels
below DRAM. The MIP fixes each dimension's (padded) bound up front and `polish` only moves prime factors
between levels, so neither reaches a tile that needs a different padding: 16 output columns on a 112-wide
map where the hand-written tiling took 23 (padded to 115). This local search moves the tiles themselves,
any size for one dimension or a trade between two nearby (one grows, one shrinks: the accumulator usually
binds), and rebuilds each candidate in Gemmini's own form (everything below DRAM at the accumulator level,
C across the array rows, K across its columns, the tile counts at DRAM, padded bounds = tile x count).
Thousands of candidates are ranked by the library cycle model alone (~0.1 ms each); the fastest few legal
ones are scored with the objective like any other plan. Deterministic.
"""

from __future__ import annotations

import bisect
import collections.abc as abc
import itertools
import operator
import time

from tileplan.check import call_violations, check_arch, level_violations
from tileplan.cost.gemmini import (
    Execution,
    ExecutionBuilder,
    GemminiCycles,
    cycles_many,
    nominal_dram_bandwidth,
)
from tileplan.cost.model import evaluate_mapping
from tileplan.cost.params import CostParams
from tileplan.dims import DIMS, TENSORS
from tileplan.emittable import emittable, emittable_memory, fits_halves, halves_rule
from tileplan.execution import library_levels
from tileplan.hardware import Architecture
from tileplan.mappers.base import TILEPLAN, Objective
from tileplan.mappers.build import build_mapping
from tileplan.mappers.gemmini_auto import GemminiShape, gemmini_shape
from tileplan.mappers.score import score_mapping
from tileplan.mapping import Mapping
from tileplan.problem import Problem, divisors

# Loop order inside a call (loop_conv_ws: och, krow, kcol, kch, b, orow, ocol with ocol innermost) and of the
# calls (tiled_conv: b, porow, pocol, poch, krow, kcol, kch innermost); innermost first, as Mappings list them.
CALL_ORDER = ("Q", "P", "N", "C", "S", "R", "K", "G")
DRAM_ORDER = ("C", "S", "R", "K", "Q", "P", "N", "G")
# Tileplan's code keeps a tile the following calls share: with output channels innermost the input tile stays
# (DRAM_ORDER), with the output pixels innermost the weight tile does.
DRAM_ORDER_KEEP_W = ("C", "S", "R", "Q", "P", "N", "K", "G")


def dram_order(problem: Problem, tiles: dict[str, int], count: dict[str, int] | None = None) -> tuple[str, ...]:
    """The DRAM loop order that saves more loads: when the calls cover the whole reduction (one tile of C, R
    and S) either the input tile stays across the output-channel tiles or the weight tile across the pixel
    tiles; keep the one whose repeated loads weigh more. (`count`: the tile counts per dimension, if known.)"""
    if count is None:
        count = {d: -(-problem.dims[d] // tiles[d]) for d in DIMS}
    if count["C"] * count["R"] * count["S"] > 1:
        return DRAM_ORDER  # consecutive calls walk the reduction: they share no tile
    pixels = count["N"] * count["P"] * count["Q"]
    saved_in = problem.tile_elements("I", tiles) * pixels * (count["K"] - 1)
    saved_w = problem.tile_elements("W", tiles) * count["K"] * (pixels - 1)
    return DRAM_ORDER_KEEP_W if saved_w > saved_in else DRAM_ORDER


def call_tiles(mapping: Mapping, dram: int) -> dict[str, int]:
    """Per dimension, the product of every factor below the DRAM level (the tile one library call works on)."""
    return mapping.level_tiles()[dram - 1] if dram else dict.fromkeys(DIMS, 1)


def tile_options(bound: int, width: int | None) -> list[int]:
    """Tile sizes worth trying for a dimension: ceil(bound / n) for every tile count n (the least padding for
    that many calls) and, on an array axis, every whole number of `width`-wide blocks within the bound."""
    opts = {-(-bound // n) for n in range(1, bound + 1)}
    if width:
        opts |= {width * b for b in range(1, bound // width + 1)}
    return sorted(opts)


def _unroll(tile: int, width: int) -> int:
    """Largest divisor of `tile` that fits the array axis (the spatial factor; the rest runs temporally)."""
    return max(d for d in divisors(tile) if d <= width)


def mapping_for_tiles(problem: Problem, shape: GemminiShape, tiles: dict[str, int],
                      db: abc.Mapping[str, abc.Sequence[str]], validate: bool = True) -> Mapping:
    """The canonical mapping whose library calls have these tiles (`validate`: see `build_mapping`)."""
    n = len(shape.arch.levels)
    temporal: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    spatial: list[list[tuple[str, int]]] = [[] for _ in range(n)]
    padded = {}
    sp = {"C": _unroll(tiles["C"], shape.dim), "K": _unroll(tiles["K"], shape.dim)}
    for d in CALL_ORDER:
        temporal[shape.acc].append((d, tiles[d] // sp.get(d, 1)))
    temporal[shape.dram] = _dram_loops(problem, tiles)
    for d, count in temporal[shape.dram]:
        if count * tiles[d] != problem.dims[d]:
            padded[d] = count * tiles[d]
    spatial[shape.acc] = [("C", sp["C"])]
    spatial[shape.spad] = [("K", sp["K"])]
    return build_mapping(shape.arch, temporal, spatial, padded_dims=padded, double_buffered=db, validate=validate)


def _dram_loops(problem: Problem, tiles: dict[str, int]) -> list[tuple[str, int]]:
    """The DRAM level's loops (innermost first) of the canonical mapping with these call tiles: the tile counts."""
    dims = problem.dims
    count = {d: -(-dims[d] // tiles[d]) for d in DIMS}
    return [(d, count[d]) for d in dram_order(problem, tiles, count)]


def execution_for_tiles(problem: Problem, shape: GemminiShape, tiles: dict[str, int],
                        db: abc.Mapping[str, abc.Sequence[str]], builder: ExecutionBuilder | None = None) -> Execution:
    """How Tileplan's code runs `mapping_for_tiles(problem, shape, tiles, db)`, without building the mapping: its
    call tiles are `tiles` (the factors below DRAM multiply to them), its DRAM loops `_dram_loops` (a Mapping drops
    the loops of one trip, which change no call order). `builder`: `ExecutionBuilder(problem, shape.arch, TILEPLAN)`,
    kept by a caller that asks for many tilings."""
    dram = [(d, n) for d, n in _dram_loops(problem, tiles) if n > 1]
    return (builder or ExecutionBuilder(problem, shape.arch, TILEPLAN)).build(tiles, dram, db)


def _near(opts: list[int], tile: int, reach: int) -> list[int]:
    """The options within `reach` positions of `tile` (which need not be an option itself)."""
    i = bisect.bisect_left(opts, tile)  # the first option >= tile (the options are sorted)
    return opts[max(0, i - reach) : i + reach + 1]


def _candidates(tiles: dict[str, int], options: dict[str, list[int]], reach: int) -> list[dict[str, int]]:
    """Every option of one dimension (a line search), and trades between two dimensions within `reach`
    options of their current tiles (the accumulator usually binds: one grows while another shrinks)."""
    out = [{**tiles, d: t} for d, opts in options.items() for t in opts if t != tiles[d]]
    for a, b in itertools.combinations(options, 2):
        for ta in _near(options[a], tiles[a], reach):
            for tb in _near(options[b], tiles[b], reach):
                if ta != tiles[a] and tb != tiles[b]:
                    out.append({**tiles, a: ta, b: tb})
    return out


def _cycles_of(arch: Architecture, es: list[Execution], params: CostParams) -> list[GemminiCycles]:
    """The call cycle model alone (no traffic, energy or legality), cheap enough to rank thousands: the call rows of
    all executions stacked and costed in one vectorised pass (`cycles_many`: each gets what it gets alone)."""
    return cycles_many(es, nominal_dram_bandwidth(arch), params)


TileKey = tuple[tuple[int, ...], tuple[tuple[str, tuple[str, ...]], ...]]


class _Tilings:
    """What `refine` learns about each call tiling (with its double buffering), kept for the whole search: rounds
    and starts revisit a third of their candidates, and every answer here is a pure function of the tiling."""

    def __init__(self, problem: Problem, shape: GemminiShape, params: CostParams, objective: Objective) -> None:
        self.problem, self.shape, self.params, self.objective = problem, shape, params, objective
        self.builder = ExecutionBuilder(problem, shape.arch, TILEPLAN)
        self.fits: dict[TileKey, bool] = {}  # False: cannot fit (`_may_fit`)
        self.fitters: dict[tuple[tuple[str, tuple[str, ...]], ...], _Fits] = {}  # per double buffering
        self.tiling: dict[TileKey, tuple[dict[str, int], abc.Mapping[str, abc.Sequence[str]]]] = {}
        self.built: dict[TileKey, Mapping] = {}  # built only when scored or handed out (`mapping`)
        self.cycles: dict[TileKey, float] = {}
        # tilings that differ only within an array block or a padding run alike (a matmul's row tiles of 17 and 20
        # on a 16-wide array: both two blocks): 70% of a matmul's candidates repeat an execution already costed
        self.execution_cycles: dict[Execution, GemminiCycles] = {}
        self.calls: dict[TileKey, GemminiCycles] = {}  # the call model's answer, handed to `evaluate_mapping`
        self.score: dict[TileKey, float | None] = {}  # None: illegal (`check_arch`)

    def rank(self, tiles: list[dict[str, int]], db: abc.Mapping[str, abc.Sequence[str]]) -> list[TileKey]:
        """The tilings that may fit, fastest first by the call cycle model (ties: in the given order)."""
        db_key = tuple(sorted((lv, tuple(ts)) for lv, ts in db.items()))
        per_dim = operator.itemgetter(*DIMS)
        keys = [(per_dim(t), db_key) for t in tiles]
        costed = []
        fits = self.fitters.get(db_key)
        if fits is None:
            fits = self.fitters[db_key] = _Fits(self.problem, self.shape, db)
        for key, t in zip(keys, tiles):
            if key not in self.fits:
                self.fits[key] = fits(t)
                self.tiling[key] = (t, db)
                if self.fits[key]:
                    costed.append(key)
        known = self.execution_cycles
        waiting: dict[Execution, list[TileKey]] = {}  # executions not costed yet -> the tilings that run as each
        for k in costed:
            e = execution_for_tiles(self.problem, self.shape, *self.tiling[k], self.builder)
            g = known.get(e)
            if g is None:
                waiting.setdefault(e, []).append(k)
            else:
                self.calls[k], self.cycles[k] = g, g.cycles
        for (e, waited), g in zip(waiting.items(), _cycles_of(self.shape.arch, list(waiting), self.params)):
            known[e] = g
            for k in waited:
                self.calls[k], self.cycles[k] = g, g.cycles
        fit = [(self.cycles[k], i, k) for i, k in enumerate(keys) if self.fits[k]]
        return [k for _, _, k in sorted(fit)]

    def mapping(self, key: TileKey) -> Mapping:
        """The canonical mapping of a tiling that may fit (unvalidated, `mapping_for_tiles`)."""
        if key not in self.built:
            assert self.fits[key]
            self.built[key] = mapping_for_tiles(self.problem, self.shape, *self.tiling[key], validate=False)
        return self.built[key]

    def legal_score(self, key: TileKey) -> float | None:
        """The objective's score of a tiling, None when it is illegal."""
        if key not in self.score:
            m = self.mapping(key)
            arch = self.shape.arch
            # (the call model's answer is the ranking's: the mapping runs as the execution ranked, `execution_for_tiles`)
            self.score[key] = None if check_arch(self.problem, arch, m) else score_mapping(
                self.problem, arch, m, evaluate_mapping(self.problem, arch, m, TILEPLAN, gemmini=self.calls[key]),
                self.objective)
        return self.score[key]


def _may_fit(problem: Problem, shape: GemminiShape, tiles: dict[str, int], db: abc.Mapping[str, abc.Sequence[str]]) -> bool:
    """False when a call with these tiles certainly overflows the scratchpad or the accumulator: the checker's own
    capacity rules on the tile below DRAM (which `mapping_for_tiles` makes exactly `tiles`), so dropping such a
    candidate before ranking changes nothing but the time spent on it (`check_arch` would reject it); and False when
    the code generator would not emit the tile as it is (`tileplan.emittable`: the plan scored is the code that
    runs)."""
    arch = shape.arch
    memory = emittable_memory(arch)
    if memory is not None and not fits_halves(problem, tiles, memory):
        return False
    spad_db = frozenset(db.get(arch.levels[shape.spad].name, []))
    if level_violations(problem, arch, shape.spad, tiles, spad_db):
        return False
    acc_db = frozenset(db.get(arch.levels[shape.acc].name, []))
    below = [tiles] * (shape.spad + 1)
    return not call_violations(problem, arch, below, {shape.acc: acc_db, shape.spad: spad_db})


class _Fits:
    """`_may_fit` for one layer, shape and double buffering, with what depends on those alone worked out once: the
    same capacity rules (`level_violations` on the scratchpad, `call_violations`), the same arithmetic in the same
    order, without building their messages; retile asks it of ~1,500 candidates per layer. Hierarchies whose
    library levels are not the shape's own fall back to `_may_fit` itself."""

    def __init__(self, problem: Problem, shape: GemminiShape, db: abc.Mapping[str, abc.Sequence[str]]) -> None:
        arch = shape.arch
        self.problem, self.shape, self.db = problem.for_hardware(arch.hardware.input_tiles), shape, db
        spad, acc = arch.levels[shape.spad], arch.levels[shape.acc]
        lib = library_levels(arch)
        self.exact = lib is not None and (lib.accumulator, lib.scratchpad) == (shape.acc, shape.spad) \
            and acc.capacity is not None
        spad_db = frozenset(db.get(spad.name, []))
        acc_db = frozenset(db.get(acc.name, []))
        self.max_tile = list(spad.max_tile.items())
        self.capacity = spad.capacity
        self.partition = list(spad.partition.items()) if spad.partition else None
        # per tensor the scratchpad keeps: bytes per element, copies (level_violations' footprint)
        self.kept = [(t, arch.element_bytes(t, spad), 2 if t in spad_db else 1) for t in TENSORS if t in spad.keeps]
        self.out_bytes = arch.element_bytes("O", acc)
        self.out_copies = 2 if "O" in acc_db else 1
        self.room = (acc.capacity or 0) * acc.instances
        emit = emittable_memory(arch)
        # (`fits_halves` with the layer's part worked out once)
        self.emits = halves_rule(self.problem, emit) if emit is not None else None

    def __call__(self, tiles: dict[str, int]) -> bool:
        # the code generator emits the tile as it is (tileplan.emittable): the plan scored is the code that runs
        if self.emits is not None and not self.emits(tiles):
            return False
        if not self.exact:
            return _may_fit(self.problem, self.shape, tiles, self.db)
        for d, limit in self.max_tile:
            if tiles[d] > limit:
                return False
        if self.capacity is not None:
            elements = self.problem.tile_elements
            fp = {t: elements(t, tiles) * b * copies for t, b, copies in self.kept}
            if self.partition:
                for t, share in self.partition:
                    if fp[t] > self.capacity * share + 1e-9:
                        return False
            elif sum(fp.values()) > self.capacity + 1e-9:
                return False
        need = self.problem.tile_elements("O", tiles) * self.out_bytes * self.out_copies
        return not need > self.room + 1e-9


def _whole_reduction(problem: Problem, shape: GemminiShape, options: dict[str, list[int]]) -> list[dict[str, int]]:
    """Call tiles that cover the whole reduction (C, R, S) and may fit one call's half of the scratchpad and
    accumulator (a byte estimate; the checker decides): the basin where Tileplan's code keeps a tile between
    calls, which single-dimension moves from a split reduction rarely reach (the accumulator binds first).
    To keep the set small (it is ranked on every solve): output channels in whole array blocks, output columns the
    whole row or half of it, and per (channels, columns) the two tallest tiles of output rows that fit (the
    accumulator's frontier)."""
    d = problem.dims
    arch = shape.arch
    acc, spad = arch.levels[shape.acc], arch.levels[shape.spad]
    if acc.capacity is None or spad.capacity is None:
        return []
    acc_room = acc.capacity * acc.instances / 2 / arch.acc_bytes
    spad_room = spad.capacity * spad.instances / 2
    red = d["C"] * d["R"] * d["S"]
    out = []
    for tk in options.get("K", [1]):
        if red * tk > spad_room:
            break
        if tk % shape.dim and tk != d["K"]:
            continue  # whole array blocks of output channels only
        for tq in sorted({d["Q"], -(-d["Q"] // 2)}):
            tiles = [{"N": 1, "G": 1, "K": tk, "C": d["C"], "P": tp, "Q": tq, "R": d["R"], "S": d["S"]}
                     for tp in options.get("P", [1])]
            fits = [t for t in tiles if t["P"] * tq * tk <= acc_room
                    and problem.tile_elements("I", t) + problem.tile_elements("W", t) <= spad_room]
            out += fits[-2:]
    return out


def refine(
    problem: Problem,
    arch: Architecture,
    starts: list[Mapping],
    objective: Objective,
    rounds: int = 6,
    reach: int = 4,
    shortlist: int = 12,
    deadline: float | None = None,
) -> tuple[Mapping, float, int]:
    """(best mapping, its score, candidates ranked) from local searches started at each of `starts` (legal
    mappings on `arch`). Each round ranks every candidate retiling by the cycle model, then checks and scores
    (objective) the `shortlist` fastest legal ones and moves to the best if it improves. Returns the best start
    unchanged when `arch` is not Gemmini-like."""
    scored = [
        (score_mapping(problem, arch, m, evaluate_mapping(problem, arch, m, TILEPLAN), objective), i, m) for i, m in enumerate(starts)
    ]
    shape = gemmini_shape(arch)
    if shape is None:
        best_score, _, best = min(scored)
        return best, best_score, 0
    # A start the code generator would shrink (tileplan.emittable) is searched from but handed out only when no
    # emittable tiling is found: the plan scored should be the code that runs.
    start_ok = [emittable(problem, arch, m) for m in starts]
    best_score, i_best, best = min(scored, key=lambda t: (not start_ok[t[1]], t[0], t[1]))
    best_rank = best_score if start_ok[i_best] else float("inf")  # what a candidate must beat
    params = CostParams.for_descriptor(arch.hardware)
    width = {"C": shape.dim, "K": shape.dim}
    options = {d: tile_options(problem.dims[d], width.get(d)) for d in DIMS if problem.dims[d] > 1}
    ranked = 0
    known = _Tilings(problem, shape, params, objective)
    # one more start: the fastest legal tiling whose calls cover the whole reduction
    whole = _whole_reduction(problem, shape, options)
    ranked += len(whole)
    for key in known.rank(whole, starts[0].double_buffered):
        s = known.legal_score(key)
        if s is not None:
            m = known.mapping(key)
            scored.append((s, len(scored), m))
            if s < best_rank:
                best_score, best_rank, best = s, s, m
            break
    for start_score, i_start, start in sorted(scored, key=lambda t: (t[0], t[1])):
        cur, cur_score, tiles = start, start_score, call_tiles(start, shape.dram)
        cur_ok = i_start >= len(starts) or start_ok[i_start]
        for _ in range(rounds):
            if deadline is not None and time.perf_counter() > deadline:
                break
            cands = _candidates(tiles, options, reach)
            ranked += len(cands)
            # only tilings that fit are ranked (the shortlist takes legal ones only), each once per search
            step: tuple[float, TileKey] | None = None
            legal = 0
            for key in known.rank(cands, start.double_buffered):
                if legal >= shortlist:
                    break
                s = known.legal_score(key)
                if s is None:
                    continue
                legal += 1
                if s < cur_score - 1e-9 and (step is None or s < step[0]):
                    step = (s, key)
            if step is None:
                break
            cur_score, cur, cur_ok = step[0], known.mapping(step[1]), True
            tiles = call_tiles(cur, shape.dram)
        if cur_ok and cur_score < best_rank - 1e-12:
            best_score, best_rank, best = cur_score, cur_score, cur
    # candidates are built unvalidated (`_Tilings`); the one handed out is validated like any other mapping
    return Mapping.model_validate(best.model_dump()), best_score, ranked


__all__ = ["call_tiles", "dram_order", "execution_for_tiles", "mapping_for_tiles", "refine", "tile_options"]
