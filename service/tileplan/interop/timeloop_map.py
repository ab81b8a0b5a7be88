"""Timeloop mapping YAML <-> contract Mappings, plus the problem and architecture files timeloop-model
needs next to it.

The form is the one timeloop-model reads and CoSA writes (data/timeloop_examples/simba_conv1_map.yaml):
`mapping:` is a list; per storage level, innermost first, a `spatial` entry (levels with a fan-out)
and a `temporal` entry, each with all seven CNN-layer dimensions in `factors` ("R=1 S=1 P=1 Q=7 C=1
K=1 N=1") and a `permutation` written innermost loop first; then one `bypass` entry per level with the
tensors it `keep`s and those it `bypass`es (Weights, Inputs, Outputs). Timeloop's spatial entry at a
level is the fan-out below it, which is exactly the contract's `spatial` at that level.

Permutations: dimensions with a factor > 1 take their loop order; dimensions with factor 1 keep the
canonical R S P Q C K N positions (so CoSA's files, which write RSPQCKN everywhere, round-trip to the
same text).

Tileplan's groups dimension G has no counterpart in Timeloop's CNN layer, so a grouped (or depthwise) conv is
exported with a problem shape of its own, the CNN layer plus a dimension G that indexes all three data spaces, and
its mappings carry G factors: Timeloop scores it exactly. `fold_groups=True` instead folds every G factor into N at
the same level and place, for tools that only know the CNN layer; the folded problem treats the weights as shared
across groups, so Timeloop under-counts weight capacity and traffic by up to G times (the returned notes say so). Timeloop has no padding either: a
mapping with `padded_dims` describes the padded problem, and `to_timeloop_problem(problem, mapping)`
writes those padded bounds.

Axes: Tileplan's P/R are output/filter rows with stride[0]; Timeloop's CNN layer pairs R with P under
`Wstride`/`Wdilation`, so stride[0] is written as Wstride and stride[1] (Q/S) as Hstride.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from tileplan.errors import InputError
from tileplan.hardware import Architecture, HardwareDescriptor
from tileplan.hardware.model import mesh_split
from tileplan.hardware.timeloop import to_timeloop_arch
from tileplan.loop_constraints import x_loops
from tileplan.mapping import LevelMapping, Mapping
from tileplan.problem import Problem

TL_DIMS = ("R", "S", "P", "Q", "C", "K", "N")
TL_TENSORS = (("W", "Weights"), ("I", "Inputs"), ("O", "Outputs"))
_TENSOR_OF = {tl: t for t, tl in TL_TENSORS}
_FACTOR = re.compile(r"^([A-Za-z])\s*=?\s*(\d+)$")  # "R=3" (CoSA) or "R3" (timeloop-mapper)


def _fold(factors: list[tuple[str, int]], fold_groups: bool, where: str, notes: list[str]) -> list[tuple[str, int]]:
    """G factors merged into N (at the innermost of the two positions) with `fold_groups`, else kept."""
    g = math.prod(f for d, f in factors if d == "G")
    if g == 1:
        return [(d, f) for d, f in factors if d != "G"]
    if not fold_groups:
        return factors
    notes.append(f"{where}: G={g} folded into N (Timeloop then sees weights shared across groups)")
    out: list[tuple[str, int]] = []
    merged = False
    for d, f in factors:
        if d in ("G", "N"):
            if not merged:
                out.append(("N", math.prod(x for dd, x in factors if dd in ("G", "N"))))
                merged = True
            continue
        out.append((d, f))
    return out


def _factor_string(factors: list[tuple[str, int]], dims: tuple[str, ...] = TL_DIMS) -> str:
    per = {d: 1 for d in dims}
    for d, f in factors:
        per[d] *= f
    return " ".join(f"{d}={per[d]}" for d in dims)


def _permutation(loops: list[tuple[str, int]], dims: tuple[str, ...] = TL_DIMS) -> str:
    """Loop dims (innermost first) in the slots of the canonical order that non-unit dims occupy."""
    order = [d for d, f in loops if f > 1]
    active = set(order)
    it = iter(order)
    return "".join(next(it) if d in active else d for d in dims)


def to_timeloop_mapping(
    mapping: Mapping, hw: HardwareDescriptor | Architecture, fold_groups: bool = False, notes: list[str] | None = None
) -> dict[str, Any]:
    """The mapping as a Timeloop mapping document ({"mapping": [...]})."""
    arch = hw if isinstance(hw, Architecture) else hw.resolve(mapping.dataflow)
    notes = notes if notes is not None else []
    names = [lv.name for lv in arch.levels]
    got = [lv.name for lv in mapping.levels]
    if got != names:
        raise InputError(("mapping", "levels"), f"levels must be {names} (innermost first), got {got}")
    entries: list[dict[str, Any]] = []
    dims = TL_DIMS + ("G",) if mapping.bounds()["G"] > 1 and not fold_groups else TL_DIMS
    spatials = [_fold(list(m.spatial), fold_groups, f"{lv.name} spatial", notes)
                for lv, m in zip(arch.levels, mapping.levels)]
    source_fanout = _source_fanouts(arch.hardware)
    for i, (lv, m) in enumerate(zip(arch.levels, mapping.levels)):
        temporal = _fold(list(m.temporal), fold_groups, f"{lv.name} temporal", notes)
        fx, fy = arch.fanout_xy(i)
        xs, ys = _along_mesh(spatials[i], fx, fy, lv.name)
        if fy > 1 and arch.hardware.constraints.loops.get(lv.name, {}).get("spatial") is not None:
            xs = x_loops(arch, i, spatials[i])  # (the file's spatial split, where one fits)
            ys = [x for x in spatials[i] if x not in xs]
        below = arch.hardware.memory_levels[i].source_instances
        if below is not None and below < lv.instances and i + 1 < len(arch.levels):
            # The source file has one level where Tileplan splits it over the fan-out of the level above (Gemmini's
            # accumulator per column): that fan-out is the X part of this level's entry, its own the Y part.
            xs = spatials[i + 1]
        if source_fanout[i] > 1:
            entries.append(_spatial_entry(lv.name, xs, ys, split=fy > 1 or bool(ys), dims=dims))
        entries.append({"factors": _factor_string(temporal, dims), "permutation": _permutation(temporal, dims),
                        "target": lv.name, "type": "temporal"})
    for lv in arch.levels:
        entries.append({
            "bypass": [tl for t, tl in TL_TENSORS if t not in lv.keeps],
            "keep": [tl for t, tl in TL_TENSORS if t in lv.keeps],
            "target": lv.name,
            "type": "bypass",
        })
    if mapping.padded_dims:
        notes.append(
            "padded bounds " + ", ".join(f"{d}={v}" for d, v in sorted(mapping.padded_dims.items()))
            + ": Timeloop has no padding, so the problem this map goes with is the padded one (a bundle's is; "
            "to_timeloop_problem(problem, mapping) writes it)"
        )
    if mapping.double_buffered:
        notes.append("double buffering has no Timeloop mapping field; it is not exported")
    return {"mapping": entries}


def _along_mesh(
    spatial: list[tuple[str, int]], fx: int, fy: int, where: str
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """A level's spatial factors as (along X, along Y) of its fan-out (all along X on a 1-D fan-out)."""
    if fy <= 1:
        return spatial, []
    split = mesh_split(spatial, fx, fy)
    if split is None:
        raise InputError(("mapping", "levels"), f"{where}: spatial factors {spatial} fit no X/Y split of its "
                         f"{fx}x{fy} mesh")
    return split


def _spatial_entry(target: str, xs: list[tuple[str, int]], ys: list[tuple[str, int]], split: bool,
                   dims: tuple[str, ...] = TL_DIMS) -> dict[str, Any]:
    """A spatial entry whose permutation lists the X factors first, in the mapping's order (the first varies fastest
    across the instances, which decides Timeloop's mesh neighbours); with `split`, Timeloop's `split` puts exactly
    those along X and the rest along Y."""
    entry: dict[str, Any] = {"factors": _factor_string(xs + ys, dims), "permutation": _permutation(xs + ys, dims),
                             "target": target, "type": "spatial"}
    if split:
        first = [d for d, _ in xs]
        then = [d for d, _ in ys if d not in first]
        entry["permutation"] = "".join(first + then + [d for d in dims if d not in first and d not in then])
        entry["split"] = len(first)
    return entry


def dump_mapping_yaml(doc: dict[str, Any]) -> str:
    """YAML text in the layout of CoSA's / timeloop-model's mapping files."""
    return yaml.safe_dump(doc, sort_keys=True, default_flow_style=False)


# timeloop-model's reading of a factors string (mapping/parser.cpp): every `D=n` (or `Dn`, `D = n`) anywhere in it,
# with an optional residual `D=n,r`; the last statement of a dimension wins
_TL_FACTOR = re.compile(r"([A-Za-z]+)\s*=*\s*([0-9]+)(,([0-9]+))?")
# the order in which timeloop-model completes a partial permutation: the problem shape's dimensions, as Tileplan
# writes the CNN layer (to_timeloop_problem) and its groups dimension
SHAPE_ORDER = ("C", "K", "R", "S", "N", "P", "Q", "G")


def _parse_factors(value: Any, loc: tuple[str | int, ...], bounds: dict[str, int] | None = None) -> dict[str, int]:
    """Per dimension, the factor the entry states: 0 is the whole dimension (`bounds`), a residual other than the
    factor is refused (an imperfect factorization, which Tileplan does not model)."""
    out: dict[str, int] = {}
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, str):
        items = []
        for m in _TL_FACTOR.finditer(value):
            if m.group(4) is not None and int(m.group(4)) != int(m.group(2)):
                raise InputError(loc, f"{m.group(0)!r}: a residual factor (an imperfect factorization, which "
                                 "timeloop-model reads) is not modelled by Tileplan")
            items.append((m.group(1), m.group(2)))
    elif value is None:
        items = []
    else:
        raise InputError(loc, "must be a string like 'R=1 S=1 P=7 ...' or a mapping of dimension to factor")
    for d, v in items:
        d = d.upper()
        if d not in TL_DIMS and d != "G":
            raise InputError(loc, f"unknown dimension {d!r}; Timeloop's CNN layer has {' '.join(TL_DIMS)}")
        try:
            f = int(v)
        except (TypeError, ValueError):
            raise InputError(loc, f"factor of {d} must be a whole number, got {v!r}") from None
        if f == 0 and bounds is not None and isinstance(value, str):
            f = bounds.get(d, 1)  # (timeloop-model: 'Interpreting 0 to mean full problem dimension')
        if f < 1:
            raise InputError(loc, f"factor of {d} must be positive, got {f}")
        out[d] = f if isinstance(value, str) else out.get(d, 1) * f
    return out


_UNMODELLED_DIRECTIVES = ("no_link_transfer", "no_multicast_no_reduction", "no_temporal_reuse")


def _keep_sets(entries: list[tuple[int, dict[str, Any]]], names: list[str]) -> dict[str, frozenset[str]]:
    """Per level, what timeloop-model keeps there under the file's bypass entries: every tensor no entry bypasses
    (a level with no entry keeps all three; a `keep` list alone bypasses nothing)."""
    bypassed: dict[str, set[str]] = {n: set() for n in names}
    for i, e in entries:
        loc = ("mapping", i)
        target = e.get("target")
        if target not in names:
            raise InputError(loc + ("target",), f"unknown level {target!r}; the hardware has {names}")
        for key in ("keep", "bypass"):
            val = e.get(key) or []
            if not isinstance(val, list):
                raise InputError(loc + (key,), "must be a list of Weights / Inputs / Outputs")
            for t in val:
                if t not in _TENSOR_OF:
                    raise InputError(loc + (key,), f"unknown data space {t!r}; one of Weights, Inputs, Outputs")
                if key == "keep":
                    bypassed[target].discard(_TENSOR_OF[t])
                else:
                    bypassed[target].add(_TENSOR_OF[t])
    return {n: frozenset(t for t in ("W", "I", "O") if t not in bypassed[n]) for n in names}


@dataclass
class TimeloopMap:
    """A Timeloop mapping file read onto a descriptor: the contract Mapping, the factors each level's spatial
    entry puts along the mesh's X axis (Timeloop's `split`), and what in the file's structure Timeloop itself
    would refuse (a spatial entry where the source hardware has no fan-out)."""

    mapping: Mapping
    along_x: dict[str, list[tuple[str, int]]]
    structure_errors: list[str]


def _source_fanouts(hw: HardwareDescriptor) -> list[int]:
    """Fan-out of each level in the Timeloop source's structure (its own instance counts)."""
    counts = [lv.source_instances or lv.instances for lv in hw.memory_levels]
    below = [hw.pe_array.macs] + counts[:-1]
    return [b // c for b, c in zip(below, counts)]


def from_timeloop_mapping(
    data: dict[str, Any] | list[Any] | str, hw: HardwareDescriptor, problem: Problem, dataflow: str | None = None
) -> Mapping:
    """A contract Mapping from a Timeloop mapping (parsed YAML or text) for `problem` on `hw`.

    The dataflow is the named one, or the first whose keep-sets match the file's bypass entries. Factors
    multiplying past a bound become `padded_dims`; short ones are an error."""
    return read_timeloop_mapping(data, hw, problem, dataflow).mapping


def read_timeloop_mapping(
    data: dict[str, Any] | list[Any] | str, hw: HardwareDescriptor, problem: Problem, dataflow: str | None = None
) -> TimeloopMap:
    """`from_timeloop_mapping` with the file's mesh splits and structural problems (see TimeloopMap). A level the
    descriptor splits where the source does not (`source_instances`, Gemmini's accumulator) takes the Y part of
    the file's spatial entry, the level above it the X part."""
    if isinstance(data, str):
        try:
            data = yaml.safe_load(data)
        except yaml.YAMLError:
            raise InputError(("mapping",), "not valid YAML") from None
    entries = data.get("mapping") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise InputError(("mapping",), "a Timeloop mapping has a list under 'mapping'")
    candidates = [dataflow] if dataflow is not None else hw.dataflow_names
    names = [lv.name for lv in hw.memory_levels]
    bypass = [(i, e) for i, e in enumerate(entries) if isinstance(e, dict) and e.get("type") in ("bypass", "datatype")]
    keeps = _keep_sets(bypass, names)
    arch = None
    for name in candidates:
        a = hw.resolve(name)
        if all(a.level(t).keeps == k for t, k in keeps.items()):
            arch = a
            break
    if arch is None:
        want = {t: "".join(x for x in "WIO" if x in k) for t, k in keeps.items()}
        raise InputError(("mapping",), f"the file's keep/bypass sets {want} match no dataflow of {hw.name} ({candidates})")

    temporal: dict[str, list[tuple[str, int]]] = {n: [] for n in names}
    spatial: dict[str, list[tuple[str, int]]] = {n: [] for n in names}
    along_x: dict[str, list[tuple[str, int]]] = {}
    errors: list[str] = []
    source_fanout = dict(zip(names, _source_fanouts(hw)))
    spatial_errors: dict[str, str] = {}
    for i, e in enumerate(entries):
        loc: tuple[str | int, ...] = ("mapping", i)
        if not isinstance(e, dict):
            raise InputError(loc, "an entry is a mapping with target, type, factors, permutation")
        kind = e.get("type")
        if kind in ("bypass", "datatype"):
            continue
        if kind == "skew":
            raise InputError(loc + ("type",), "skew: a skewed loop nest (timeloop-model reads it) is not modelled by "
                             "Tileplan")
        if kind not in ("temporal", "spatial"):
            raise InputError(loc + ("type",), f"must be temporal, spatial or bypass, got {kind!r}")
        for key in _UNMODELLED_DIRECTIVES:
            if e.get(key):
                raise InputError(loc + (key,), f"{e[key]!r}: {key} changes what timeloop-model counts (links, "
                                 "multicast, reuse) in a way Tileplan does not model")
        target = e.get("target")
        if target not in names:
            raise InputError(loc + ("target",), f"unknown level {target!r}; the hardware has {names}")
        # (a level's entry stated again replaces the first, as timeloop-model reads it)
        factors = _parse_factors(e.get("factors", ""), loc + ("factors",), problem.dims)
        perm = str(e.get("permutation", "") or "").replace(" ", "").upper()
        for d in perm:
            if d not in TL_DIMS and d != "G":
                raise InputError(loc + ("permutation",), f"unknown dimension {d!r}")
        # a partial permutation is completed in the shape's order, as timeloop-model completes it
        order = list(dict.fromkeys(perm))
        order += [d for d in SHAPE_ORDER if d not in order]
        if kind == "spatial":
            spatial_errors.pop(target, None)
            if source_fanout[target] == 1:
                spatial_errors[target] = (f"no spatial tiling level for storage level {target}: the level below it has "
                                          "as many instances (no fan-out to unroll across)")
            split = e.get("split", len(order))
            if not isinstance(split, int) or split < 0:
                raise InputError(loc + ("split",), f"must be a whole number >= 0, got {split!r}")
            used = [(d, factors[d]) for d in order if factors.get(d, 1) > 1]
            xs = [(d, factors[d]) for d in order[:split] if factors.get(d, 1) > 1]
            spatial[target], along_x[target] = used, xs
            continue
        temporal[target] = [(d, factors[d]) for d in order if factors.get(d, 1) > 1]
    errors += list(spatial_errors.values())

    for k, lv in enumerate(hw.memory_levels[:-1]):
        if lv.source_instances is not None and lv.source_instances < lv.instances and not spatial[names[k + 1]]:
            # Tileplan splits this level over the fan-out of the one above: the X part of the file's entry is that
            # fan-out, the Y part stays here (see hardware.timeloop's Gemmini conventions).
            up = names[k + 1]
            xs = along_x.get(lv.name, [])
            ys = list(spatial[lv.name])
            for xf in xs:
                ys.remove(xf)
            spatial[up], along_x[up] = xs, xs
            spatial[lv.name], along_x[lv.name] = ys, []

    mapping = Mapping(
        levels=[LevelMapping(name=n, temporal=temporal[n], spatial=spatial[n]) for n in names],  # type: ignore[arg-type]
        dataflow=arch.dataflow,
    )
    bounds = mapping.bounds()
    padded = {}
    for d, bound in problem.dims.items():
        if bounds[d] < bound:
            raise InputError(("mapping",), f"factors of {d} multiply to {bounds[d]}, the layer's bound is {bound}")
        if bounds[d] > bound:
            padded[d] = bounds[d]
    if padded:
        mapping = mapping.model_copy(update={"padded_dims": padded})
    return TimeloopMap(mapping, along_x, errors)


def timeloop_verdict(
    data: dict[str, Any] | list[Any] | str, hw: HardwareDescriptor, problem: Problem
) -> tuple[Mapping | None, list[str]]:
    """What timeloop-model says of a mapping file for `problem` on `hw`: (the mapping, []) when it accepts it,
    (the mapping or None, the reasons) when it rejects it. A file that cannot be read raises InputError."""
    from tileplan.cost.timeloop import timeloop_violations

    try:
        tm = read_timeloop_mapping(data, hw, problem)
    except InputError as exc:
        if "multiply to" in str(exc):
            return None, [str(exc)]
        raise
    if tm.structure_errors:
        return tm.mapping, tm.structure_errors
    arch = hw.resolve(tm.mapping.dataflow)
    return tm.mapping, timeloop_violations(problem, arch, tm.mapping, tm.along_x)


def to_timeloop_problem(problem: Problem, mapping: Mapping | None = None, fold_groups: bool = False) -> dict[str, Any]:
    """The layer as a Timeloop CNN-Layer problem (padded bounds when a mapping pads); a grouped conv as the CNN layer
    plus a groups dimension G over all three data spaces (or, with `fold_groups`, G folded into N)."""
    dims: dict[str, int] = dict(problem.dims)
    if mapping is not None:
        dims.update(mapping.padded_dims.items())
    grouped = dims["G"] > 1 and not fold_groups
    if dims["G"] > 1 and fold_groups:
        dims["N"] *= dims["G"]
    names = ["C", "K", "R", "S", "N", "P", "Q"] + (["G"] if grouped else [])
    instance = {d: dims[d] for d in names}
    instance.update({"Wstride": problem.stride[0], "Hstride": problem.stride[1],
                     "Wdilation": problem.dilation[0], "Hdilation": problem.dilation[1]})
    g: list[list[list[str]]] = [[["G"]]] if grouped else []
    shape = {
        "name": "CNN-Layer-Grouped" if grouped else "CNN-Layer",
        "dimensions": names,
        "coefficients": [{"name": c, "default": 1} for c in ("Wstride", "Hstride", "Wdilation", "Hdilation")],
        "data-spaces": [
            {"name": "Weights", "projection": g + [[["C"]], [["K"]], [["R"]], [["S"]]]},
            {"name": "Inputs", "projection": [[["N"]]] + g + [[["C"]], [["R", "Wdilation"], ["P", "Wstride"]],
                                                              [["S", "Hdilation"], ["Q", "Hstride"]]]},
            {"name": "Outputs", "projection": [[["N"]]] + g + [[["K"]], [["Q"]], [["P"]]], "read-write": True},
        ],
    }
    return {"problem": {"shape": shape, "instance": instance}}


def to_timeloop_bundle(
    problem: Problem, hw: HardwareDescriptor, mapping: Mapping, fold_groups: bool = False,
    notes: list[str] | None = None,
) -> str:
    """Architecture, problem and mapping in one YAML document, as timeloop-model takes them. A padded plan's
    problem is the padded one, and the bundle's first line says so (a YAML comment: Timeloop reads no such field);
    so is a plan that packs groups (`Mapping.group_pack`: the problem is the packed one, block-diagonal weights
    counted as dense)."""
    problem = problem.mapped_by(mapping.group_pack)
    doc = to_timeloop_arch(hw, hint=False)
    doc.update(to_timeloop_problem(problem, mapping, fold_groups))
    doc.update(to_timeloop_mapping(mapping, hw, fold_groups, notes))
    head = ""
    if problem.group_pack > 1:
        head += (f"# packed problem: {problem.group_pack} groups per group, each weight tile block-diagonal (Timeloop "
                 "counts its zeros as MACs, as the plan's array runs them)\n")
    if mapping.padded_dims:
        head += "# padded problem: " + ", ".join(
            f"{d} {problem.dims[d]} -> {v}" for d, v in sorted(mapping.padded_dims.items())
        ) + " (the plan pads these bounds; Timeloop has no padding, so the problem below is the padded one)\n"
    return head + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
