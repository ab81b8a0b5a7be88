"""Timeloop architecture YAML <-> Tileplan descriptors.

Import (`from_timeloop`) reads both forms Timeloop has used:
- v0.3 `architecture: {version: 0.3, subtree: [...]}`: nested subtrees, outermost first; a name such as
  `PECols[0..15]` means 16 copies of everything below it; each subtree's `local:` lists its storage
  (outer to inner) and compute (`class: intmac`, ...) components with their `attributes`.
- legacy `arch: {arithmetic: {...}, storage: [...]}`: storage listed innermost first, attributes inline.

Per storage level: entries (or depth x block-size, or sizeKB), word-bits (16 unless stated, as in Timeloop), instances (stated, or
the product of the enclosing `[a..b]` counts); capacity = entries x word-bits / 8 x instances bytes.
block-size and cluster-size are stated or follow from `width` = word-bits x block-size x cluster-size, as
timeloop-model derives them; they, the array's size and the technology (DRAM for the backing store) price
accesses under Timeloop's energy table, unless the file states `vector-access-energy` (pJ per block access;
arithmetic `energy`: pJ per MAC), which then replaces the table, as in Timeloop. The inferred network below a level
is priced from its `energy-per-hop`, else `wire-energy` (pJ per bit per mm) x its word bits x `tile-width` (um; else
the floorplan's tile width from the arithmetic's `area` and levels' `cluster-area`), and `router-energy`
(`network`: pJ per word per hop and per router).
Bandwidths are words per cycle per instance in Timeloop (`shared_bandwidth`, `read_bandwidth`,
`write_bandwidth`; legacy `bandwidth`) and bytes in Tileplan. The outermost level is the backing store.

Timeloop's architecture does not say which tensor a level keeps (its mapping's bypass lists do); the importer
reads the file's own `datatype` / `bypass` constraints (`architecture_constraints`, `mapspace_constraints` or the
legacy `mapspace: {constraints}`: a level keeps what they do not bypass), else infers keep-sets from level names,
following the Gemmini and Simba conventions (Registers: W, Accumulator* / AccumulationBuffer: O, Scratchpad: I+W,
WeightBuffer: W, InputBuffer: I, GlobalBuffer: I+O), else keeps all three (timeloop-model's default: it keeps what
a map does not bypass), and an optional top-level `tileplan:` block overrides or completes anything:

    tileplan:
      pe_array: {rows: 16, cols: 16, acc_dtype: int32}      # merged into the inferred pe_array
      dataflows: [{name: weight_stationary, levels: {...}}]  # replaces the inferred dataflows
      levels:
        Scratchpad: {keeps: [I, W], spatial_dims: [K], buffer_count: 2, partition: {I: 0.5, W: 0.5}}
      constraints: {...}
      cost_params: {...}

Gemmini-shaped hierarchies ([Registers W] -> Accumulator O -> Scratchpad I+W -> DRAM) get Gemmini's
conventions, as in the catalog: one accumulator slice per array column (DOSA's legacy file states
one 64 KiB accumulator instance; it is split over the columns, total capacity unchanged), the
accumulator's fan-out over the rows unrolls C and the scratchpad's over the columns K under the
weight-stationary dataflow (plus output-stationary when the PE registers are accumulator-wide), and
both buffers double-buffer (loop_ws / loop_conv_ws do).

Export (`to_timeloop_arch`) writes a descriptor as v0.3 YAML with the fan-outs as nested subtrees and
a `tileplan:` block, so the round trip is exact and the file feeds timeloop-model (a level's own energies as
Timeloop's attributes: vector-access-energy, addr-gen-energy, energy-per-hop, router-energy; the rest is
Accelergy's business).
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from tileplan.errors import InputError
from tileplan.hardware.model import DTYPE_BITS, MAX_INSTANCES, MAX_PES, HardwareDescriptor

Loc = tuple[str | int, ...]

_RANGE = re.compile(r"^\s*(?P<base>[^\[\]]*?)\s*(\[\s*(?P<lo>\d+)\s*\.\.\s*(?P<hi>\d+)\s*\])?\s*$")

# Keep-sets by level name (lower-case, letters and digits only), most specific first.
_KEEP_RULES: tuple[tuple[str, list[str]], ...] = (
    ("weightbuffer", ["W"]),
    ("weightreg", ["W"]),
    ("inputbuffer", ["I"]),
    ("outputbuffer", ["O"]),
    ("globalbuffer", ["I", "O"]),
    ("accumulat", ["O"]),  # Accumulator, AccumulationBuffer
    ("psum", ["O"]),
    ("scratchpad", ["I", "W"]),
    ("register", ["W"]),
)


_TL_TENSORS = {"Weights": "W", "Inputs": "I", "Outputs": "O"}


def _model_constraint_block(data: dict[str, Any]) -> list[tuple[Loc, Any]]:
    """The one block of constraints timeloop-model itself reads and checks every map against: the architecture's own
    `constraints`, else `arch_constraints`, else `architecture_constraints` (the mapper also reads
    `mapspace_constraints`; the model does not)."""
    key = "arch" if "arch" in data else "architecture"
    arch = data.get(key)
    if isinstance(arch, dict) and arch.get("constraints") is not None:
        return [((key, "constraints"), arch["constraints"])]
    for name in ("arch_constraints", "architecture_constraints"):
        if data.get(name) is not None:
            return [((name,), data[name])]
    return []


def _constraint_entries(data: dict[str, Any], model_only: bool = False) -> list[tuple[Loc, dict[str, Any]]]:
    """The file's own constraints, wherever Timeloop reads them: the architecture's `constraints`,
    `arch_constraints`, `architecture_constraints` or `mapspace_constraints` (a list, or `{targets: [...]}`), or the
    legacy `mapspace: {constraints: [...]}`; with `model_only`, only the block timeloop-model checks maps against."""
    out: list[tuple[Loc, dict[str, Any]]] = []
    blocks = _model_constraint_block(data)
    if not model_only:
        blocks = [b for b in blocks if b[0] != ("architecture_constraints",)]
        blocks += [((key,), data.get(key)) for key in ("architecture_constraints", "mapspace_constraints", "mapspace")]
    for loc, block in blocks:
        if isinstance(block, dict):
            # as timeloop's Constraints::Parse: a `constraints` list, or a string naming the list `constraints_<it>`
            # beside it (its configs/mapper/eyeriss-256.yaml), else a `targets` list
            named = block.get("constraints")
            if isinstance(named, str):
                inner = f"constraints_{named}"
                if not isinstance(block.get(inner), list):
                    raise InputError(loc + (inner,), f"constraints: {named!r} names no list {inner!r} here")
            else:
                inner = "constraints" if "constraints" in block else "targets"
            block, loc = block.get(inner), loc + (inner,)
        if block is None:
            continue
        if not isinstance(block, list):
            raise InputError(loc, "must be a list of constraints (target, type, ...)")
        for i, entry in enumerate(block):
            if not isinstance(entry, dict):
                raise InputError(loc + (i,), "a constraint is a mapping with target and type")
            # the level: `target`, else `name` (as Timeloop's FindTargetTilingLevel looks them up)
            target = entry.get("target") if entry.get("target") is not None else entry.get("name")
            if "constraints" in entry:  # a target with its own list of constraints (Timeloop's ParseList)
                inner_list = entry["constraints"]
                if not isinstance(inner_list, list):
                    raise InputError(loc + (i, "constraints"), "must be a list of constraints (type, ...)")
                for j, sub in enumerate(inner_list):
                    if not isinstance(sub, dict):
                        raise InputError(loc + (i, "constraints", j), "a constraint is a mapping with a type")
                    out.append((loc + (i, "constraints", j), {**sub, "target": target}))
                continue
            out.append((loc + (i,), {**entry, "target": target}))
    return out


def _constraint_attrs(entry: dict[str, Any]) -> dict[str, Any]:
    """Where Timeloop reads a constraint's factors, permutation, keep / bypass and min: its `attributes`, else the
    constraint itself."""
    return entry["attributes"] if isinstance(entry.get("attributes"), dict) else entry


_CONSTRAINT_TYPES = ("temporal", "spatial", "datatype", "bypass", "bypassing", "max_overbooked_proportion",
                     "utilization", "parallelism")


def check_model_constraints(data: dict[str, Any], names: list[str]) -> None:
    """What timeloop-model's constraint parser stops on in the block it reads (so on every map of the file): a
    constraint without a type or of a type it does not know, a target it cannot find, `utilization` /
    `parallelism` other than once at the innermost level with a `min`, `max_overbooked_proportion` without its
    `proportion`, keep / bypass that is not a list or states a tensor twice at a level (not the outermost)."""
    said: dict[tuple[str, str], Loc] = {}
    utilization = False
    for loc, entry in _constraint_entries(data, model_only=True):
        kind = entry.get("type")
        if not isinstance(kind, str):
            raise InputError(loc + ("type",), "missing: timeloop-model asserts every constraint states its type")
        if kind not in _CONSTRAINT_TYPES:
            raise InputError(loc + ("type",), f"{kind!r}: timeloop-model stops on it ('unrecognized constraint "
                             f"type'); it knows {', '.join(_CONSTRAINT_TYPES)}")
        target = entry.get("target")
        if target not in names:
            raise InputError(loc + ("target",), f"no such storage level {target!r}; the file has {names} "
                             "(timeloop-model: 'target storage level not found')")
        attrs = _constraint_attrs(entry)
        if kind in ("utilization", "parallelism"):
            if target != names[0]:
                raise InputError(loc + ("target",), f"{kind} at {target!r}: timeloop-model takes it only at the "
                                 f"innermost storage level ({names[0]!r})")
            if _yaml_double(attrs.get("min")) is None:
                raise InputError(loc + ("min",), f"{kind} needs its min (timeloop-model asserts it)")
            if utilization:
                raise InputError(loc, f"a second {kind} constraint (timeloop-model: 're-specification of min "
                                 "parallelism/utilization')")
            utilization = True
        elif kind == "max_overbooked_proportion":
            if _yaml_double(entry.get("proportion")) is None:
                raise InputError(loc + ("proportion",), "max_overbooked_proportion needs its proportion (timeloop-model "
                                 "asserts it)")
        elif kind in ("datatype", "bypass", "bypassing"):
            for key in ("keep", "bypass"):
                if key not in attrs:
                    continue
                value = attrs[key]
                if not isinstance(value, list):
                    raise InputError(loc + (key,), "must be a list of Weights / Inputs / Outputs (timeloop-model "
                                     "asserts a list)")
                for t in value:
                    if target != names[-1] and (target, str(t)) in said:
                        raise InputError(loc + (key,), f"{t} stated twice at {target!r} (also at "
                                         f"{'.'.join(map(str, said[(target, str(t))]))}): timeloop-model stops on a "
                                         "re-specified keep / bypass")
                    said[(target, str(t))] = loc


def file_keeps(data: dict[str, Any], names: list[str]) -> dict[str, list[str]]:
    """Per level, the tensors the file's own `datatype` (or `bypass`) constraints keep there: those listed under
    `keep`, and those listed nowhere (Timeloop keeps a tensor a mapping does not bypass); several constraints on one
    level combine."""
    keep: dict[str, set[str]] = {}
    bypass: dict[str, set[str]] = {}
    for loc, entry in _constraint_entries(data):
        if entry.get("type") not in ("datatype", "bypass", "bypassing"):
            continue
        target = entry.get("target")
        if target not in names:
            raise InputError(loc + ("target",), f"no such storage level {target!r}; the file has {names}")
        attrs = _constraint_attrs(entry)
        for key, into in (("keep", keep), ("bypass", bypass)):
            value = attrs.get(key) or []
            if not isinstance(value, list):
                raise InputError(loc + (key,), "must be a list of Weights / Inputs / Outputs")
            for t in value:
                if t not in _TL_TENSORS:
                    raise InputError(loc + (key,), f"unknown data space {t!r}; one of Weights, Inputs, Outputs")
                into.setdefault(target, set()).add(_TL_TENSORS[t])
    out = {}
    for name in set(keep) | set(bypass):
        both = keep.get(name, set()) & bypass.get(name, set())
        if both:
            raise InputError(("architecture_constraints",), f"{name}: {sorted(both)} both kept and bypassed")
        out[name] = [t for t in ("W", "I", "O") if t not in bypass.get(name, set())]
    return out


_TL_LOOP_DIMS = ("R", "S", "P", "Q", "C", "K", "N")
# Timeloop's exercises write the CNN layer's output channels as M (their problems: C M R S N P Q); Tileplan's K
_CNN_ALIASES = {"M": "K"}
_EXACT = re.compile(r"([A-Za-z]+)\s*=*\s*([0-9]+)")
_AT_MOST = re.compile(r"([A-Za-z]+)\s*<=\s*([0-9]+)")


def file_loop_constraints(data: dict[str, Any], names: list[str], fanouts: list[int]) -> dict[str, dict[str, Any]]:
    """Per level, the `temporal` / `spatial` constraints of the block timeloop-model checks maps against (the
    architecture's `constraints`, `arch_constraints` or `architecture_constraints`; `mapspace_constraints` guide
    timeloop-mapper only and are not read here), as it reads them (Constraints::Parse): in
    `factors` (a string) `D=n` is an exact factor (0: the whole bound) and `D<=n` a largest one, `permutation` a
    string of dimensions innermost first, `split` (spatial) the loops along X; a list where Timeloop reads a string
    is passed over, as it does. What timeloop-model refuses is refused: a dimension the CNN layer lacks, a factor
    stated twice, a spatial constraint on a level without a fan-out."""
    out: dict[str, dict[str, Any]] = {}
    for loc, entry in _constraint_entries(data, model_only=True):
        kind = entry.get("type")
        if kind not in ("temporal", "spatial"):
            continue
        target = entry.get("target")
        if target not in names:
            raise InputError(loc + ("target",), f"no such storage level {target!r}; the file has {names}")
        if kind == "spatial" and fanouts[names.index(target)] <= 1:
            raise InputError(loc, f"a spatial constraint on {target!r}, which has no fan-out (timeloop-model: "
                             "'cannot find spatial tiling level')")
        attrs: dict[str, Any] = entry["attributes"] if isinstance(entry.get("attributes"), dict) else entry
        got = out.setdefault(target, {}).setdefault(kind, {"factors": {}, "max_factors": {}})
        text = attrs.get("factors")
        if isinstance(text, str):
            for key, pattern in (("factors", _EXACT), ("max_factors", _AT_MOST)):
                for m in pattern.finditer(text):
                    d, n = _CNN_ALIASES.get(m.group(1), m.group(1)), int(m.group(2))
                    if d not in _TL_LOOP_DIMS:
                        raise InputError(loc + ("factors",), f"dimension {d!r} is not the CNN layer's "
                                         f"({' '.join(_TL_LOOP_DIMS)})")
                    if key == "max_factors" and n <= 0:
                        raise InputError(loc + ("factors",), f"{d}<={n}: a largest factor must be positive")
                    if d in got[key]:
                        raise InputError(loc + ("factors",), f"{d} stated twice for {target} ({kind})")
                    got[key][d] = n
        default_max = attrs.get("default_max_factor")
        if default_max is not None:
            n = _int(default_max, loc + ("default_max_factor",))
            for d in _TL_LOOP_DIMS:
                got["max_factors"].setdefault(d, n)
        perm = attrs.get("permutation")
        if isinstance(perm, str):
            dims = [_CNN_ALIASES.get(c, c) for c in perm if not c.isspace()]
            bad = [c for c in dims if c not in _TL_LOOP_DIMS]
            if bad:
                raise InputError(loc + ("permutation",), f"dimension {bad[0]!r} is not the CNN layer's")
            if got.get("permutation") is not None:
                raise InputError(loc + ("permutation",), f"a second permutation for {target} ({kind})")
            got["permutation"] = dims
        split = entry.get("split")
        if kind == "spatial" and split is not None:
            got["split"] = _int(split, loc + ("split",), positive=False)
    return out


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def infer_keeps(name: str) -> list[str] | None:
    n = _norm(name)
    for prefix, keeps in _KEEP_RULES:
        if n.startswith(prefix):
            return list(keeps)
    return None


def _attr(attrs: dict[str, Any], *names: str) -> Any:
    """The first of `names` the attributes state: exactly the spellings timeloop-model reads (it ignores others, so
    `word_bits` is not `word-bits` there either)."""
    for n in names:
        if attrs.get(n) is not None:
            return attrs[n]
    return None


MAX_WHOLE = 2**62  # any count or size a descriptor states (entries, depth, instances, ...); past it, its products
# (a capacity of entries x word-bits / 8) overflowed float arithmetic: `entries: 1e308` was an OverflowError, a 500


def _number(value: Any, loc: Loc, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(str(value).strip())
        except ValueError:
            raise InputError(loc, f"must be a number, got {value!r}") from None
    if isinstance(value, int) and abs(value) > MAX_WHOLE:  # (an int past float's range: float() of it raises)
        raise InputError(loc, f"{str(value)[:40]}... is over this server's bound of 2^62", "less_than_equal")
    if positive and value <= 0:
        raise InputError(loc, f"must be positive, got {value}")
    return value


def _int(value: Any, loc: Loc, positive: bool = True) -> int:
    v = _number(value, loc, positive)
    if v < 0:
        raise InputError(loc, f"must not be negative, got {value}")
    if not float(v).is_integer():
        raise InputError(loc, f"must be a whole number, got {value}")
    if v > MAX_WHOLE:
        raise InputError(loc, f"{value} is over this server's bound of 2^62", "less_than_equal")
    return int(v)


# --------------------------------------------------------------------------------------------------------------
# Values as timeloop-model's config reader (compound-config over yaml-cpp 0.7) converts them: a value that fails the
# conversion and names one of the document's `variables` is that variable; any other failure stops timeloop-model
# ("bad conversion"), so the file is refused here, naming the attribute.

_UINT = re.compile(r"^\+?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$")
_SINT = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$")
_BOOLS = {"y": True, "yes": True, "true": True, "on": True, "n": False, "no": False, "false": False, "off": False}


def _yaml_int(value: Any, bits: int, signed: bool = False) -> int | None:
    """`value` as yaml-cpp's as<uint32/uint64/int>() reads it (base from the prefix: 0x hex, 0 octal), else None."""
    if isinstance(value, bool) or isinstance(value, float):
        return None  # (true / 1.5 / 1024.0: the stream leaves text unread)
    if isinstance(value, int):
        n = value
    elif isinstance(value, str):
        text = value.strip()
        if not (_SINT if signed else _UINT).match(text):
            return None
        neg = text.startswith("-")
        body = text.lstrip("+-")
        n = int(body, 16) if body[:2].lower() == "0x" else int(body, 8) if len(body) > 1 and body[0] == "0" else int(body)
        n = -n if neg else n
    else:
        return None
    lo, hi = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    return n if lo <= n <= hi else None


def _yaml_double(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*|\s*[+-]?\.?(inf|Inf|INF)\s*"
                                               r"|\s*\.?(nan|NaN|NAN)\s*", value):
        return float(value.strip().replace(".inf", "inf").replace(".Inf", "inf").replace(".INF", "inf")
                     .replace(".nan", "nan").replace(".NaN", "nan").replace(".NAN", "nan"))
    return None


def _yaml_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _BOOLS and value.strip() in (
            value.strip().lower(), value.strip().upper(), value.strip().capitalize()):
        return _BOOLS[value.strip().lower()]
    return None


def substitute_variables(data: dict[str, Any]) -> dict[str, Any]:
    """The document with every mapping value that names one of its top-level `variables` replaced by that
    variable's value (as timeloop-model's reader does wherever a value does not convert; a string value always),
    without changing `data`. List items and keys are read as they stand, as Timeloop reads them."""
    variables = data.get("variables")
    if not isinstance(variables, dict) or not variables:
        return data

    def resolve(value: Any, depth: int = 0) -> Any:
        while isinstance(value, str) and value in variables and depth < 16:
            value, depth = variables[value], depth + 1
        return value

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            # (a fractional attribute is read with a fallback of 0 and no look-up: as<double, int>(0))
            return {k: walk(v if k in _F64_KEYS else resolve(v)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(x) if isinstance(x, (dict, list)) else x for x in node]
        return node

    return {k: (v if k in ("variables", "tileplan") else walk(v)) for k, v in data.items()}


# (kind, the keys timeloop-model looks up in turn: the first one present as a scalar is read) per component
_STORAGE_READS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("u32", ("word-bits", "word_width", "datawidth")), ("u32", ("block-size", "block_size", "n_words")),
    ("u32", ("metadata_block_size",)), ("u32", ("metadata_datawidth", "metadata_word_bits")),
    ("u32", ("metadata_storage_width",)), ("u32", ("metadata_storage_depth",)),
    ("bool", ("concordant_compressed_tile_traversal",)), ("bool", ("tile_partition_supported",)),
    ("bool", ("decompression_supported",)), ("bool", ("compression_supported",)), ("u32", ("cluster-size",)),
    ("u32", ("width", "memory_width", "data_storage_width")),
    ("u32", ("entries", "depth", "memory_depth", "data_storage_depth", "sizeKB")),
    ("str", ("technology",)), ("u32", ("num-ports", "n_ports")), ("bool", ("reduction_supported",)),
    ("u32", ("num-banks", "n_banks")), ("f64", ("bandwidth",)), ("f64", ("shared_bandwidth",)),
    ("f64", ("read_bandwidth",)), ("f64", ("write_bandwidth",)), ("f64", ("multiple-buffering",)),
    ("f64", ("min-utilization",)), ("u64", ("instances",)), ("u64", ("meshX",)), ("u64", ("meshY",)),
    ("str", ("network_read",)), ("str", ("network_fill",)), ("str", ("network_drain",)), ("str", ("network_update",)),
    ("bool", ("allow_overbooking",)), ("f64", ("vector-access-energy",)), ("f64", ("addr-gen-energy",)),
    ("f64", ("cluster-area",)),
    # the inferred network's own reading of the same component
    ("str", ("network-type",)), ("u32", ("network-word-bits", "word-bits", "word_width", "datawidth")),
    ("f64", ("router-energy",)), ("f64", ("wire-energy",)), ("f64", ("tile-width",)), ("f64", ("energy-per-hop",)),
)
_COMPUTE_READS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("u64", ("instances",)), ("u32", ("word-bits", "datawidth")), ("u64", ("meshX",)), ("u64", ("meshY",)),
    ("str", ("network_operand",)), ("str", ("network_result",)),
)
_F64_KEYS = frozenset(k for kind, keys in _STORAGE_READS if kind == "f64" for k in keys) | {"min", "proportion"}
_KIND_WORDS = {"u32": "an unsigned 32-bit integer", "u64": "an unsigned integer", "f64": "a number",
               "bool": "true or false", "str": "a string"}


def _read_as_timeloop(attrs: dict[str, Any], loc: Loc, reads: tuple[tuple[str, tuple[str, ...]], ...]
                      ) -> dict[str, Any]:
    """`attrs` with each value timeloop-model reads converted as it converts it (hex / octal counts to numbers,
    "true" to True); a value it cannot convert is refused, naming the attribute."""
    out = dict(attrs)
    for kind, keys in reads:
        for key in keys:
            value = attrs.get(key)
            if value is None or isinstance(value, (dict, list)):
                continue  # (not a scalar: Timeloop looks up the next spelling)
            got: Any
            if kind in ("u32", "u64"):
                got = _yaml_int(value, 32 if kind == "u32" else 64)
            elif kind == "f64":
                got = _yaml_double(value)
            elif kind == "bool":
                got = _yaml_bool(value)
            else:
                got = value if not isinstance(value, bool) else str(value).lower()
            if got is None and kind == "f64":
                raise InputError(loc + (key,), f"{value!r}: timeloop-model reads {key} as a number and takes 0 for "
                                 "anything else (it looks no name up in `variables` there); state the number")
            if got is None:
                raise InputError(loc + (key,), f"{value!r}: timeloop-model reads {key} as {_KIND_WORDS[kind]} and stops "
                                 "on this value ('bad conversion')")
            out[key] = got
            break
    return out


def _check_sizes(attrs: dict[str, Any], loc: Loc) -> None:
    """timeloop-model asserts that a size is stated one way: entries (or depth) beside sizeKB, or depth beside
    entries (even an empty one), fail its assertions."""
    if _attr(attrs, "entries") is not None:
        if "sizeKB" in attrs:
            raise InputError(loc + ("sizeKB",), "stated beside entries: timeloop-model asserts that a size is stated "
                             "one way (entries, depth or sizeKB)")
    elif _attr(attrs, "depth", "memory_depth", "data_storage_depth") is not None:
        for key in ("sizeKB", "entries"):
            if key in attrs:
                raise InputError(loc + (key,), "stated beside depth: timeloop-model asserts that a size is stated one "
                                 "way (entries, depth or sizeKB)")


def _refuse_unmodelled_storage(attrs: dict[str, Any], loc: Loc) -> None:
    """Storage attributes that change what timeloop-model computes in ways Tileplan does not model (or that stop it)."""
    for key in ("network_read", "network_fill", "network_drain", "network_update"):
        if attrs.get(key) is not None:
            raise InputError(loc + (key,), f"{attrs[key]!r}: a user-declared network between levels (Timeloop then "
                             "prices that traffic by the named network component) is not modelled by Tileplan; drop "
                             "it to use the inferred network, whose figures the storage level states")
    if attrs.get("allow_overbooking") is True:
        raise InputError(loc + ("allow_overbooking",), "true: overbooked buffers (tiles past the capacity, priced by "
                         "confidence) are not modelled by Tileplan")
    if attrs.get("tile_partition_supported") is True:
        raise InputError(loc + ("tile_partition_supported",), "true: timeloop-model stops on it ('runtime tile "
                         "partitioning is not supported yet')")


_NETWORK_CLASSES = ("XY_NoC", "Legacy", "ReductionTree", "SimpleMulticast")


class _Storage:
    """One storage level as Timeloop states it."""

    def __init__(self, name: str, attrs: dict[str, Any], loc: Loc, instances: int | None, mesh_x: int | None):
        self.name = name
        self.attrs = attrs
        self.loc = loc
        self.instances = instances
        self.mesh_x = mesh_x
        self.cls = str(attrs.get("class", "") or "")


def _split_name(raw: Any, loc: Loc) -> tuple[str, int]:
    if not isinstance(raw, str) or not raw.strip():
        raise InputError(loc, "needs a name")
    m = _RANGE.match(raw)
    if not m or not m.group("base"):
        raise InputError(loc, f"cannot read the name {raw!r} (expected Name or Name[lo..hi])")
    count = 1
    if m.group("lo") is not None:
        lo, hi = int(m.group("lo")), int(m.group("hi"))
        if hi < lo:
            raise InputError(loc, f"{raw!r}: range end below its start")
        count = hi - lo + 1
        if count > MAX_INSTANCES:
            raise InputError(loc, f"{raw!r}: {count} copies; at most {MAX_INSTANCES}", "too_large")
    return m.group("base"), count


# timeloop-model's component classes (case-sensitive substrings, storage first); anything else it ignores
_BUFFER_CLASSES = ("DRAM", "SRAM", "regfile", "smartbuffer", "storage")
_COMPUTE_CLASSES_TL = ("mac", "intmac", "fpmac", "compute")


def _class_kind(cls: str) -> str | None:
    """'storage', 'compute' or None (a network, a wire, an unknown class: timeloop-model passes over it)."""
    if any(k in cls for k in _BUFFER_CLASSES):
        return "storage"
    if any(k in cls for k in _COMPUTE_CLASSES_TL):
        return "compute"
    return None


def _mesh_x(attrs: dict[str, Any], instances: int, loc: Loc) -> int | None:
    """meshX as timeloop-model derives it: stated, or instances / meshY; None when neither is stated (all along X).
    A mesh that does not tile the instances is an error, as it is for Timeloop (an assertion there)."""
    mx, my = _attr(attrs, "meshX"), _attr(attrs, "meshY")
    x = _int(mx, loc + ("meshX",)) if mx is not None else None
    y = _int(my, loc + ("meshY",)) if my is not None else None
    if x is not None and y is not None and x * y != instances:
        raise InputError(loc + ("meshY",), f"meshX {x} x meshY {y} is not the {instances} instances")
    if x is None and y is not None:
        if instances % y:
            raise InputError(loc + ("meshY",), f"meshY {y} does not divide the {instances} instances")
        x = instances // y
    if x is not None and instances % x:
        raise InputError(loc + ("meshX",), f"meshX {x} does not divide the {instances} instances")
    return x


def _component_attrs(comp: dict[str, Any], loc: Loc) -> tuple[dict[str, Any], str]:
    """(attributes, their location, the class timeloop-model prices the component by): its `attributes`, or, as
    timeloop-model reads a component without them, its own keys; then it reads no class for the technology."""
    if "attributes" in comp:
        attrs = comp.get("attributes") or {}
        if not isinstance(attrs, dict):
            raise InputError(loc + ("attributes",), "must be a mapping")
        return attrs, str(comp.get("class", "") or "")
    return {k: v for k, v in comp.items() if k not in ("name", "class")}, ""


def _parse_v03(arch: Any, key: str = "architecture") -> tuple[list[_Storage], dict[str, Any], int]:
    """Storage levels innermost first, the compute attributes, and the number of compute units."""
    root: Loc = (key,)
    if not isinstance(arch, dict):
        raise InputError(root, "must be a mapping with a 'subtree' list")
    outer_first: list[_Storage] = []
    computes: list[tuple[dict[str, Any], int, Loc, str]] = []

    def walk(nodes: Any, mult: int, loc: Loc) -> None:
        if nodes is None:
            return
        if not isinstance(nodes, list):
            raise InputError(loc, "must be a list of subtrees")
        if len(nodes) > 1:
            raise InputError(loc, f"{len(nodes)} subtrees side by side; timeloop-model takes one subtree per level")
        for i, node in enumerate(nodes):
            here = loc + (i,)
            if not isinstance(node, dict):
                raise InputError(here, "a subtree is a mapping with name, local, subtree")
            _, count = _split_name(node.get("name"), here + ("name",))
            m = mult * count
            if m > MAX_PES:  # checked as the tree is walked, so no count ever grows past it
                raise InputError(here + ("name",), f"{m} instances in all below this subtree; at most {MAX_PES}",
                                 "too_large")
            locals_ = node.get("local") or []
            if not isinstance(locals_, list):
                raise InputError(here + ("local",), "must be a list of components")
            for j, comp in enumerate(locals_):
                cl = here + ("local", j)
                if not isinstance(comp, dict):
                    raise InputError(cl, "a component is a mapping with name, class, attributes")
                cname, ccount = _split_name(comp.get("name"), cl + ("name",))
                cls = str(comp.get("class", "") or "")
                kind = _class_kind(cls)
                if kind is None:
                    net = next((k for k in _NETWORK_CLASSES if k in cls), None)
                    if net is not None and cls not in _NETWORK_CLASSES:
                        raise InputError(cl + ("class",), f"{cls!r} names a network (it contains {net!r}) but is none of "
                                         f"timeloop-model's {', '.join(_NETWORK_CLASSES)} ('unrecognized network class')")
                    if cls == "SimpleMulticast":
                        raise InputError(cl + ("class",), "SimpleMulticast: a network priced from an Accelergy table "
                                         "(its action_name), which Tileplan does not read")
                    continue  # (a network no level names, or a class Timeloop passes over)
                attrs, price_cls = _component_attrs(comp, cl)
                attrs = _read_as_timeloop(attrs, cl, _STORAGE_READS if kind == "storage" else _COMPUTE_READS)
                inst = _attr(attrs, "instances")
                n_inst = _int(inst, cl + ("attributes", "instances")) if inst is not None else m * ccount
                if n_inst > MAX_PES:
                    raise InputError(cl + ("name",), f"{n_inst} instances; at most {MAX_PES}", "too_large")
                if kind == "compute":
                    for nk in ("network_operand", "network_result"):
                        if attrs.get(nk) is not None:
                            raise InputError(cl + (nk,), f"{attrs[nk]!r}: a user-declared network to the compute units "
                                             "is not modelled by Tileplan; drop it to use the inferred network")
                    computes.append((attrs, n_inst, cl + ("name",), cname))
                    continue
                _check_sizes(attrs, cl)
                _refuse_unmodelled_storage(attrs, cl)
                st = _Storage(cname, {**attrs, "class": price_cls}, cl, n_inst, None)
                st.mesh_x = _mesh_x(attrs, n_inst, cl + ("attributes",))
                outer_first.append(st)
            walk(node.get("subtree"), m, here + ("subtree",))

    walk(arch.get("subtree"), 1, root + ("subtree",))
    if not outer_first:
        raise InputError(root + ("subtree",), "declares no storage level")
    if not computes:
        raise InputError(root + ("subtree",), "declares no compute component (class intmac, mac, ...)")
    if len(computes) > 1:
        raise InputError(computes[1][2], f"a second compute component ({computes[1][3]!r}): timeloop-model takes one "
                         "arithmetic level (with two it fails: bad_alloc)")
    attrs, macs = computes[-1][:2]
    return list(reversed(outer_first)), attrs, macs


def _bounded_macs(macs: int, loc: Loc) -> int:
    if macs > MAX_PES:  # the array's shape is searched among the divisors of this count
        raise InputError(loc, f"{macs} compute units; at most {MAX_PES}", "too_large")
    return macs


def _parse_legacy(arch: Any, key: str = "arch") -> tuple[list[_Storage], dict[str, Any], int]:
    root: Loc = (key,)
    if not isinstance(arch, dict):
        raise InputError(root, "must be a mapping with 'arithmetic' and 'storage' (timeloop-model reads this form "
                         "unless the architecture's version is 0.2 or 0.3)")
    arith = arch.get("arithmetic")
    if not isinstance(arith, dict):
        raise InputError(root + ("arithmetic",), "missing; the compute units' attributes (instances, word-bits) "
                         "(timeloop-model reads this form unless the architecture's version is 0.2 or 0.3)")
    arith, _ = _component_attrs(arith, root + ("arithmetic",))
    arith = _read_as_timeloop(arith, root + ("arithmetic",), _COMPUTE_READS)
    for nk in ("network_operand", "network_result"):
        if arith.get(nk) is not None:
            raise InputError(root + ("arithmetic", nk), f"{arith[nk]!r}: a user-declared network is not modelled by "
                             "Tileplan")
    if _attr(arith, "instances") is None:
        raise InputError(root + ("arithmetic", "instances"), "missing; the number of MAC units")
    macs = _bounded_macs(_int(_attr(arith, "instances"), root + ("arithmetic", "instances")),
                         root + ("arithmetic", "instances"))
    storage = arch.get("storage")
    if not isinstance(storage, list) or not storage:
        raise InputError(root + ("storage",), "missing; the list of storage levels, innermost first")
    out = []
    for i, st in enumerate(storage):
        loc = root + ("storage", i)
        if not isinstance(st, dict):
            raise InputError(loc, "a storage level is a mapping of attributes")
        name, count = _split_name(st.get("name"), loc + ("name",))
        attrs, cls = _component_attrs(st, loc)
        attrs = _read_as_timeloop(attrs, loc, _STORAGE_READS)
        _check_sizes(attrs, loc)
        _refuse_unmodelled_storage(attrs, loc)
        inst = _attr(attrs, "instances")
        if inst is None:  # (the legacy reader gives an unstated count 0, and timeloop-model divides by it)
            raise InputError(loc + ("instances",), f"missing for {name!r}: in the legacy form timeloop-model needs every "
                             "storage level's instances (without it: 0, and it dies of a division by zero)")
        n_inst = _int(inst, loc + ("instances",))
        out.append(_Storage(name, {**attrs, "class": cls}, loc, n_inst, _mesh_x(attrs, n_inst, loc)))
    return out, arith, macs


DEFAULT_WORD_BITS = 16  # what timeloop-model assumes for a component that states no word-bits


def _word_bits(st: _Storage) -> int:
    wb = _attr(st.attrs, "word-bits", "word_width", "datawidth")
    return DEFAULT_WORD_BITS if wb is None else _int(wb, st.loc + ("word-bits",))


def _block_cluster(st: _Storage, word_bits: int) -> tuple[int, int]:
    """Timeloop's block-size (words per access) and cluster-size (instances per physical array), as timeloop-model
    derives them: stated, or from the array's `width` in bits = word-bits x block-size x cluster-size."""
    b, c = _attr(st.attrs, "block-size", "block_size", "n_words"), _attr(st.attrs, "cluster-size")
    block = _int(b, st.loc + ("block-size",)) if b is not None else 1
    cluster = _int(c, st.loc + ("cluster-size",)) if c is not None else 1
    w = _attr(st.attrs, "width", "memory_width", "data_storage_width")
    if w is None:
        return block, cluster
    width = _int(w, st.loc + ("width",))
    if width % (word_bits * block):
        raise InputError(st.loc + ("width",), f"{width} bits is not a whole number of {block}-word blocks of "
                         f"{word_bits} bits")
    if b is not None and c is not None:
        if block * word_bits * cluster != width:
            raise InputError(st.loc + ("width",), f"{width} bits, but block-size x word-bits x cluster-size is "
                             f"{block * word_bits * cluster}")
    elif c is not None:
        block = width // cluster // word_bits
    elif b is not None:
        cluster = width // (word_bits * block)
    else:
        block = width // word_bits
    return block, cluster


def _entries(st: _Storage, word_bits: int) -> int | None:
    e = _attr(st.attrs, "entries")
    if e is not None:
        return _int(e, st.loc + ("entries",), positive=False)
    depth = _attr(st.attrs, "depth", "memory_depth", "data_storage_depth")
    if depth is not None:  # rows of blocks, as Timeloop reads it
        return _int(depth, st.loc + ("depth",), positive=False) * _block_cluster(st, word_bits)[0]
    kb = _attr(st.attrs, "sizeKB")
    if kb is not None:  # a whole number of KiB: timeloop-model reads it as an unsigned integer
        size = _int(kb, st.loc + ("sizeKB",))
        bits = size * 1024 * 8
        if bits >= 2**32:  # timeloop-model multiplies in 32 bits: it would read (bits mod 2^32) / word-bits entries
            raise InputError(st.loc + ("sizeKB",), f"{size} KiB overflows timeloop-model's 32-bit size arithmetic (it "
                             f"reads {(bits % 2**32) // word_bits} entries); state entries instead")
        return bits // word_bits
    return None


def _buffering(st: _Storage, lv: dict[str, Any], entries: int | None, keeps: list[str], top: bool) -> None:
    """`multiple-buffering` (a tile may use floor(entries / it) words) and `min-utilization` (the kept tiles must fill
    that share of them), as timeloop-model reads them; the ports a level states (Timeloop asserts 1 or 2)."""
    ports = _attr(st.attrs, "num-ports", "n_ports")
    if ports is not None and _int(ports, st.loc + ("n_ports",)) not in (1, 2):
        raise InputError(st.loc + ("n_ports",), f"{ports}: timeloop-model takes 1 or 2 ports (it asserts otherwise)")
    mb = _attr(st.attrs, "multiple-buffering")
    mu = _attr(st.attrs, "min-utilization")
    if mb is not None:
        factor = _number(mb, st.loc + ("multiple-buffering",))
        if factor != 1:
            if top:
                raise InputError(st.loc + ("multiple-buffering",), "on the backing store: Tileplan does not model it "
                                 "there")
            if entries is not None and math.floor(entries / factor + 1e-9) == 0 and keeps:
                raise InputError(st.loc + ("multiple-buffering",), f"{factor} leaves {st.name!r} no word of its "
                                 f"{entries} for the tiles it keeps {keeps} (timeloop-model refuses every such tile)")
            lv["multiple_buffering"] = factor
    if mu is not None:
        share = _number(mu, st.loc + ("min-utilization",), positive=False)
        if share > 1:
            raise InputError(st.loc + ("min-utilization",), f"{share}: a share of the buffer, at most 1")
        if share > 0:
            if top:
                raise InputError(st.loc + ("min-utilization",), "on the backing store: Tileplan does not model it "
                                 "there")
            if entries is None:  # timeloop-model asserts a size
                raise InputError(st.loc + ("min-utilization",), "needs the level's size (entries, depth or sizeKB)")
            lv["min_utilization"] = share


def _network_type(st: _Storage) -> None:
    """The inferred network's `network-type`: 1:1 and 1:N change nothing timeloop-model computes; M:N (distributed
    multicast) changes its tiles and access counts, which Tileplan does not model."""
    kind = _attr(st.attrs, "network-type")
    if kind is None or kind in ("1:1", "1:N"):
        return
    if kind == "M:N":
        raise InputError(st.loc + ("network-type",), "M:N (distributed multicast) is not modelled by Tileplan")
    raise InputError(st.loc + ("network-type",), f"{kind!r}: timeloop-model knows 1:1, 1:N and M:N")


def _energy_attr(st: _Storage, key: str) -> float | None:
    """A network figure as timeloop-model reads it (a number; pJ, pJ per bit per mm, or um): a negative one is refused
    (Timeloop would charge it as stated)."""
    v = _attr(st.attrs, key)
    if v is None:
        return None
    x = _number(v, st.loc + (key,), positive=False)
    if x < 0:
        raise InputError(st.loc + (key,), f"must not be negative, got {v!r}")
    return x


def _network_energies(st: _Storage) -> dict[str, Any]:
    """The inferred network's figures below this level, as far as they do not need the floorplan: `energy-per-hop`
    (pJ per word per hop) and `router-energy` (pJ per word per router); `wire-energy` (pJ per bit per mm) is priced
    per hop by `_tile_widths` once the tiles' widths are known. Timeloop's own table charges no wire or router."""
    out: dict[str, Any] = {}
    hop, router = _energy_attr(st, "energy-per-hop"), _energy_attr(st, "router-energy")
    for key in ("wire-energy", "tile-width"):  # (checked here, priced by _tile_widths)
        _energy_attr(st, key)
    if hop:
        out["hop_pj"] = hop
    if router:
        out["router_pj"] = router
    rs = _attr(st.attrs, "reduction_supported")
    if rs is not None:  # (Timeloop reads a boolean; outputs then cross the network twice where it is false)
        if isinstance(rs, str) and rs.strip().lower() in ("true", "false"):
            rs = rs.strip().lower() == "true"
        if not isinstance(rs, bool):
            raise InputError(st.loc + ("reduction_supported",), f"must be true or false, got {rs!r}")
        out["reduces"] = rs
    return out


def _tile_widths(levels: list[_Storage], mem: list[dict[str, Any]], arith: dict[str, Any], macs: int) -> None:
    """Where a level states `wire-energy` (and no `energy-per-hop`), its hop energy: wire-energy x the network's word
    bits (`network-word-bits`, else the level's word-bits / word_width / datawidth, else 16) x the hop's length, the
    stated `tile-width` (um), else the width of one child tile as timeloop-model's floorplan makes it: the square root
    of its area (the arithmetic's `area` per MAC, a level's `cluster-area` / cluster-size per instance, each level's
    area plus its children's; Timeloop's table gives every array and MAC no area, so without these the wires cost
    nothing)."""
    a = _attr(arith, "area")
    tile = float(_number(a, ("arithmetic", "area"), positive=False)) if a is not None else 0.0
    tile = max(tile, 0.0)
    inner = macs
    for st, lv in zip(levels, mem):
        wire = _energy_attr(st, "wire-energy")
        width = _energy_attr(st, "tile-width")
        if wire and _attr(st.attrs, "energy-per-hop") is None:
            wb = _attr(st.attrs, "network-word-bits", "word-bits", "word_width", "datawidth")
            bits = 16 if wb is None else _int(wb, st.loc + ("network-word-bits",))
            um = width if width is not None else math.sqrt(tile)
            hop = bits * um / 1000 * wire
            if hop:
                lv["network"] = {**lv.get("network", {}), "hop_pj": hop}
        if set(lv.get("network", {})) == {"reduces"}:
            del lv["network"]  # (without a hop or router energy the network costs nothing either way)
        inst = st.instances or 1
        ca = _attr(st.attrs, "cluster-area")
        area = _number(ca, st.loc + ("cluster-area",), positive=False) if ca is not None else 0.0
        own = area / lv.get("cluster_size", 1) if area > 0 else 0.0
        tile = own + tile * (inner // inst)
        inner = inst


def _technology(st: _Storage) -> str:
    """Timeloop's energy table for the level: DRAM when its class names DRAM or it states technology DRAM."""
    return "DRAM" if "DRAM" in st.cls or _attr(st.attrs, "technology") == "DRAM" else "SRAM"


def _dtype(bits: int, loc: Loc) -> str:
    for name in ("int8", "int16", "int32", "int4"):
        if DTYPE_BITS[name] == bits:
            return name
    raise InputError(loc, f"{bits}-bit operands have no Tileplan dtype (int4, int8, int16, int32)")


def _rows_cols(macs: int, mesh_x: int | None) -> tuple[int, int]:
    if mesh_x and macs % mesh_x == 0:
        return macs // mesh_x, mesh_x
    rows = max(d for d in range(1, math.isqrt(macs) + 1) if macs % d == 0)
    return rows, macs // rows


def _is_tree(arch: Any, key: str) -> bool:
    """Whether timeloop-model reads `arch` as a v0.2 / v0.3 tree (its `version` is 0.2 or 0.3) rather than the
    legacy `arithmetic` + `storage` form; a tree it would read as the legacy form is refused, saying why."""
    if not isinstance(arch, dict):
        return False
    version = arch.get("version")
    text = None if version is None else (f"{version:g}" if isinstance(version, float) else str(version)).strip()
    if text in ("0.2", "0.3"):
        return True
    if "subtree" in arch or "nodes" in arch:
        said = "states no version" if version is None else f"states version {text}"
        raise InputError((key, "version"), f"the architecture {said}: timeloop-model (NVlabs/timeloop@019f107) reads "
                         "a tree (subtree / local) only at version 0.2 or 0.3, else the legacy arithmetic + storage "
                         "form (the v0.4 !Container / !Component form it does not read)")
    return False


def _refuse_unmodelled_documents(data: dict[str, Any]) -> None:
    """Top-level sections that replace parts of timeloop-model's model: an Accelergy energy / area table (ERT, ART)
    replaces its built-in energies; `sparse_optimizations` makes it a sparse model. Tileplan models neither."""
    for key, why in (("ERT", "an Accelergy energy reference table replaces timeloop-model's built-in energies, per "
                      "component and action; Tileplan prices by the built-in table and the attributes "
                      "(vector-access-energy, the arithmetic's energy, ...) instead"),
                     ("ART", "an Accelergy area table (with an ERT) replaces timeloop-model's areas"),
                     ("sparse_optimizations", "sparse (compressed / gated / skipped) models are not Tileplan's; it "
                      "plans dense tensors")):
        if data.get(key) is not None:
            raise InputError((key,), f"not modelled by Tileplan: {why}")


def from_timeloop(data: dict[str, Any], name: str) -> dict[str, Any]:
    """A Tileplan descriptor (as a dict, for HardwareDescriptor.model_validate) from a parsed Timeloop
    architecture document."""
    if not isinstance(data, dict):
        raise InputError((), f"a Timeloop document is a mapping, got {type(data).__name__}")
    hint = data.get("tileplan") or {}
    if not isinstance(hint, dict):
        raise InputError(("tileplan",), "must be a mapping (pe_array, dataflows, levels, constraints, cost_params)")
    level_hints = hint.get("levels") or {}
    if not isinstance(level_hints, dict):
        raise InputError(("tileplan", "levels"), "must map level names to {keeps, spatial_dims, ...}")
    _refuse_unmodelled_documents(data)
    data = substitute_variables(data)
    key = "arch" if "arch" in data else "architecture"  # (timeloop-model reads `arch` first)
    if key not in data:
        raise InputError((), "a Timeloop architecture has a top-level 'architecture:' (v0.3) or 'arch:' (legacy)")
    if _is_tree(data[key], key):
        levels, arith, macs = _parse_v03(data[key], key)
    else:
        levels, arith, macs = _parse_legacy(data[key], key)
    names = [lv.name for lv in levels]
    if len(levels) < 2:
        raise InputError(levels[0].loc, f"a single storage level ({names[0]!r}): Tileplan plans for at least one "
                         "level below the backing store")
    for hname in level_hints:
        if hname not in names:
            raise InputError(("tileplan", "levels", hname), f"no such level; the file has {names}")
    if len(set(names)) != len(names):
        raise InputError(levels[0].loc[:-1], f"level names must be unique, got {names}")

    ab = _attr(arith, "word-bits", "datawidth")  # the arithmetic's spellings (not word_width)
    op_bits = DEFAULT_WORD_BITS if ab is None else _int(ab, ("arithmetic", "word-bits"))
    check_model_constraints(data, names)
    constrained = file_keeps(data, names)
    below = [macs] + [st.instances or 1 for st in levels[:-1]]
    loop_constraints = file_loop_constraints(data, names, [b // (st.instances or 1) if i < len(levels) - 1 else b
                                                           for i, (b, st) in enumerate(zip(below, levels))])
    n = len(levels)
    mem: list[dict[str, Any]] = []
    for i, st in enumerate(levels):
        h = level_hints.get(st.name) or {}
        top = i == n - 1
        wb = _word_bits(st)
        if h.get("keeps") is not None:
            keeps = h["keeps"]
        elif st.name in constrained:
            keeps = constrained[st.name]
        elif not top and _entries(st, wb) == 0:
            # a level of no entries nothing speaks for (a DummyBuffer there for its fan-out) keeps nothing: timeloop-
            # model refuses every map that keeps something there
            keeps = []
        else:
            # a level nothing speaks for keeps all three, as timeloop-model keeps what a map does not bypass
            keeps = (None if top else infer_keeps(st.name)) or ["W", "I", "O"]
        inst = 1 if top else (st.instances or 1)
        lv: dict[str, Any] = {"name": st.name, "word_bits": wb, "instances": inst, "keeps": list(keeps)}
        if st.mesh_x is not None and not top and st.mesh_x != inst:
            lv["mesh_x"] = st.mesh_x
        tech = _technology(st)
        entries = _entries(st, wb)
        if tech != "DRAM" and entries is None:
            raise InputError(st.loc + ("entries",), f"{st.name!r} has no size (entries, depth or sizeKB) and is priced as "
                             "an SRAM (no DRAM class with attributes, no technology: DRAM): timeloop-model asserts on "
                             "the missing size")
        if not top:
            if entries is None:
                raise InputError(st.loc + ("entries",), f"missing for on-chip level {st.name!r} (or depth and width)")
            if entries == 0 and keeps:
                raise InputError(st.loc + ("entries",), f"{st.name!r} holds no word but keeps {keeps} (timeloop-model "
                                 "refuses every tile it keeps); bypass them in the file's constraints")
            # a level of no entries that keeps nothing (Eyeriss' DummyBuffer, there for its fan-out) is given one word
            # per instance: it holds no tile either way, and an access to it never happens
            lv["capacity"] = math.ceil(max(entries, 1) * wb / 8) * inst
            if tech == "DRAM":
                lv["technology"] = "DRAM"
        else:
            if entries is not None:  # an outermost buffer with a size: Timeloop checks the problem against it
                lv["source_entries"] = entries
            if tech == "SRAM":
                lv["technology"] = "SRAM"
        _buffering(st, lv, entries, keeps, top)
        _network_type(st)
        block, cluster = _block_cluster(st, wb)
        if tech == "DRAM" and cluster != 1:  # timeloop-model asserts a DRAM is one array
            raise InputError(st.loc + ("cluster-size",), f"{cluster}: a DRAM is one array (Timeloop allows no cluster)")
        if block != 1:
            lv["block_size"] = block
        if cluster != 1:
            lv["cluster_size"] = cluster
        age = _attr(st.attrs, "addr-gen-energy")
        if age is not None and _number(age, st.loc + ("addr-gen-energy",), positive=False) >= 0:
            # pJ per address generated (timeloop-model reads a negative figure as "use the table", which charges 0)
            lv["addr_gen_energy_pj"] = _number(age, st.loc + ("addr-gen-energy",), positive=False)
        net = _network_energies(st)
        if net:
            lv["network"] = net
        vae = _attr(st.attrs, "vector-access-energy")
        if vae is not None:  # pJ per block access, the figure Timeloop then uses instead of its table
            per_byte = _number(vae, st.loc + ("vector-access-energy",), positive=False) / (block * wb / 8)
            lv["energy"] = {"read_pj_per_byte": per_byte, "write_pj_per_byte": per_byte}
        word_bytes = wb / 8
        shared = _attr(st.attrs, "shared_bandwidth")
        legacy = _attr(st.attrs, "bandwidth")
        read, write = _attr(st.attrs, "read_bandwidth"), _attr(st.attrs, "write_bandwidth")
        if shared is not None:
            lv["bandwidth"] = _number(shared, st.loc + ("shared_bandwidth",)) * word_bytes
        if legacy is not None:
            # Timeloop reads the deprecated `bandwidth: B` as B/2 words per cycle for reads and B/2 for writes
            half = _number(legacy, st.loc + ("bandwidth",)) / 2 * word_bytes
            lv["read_bandwidth"] = lv["write_bandwidth"] = half
        if read is not None:
            lv["read_bandwidth"] = _number(read, st.loc + ("read_bandwidth",)) * word_bytes
        if write is not None:
            lv["write_bandwidth"] = _number(write, st.loc + ("write_bandwidth",)) * word_bytes
        mem.append(lv)

    mesh_x = _mesh_x(arith, macs, ("arithmetic",))
    # timeloop-model asserts that each level's mesh tiles the one below it (fan-out X = inner meshX / outer meshX)
    inner = (macs, mesh_x or macs, "the compute units")
    for st in levels:
        n_inst = st.instances or 1
        x = st.mesh_x or n_inst
        if inner[1] % x or (inner[0] // inner[1]) % (n_inst // x):
            raise InputError(st.loc + ("attributes",) if "architecture" in data else st.loc,
                             f"{st.name}: its {x} x {n_inst // x} mesh does not tile the {inner[1]} x "
                             f"{inner[0] // inner[1]} mesh of {inner[2]} below it (Timeloop needs each to divide)")
        inner = (n_inst, x, st.name)
    _tile_widths(levels, mem, arith, macs)
    pe: dict[str, Any] = {"input_dtype": _dtype(op_bits, ("arithmetic", "word-bits")),
                          "weight_dtype": _dtype(op_bits, ("arithmetic", "word-bits"))}
    for key in ("energy", "area"):
        # timeloop-model (@019f107) reads these as whole numbers first and fails ("bad conversion") on any other
        v = _attr(arith, key)
        if v is not None and not (isinstance(v, int) and not isinstance(v, bool)) and not re.fullmatch(
                r"\s*[+-]?\d+\s*", str(v)):
            raise InputError(("arithmetic", key), f"{v!r}: timeloop-model reads the arithmetic's {key} as a whole "
                             "number and fails on any other ('bad conversion'); state a whole number")
    mac_energy = _attr(arith, "energy")
    if mac_energy is not None:  # pJ per MAC, instead of Timeloop's table
        pe["mac_energy_pj"] = _number(mac_energy, ("arithmetic", "energy"), positive=False)
    dataflows: list[dict[str, Any]]
    gem = _gemmini_roles(mem)
    if gem is not None:
        reg, acc, spad = gem
        cols = mem[acc]["instances"] if mem[acc]["instances"] > 1 else (mesh_x or math.isqrt(macs))
        if macs % cols or mem[acc]["capacity"] % cols:
            gem = None
    if gem is not None:
        reg, acc, spad = gem
        if mem[acc]["instances"] != cols:
            mem[acc]["source_instances"] = mem[acc]["instances"]
            mem[acc].pop("mesh_x", None)
        mem[acc]["instances"] = cols  # one accumulator slice per column
        rows = macs // cols
        for j in (acc, spad):
            mem[j].setdefault("buffer_count", 2)
        mem[acc]["array_axis"] = "rows"
        mem[spad]["array_axis"] = "cols"
        ws_levels: dict[str, Any] = {mem[acc]["name"]: {"spatial_dims": ["C"]}, mem[spad]["name"]: {"spatial_dims": ["K"]}}
        if reg is not None:
            ws_levels = {mem[reg]["name"]: {"keeps": ["W"]}, **ws_levels}
        dataflows = [{"name": "weight_stationary", "levels": ws_levels}]
        acc_bits = mem[acc]["word_bits"]
        pe["acc_dtype"] = "int16" if acc_bits == 16 else "int32"
        if reg is not None and mem[reg]["word_bits"] >= acc_bits:
            dataflows.append({"name": "output_stationary", "levels": {
                mem[reg]["name"]: {"keeps": ["O"]}, mem[acc]["name"]: {"spatial_dims": ["N", "P", "Q"]},
                mem[spad]["name"]: {"spatial_dims": ["K"]}}})
    else:
        first = frozenset(mem[0]["keeps"])
        df = {frozenset("W"): "weight_stationary", frozenset("O"): "output_stationary",
              frozenset("I"): "input_stationary"}.get(first, "default")
        dataflows = [{"name": df}]
        rows, cols = _rows_cols(macs, mesh_x)
    pe.update({"rows": rows, "cols": cols})
    if mesh_x is not None and mesh_x != macs:
        pe["mesh_x"] = mesh_x
    pe.setdefault("acc_dtype", "int32")

    for lv in mem:  # hints override inferred level fields
        h = level_hints.get(lv["name"]) or {}
        for key, value in h.items():
            lv[key] = value
    pe_hint = hint.get("pe_array") or {}
    if not isinstance(pe_hint, dict):
        raise InputError(("tileplan", "pe_array"), "must be a mapping")
    pe.update(pe_hint)
    if "dataflows" in hint:
        dataflows = hint["dataflows"]
    pe["dataflows"] = dataflows
    desc: dict[str, Any] = {
        "name": hint.get("name") or name,
        "description": hint.get("description") or f"imported from Timeloop ({'v0.3' if 'architecture' in data else 'legacy'})",
        "pe_array": pe,
        "memory_levels": mem,
        # Timeloop sizes strided input tiles by their bounding box; plans are scored the way timeloop-model scores
        # them, except on Gemmini-like hierarchies, where the calibrated Gemmini model stays the default.
        "input_tiles": "bounding_box",
        "word_elements": True,
    }
    if gem is None:
        desc["cost_model"] = "timeloop"
    if loop_constraints:
        desc["constraints"] = {"loops": loop_constraints}
    for key in ("constraints", "cost_params", "input_tiles", "word_elements", "cost_model"):
        if key in hint:
            desc[key] = hint[key]
    return desc


def _gemmini_roles(mem: list[dict[str, Any]]) -> tuple[int | None, int, int] | None:
    """(registers or None, accumulator, scratchpad) when the keep-sets are Gemmini's."""
    keeps = [frozenset(lv["keeps"]) for lv in mem]
    shape4 = [frozenset("W"), frozenset("O"), frozenset("IW"), frozenset("WIO")]
    if len(mem) == 4 and keeps == shape4:
        return 0, 1, 2
    if len(mem) == 3 and keeps == shape4[1:]:
        return None, 0, 1
    return None


# --------------------------------------------------------------------------------------------------
# Export


def _words(bytes_per_cycle: float, word_bits: int) -> float:
    w = bytes_per_cycle * 8 / word_bits
    return int(w) if float(w).is_integer() else w


def to_timeloop_arch(hw: HardwareDescriptor, hint: bool = True) -> dict[str, Any]:
    """The descriptor as a Timeloop v0.3 architecture document (a dict; `dump_yaml` for text).

    Each growth in instance count opens a nested subtree `Name[0..f-1]`; Gemmini-style levels name
    them PECols / PERows after their `array_axis`. The compute units (`MACC`, class intmac) sit in the
    innermost subtree. With `hint`, a `tileplan:` block carries what Timeloop has no field for (keep-sets,
    dataflows, spatial dims, double buffering, partitions), so `from_timeloop` restores the descriptor."""
    levels = list(hw.memory_levels)
    outer_first = list(reversed(levels))

    def component(lv: Any) -> dict[str, Any]:
        # a level Tileplan splits where the source did not (Gemmini's accumulator) is written as the source has it
        instances = lv.source_instances or lv.instances
        attrs: dict[str, Any] = {"instances": instances, "word-bits": lv.word_bits}
        if lv.mesh_x is not None:
            attrs["meshX"] = lv.mesh_x
        block, cluster = lv.block_size or 1, lv.cluster_size or 1
        if lv.capacity is not None:
            per = lv.capacity // instances
            attrs["entries"] = per * 8 // lv.word_bits
            attrs["depth"] = -(-attrs["entries"] // block)
            attrs["width"] = lv.word_bits * block * cluster
        if block != 1:
            attrs["block-size"] = block
        if cluster != 1:
            attrs["cluster-size"] = cluster
        if lv.bandwidth is not None:
            attrs["shared_bandwidth"] = _words(lv.bandwidth, lv.word_bits)
        if lv.read_bandwidth is not None:
            attrs["read_bandwidth"] = _words(lv.read_bandwidth, lv.word_bits)
        if lv.write_bandwidth is not None:
            attrs["write_bandwidth"] = _words(lv.write_bandwidth, lv.word_bits)
        if lv.source_entries is not None:
            attrs["entries"] = lv.source_entries
        if lv.multiple_buffering is not None:
            attrs["multiple-buffering"] = lv.multiple_buffering
        if lv.min_utilization is not None:
            attrs["min-utilization"] = lv.min_utilization
        if lv.addr_gen_energy_pj is not None:
            attrs["addr-gen-energy"] = lv.addr_gen_energy_pj
        if lv.network is not None:  # the network below the level, as Timeloop's inferred network reads it
            if lv.network.hop_pj:
                attrs["energy-per-hop"] = lv.network.hop_pj
            if lv.network.router_pj:
                attrs["router-energy"] = lv.network.router_pj
            if lv.network.reduces is not None:
                attrs["reduction_supported"] = lv.network.reduces
        if lv.energy is not None and lv.energy.read_pj_per_byte == lv.energy.write_pj_per_byte:
            # Timeloop's one figure per block access (the importer reads it back per byte)
            attrs["vector-access-energy"] = lv.energy.read_pj_per_byte * block * lv.word_bits / 8
        tech = lv.technology or ("DRAM" if lv.capacity is None else "SRAM")
        cls = "DRAM" if tech == "DRAM" else (
            "regfile" if lv.capacity is not None and lv.capacity // instances <= 64 else "SRAM")
        return {"name": lv.name, "class": cls, "attributes": attrs}

    in_bits = DTYPE_BITS[hw.pe_array.input_dtype]
    macc: dict[str, Any] = {"name": "MACC", "class": "intmac",
                            "attributes": {"instances": hw.pe_array.macs, "datawidth": in_bits, "word-bits": in_bits}}
    if hw.pe_array.mesh_x is not None:
        macc["attributes"]["meshX"] = hw.pe_array.mesh_x
    if hw.pe_array.mac_energy_pj is not None:
        # (a whole number: timeloop-model reads no other here; a fractional one it refuses, as the importer does)
        e = hw.pe_array.mac_energy_pj
        macc["attributes"]["energy"] = int(e) if float(e).is_integer() else e
    root: dict[str, Any] = {"name": "System", "local": [], "subtree": []}
    node = root
    current = 1
    for k, lv in enumerate(outer_first):
        instances = lv.source_instances or lv.instances
        if instances > current:
            f = instances // current
            axis = {"cols": "PECols", "rows": "PERows"}.get(outer_first[k - 1].array_axis or "", f"Array{k}")
            child: dict[str, Any] = {"name": f"{axis}[0..{f - 1}]", "local": [], "subtree": []}
            node["subtree"].append(child)
            node = child
            current = instances
        elif k == 1 and node is root:
            chip: dict[str, Any] = {"name": "Chip", "local": [], "subtree": []}
            root["subtree"].append(chip)
            node = chip
        node["local"].append(component(lv))
    if hw.pe_array.macs > current:
        f = hw.pe_array.macs // current
        axis = {"cols": "PECols", "rows": "PERows"}.get(outer_first[-1].array_axis or "", "PE")
        child = {"name": f"{axis}[0..{f - 1}]", "local": [], "subtree": []}
        node["subtree"].append(child)
        node = child
    node["local"].append(macc)

    def prune(n: dict[str, Any]) -> dict[str, Any]:
        out = {"name": n["name"]}
        if n["local"]:
            out["local"] = n["local"]
        if n["subtree"]:
            out["subtree"] = [prune(c) for c in n["subtree"]]
        return out

    doc: dict[str, Any] = {"architecture": {"version": 0.3, "subtree": [prune(root)]}}
    if hint:
        lv_hint = {}
        for lv in levels:
            h: dict[str, Any] = {"keeps": list(lv.keeps)}
            for key in ("spatial_dims", "partition", "array_axis", "mesh_x", "source_instances"):
                v = getattr(lv, key)
                if v is not None:
                    h[key] = list(v) if isinstance(v, list) else (dict(v) if isinstance(v, dict) else v)
            if lv.buffer_count != 1:
                h["buffer_count"] = lv.buffer_count
            lv_hint[lv.name] = h
        pe = hw.pe_array.model_dump(mode="json", exclude={"dataflows"})
        doc["tileplan"] = {
            "name": hw.name,
            "description": hw.description,
            "pe_array": pe,
            "dataflows": [df.model_dump(mode="json", exclude_none=True) for df in hw.pe_array.dataflows],
            "levels": lv_hint,
            "input_tiles": hw.input_tiles,
            "word_elements": hw.word_elements,
            "cost_model": hw.cost_model,
        }
        if hw.constraints.max_tile or hw.constraints.loops:
            doc["tileplan"]["constraints"] = hw.constraints.model_dump(mode="json", exclude_defaults=True)
        if hw.cost_params:
            doc["tileplan"]["cost_params"] = dict(hw.cost_params)
    return doc


def dump_yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
