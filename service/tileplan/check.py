"""Legality of a mapping on a hardware descriptor: run on every plan from every mapper.

Returns readable violations ("Scratchpad holds 300 KiB of I+W, capacity 256 KiB"); an empty list
means the mapping is legal.
"""

from __future__ import annotations

import math

from tileplan.dims import DIMS, TENSORS
from tileplan.execution import library_levels
from tileplan.hardware import Architecture, HardwareDescriptor
from tileplan.hardware.model import mesh_split
from tileplan.loop_constraints import violations as loop_violations
from tileplan.mapping import Mapping
from tileplan.problem import Problem
from tileplan.units import format_size


def footprint(problem: Problem, arch: Architecture, mapping: Mapping, level: int) -> dict[str, float]:
    """Bytes per instance each kept tensor occupies at `level` (doubled where double buffered); for
    memory-utilisation scores."""
    problem = problem.mapped_by(mapping.group_pack).for_hardware(arch.hardware.input_tiles)
    lv = arch.levels[level]
    tiles = mapping.level_tiles()[level]
    db = set(mapping.double_buffered.get(lv.name, []))
    return {
        t: problem.tile_elements(t, tiles) * arch.element_bytes(t, lv) * (2 if t in db else 1)
        for t in TENSORS
        if t in lv.keeps
    }


def check(problem: Problem, hw: HardwareDescriptor, mapping: Mapping) -> list[str]:
    """All the ways `mapping` is illegal for `problem` on `hw` (empty: legal)."""
    try:
        arch = hw.resolve(mapping.dataflow)
    except ValueError as exc:
        return [f"dataflow: {exc}"]
    return check_arch(problem, arch, mapping)


def check_arch(problem: Problem, arch: Architecture, mapping: Mapping) -> list[str]:
    out: list[str] = []
    names = [lv.name for lv in arch.levels]
    got = [lv.name for lv in mapping.levels]
    if got != names:
        return [f"levels must be {names} (innermost first), got {got}"]
    try:
        problem = problem.mapped_by(mapping.group_pack)  # packed groups: the factors are the packed layer's
    except ValueError as exc:
        return [f"group_pack: {exc}"]

    bounds = mapping.bounds()
    padded_dims: dict[str, int] = dict(mapping.padded_dims.items())
    for d in DIMS:
        want = problem.dims[d]
        padded = padded_dims.get(d)
        if padded is not None:
            if padded < want:
                out.append(f"padded_dims.{d}={padded} is smaller than the bound {want}")
            elif bounds[d] != padded:
                out.append(f"factors of {d} multiply to {bounds[d]}, padded bound is {padded}")
        elif bounds[d] != want:
            out.append(f"factors of {d} multiply to {bounds[d]}, bound is {want}")

    for lv, m in zip(arch.levels, mapping.levels):
        if m.spatial_total > lv.fanout:
            out.append(f"{lv.name} unrolls {m.spatial_total} ways, fan-out is {lv.fanout}")
        for d, _ in m.spatial:
            if d not in lv.spatial_dims:
                out.append(f"{lv.name} cannot unroll {d} (allowed: {''.join(sorted(lv.spatial_dims)) or 'none'})")
        x, y = arch.fanout_xy(lv.index)
        if y > 1 and m.spatial_total <= lv.fanout and mesh_split(list(m.spatial), x, y) is None:
            out.append(f"{lv.name} unrolls {m.spatial_total} ways, which no split fits on its {x}x{y} mesh (X by Y)")
        if lv.is_backing_store and m.spatial and lv.fanout == 1:
            out.append(f"{lv.name} has no fan-out to unroll across")
        if len({d for d, _ in m.temporal}) != len(m.temporal):
            out.append(f"{lv.name} lists a temporal dimension twice; merge its factors")

    for lname, tensors in mapping.double_buffered.items():
        if lname not in names:
            out.append(f"double_buffered names unknown level {lname!r}")
            continue
        lv = arch.level(lname)
        if lv.buffer_count < 2 and tensors:
            out.append(f"{lname} cannot double buffer (buffer_count 1)")
        for t in tensors:
            if t not in lv.keeps:
                out.append(f"{lname} double buffers {t}, which it does not keep")

    if out:
        return out  # capacities are meaningless while the factors are wrong
    out += loop_violations(arch, mapping, bounds)  # a Timeloop file's own loop constraints

    tiles = mapping.level_tiles()  # (what `nest.analyse` reads as each level's tile)
    db: dict[int, frozenset[str]] = {i: frozenset(mapping.double_buffered.get(lv.name, [])) for i, lv in enumerate(arch.levels)}
    for i in range(len(arch.levels)):
        out += level_violations(problem, arch, i, tiles[i], db[i])
    out += utilization_violations(problem, arch, mapping)
    out += call_violations(problem, arch, tiles, db)
    return out


def level_violations(
    problem: Problem, arch: Architecture, level: int, tile: dict[str, int], db: frozenset[str] = frozenset()
) -> list[str]:
    """What does not fit at one level, holding `tile` (extent per dimension) with `db` double buffered.
    The one place capacities are judged: the checker and the search mappers' incremental legality."""
    problem = problem.for_hardware(arch.hardware.input_tiles)
    lv = arch.levels[level]
    out = [
        f"{lv.name} holds a tile of {d}={tile[d]}, limit {limit}" for d, limit in lv.max_tile.items() if tile[d] > limit
    ]
    if lv.capacity is None:
        return out
    fp = {
        t: problem.tile_elements(t, tile) * arch.element_bytes(t, lv) * (2 if t in db else 1)
        for t in TENSORS
        if t in lv.keeps
    }
    if lv.partition:
        for t, share in lv.partition.items():
            room = lv.capacity * share
            if fp[t] > room + 1e-9:
                out.append(f"{lv.name} holds {format_size(fp[t])} of {t}, its share is {format_size(room)}")
    else:
        total = sum(fp.values())
        if total > lv.capacity + 1e-9:
            kept = "+".join(t for t in ("I", "W", "O") if t in lv.keeps)
            out.append(f"{lv.name} holds {format_size(total)} of {kept}, capacity {format_size(lv.capacity)}")
    return out


def call_violations(
    problem: Problem, arch: Architecture, tiles: list[dict[str, int]], db: dict[int, frozenset[str]]
) -> list[str]:
    """Library execution (tileplan.execution): one call keeps its whole output tile, everything below
    DRAM, in the accumulator."""
    lib = library_levels(arch)
    if lib is None:
        return []
    acc = arch.levels[lib.accumulator]
    assert acc.capacity is not None
    copies = 2 if "O" in db.get(lib.accumulator, frozenset()) else 1
    need = problem.tile_elements("O", tiles[lib.scratchpad]) * arch.element_bytes("O", acc) * copies
    room = acc.capacity * acc.instances
    if need > room + 1e-9:
        return [
            f"{acc.name} holds {format_size(need)} of O for one call (the tile below DRAM), "
            f"capacity {format_size(room)}"
        ]
    return []


MIN_UTILIZATION = "less than constrained minimum utilization"


def utilization_deficits(problem: Problem, arch: Architecture, mapping: Mapping) -> dict[int, tuple[float, float]]:
    """Per level whose kept tiles fill less than its min-utilization share of its usable words, as timeloop-model
    judges it (it refuses such a map): (words filled, words needed). The one place the rule is computed (the checker,
    the mappers' growth towards it and the Timeloop verdict all ask here). A level Tileplan splits where the source
    file does not (Gemmini's one accumulator over the columns) is judged as the source has it: one instance holding
    the union of its slices' tiles, with all their words."""
    problem = problem.for_hardware(arch.hardware.input_tiles)
    tiles = mapping.level_tiles()
    out: dict[int, tuple[float, float]] = {}
    for i, lv in enumerate(arch.levels):
        if not lv.min_utilization or lv.capacity is None:
            continue
        tile = dict(tiles[i])
        entries = math.floor(lv.capacity / lv.word_bytes + 1e-9)
        source = arch.hardware.memory_levels[i].source_instances
        if source is not None and i + 1 < len(arch.levels):
            for d, f in mapping.levels[i + 1].spatial:
                tile[d] *= f
            entries *= lv.instances // source
        words = sum(problem.tile_elements(t, tile) * arch.element_bytes(t, lv) for t in TENSORS
                    if t in lv.keeps) / lv.word_bytes
        need = entries * lv.min_utilization
        if words < need - 1e-9:
            out[i] = (words, need)
    return out


def utilization_violations(problem: Problem, arch: Architecture, mapping: Mapping) -> list[str]:
    return [f"{arch.levels[i].name}: mapped tile size {words:g} is {MIN_UTILIZATION} {need:g}"
            for i, (words, need) in utilization_deficits(problem, arch, mapping).items()]
