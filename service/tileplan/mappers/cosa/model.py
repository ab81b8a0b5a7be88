"""The CoSA mixed-integer program, in log space, built with Pyomo from a CosaSpec.

Variables (all binary unless noted):
  X[d, a, p, i, s]  integer: how many copies of prime p in alternative a of dimension d sit at level i, s=0 spatial,
                    1 temporal (with one binary per copy, as in CoSA's paper, branch and bound refutes placements that
                    differ only in which copy goes where: HiGHS reported a full orbitope over 176 columns of a 3x3
                    conv's model on Simba)
  u[d, a]           dimension d uses factorisation a (its exact bound or a padded one)
  db[i, v]          tensor v is double buffered at level i (costs one bit of log-capacity)
  split[i, o]       a shared buffer gives its tensors the capacities of option o
  halo[i, ax, p, r] the input tile at level i spans p outputs and r taps along axis ax (exact halo)
  sigma[j, v]       the loops at level j are ordered to keep v stationary (its irrelevant loops innermost)
  reuse[v] >= 0     log of the refetches of v that stationarity saves (continuous)
  lat, en           epigraph variables of latency and energy (continuous)

Every size is a product of factors, so in log2 space it is a sum of constants times binaries. Latency
is a max of the compute term and each tensor's DRAM-transfer term, modelled exactly by an epigraph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pyomo.core as pyo  # (not pyomo.environ: its solver and extension plugins, unused here, cost 0.2 CPU s a process)

from tileplan.cost.gemmini import LibraryTerms
from tileplan.cost.model import model_for
from tileplan.dims import DIMS, RELEVANT, TENSORS
from tileplan.execution import library_levels
from tileplan.mappers.cosa.spec import CosaSpec

Key = tuple[str, int, int, int, int]  # (dim, alternative, prime, level, 0 spatial / 1 temporal)


@dataclass
class Weights:
    latency: float
    energy: float
    memory: float


@dataclass
class CosaModel:
    spec: CosaSpec
    m: pyo.ConcreteModel
    x_keys: list[Key]
    coef: dict[Key, float]
    fill: Any  # the memory-use term (mean log fill of the on-chip tiles), kept to re-weigh the objective
    tie: Any  # the tie-break term
    timeloop: bool  # the MIP carries timeloop-model's terms (shared DRAM read budget, O's spills, on-chip bandwidth)

    def weigh(self, w: Weights) -> None:
        """Replace the objective by one with these weights (solve.Session re-solves with the new costs, the rows as they were)."""
        m = self.m
        if hasattr(m, "obj"):
            m.del_component(m.obj)
        m.obj = pyo.Objective(expr=w.latency * m.lat + w.energy * m.en - w.memory * self.fill + self.tie,
                              sense=pyo.minimize)


def log2(v: float) -> float:
    return math.log2(v)


def build_model(spec: CosaSpec, w: Weights) -> CosaModel:
    arch, prob = spec.arch, spec.problem
    n = spec.n_levels
    m = pyo.ConcreteModel(name="cosa")

    x_keys: list[Key] = []
    coef: dict[Key, float] = {}
    mult: dict[Key, int] = {}
    for d in DIMS:
        for a, alt in enumerate(spec.alternatives[d]):
            for f in sorted(set(alt.factors)):
                for i in range(n):
                    places = [1] + ([0] if spec.spatial_ok(i, d, f) else [])
                    for s in places:
                        key = (d, a, f, i, s)
                        x_keys.append(key)
                        coef[key] = log2(f)
                        mult[key] = alt.factors.count(f)
    m.X = pyo.Var(x_keys, within=pyo.NonNegativeIntegers, bounds=lambda m, *q: (0, mult[q]))
    X = m.X

    # --- every factor of the chosen factorisation is placed exactly once -------------------------
    alt_keys = [(d, a) for d in DIMS for a in range(len(spec.alternatives[d]))]
    m.u = pyo.Var(alt_keys, within=pyo.Binary)
    m.one_alt = pyo.Constraint(DIMS, rule=lambda m, d: sum(m.u[d, a] for a in range(len(spec.alternatives[d]))) == 1)
    by_factor: dict[tuple[str, int, int], list[Key]] = {}
    for key in x_keys:
        by_factor.setdefault(key[:3], []).append(key)
    m.placed = pyo.Constraint(
        list(by_factor), rule=lambda m, d, a, f: sum(X[q] for q in by_factor[d, a, f]) == mult[by_factor[d, a, f][0]] * m.u[d, a]
    )

    def ext(d: str, i: int) -> pyo.Expression:
        """log2 of the tile extent of d at level i (all factors at levels <= i)."""
        return sum(coef[q] * X[q] for q in x_keys if q[0] == d and q[3] <= i)

    def temporal_at(j: int, dims: frozenset[str] | tuple[str, ...]) -> pyo.Expression:
        return sum(coef[q] * X[q] for q in x_keys if q[3] == j and q[4] == 1 and q[0] in dims)

    def spatial_at(j: int, dims: frozenset[str] | tuple[str, ...]) -> pyo.Expression:
        return sum(coef[q] * X[q] for q in x_keys if q[3] == j and q[4] == 0 and q[0] in dims)

    # --- fan-out and tile-extent limits ------------------------------------------------------------
    fan_levels = [i for i in range(n) if any(q[3] == i and q[4] == 0 for q in x_keys)]
    m.fanout = pyo.Constraint(
        fan_levels, rule=lambda m, i: spatial_at(i, DIMS) <= log2(arch.levels[i].fanout) + 1e-9
    )
    _mesh_axes(m, spec, fan_levels, spatial_at)
    lim = [(i, d) for i, lv in enumerate(arch.levels) for d in lv.max_tile]
    m.max_tile = pyo.Constraint(lim, rule=lambda m, i, d: ext(d, i) <= log2(arch.levels[i].max_tile[d]) + 1e-9)

    # --- exact input halo: pick the (outputs, taps) pair of each axis at each level keeping I ---------
    halo_levels = spec.onchip_keeps("I")
    halo_keys = [(i, ax, p, r) for i in halo_levels for ax in (0, 1) for p, r in spec.halo_pairs(ax)]
    m.halo = pyo.Var(halo_keys, within=pyo.Binary)
    hk = [(i, ax) for i in halo_levels for ax in (0, 1)]
    m.halo_one = pyo.Constraint(hk, rule=lambda m, i, ax: sum(m.halo[q] for q in halo_keys if q[:2] == (i, ax)) == 1)
    m.halo_p = pyo.Constraint(
        hk, rule=lambda m, i, ax: ext("PQ"[ax], i) == sum(log2(q[2]) * m.halo[q] for q in halo_keys if q[:2] == (i, ax))
    )
    m.halo_r = pyo.Constraint(
        hk, rule=lambda m, i, ax: ext("RS"[ax], i) == sum(log2(q[3]) * m.halo[q] for q in halo_keys if q[:2] == (i, ax))
    )

    def log_tile(v: str, i: int) -> pyo.Expression:
        if v != "I":
            return sum(ext(d, i) for d in RELEVANT[v])
        halo = sum(
            log2(prob.input_extent(q[2], q[3], q[1])) * m.halo[q] for q in halo_keys if q[0] == i
        )
        return ext("N", i) + ext("G", i) + ext("C", i) + halo

    # --- capacity, with double buffering and a choice of split for shared buffers -------------------
    db_keys = [
        (i, v) for i, lv in enumerate(arch.levels[:-1]) if lv.buffer_count == 2 for v in TENSORS if v in lv.keeps
    ]
    m.db = pyo.Var(db_keys, within=pyo.Binary)
    lib_levels = library_levels(arch)
    if lib_levels is not None:
        # Library calls overlap only when the scratchpad double buffers I and W and the accumulator O
        # (gemmini.md: a loop_ws / loop_conv_ws call uses at most half of each); plan for that.
        for db_key in ((lib_levels.scratchpad, "I"), (lib_levels.scratchpad, "W"), (lib_levels.accumulator, "O")):
            if db_key in db_keys:
                m.db[db_key].fix(1)
    split_keys = [(i, o) for i, opts in spec.capacity_options.items() for o in range(len(opts))]
    m.split = pyo.Var(split_keys, within=pyo.Binary)
    m.split_one = pyo.Constraint(
        list(spec.capacity_options), rule=lambda m, i: sum(m.split[i, o] for o in range(len(spec.capacity_options[i]))) == 1
    )
    cap_keys = [(i, v) for i, opts in spec.capacity_options.items() for v in opts[0]]
    tiles = {(i, v): log_tile(v, i) for i, v in cap_keys}

    def cap_rule(m: pyo.ConcreteModel, i: int, v: str) -> pyo.Expression:
        lv = arch.levels[i]
        room = sum(log2(opt[v]) * m.split[i, o] for o, opt in enumerate(spec.capacity_options[i]))
        dbl = m.db[i, v] if (i, v) in db_keys else 0
        return tiles[i, v] + log2(arch.element_bytes(v, lv)) + dbl <= room + 1e-9

    m.capacity = pyo.Constraint(cap_keys, rule=cap_rule)

    # Library execution: one call keeps its whole output tile (everything below DRAM) in the accumulator.
    if lib_levels is not None:
        acc = arch.levels[lib_levels.accumulator]
        assert acc.capacity is not None
        call_out = sum(ext(d, lib_levels.scratchpad) for d in RELEVANT["O"])
        dbl = m.db[lib_levels.accumulator, "O"] if (lib_levels.accumulator, "O") in db_keys else 0
        m.call_output = pyo.Constraint(
            expr=call_out + log2(arch.element_bytes("O", acc)) + dbl <= log2(acc.capacity * acc.instances) + 1e-9
        )

    # --- DRAM traffic of each tensor, with loop-order reuse at the level above its outer tile ---------
    # Under library execution (Gemmini) every DRAM iteration is a call that reloads its tiles: no reuse
    # there, and outputs leave once.
    lib = spec.library
    big = log2(max(prob.macs, 2)) + 1
    timeloop = lib is None and model_for(arch) == "timeloop"
    # Under timeloop-model's semantics a tensor no on-chip level keeps (streamed from DRAM straight to the MACs) is
    # reused too where level 0 fans out to the MACs along a dimension it does not depend on: while a loop over its
    # irrelevant dimensions runs innermost, each MAC's operand is the one a neighbouring MAC held the iteration before
    # and comes over the mesh link, not from DRAM (cost.timeloop._mac_accesses). Without the term the MIP saw no
    # saving in ordering level 0 for the stream: a conv whose weights stream past a 2x9 output-only buffer array took
    # 1,164 cycles where timeloop-mapper's P13 innermost took 904 (fuzz1_019 L0).
    streamed = [v for v in TENSORS if timeloop and spec.outer_onchip(v) == -1 and n > 1
                and any(q[3] == 0 and q[4] == 0 and q[0] not in RELEVANT[v] for q in x_keys)]
    # on-chip levels with a bandwidth: their ports count the fills of every level (_onchip_bandwidth)
    paced = timeloop and any(lv.read_bandwidth or lv.write_bandwidth for lv in arch.levels[:-1])
    sigma_levels = sorted(
        {spec.outer_onchip(v) + 1 for v in TENSORS if 0 <= spec.outer_onchip(v) < n - 1}
        - ({lib.top} if lib else set()) | (set(range(n)) if streamed or paced else set())
    )
    m.sigma = pyo.Var([(j, v) for j in sigma_levels for v in TENSORS], within=pyo.Binary)
    m.sigma_one = pyo.Constraint(sigma_levels, rule=lambda m, j: sum(m.sigma[j, v] for v in TENSORS) <= 1)
    m.reuse = pyo.Var(TENSORS, within=pyo.NonNegativeReals)

    def run_reuse(tag: str, v: str, i: int) -> pyo.Var:
        """log2 of what v's tile at level i (-1: the MACs) is spared by the run of loops innermost above it that leave
        v alone: level j's irrelevant loops count (ordered to keep v, sigma) while no level between i and j has a loop
        over v's dimensions (a relevant factor's log is >= 1, which drops the bound to <= 0). Timeloop refetches a
        tile only when a loop over its dimensions moves it."""
        irr = tuple(d for d in DIMS if d not in RELEVANT[v])
        rel = tuple(RELEVANT[v])
        ups = range(i + 1, n)
        r = pyo.Var(ups, within=pyo.NonNegativeReals)
        m.add_component(f"run_{tag}", r)
        m.add_component(f"run_{tag}_loops", pyo.Constraint(ups, rule=lambda m, j: r[j] <= temporal_at(j, irr)))
        m.add_component(f"run_{tag}_order", pyo.Constraint(ups, rule=lambda m, j: r[j] <= big * m.sigma[j, v]))
        # inner[j] is 1 where a loop over v's dimensions runs at a level between i and j; it cuts the run there.
        # (Bounding r[j] by big * (1 - the loops' log) made every plan with a relevant factor other than one 2 below
        # j infeasible, not merely without reuse: a log of 3.6 asked r[j] <= -2.6 big. The MIP then could not place
        # C3 K4 at a buffer under DRAM with a streamed W, timeloop-mapper's 904-cycle map: fuzz1_019 L0, 1,164.)
        inner_ups = [j for j in ups if j > i + 1]
        cut = pyo.Var(inner_ups, within=pyo.Binary)
        m.add_component(f"run_{tag}_cut", cut)
        # (one row per placement: cut >= X / copies is tight in the LP where one big-M row over the sum was not)
        cut_on = [(j, q) for j in inner_ups for q in x_keys if q[4] == 1 and q[0] in rel and i < q[3] < j]
        m.add_component(f"run_{tag}_cut_on", pyo.Constraint(
            cut_on, rule=lambda m, j, *q: X[q] <= mult[q] * cut[j]))
        m.add_component(f"run_{tag}_inner", pyo.Constraint(inner_ups, rule=lambda m, j: r[j] <= big * (1 - cut[j])))
        total = pyo.Var(within=pyo.NonNegativeReals)
        m.add_component(f"run_{tag}_total", total)
        m.add_component(f"run_{tag}_sum", pyo.Constraint(expr=total <= sum(r[j] for j in ups)))
        return total

    log_traffic = {}
    per_instance = {}  # log2 of the fills of one instance of v's outermost on-chip level (no fan-out above it)
    for v in TENSORS:
        iv = spec.outer_onchip(v)
        above = range(iv + 1, n)
        inner = tiles[iv, v] if iv >= 0 and (iv, v) in tiles else (log_tile(v, iv) if iv >= 0 else 0)
        loops = sum(temporal_at(j, DIMS) for j in above)
        fan = sum(spatial_at(j, RELEVANT[v]) for j in above)
        if timeloop and v == "I" and iv == -1 and n > 1:
            # inputs streamed from DRAM to the MACs: level 0's unrolled output and filter dimensions read
            # overlapping windows there too (S3 x Q2 under one buffer: 4 distinct inputs per cycle, not 6; the
            # MIP preferred a plan of 8 MACs at 1,222 cycles to timeloop-mapper's 12 at 904, fuzz1_019 L0)
            fan = fan - spatial_at(0, ("P", "Q", "R", "S")) + _unrolled_windows(m, spec, spatial_at, n - 1)
        irrelevant = tuple(d for d in DIMS if d not in RELEVANT[v])
        if iv >= 0 and iv + 1 < n and iv + 1 in sigma_levels:
            j = iv + 1
            setattr(m, f"reuse_loops_{v}", pyo.Constraint(expr=m.reuse[v] <= temporal_at(j, irrelevant)))
            setattr(m, f"reuse_order_{v}", pyo.Constraint(expr=m.reuse[v] <= big * m.sigma[j, v]))
        elif v in streamed:
            # The run of irrelevant loops innermost in the whole nest, at any level (a DRAM K8 over a buffer's K2
            # reads a streamed input once, not eight times: fuzz1_047 L3)
            setattr(m, f"reuse_run_{v}", pyo.Constraint(expr=m.reuse[v] <= run_reuse(f"stream_{v}", v, -1)))
            # (a link needs a neighbour holding the same operand: an irrelevant factor in level 0's fan-out)
            setattr(m, f"reuse_link_{v}", pyo.Constraint(expr=m.reuse[v] <= big * spatial_at(0, irrelevant)))
        else:
            m.reuse[v].fix(0)
        log_traffic[v] = inner + loops + fan - m.reuse[v]
        per_instance[v] = inner + loops - m.reuse[v]
    if lib is not None:
        log_traffic["O"] = log2(prob.tensor_elements("O"))

    compute = sum(coef[q] * X[q] for q in x_keys if q[4] == 1)
    # Plans scored by timeloop-model's semantics (hardware imported from Timeloop YAML, or `model: timeloop`): the MIP
    # sees what that model charges (DRAM reads of all streams against one budget, buffers feeding the MACs at their
    # own bandwidth); the calibrated and first-order models keep the terms they were tuned with.
    dram = arch.levels[-1]
    m.lat = pyo.Var(within=pyo.Reals)
    m.en = pyo.Var(within=pyo.Reals)
    m.lat_compute = pyo.Constraint(expr=m.lat >= compute)
    byte_of = {v: arch.element_bytes(v, dram) for v in TENSORS}
    if timeloop and (dram.read_bandwidth or dram.write_bandwidth):
        # Timeloop's DRAM: W and I and the partial sums of O read back against the read budget, O's updates
        # against the write budget, all of them against one budget where the port is shared. A DRAM stating only
        # a write bandwidth still paces O's updates (fuzz1_032 L2: a 32-word write port under 96 MACs that all
        # wrote their partial sums, 735 cycles, where unrolling R7 over the tiles reduces them on the way: 480).
        per_tensor = {v: dram.write_bandwidth if v == "O" else dram.read_bandwidth for v in TENSORS}
        budgets = {v: b for v, b in per_tensor.items() if b and not dram.shared_bandwidth}
        m.lat_dram = pyo.Constraint(
            list(budgets), rule=lambda m, v: m.lat >= log_traffic[v] + log2(byte_of[v] / budgets[v])
        )
        # The streams share the read port: W, I and the partial sums of O read back add up, so a plan is not
        # free to refetch the smaller stream while the larger one sets the pace. O's read-backs are its
        # traffic t less its first touches s: t + log2(1 - 2^-(t-s)) in log space, none when t = s (no reduction
        # loop above O's outermost on-chip tile brings it back). spill[k] is 1 once t - s >= k, so the term
        # takes log2(1 - 2^-k) at the largest such k: a lower bound, exact at whole powers of two.
        correction = _readback_share(m, "spill", log_traffic["O"] - sum(ext(d, n - 1) for d in RELEVANT["O"]), big)
        reads = {v: log_traffic[v] + log2(byte_of[v]) for v in ("W", "I")}
        reads["O"] = log_traffic["O"] + log2(byte_of["O"]) + correction
        write = log_traffic["O"] + log2(byte_of["O"])
        # (fine planes: W's stream is often 90%+ of the reads, and the few percent I or O add on top are what
        # separates the best plans)
        if dram.shared_bandwidth and dram.read_bandwidth:
            total = add_log_sum(m, "dram_reads", [*reads.values(), write], fine=True)
            m.lat_dram_total = pyo.Constraint(expr=m.lat >= total - log2(dram.read_bandwidth))
        elif dram.read_bandwidth:
            total = add_log_sum(m, "dram_reads", list(reads.values()), fine=True)
            m.lat_dram_total = pyo.Constraint(expr=m.lat >= total - log2(dram.read_bandwidth))
    elif dram.read_bandwidth and not timeloop:  # a DRAM without a stated bandwidth never sets the pace
        m.lat_dram = pyo.Constraint(
            TENSORS, rule=lambda m, v: m.lat >= log_traffic[v] + log2(byte_of[v] / dram.read_bandwidth)
        )
    m.en_dram = pyo.Constraint(TENSORS, rule=lambda m, v: m.en >= log_traffic[v] + log2(byte_of[v]))
    if paced:
        cache: dict[tuple[int, str], Any] = {}

        def fills_of(i: int, v: str) -> Any:
            """log2 of the fills of one instance of level i keeping v over the run (its DRAM traffic per instance at
            v's outermost on-chip level; below it, its tile per visit less the run of loops that leave it alone)."""
            if i == spec.outer_onchip(v):
                return per_instance[v]
            if (i, v) not in cache:
                cache[i, v] = (log_tile(v, i) + sum(temporal_at(j, DIMS) for j in range(i + 1, n))
                               - run_reuse(f"{v}{i}", v, i))
            return cache[i, v]

        _onchip_bandwidth(m, spec, log_tile, temporal_at, spatial_at, fills_of)
    if lib is not None:
        matmul_like = prob.dims["Q"] == prob.dims["R"] == prob.dims["S"] == 1
        _library_latency(m, lib, ext, tiles, temporal_at, matmul_like, prob.tensor_elements("O"))

    # Memory use: mean log fill of the on-chip tiles (maximised); a small push of temporal factors
    # toward inner levels breaks the remaining ties deterministically.
    fill = sum(tiles.values()) / max(len(tiles), 1)
    tie = sum(q[3] * coef[q] * X[q] for q in x_keys if q[4] == 1) * 1e-4
    model = CosaModel(spec=spec, m=m, x_keys=x_keys, coef=coef, fill=fill, tie=tie, timeloop=timeloop)
    model.weigh(w)
    return model


def _mesh_axes(m: pyo.ConcreteModel, spec: CosaSpec, fan_levels: list[int], spatial_at) -> None:  # type: ignore[no-untyped-def]
    """A fan-out laid out as an X-by-Y mesh unrolls each dimension along one axis (Timeloop's `split`): the product
    along X must fit X and the rest Y, not merely the total fit X*Y (an 8x8 mesh cannot take K=16 with C=4). One
    binary per (level, dimension) says which axis; the dimension's log-extent counts against that axis's budget
    (big-M: an extent never exceeds the whole fan-out)."""
    keys: list[tuple[int, str]] = []
    for i in fan_levels:
        fx, fy = spec.arch.fanout_xy(i)
        if fx > 1 and fy > 1:
            keys += [(i, d) for d in DIMS if any(spec.spatial_ok(i, d, f) for alt in spec.alternatives[d]
                                                 for f in set(alt.factors))]
    if not keys:
        return
    levels = sorted({i for i, _ in keys})
    big = {i: log2(spec.arch.levels[i].fanout) for i in levels}
    m.mesh_on_x = pyo.Var(keys, within=pyo.Binary)
    m.mesh_x_ext = pyo.Var(keys, within=pyo.NonNegativeReals)
    m.mesh_y_ext = pyo.Var(keys, within=pyo.NonNegativeReals)
    m.mesh_x_link = pyo.Constraint(keys, rule=lambda m, i, d: m.mesh_x_ext[i, d] >= spatial_at(i, (d,))
                                   - big[i] * (1 - m.mesh_on_x[i, d]))
    m.mesh_y_link = pyo.Constraint(keys, rule=lambda m, i, d: m.mesh_y_ext[i, d] >= spatial_at(i, (d,))
                                   - big[i] * m.mesh_on_x[i, d])
    m.mesh_x_fit = pyo.Constraint(levels, rule=lambda m, i: sum(m.mesh_x_ext[k] for k in keys if k[0] == i)
                                  <= log2(spec.arch.fanout_xy(i)[0]) + 1e-9)
    m.mesh_y_fit = pyo.Constraint(levels, rule=lambda m, i: sum(m.mesh_y_ext[k] for k in keys if k[0] == i)
                                  <= log2(spec.arch.fanout_xy(i)[1]) + 1e-9)


def _onchip_bandwidth(m: pyo.ConcreteModel, spec: CosaSpec, log_tile, temporal_at, spatial_at, fills_of) -> None:  # type: ignore[no-untyped-def]
    """On-chip levels with a bandwidth set the pace too (DianNao's 16-word buffers feeding 256 MACs). Timeloop
    charges a port with the sum of its streams: the reads of W, of I and the read-modify-write reads of O's partial
    sums share the read budget (a level stating only a read bandwidth paces O's reads too), the fills and O's updates
    the write budget, and a shared port all of them; a max over the streams let the MIP leave the array idle where
    three streams, each alone within budget, together were not (a 1-word-per-cycle buffer feeding 3 MACs: 1.31x the
    cycles of a random map). Per instance:
    - a level feeding the MACs serves one word per temporal iteration for every MAC below it that needs different
      data (multicast and reduction are free); outputs also take one fill per tile visit;
    - a level whose child keeps the tensor serves the child's fills (`fills_of`, with the loop-order reuse above the
      child's tile), once per child instance that needs different data; O's updates are the child's fills too;
    - every level takes its own fills on the write port. Without the fills and the children's streams the MIP filled
      a write-bound buffer with strided inputs' bounding boxes or partial-sum tiles it never charged (a
      1-word-per-cycle regfile over 18 scratchpads: 138 cycles where timeloop-mapper's took 66, fuzz1_044 L1; an
      output buffer's 0.5-word port, fuzz1_056 L2: 1.43x), and a single shared-port buffer refetched the weights for
      every output (fuzz1_011 L2: 1.19x)."""
    arch = spec.arch
    n = spec.n_levels
    big = log2(max(spec.problem.macs, 2)) + 1
    rows = []
    for i, lv in enumerate(arch.levels[:-1]):
        if not (lv.read_bandwidth or lv.write_bandwidth):
            continue
        reads, writes = [], []
        for v in TENSORS:
            if v not in lv.keeps:
                continue
            word = log2(arch.element_bytes(v, lv))
            below = [c for c in range(i) if v in arch.levels[c].keeps]
            if below:
                c = below[-1]
                served = fills_of(c, v) + sum(spatial_at(j, RELEVANT[v]) for j in range(c + 1, i + 1))
                if v == "O":
                    writes.append(add_log_sum(m, f"writes_{i}", [served, fills_of(i, v)], dominant=True) + word)
                    # the child's fills are read from here too, all but each element's first visit (the partial sums
                    # it wrote back): without them a 0.5-word read port served 832 uncharged partial-sum reads to the
                    # output buffer below (S5 above it: 6,145 cycles where S5 below it takes 4,896, fuzz1_008 L0)
                    # (first visits: the tile times the loops above over O's dimensions; not this level's fills,
                    # whose reuse the MIP may decline to take, which made the read-backs vanish)
                    first = log_tile(v, i) + sum(temporal_at(j, RELEVANT[v]) for j in range(i + 1, n))
                    back = _readback_share(m, f"back_{i}", served - first, big)
                    reads.append(served + back + word)
                else:
                    reads.append(served + word)
                    writes.append(fills_of(i, v) + word)
                continue
            # The MACs keep nothing: a level feeding them serves every temporal iteration, exactly.
            served = sum(temporal_at(j, DIMS) for j in range(n)) + sum(spatial_at(j, RELEVANT[v]) for j in range(i + 1))
            if v == "I":
                served = served - spatial_at(0, ("P", "Q", "R", "S")) + _unrolled_windows(m, spec, spatial_at, i)
            if v == "O":
                # each visit of the output tile also writes it once (Timeloop's fill): writes = updates + fills,
                # the visits less the run of loops above that leave the tile in place (a 0.5-word write port under
                # DRAM's S7 R7 C5 loops innermost: 686 fills, not 168,070; the MIP charged timeloop-mapper's map
                # 1.8x its cycles, fuzz1_000 L2); every update but an element's first reads the old value back
                writes.append(add_log_sum(m, f"writes_{i}", [served, fills_of(i, v)], dominant=True) + word)
            else:
                writes.append(fills_of(i, v) + word)
            reads.append(served + word)
        ports = [(reads + writes, lv.read_bandwidth)] if lv.shared_bandwidth else [
            (reads, lv.read_bandwidth), (writes, lv.write_bandwidth)]
        for k, (streams, budget) in enumerate(ports):
            if not budget or not streams:
                continue
            total = streams[0] if len(streams) == 1 else add_log_sum(m, f"port_{i}_{k}", streams)
            rows.append(total - log2(budget))
    if rows:
        m.lat_onchip = pyo.Constraint(range(len(rows)), rule=lambda m, k: m.lat >= rows[k])


def _unrolled_windows(m: pyo.ConcreteModel, spec: CosaSpec, spatial_at, i: int):  # type: ignore[no-untyped-def]
    """log2 of the distinct input columns (rows) the MACs below level 0 read at once, per axis: an output and a filter
    dimension unrolled together along one axis read overlapping windows, (p - 1) + (r - 1) + 1 at unit stride and
    dilation, not p * r (3 MACs over S3 on a 1-word port: 27,456 input reads where p * r counts 74,880; fuzz1_023 L2).
    Bounded below by max(log p, log r, log p + log r - 1); with a stride or dilation the windows are taken as apart."""
    prob = spec.problem
    total = 0
    for axis, (p, r) in enumerate((("P", "R"), ("Q", "S"))):
        e = pyo.Var(within=pyo.NonNegativeReals)
        m.add_component(f"windows_{i}_{axis}", e)
        sp, sr = spatial_at(0, (p,)), spatial_at(0, (r,))
        unit = prob.stride[axis] == 1 and prob.dilation[axis] == 1
        rows = [sp, sr, sp + sr - 1] if unit else [sp + sr]
        m.add_component(f"windows_{i}_{axis}_lb", pyo.Constraint(range(len(rows)), rule=lambda m, k, e=e, rows=rows: e >= rows[k]))
        total = total + e
    return total


def _readback_share(m: pyo.ConcreteModel, name: str, excess: Any, big: float) -> Any:
    """log2 of the share of a stream of partial sums that reads an old value back, given `excess`, the log2 of the
    stream over its first touches: log2(1 - 2^-excess), through binaries spill[k] that are 1 once excess >= k (a lower
    bound, exact at whole powers of two; -big, no reads, where the stream touches each element once)."""
    steps = range(1, 6)
    spill = pyo.Var(steps, within=pyo.Binary)
    m.add_component(name, spill)
    m.add_component(name + "_on", pyo.Constraint(steps, rule=lambda m, k: big * spill[k] >= excess - k + 1e-3))
    m.add_component(name + "_nested", pyo.Constraint(steps[1:], rule=lambda m, k: spill[k] <= spill[k - 1]))
    return -big * (1 - spill[1]) + sum((_readback(k) - _readback(k - 1 if k > 1 else None)) * spill[k] for k in steps)


def _readback(k: int | None) -> float:
    """log2(1 - 2^-k): the share of k doublings of traffic that reads back partial sums (None: 0, no term)."""
    return 0.0 if k is None else math.log2(1 - 2.0 ** -k)


def _lse_planes(n: int) -> list[tuple[float, ...]]:
    """Weight vectors w at which log2(sum 2^a_i) is linearised: LSE(a) = max_w (w.a + H(w)) over the
    simplex (H = entropy in bits), so every w gives a valid lower bound and together they are tight to
    a few hundredths of a bit where it matters: equal weights, one or two dominant terms."""
    planes: set[tuple[float, ...]] = set()
    for i in range(n):
        planes.add(tuple(1.0 if j == i else 0.0 for j in range(n)))
        for share in (0.9, 0.75):
            rest = (1 - share) / (n - 1) if n > 1 else 0.0
            planes.add(tuple(share if j == i else rest for j in range(n)))
        for k in range(i + 1, n):
            for share in (0.5, 0.8, 0.2):
                planes.add(tuple(share if j == i else (1 - share) if j == k else 0.0 for j in range(n)))
    planes.add(tuple(1.0 / n for _ in range(n)))
    return sorted(planes)


def _entropy(w: tuple[float, ...]) -> float:
    return -sum(x * math.log2(x) for x in w if x > 0)


def _coarse_planes(n: int) -> list[tuple[float, ...]]:
    """Fewer tangent planes (each term alone, pairs and all at equal weight): a looser bound, a smaller MIP."""
    planes = {tuple(1.0 if j == i else 0.0 for j in range(n)) for i in range(n)}
    planes |= {tuple(0.5 if j in (i, k) else 0.0 for j in range(n)) for i in range(n) for k in range(i + 1, n)}
    planes.add(tuple(1.0 / n for _ in range(n)))
    return sorted(planes)


def _dominant_planes() -> list[tuple[float, ...]]:
    """Two terms, one of them a few percent of the other (a buffer's fills next to its updates): planes where
    that share is 0.5% to 5%, so the bound resolves the few percent that separate good plans there."""
    shares = (0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5)
    return sorted({(1.0 - x, x) for x in shares} | {(1.0, 0.0), (0.0, 1.0)})


def _pair_planes() -> list[tuple[float, ...]]:
    """Two terms, either one a small share of the sum (0.5% up): the bound resolves a stream that adds a few
    percent to a dominant one, which the coarse planes leave invisible."""
    shares = (0.0, 0.005, 0.01, 0.02, 0.035, 0.06, 0.1, 0.17, 0.3, 0.5)
    return sorted({(1.0 - x, x) for x in shares} | {(x, 1.0 - x) for x in shares})


def add_log_sum(
    m: pyo.ConcreteModel, name: str, args: list[Any], coarse: bool = False, dominant: bool = False,
    fine: bool = False,
) -> pyo.Var:
    """A variable bounded below by log2(sum_i 2^args_i), through tangent planes of the convex log-sum-exp."""
    if fine and len(args) > 2:
        # log-sum-exp is associative: bound the first two, then that bound and the next (few planes each)
        args = [add_log_sum(m, name + "_head", args[:-1], fine=True), args[-1]]
    v = pyo.Var(within=pyo.Reals)
    m.add_component(name, v)
    if fine:
        planes = _pair_planes() if len(args) == 2 else [(1.0,)]
    elif dominant and len(args) == 2:
        planes = _dominant_planes()
    else:
        planes = _coarse_planes(len(args)) if coarse else _lse_planes(len(args))
    m.add_component(
        name + "_planes",
        pyo.Constraint(
            range(len(planes)),
            rule=lambda m, k: v >= sum(w * a for w, a in zip(planes[k], args) if w > 0) + _entropy(planes[k]),
        ),
    )
    return v


def _library_latency(m: pyo.ConcreteModel, lib: LibraryTerms, ext, tiles, temporal_at, matmul_like: bool, out_elems: int) -> None:  # type: ignore[no-untyped-def]
    """Latency of library execution (cost.gemmini) in log space. Per call: DMA time = input and weight
    tile bytes at the effective bandwidth + one request per input pixel row and per weight row for every
    64 B of channels (+ this call's share of the output store); execute time = streamed rows + a fixed cost
    per compute instruction (one per DIM output columns of a row). A call costs the largest of the two and
    its issue time (the floor), plus a fixed cost; the layer costs calls x that. Sums are log-sum-exp, bounded by tangent
    planes; maxima are epigraphs."""
    calls = temporal_at(lib.top, DIMS)
    t = lib.tile_level
    d = log2(lib.dim)
    in_tile, w_tile = tiles[t, "I"], tiles[t, "W"]
    pixels = in_tile - ext("C", t)
    w_rows = ext("G", t) + ext("R", t) + ext("S", t) + ext("C", t)
    # An mvin row moves up to 64 B (several DIM-blocks on small arrays): requests per row = channels / 64 B.
    per_req = log2(lib.request_elems)
    m.req_in = pyo.Var(within=pyo.Reals)  # log input requests per call: pixels x max(1, C / request_elems)
    m.req_w = pyo.Var(within=pyo.Reals)
    m.req_in_lb = pyo.Constraint([0, 1], rule=lambda m, k: m.req_in >= pixels + (ext("C", t) - per_req if k else 0))
    m.req_w_lb = pyo.Constraint([0, 1], rule=lambda m, k: m.req_w >= w_rows + (ext("K", t) - per_req if k else 0))
    cpb = log2(lib.cycles_per_byte)
    dma_args = [in_tile + cpb, w_tile + cpb, log2(out_elems * lib.output_bytes) + cpb - calls]
    if lib.request_cycles > 0:
        rq = log2(lib.request_cycles)
        dma_args += [m.req_in + rq, m.req_w + rq]
    dma = add_log_sum(m, "call_dma", dma_args)
    rows = sum(temporal_at(j, DIMS) for j in range(lib.top))
    m.ops = pyo.Var(within=pyo.Reals)  # log compute instructions per call: rows / min(Q tile, DIM)
    # Rows streamed per instruction run along output columns (Q); a layer without Q, R and S is run as
    # a matmul, whose rows are its M (= P) rows.
    stream = "P" if matmul_like else "Q"
    m.ops_lb = pyo.Constraint([0, 1], rule=lambda m, k: m.ops >= rows - (d if k else ext(stream, t)))
    ex_args = [rows] + ([m.ops + log2(lib.op_cycles)] if lib.op_cycles > 0 else [])
    ex = add_log_sum(m, "call_execute", ex_args)
    m.call_busy = pyo.Var(within=pyo.Reals)
    m.call_busy_lb = pyo.Constraint([0, 1], rule=lambda m, k: m.call_busy >= (dma if k else ex))
    floor = lib.call_floor_matmul if matmul_like else lib.call_floor
    if floor > 0:  # a call lasts at least the host's time to issue it
        m.call_busy_floor = pyo.Constraint(expr=m.call_busy >= log2(floor))
    per_call = add_log_sum(m, "call_cycles", [m.call_busy] + ([log2(lib.call_cycles)] if lib.call_cycles > 0 else []))
    m.lat_library = pyo.Constraint(expr=m.lat >= calls + per_call)
