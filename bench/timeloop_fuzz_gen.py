"""Random Timeloop v0.3 architectures, layers and mappings for the differential fuzzer (bench/timeloop_fuzz.py).

Everything here is drawn from one `random.Random`, so a seed names a case set. Architectures are written the way
people write Timeloop files: nested subtrees `Name[0..n-1]` or ranged component names for fan-outs, `meshX` (or
`meshY`) for 2-D meshes, per-level `word-bits` / `datawidth`, sizes as `entries`, `depth` (+ `width` or
`block-size`) or `sizeKB`, `block-size`, `cluster-size`, `network-word-bits`, `read_bandwidth` /
`write_bandwidth` / `shared_bandwidth` / legacy `bandwidth`, SRAM-ish classes (SRAM, regfile, smartbuffer,
storage) on chip and a DRAM backing store; which tensors each level keeps is stated as the file's own
`architecture_constraints` (type datatype, keep / bypass), the only place a Timeloop file says it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

TL_NAMES = {"W": "Weights", "I": "Inputs", "O": "Outputs"}
ONCHIP_CLASSES = ("SRAM", "regfile", "smartbuffer", "storage")


@dataclass
class GenLevel:
    name: str
    rows: int  # instance grid: rows x cols instances
    cols: int
    keeps: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    cls: str = "SRAM"

    @property
    def instances(self) -> int:
        return self.rows * self.cols


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _grid(rng: random.Random) -> tuple[int, int]:
    """The MAC array: rows x cols (X = columns)."""
    shape = rng.random()
    if shape < 0.15:
        return 1, 1
    sizes = [1, 2, 3, 4, 6, 8, 12, 16]
    while True:
        r, c = rng.choice(sizes), rng.choice(sizes)
        if shape < 0.45:
            r = 1  # a 1-D array
        if 2 <= r * c <= 256:
            return r, c


def _bandwidth(rng: random.Random, attrs: dict[str, Any], dram: bool) -> None:
    values = [0.5, 1, 2, 4, 8, 16, 32] if not dram else [1, 2, 4, 8, 16, 32, 64]
    kind = rng.random()
    if kind < 0.35:
        return
    if kind < 0.55:
        attrs["shared_bandwidth"] = rng.choice(values)
    elif kind < 0.7:
        attrs["read_bandwidth"] = rng.choice(values)
    elif kind < 0.8:
        attrs["write_bandwidth"] = rng.choice(values)
    elif kind < 0.92:
        attrs["read_bandwidth"] = rng.choice(values)
        attrs["write_bandwidth"] = rng.choice(values)
    else:
        attrs["bandwidth"] = rng.choice([v for v in values if v >= 1]) * 2  # deprecated: read = write = B/2


def _word_bits(rng: random.Random, attrs: dict[str, Any], bits: int | None = None) -> int:
    wb = bits if bits is not None else rng.choice([8, 8, 16, 16, 24, 32])
    form = rng.random()
    if form < 0.1 and wb == 16:
        return 16  # unstated: Timeloop's default
    attrs["datawidth" if form < 0.25 else "word-bits"] = wb
    return wb


def _size(rng: random.Random, attrs: dict[str, Any], entries: int, wb: int, instances: int) -> None:
    """entries, depth (+ width / block-size), or sizeKB; plus block-size and cluster-size."""
    block = rng.choice([1, 1, 1, 2, 4, 8]) if entries >= 8 else 1
    clusters = [c for c in _divisors(instances) if c <= 16]
    cluster = rng.choice(clusters) if rng.random() < 0.3 else 1
    form = rng.random()
    if form < 0.4:
        attrs["entries"] = entries
        if block > 1:
            attrs["block-size"] = block
        if cluster > 1:
            attrs["cluster-size"] = cluster
    elif form < 0.85:
        depth = max(1, entries // block)
        width = wb * block * cluster
        key = rng.choice(["depth", "memory_depth"])
        attrs[key] = depth
        which = rng.random()
        if which < 0.4:
            attrs["width" if rng.random() < 0.5 else "memory_width"] = width
            if block > 1 and rng.random() < 0.5:
                attrs["block-size"] = block
            if cluster > 1 and (block == 1 or "block-size" not in attrs):
                attrs["cluster-size"] = cluster
            if block > 1 and "block-size" not in attrs and cluster > 1:
                attrs["block-size"] = block
        else:
            if block > 1:
                attrs["block-size"] = block
            if cluster > 1:
                attrs["cluster-size"] = cluster
    else:
        kb = max(1, round(entries * wb / 8 / 1024))
        attrs["sizeKB"] = kb
        if block > 1:
            attrs["block-size"] = block
        if cluster > 1:
            attrs["cluster-size"] = cluster


def random_arch(rng: random.Random, name: str) -> tuple[str, dict[str, Any]]:
    """(name, a Timeloop v0.3 document with architecture_constraints)."""
    rows, cols = _grid(rng)
    n_onchip = rng.randint(1, 5)  # 2..6 storage levels with DRAM
    # instance grids, outer to inner, each dividing the next and the MAC grid
    grids: list[tuple[int, int]] = []
    r, c = 1, 1
    for i in range(n_onchip):
        left = n_onchip - i
        if rng.random() < 0.5 or left == 1 and rng.random() < 0.5:
            opts = [(rr, cc) for rr in _divisors(rows) for cc in _divisors(cols) if rr % r == 0 and cc % c == 0]
            r, c = rng.choice(opts)
        grids.append((r, c))
    levels: list[GenLevel] = []
    used: set[str] = set()
    for i, (gr, gc) in enumerate(grids):
        inner = i == n_onchip - 1
        per_pe = gr * gc == rows * cols and rows * cols > 1
        if per_pe and inner and rng.random() < 0.6:
            kind = "Reg"
            entries = 1 if rng.random() < 0.6 else rng.choice([2, 4, 8, 16])
            keeps = [rng.choice("WIO")]
        else:
            kind = {1: "Buf", 0: "Spad"}[int(gr * gc == 1)] if not per_pe else "PEBuf"
            if gr > 1 and gc == 1:
                kind = "RowBuf"
            elif gr == 1 and gc > 1 and rows > 1:
                kind = "ColBuf"
            depth_exp = 4 + 2 * (n_onchip - i) + rng.randint(-2, 3)
            entries = 2 ** max(2, depth_exp)
            if rng.random() < 0.2:
                entries = entries * 3 // 2
            keeps = [t for t in "WIO" if rng.random() < 0.55] or [rng.choice("WIO")]
        nm = f"{kind}{i}"
        while nm in used:
            nm += "x"
        used.add(nm)
        attrs: dict[str, Any] = {}
        wb = _word_bits(rng, attrs)
        _size(rng, attrs, entries, wb, gr * gc)
        _bandwidth(rng, attrs, dram=False)
        if rng.random() < 0.2:
            attrs["network-word-bits"] = rng.choice([8, 16, 32])
        levels.append(GenLevel(nm, gr, gc, keeps, attrs, rng.choice(ONCHIP_CLASSES)))
    first = levels[0].attrs
    if len(levels) > 1 and rng.random() < 0.08 and not {"cluster-size", "width", "memory_width"} & set(first):
        # an on-chip level of DRAM technology (an HBM-like stack; Timeloop allows it no cluster)
        if rng.random() < 0.5:
            levels[0].cls = "DRAM"
        else:
            first["technology"] = "DRAM"
    dram_attrs: dict[str, Any] = {}
    dram_wb = _word_bits(rng, dram_attrs, rng.choice([8, 8, 16, 32]))
    if rng.random() < 0.5:
        dram_block = rng.choice([1, 2, 4, 8])
        if rng.random() < 0.5:
            dram_attrs["width"] = dram_wb * dram_block
        elif dram_block > 1:
            dram_attrs["block-size"] = dram_block
    _bandwidth(rng, dram_attrs, dram=True)
    top_class = "DRAM"
    if rng.random() < 0.12:  # a backing store that is an SRAM of a stated size (as in Timeloop's exercises)
        top_class = rng.choice(["SRAM", "smartbuffer_SRAM", "storage"])
        dram_attrs["entries"] = 2 ** rng.randint(14, 22)
    mac_bits = rng.choice([8, 8, 16])
    doc = _document(levels, dram_attrs, rows, cols, mac_bits, rng, top_class)
    return name, doc


def _mesh_attrs(rng: random.Random, lv_rows: int, lv_cols: int, attrs: dict[str, Any]) -> None:
    """meshX / meshY where the grid is not one X row (Timeloop's default: all instances along X)."""
    if lv_rows > 1:
        if rng.random() < 0.8:
            attrs["meshX"] = lv_cols
        else:
            attrs["meshY"] = lv_rows
    elif rng.random() < 0.15 and lv_cols > 1:
        attrs["meshX"] = lv_cols


def _document(levels: list[GenLevel], dram_attrs: dict[str, Any], rows: int, cols: int, mac_bits: int,
              rng: random.Random, top_class: str = "DRAM") -> dict[str, Any]:
    root: dict[str, Any] = {"name": "system", "local": [{"name": "DRAM" if top_class == "DRAM" else "MainMemory",
                                                         "class": top_class, "attributes": dram_attrs}]}
    node = root
    mult = 1  # instances of the current subtree
    for lv in levels:
        attrs = dict(lv.attrs)
        _mesh_attrs(rng, lv.rows, lv.cols, attrs)
        k = lv.instances // mult
        comp_name = lv.name
        if k > 1 and rng.random() < 0.35:
            comp_name = f"{lv.name}[0..{k - 1}]"  # a ranged component in the current subtree
        elif k > 1 or rng.random() < 0.3:
            child: dict[str, Any] = {"name": f"{lv.name}_tile[0..{k - 1}]" if k > 1 else f"{lv.name}_tile",
                                     "local": []}
            node.setdefault("subtree", []).append(child)
            node = child
            mult = lv.instances
        node.setdefault("local", []).append({"name": comp_name, "class": lv.cls, "attributes": attrs})
    mac_attrs: dict[str, Any] = {}
    mac_attrs["datawidth" if rng.random() < 0.5 else "word-bits"] = mac_bits
    if rows > 1:
        mac_attrs["meshX"] = cols
    k = rows * cols // mult
    mac = {"name": f"MAC[0..{k - 1}]" if k > 1 else "MAC", "class": rng.choice(["intmac", "compute", "mac"]),
           "attributes": mac_attrs}
    if k > 1 and rng.random() < 0.5:
        child = {"name": f"PE[0..{k - 1}]", "local": [dict(mac, name="MAC")]}
        node.setdefault("subtree", []).append(child)
    else:
        node.setdefault("local", []).append(mac)
    targets = []
    for lv in levels:
        entry: dict[str, Any] = {"target": lv.name, "type": "datatype" if rng.random() < 0.7 else "bypass",
                                 "keep": [TL_NAMES[t] for t in lv.keeps],
                                 "bypass": [TL_NAMES[t] for t in "WIO" if t not in lv.keeps]}
        targets.append(entry)
    return {"architecture": {"version": 0.3, "subtree": [root]}, "architecture_constraints": {"targets": targets}}


# ------------------------------------------------------------------------------------------------------------
# Layers


def random_layer(rng: random.Random, name: str) -> dict[str, Any]:
    """A Tileplan layer: conv (strided, dilated, non-square, padded), depthwise / grouped conv, or matmul."""
    kind = rng.random()
    small = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32, 48, 64]
    if kind < 0.2:
        return {"name": name, "op": "matmul", "M": rng.choice(small + [96, 128]), "K": rng.choice(small + [96, 128]),
                "N": rng.choice(small + [96])}
    r, s = rng.choice([1, 1, 3, 3, 5, 7]), rng.choice([1, 3, 3, 5])
    if rng.random() < 0.6:
        s = r
    stride = (rng.choice([1, 1, 1, 2, 3]), rng.choice([1, 1, 2]))
    dilation = (1, 1) if rng.random() < 0.8 else (rng.choice([1, 2]), rng.choice([1, 2, 3]))
    p, q = rng.choice([1, 2, 3, 4, 5, 7, 8, 13, 14, 16]), rng.choice([1, 2, 4, 5, 7, 8, 14, 16])
    pad = (0, 0) if rng.random() < 0.7 else (r // 2, s // 2)
    in_h = (p - 1) * stride[0] + (r - 1) * dilation[0] + 1 - 2 * pad[0]
    in_w = (q - 1) * stride[1] + (s - 1) * dilation[1] + 1 - 2 * pad[1]
    if in_h < 1 or in_w < 1:
        pad = (0, 0)
        in_h = (p - 1) * stride[0] + (r - 1) * dilation[0] + 1
        in_w = (q - 1) * stride[1] + (s - 1) * dilation[1] + 1
    layer: dict[str, Any] = {"name": name, "op": "conv2d", "kernel": [r, s], "stride": list(stride),
                             "dilation": list(dilation), "padding": list(pad), "in_h": in_h, "in_w": in_w,
                             "batch": rng.choice([1, 1, 1, 1, 2, 3])}
    if kind < 0.35:
        g = rng.choice([2, 3, 4, 8, 16, 32])
        per_in, per_out = (1, 1) if rng.random() < 0.6 else (rng.choice([1, 2, 4]), rng.choice([1, 2, 4]))
        layer.update(in_channels=g * per_in, out_channels=g * per_out, groups=g)
    else:
        layer.update(in_channels=rng.choice(small + [3, 96, 128]), out_channels=rng.choice(small + [96, 128]))
    return layer


def wild_factors(rng: random.Random, dims: dict[str, int], n_levels: int, fanouts: list[int]) -> list[
        tuple[list[tuple[str, int]], list[tuple[str, int]]]]:
    """A random factorization of every dimension over the levels' temporal and spatial slots, ignoring capacity
    (and now and then the fan-outs): (temporal, spatial) per level, innermost first."""
    temporal: list[list[tuple[str, int]]] = [[] for _ in range(n_levels)]
    spatial: list[list[tuple[str, int]]] = [[] for _ in range(n_levels)]
    room = list(fanouts)
    for d, bound in dims.items():
        for p in _primes(bound):
            lvl = rng.randrange(n_levels)
            if room[lvl] > 1 and (room[lvl] % p == 0 or rng.random() < 0.1) and rng.random() < 0.5:
                spatial[lvl].append((d, p))
                room[lvl] = max(1, room[lvl] // p)
            else:
                temporal[lvl].append((d, p))
    out = []
    for t, s in zip(temporal, spatial):
        out.append((_merge(t, rng), _merge(s, rng)))
    return out


def _merge(fs: list[tuple[str, int]], rng: random.Random) -> list[tuple[str, int]]:
    per: dict[str, int] = {}
    for d, f in fs:
        per[d] = per.get(d, 1) * f
    items = list(per.items())
    rng.shuffle(items)
    return items


def _primes(n: int) -> list[int]:
    out, d = [], 2
    while d * d <= n:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    if n > 1:
        out.append(n)
    return out


# ------------------------------------------------------------------------------------------------------------
# Features of Timeloop files in the wild that `random_arch` does not write (seed 2 on, `--extended`)

_SIZE_KEYS = ("entries", "depth", "memory_depth", "data_storage_depth", "sizeKB")
_STORAGE_WORDS = ("DRAM", "SRAM", "regfile", "smartbuffer", "storage")


def _is_storage(comp: dict[str, Any]) -> bool:
    return any(k in str(comp.get("class", "")) for k in _STORAGE_WORDS)


def _entries_of(attrs: dict[str, Any]) -> int | None:
    """Words per instance as timeloop-model reads the generated attributes (entries, depth x block, sizeKB)."""
    wb = attrs.get("word-bits", attrs.get("datawidth", attrs.get("word_width", 16)))
    if "entries" in attrs:
        return int(attrs["entries"])
    depth = next((attrs[k] for k in ("depth", "memory_depth", "data_storage_depth") if k in attrs), None)
    if depth is not None:
        block = attrs.get("block-size")
        if block is None and any(k in attrs for k in ("width", "memory_width", "data_storage_width")):
            width = next(attrs[k] for k in ("width", "memory_width", "data_storage_width") if k in attrs)
            block = width // (wb * attrs.get("cluster-size", 1))
        return int(depth) * int(block or 1)
    if "sizeKB" in attrs:
        return int(attrs["sizeKB"]) * 1024 * 8 // int(wb)
    return None


def _walk(node: dict[str, Any], mult: int, out: list[tuple[dict[str, Any], int, list[Any], int]]) -> None:
    """(component, its instances, the local list holding it, its index there), outer to inner."""
    for sub in node.get("subtree") or []:
        m = mult * _count(sub["name"])
        for j, comp in enumerate(sub.get("local") or []):
            out.append((comp, m * _count(comp["name"]), sub["local"], j))
        _walk(sub, m, out)


def _count(name: str) -> int:
    if "[" not in name:
        return 1
    lo, hi = name[name.index("[") + 1:name.index("]")].split("..")
    return int(hi) - int(lo) + 1


def _base(name: str) -> str:
    return name.split("[")[0]


def _split_per_datatype(doc: dict[str, Any], rng: random.Random) -> None:
    """One on-chip buffer that keeps several tensors becomes sibling buffers, one per tensor (Eyeriss' weight /
    ifmap / psum spads, Simba's per-datatype PE buffers): same instances, each its own size, listed outer to inner in
    the same `local`."""
    comps: list[tuple[dict[str, Any], int, list[Any], int]] = []
    _walk(doc["architecture"], 1, comps)
    targets = doc["architecture_constraints"]["targets"]
    keep_of = {t["target"]: t["keep"] for t in targets}
    cands = [c for c in comps if _is_storage(c[0]) and len(keep_of.get(_base(c[0]["name"]), [])) >= 2
             and "DRAM" not in str(c[0].get("class")) and _entries_of(c[0]["attributes"])]
    if not cands:
        return
    comp, _, local, j = rng.choice(cands)
    base, suffix = _base(comp["name"]), comp["name"][len(_base(comp["name"])):]
    entries = _entries_of(comp["attributes"]) or 1
    siblings = []
    tensors = list(keep_of[base])
    rng.shuffle(tensors)
    for t in tensors:
        attrs = {k: v for k, v in comp["attributes"].items() if k not in _SIZE_KEYS}
        attrs["entries"] = max(1, entries // rng.choice([1, 2, 4]))
        if attrs.get("block-size", 1) > attrs["entries"]:
            attrs.pop("block-size")
        for k in ("width", "memory_width", "data_storage_width"):  # a width that no longer matches is dropped
            attrs.pop(k, None)
        siblings.append({"name": f"{base}_{t[0].lower()}{suffix}", "class": comp["class"], "attributes": attrs})
    local[j:j + 1] = siblings
    k = next(i for i, t in enumerate(targets) if t["target"] == base)
    typ = targets[k]["type"]
    targets[k:k + 1] = [{"target": _base(s["name"]), "type": typ, "keep": [t],
                         "bypass": [x for x in TL_NAMES.values() if x != t]} for s, t in zip(siblings, tensors)]


def _sprinkle(comp: dict[str, Any], rng: random.Random, top: bool) -> None:
    """Attributes timeloop-model reads (or passes over) that change nothing the generator wrote before: bank and port
    counts, technology strings, DRAM types, multiple-buffering, min-utilization, spellings, network types, energies."""
    a = comp["attributes"]
    storage = _is_storage(comp)
    if not storage:
        if rng.random() < 0.08:
            # pJ per MAC instead of the table's; whole numbers: timeloop-model @019f107 fails on any other ("bad
            # conversion"; Tileplan refuses those files too, tests/hardware/test_timeloop.py)
            a["energy"] = rng.choice([1, 2, 3])
        return
    if rng.random() < 0.25:
        a[rng.choice(["n_banks", "num-banks"])] = rng.choice([1, 2, 4, 8, 16])
    if rng.random() < 0.12:
        a[rng.choice(["n_ports", "num-ports"])] = rng.choice([1, 2])
    if top:
        if "DRAM" in str(comp.get("class")) and rng.random() < 0.5:
            a["type"] = rng.choice(["LPDDR4", "DDR4", "HBM2", "GDDR5"])  # Accelergy's; timeloop-model ignores it
        return
    if "technology" not in a and rng.random() < 0.2:
        a["technology"] = rng.choice(["45nm", "40nm", "16nm", "SRAM"])  # only "DRAM" means anything to Timeloop
    entries = _entries_of(a)
    if entries and entries >= 2 and rng.random() < 0.18:
        a["multiple-buffering"] = rng.choice([2, 2, 1.5, 3])
    if entries and entries >= 4 and rng.random() < 0.08:
        a["min-utilization"] = rng.choice([0.05, 0.1, 0.25])
    if rng.random() < 0.1:
        a["network-type"] = rng.choice(["1:1", "1:N"])
    if rng.random() < 0.05:
        a["vector-access-energy"] = rng.choice([0.3, 1.5, 4.0])
    # other spellings timeloop-model reads
    if "word-bits" in a and rng.random() < 0.1:
        a["word_width"] = a.pop("word-bits")
    if "block-size" in a and rng.random() < 0.15:
        a[rng.choice(["block_size", "n_words"])] = a.pop("block-size")
    if "depth" in a and rng.random() < 0.15:
        a["data_storage_depth"] = a.pop("depth")
        if "width" in a:
            a["data_storage_width"] = a.pop("width")
    # a one-word register stated as depth 1 x width, as register files often are
    if a.get("entries") == 1 and rng.random() < 0.4 and not {"block-size", "cluster-size"} & set(a):
        a.pop("entries")
        a["depth"] = 1
        a["width"] = a.get("word-bits", a.get("datawidth", a.get("word_width", 16)))


def _state_instances(doc: dict[str, Any], flatten: bool) -> None:
    """Every component states its `instances` (and the compute its meshX); with `flatten`, the tree becomes one
    subtree of components whose counts come from the attribute alone (as files converted from the legacy form)."""
    comps: list[tuple[dict[str, Any], int, list[Any], int]] = []
    _walk(doc["architecture"], 1, comps)
    for comp, n, _, _ in comps:
        comp["attributes"]["instances"] = n
        if flatten:
            comp["name"] = _base(comp["name"])
    if flatten:
        system = doc["architecture"]["subtree"][0]
        system["local"] = [c for c, _, _, _ in comps]
        system.pop("subtree", None)
        chip = {"name": "chip", "local": system["local"][1:]}
        system["local"] = system["local"][:1]
        system["subtree"] = [chip]


def _to_legacy(doc: dict[str, Any]) -> dict[str, Any]:
    """The legacy v0.2 form (`arch: {storage: [innermost first], arithmetic}`), attributes inline, instances stated,
    the backing store's DRAM technology stated (there is no class), the keep-sets as `mapspace: {constraints}`."""
    comps: list[tuple[dict[str, Any], int, list[Any], int]] = []
    _walk(doc["architecture"], 1, comps)
    storage, arith = [], None
    for comp, n, _, _ in comps:
        entry = {"name": _base(comp["name"]), **comp["attributes"], "instances": n}
        if _is_storage(comp):
            if "DRAM" in str(comp.get("class")):
                entry["technology"] = "DRAM"
            storage.append(entry)
        else:
            arith = entry
    return {"arch": {"arithmetic": arith, "storage": list(reversed(storage))},
            "mapspace": {"constraints": doc["architecture_constraints"]["targets"]}}


def extend_arch(doc: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """`random_arch`'s document with features of Timeloop files in the wild it does not write itself."""
    doc = {k: v for k, v in doc.items()}
    if rng.random() < 0.35:
        _split_per_datatype(doc, rng)
    comps: list[tuple[dict[str, Any], int, list[Any], int]] = []
    _walk(doc["architecture"], 1, comps)
    storages = [c for c, _, _, _ in comps if _is_storage(c)]
    for comp, _, _, _ in comps:
        _sprinkle(comp, rng, top=comp is storages[0])
    form = rng.random()
    if form < 0.15:
        return _to_legacy(doc)
    if form < 0.3:
        _state_instances(doc, flatten=True)
    elif form < 0.45:
        _state_instances(doc, flatten=False)
    where = rng.random()
    if where < 0.15:
        doc["mapspace_constraints"] = doc.pop("architecture_constraints")
    elif where < 0.3:
        doc["architecture_constraints"] = doc["architecture_constraints"]["targets"]
    return doc


# ------------------------------------------------------------------------------------------------------------
# Round 3 (seed 4 on, `--more`): loop constraints timeloop-model checks every map against, and the energies of the
# inferred networks and address generators a storage level may state

_TL_DIMS = "RSPQCKN"


def _storage_levels(doc: dict[str, Any]) -> list[tuple[str, int]]:
    """(name, fan-out below it) of every storage level, innermost first, in any of the forms `extend_arch` writes."""
    if "arch" in doc:  # the legacy form: storage innermost first, instances stated
        below = int(doc["arch"]["arithmetic"]["instances"])
        levels = [(str(st["name"]), int(st.get("instances", 1))) for st in doc["arch"]["storage"]]
    else:
        comps: list[tuple[dict[str, Any], int, list[Any], int]] = []
        _walk(doc["architecture"], 1, comps)
        below = next(c["attributes"].get("instances", n) for c, n, _, _ in comps if not _is_storage(c))
        levels = [(_base(c["name"]), c["attributes"].get("instances", n)) for c, n, _, _ in comps if _is_storage(c)]
        levels.reverse()
    out = []
    for name, n in levels:
        out.append((name, below // max(1, n)))
        below = n
    return out


def _loop_entries(rng: random.Random, levels: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """`temporal` / `spatial` constraints as Timeloop files write them (Eyeriss' `R=1 S=1` at its registers, Simba's
    spatial `C` / `K` only with a split, partial permutations innermost first, `D<=n` largest factors)."""
    out: list[dict[str, Any]] = []
    for k, (name, fanout) in enumerate(levels):
        top = k == len(levels) - 1
        if not top and rng.random() < 0.35:
            parts = []
            dims = rng.sample(_TL_DIMS, rng.randint(1, 3))
            for d in dims:
                r = rng.random()
                if r < 0.6:
                    parts.append(f"{d}=1")
                elif r < 0.75 and k == 0 and d in "RS":
                    parts.append(f"{d}=0")  # the whole filter at the innermost level (row-stationary)
                else:
                    parts.append(f"{d}<={rng.choice([2, 3, 4, 8])}")
            entry: dict[str, Any] = {"target": name, "type": "temporal", "factors": " ".join(parts)}
            if rng.random() < 0.3:
                entry["permutation"] = "".join(rng.sample(_TL_DIMS, rng.randint(2, 7)))
            out.append(entry)
        elif rng.random() < 0.12:
            out.append({"target": name, "type": "temporal",
                        "permutation": "".join(rng.sample(_TL_DIMS, rng.randint(2, 7)))})
        if fanout > 1 and rng.random() < 0.4:
            allowed = rng.sample("CKPQ", rng.randint(1, 3))
            entry = {"target": name, "type": "spatial",
                     "factors": " ".join(f"{d}=1" for d in _TL_DIMS if d not in allowed)}
            if rng.random() < 0.3:
                entry["factors"] += f" {allowed[0]}<={rng.choice([2, 4, fanout])}"
            if rng.random() < 0.3:
                entry["permutation"] = "".join(allowed)
            if rng.random() < 0.25:
                entry["split"] = rng.choice([len(allowed), 1])
            out.append(entry)
    return out


def _network_energies(doc: dict[str, Any], rng: random.Random) -> None:
    """Per-level figures of the inferred network and address generator that timeloop-model reads from a storage
    component's attributes (router / wire energy, energy per hop, tile width, addr-gen-energy)."""
    if "arch" in doc:
        comps = [st for st in doc["arch"]["storage"]]
    else:
        walked: list[tuple[dict[str, Any], int, list[Any], int]] = []
        _walk(doc["architecture"], 1, walked)
        comps = [c["attributes"] for c, _, _, _ in walked if _is_storage(c)]
    for a in comps:
        r = rng.random()
        if r < 0.1:
            a["addr-gen-energy"] = rng.choice([0.1, 0.5, 2])
        elif r < 0.17:
            a["router-energy"] = rng.choice([0.2, 1])
        elif r < 0.24:
            a["wire-energy"] = rng.choice([0.05, 0.3])
            if rng.random() < 0.5:
                a["tile-width"] = rng.choice([50, 200])
        elif r < 0.3:
            a["energy-per-hop"] = rng.choice([0.5, 2])


def extend_more(doc: dict[str, Any], rng: random.Random, network: bool = False) -> dict[str, Any]:
    """Round 3, on what `extend_arch` made (any of its forms): loop constraints, mostly in the block timeloop-model
    checks maps against (`architecture_constraints`, or the legacy form's `arch: {constraints}`), now and then in
    `mapspace_constraints`, which only timeloop-mapper reads; with `network`, network / address-generation
    energies."""
    doc = {k: v for k, v in doc.items()}
    if rng.random() < 0.6:
        extra = _loop_entries(rng, _storage_levels(doc))
        if "arch" in doc:
            doc["arch"] = {**doc["arch"], "constraints": extra}
        elif "architecture_constraints" in doc:
            block = doc["architecture_constraints"]
            doc["architecture_constraints"] = block + extra if isinstance(block, list) else {
                "targets": block["targets"] + extra}
        elif rng.random() < 0.5:
            doc["architecture_constraints"] = {"targets": extra}
        else:
            doc["mapspace_constraints"] = {"targets": doc["mapspace_constraints"]["targets"] + extra}
    if network:
        _network_energies(doc, rng)
    return doc


# ------------------------------------------------------------------------------------------------------------
# Round 4 (seed 5 on, `--net`): the inferred networks' energies stated often and in every form a file can state them


def extend_net(doc: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """On what `extend_more` made (any form): most storage levels state the network below them: `energy-per-hop`,
    `router-energy`, both, or `wire-energy` (pJ per bit per mm) with a `tile-width` (um) or without one (the hop's
    length then comes from the floorplan: the arithmetic's `area`, a level's `cluster-area`), now and then a
    `network-word-bits` or `reduction_supported`; so fan-outs, multicasts and link transfers are priced as
    timeloop-model prices them."""
    doc = {k: v for k, v in doc.items()}
    if "arch" in doc:
        comps = list(doc["arch"]["storage"])
        arith = doc["arch"]["arithmetic"]
    else:
        walked: list[tuple[dict[str, Any], int, list[Any], int]] = []
        _walk(doc["architecture"], 1, walked)
        comps = [c["attributes"] for c, _, _, _ in walked if _is_storage(c)]
        arith = next(c["attributes"] for c, _, _, _ in walked if not _is_storage(c))
    if rng.random() < 0.5:
        arith["area"] = rng.choice([100, 400, 2500, 10000])  # um^2 per MAC (a whole number: Timeloop reads it so)
    for a in comps:
        for key in ("addr-gen-energy", "router-energy", "wire-energy", "tile-width", "energy-per-hop"):
            a.pop(key, None)  # (this round states them afresh)
        r = rng.random()
        if r < 0.2:
            a["energy-per-hop"] = rng.choice([0.25, 0.5, 1, 2])
        elif r < 0.35:
            a["router-energy"] = rng.choice([0.2, 1, 3])
        elif r < 0.5:
            a["energy-per-hop"] = rng.choice([0.5, 2])
            a["router-energy"] = rng.choice([0.2, 1])
        elif r < 0.8:
            a["wire-energy"] = rng.choice([0.05, 0.3, 1])
            if rng.random() < 0.5:
                a["tile-width"] = rng.choice([20, 50, 200])
            if rng.random() < 0.3:
                a["router-energy"] = rng.choice([0.2, 1])
        if rng.random() < 0.2:
            a["network-word-bits"] = rng.choice([8, 16, 32])
        if rng.random() < 0.15 and "DRAM" not in str(a.get("technology", "")):
            a["cluster-area"] = rng.choice([1000, 5000, 20000])
        if rng.random() < 0.12:
            a["reduction_supported"] = rng.random() < 0.3  # (false: outputs cross its network twice)
    return doc


# ------------------------------------------------------------------------------------------------------------
# Round 5 (seed 7 on, `--wide`): the rest of what timeloop-model @019f107 reads from an architecture file that the
# earlier rounds never wrote (the coverage audit, bench/results/timeloop_coverage.md), and probes: files that change
# one thing timeloop-model stops on, or that Tileplan refuses by design, each judged by both

# (whole-number attributes only: timeloop-model looks no variable up where it reads a fractional number)
_NUMERIC_KEYS = ("entries", "depth", "memory_depth", "word-bits", "datawidth", "block-size", "cluster-size",
                 "num-ports", "n_banks", "num-banks")


def _model_block(doc: dict[str, Any]) -> tuple[dict[str, Any] | list[Any] | None, str | None]:
    """The constraint block timeloop-model reads (the architecture's `constraints`, else arch_constraints /
    architecture_constraints) and its key."""
    key = "arch" if "arch" in doc else "architecture"
    if isinstance(doc.get(key), dict) and doc[key].get("constraints") is not None:
        return doc[key]["constraints"], "inner"
    for k in ("arch_constraints", "architecture_constraints"):
        if doc.get(k) is not None:
            return doc[k], k
    return None, None


def _block_list(block: Any) -> list[Any] | None:
    if isinstance(block, list):
        return block
    if isinstance(block, dict):
        for k in ("constraints", "targets"):
            if isinstance(block.get(k), list):
                return block[k]  # type: ignore[no-any-return]
    return None


def _components(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(storage attribute dicts innermost first, compute attribute dicts, tree subtrees outer first) in any form."""
    key = "arch" if "arch" in doc else "architecture"
    arch = doc[key]
    if "storage" in arch:
        return list(arch["storage"]), [arch["arithmetic"]], []
    walked: list[tuple[dict[str, Any], int, list[Any], int]] = []
    _walk(arch, 1, walked)
    storage = [c.get("attributes", c) for c, _, _, _ in walked if _is_storage(c)]
    compute = [c.get("attributes", c) for c, _, _, _ in walked if not _is_storage(c)]
    subtrees = []
    node = arch
    while node.get("subtree"):
        node = node["subtree"][0]
        subtrees.append(node)
    return list(reversed(storage)), compute, subtrees


def _tree_components(arch: dict[str, Any]) -> list[dict[str, Any]]:
    walked: list[tuple[dict[str, Any], int, list[Any], int]] = []
    _walk(arch, 1, walked)
    return [c for c, _, _, _ in walked]


def _storage_names(doc: dict[str, Any]) -> list[str]:
    """Storage level names, innermost first, in any form under either key."""
    key = "arch" if "arch" in doc else "architecture"
    arch = doc[key]
    if "storage" in arch:
        return [str(st["name"]).split("[")[0] for st in arch["storage"]]
    walked: list[tuple[dict[str, Any], int, list[Any], int]] = []
    _walk(arch, 1, walked)
    return [_base(c["name"]) for c, _, _, _ in reversed(walked) if _is_storage(c)]


def extend_wide(doc: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """On what the earlier rounds made (any form): the form chosen by `version` under `arch:` or `architecture:`,
    components stating their attributes inline, `variables` standing for attribute values, counts in hex, constraint
    lists per target, `name` for `target`, `bypassing`, constraint attributes under `attributes:`, utilization and
    max_overbooked_proportion constraints, networks no level names, components in the tree's root `local` (which
    timeloop-model never reads) and flags that change nothing dense (allow_overbooking: false, ...)."""
    doc = {k: v for k, v in doc.items()}
    key = "arch" if "arch" in doc else "architecture"
    arch = doc[key]
    tree = "subtree" in arch
    # the form's key and version (timeloop-model reads a tree only at version 0.2 / 0.3, under either key)
    if tree:
        arch["version"] = rng.choice([0.3, 0.3, "0.3", 0.2, "0.2"])
        if rng.random() < 0.3:
            doc["arch"] = doc.pop("architecture")
            if "constraints" in doc["arch"]:
                pass
    elif rng.random() < 0.3:  # the legacy form under `architecture:` (no version: the legacy reading)
        doc["architecture"] = doc.pop("arch")
    key = "arch" if "arch" in doc else "architecture"
    arch = doc[key]
    storage, compute, subtrees = _components(doc)
    names = _storage_names(doc)
    # components stating their attributes inline (a DRAM-class one keeps its technology by stating it)
    if tree:
        walked: list[tuple[dict[str, Any], int, list[Any], int]] = []
        _walk(arch, 1, walked)
        for comp, _, _, _ in walked:
            if "attributes" in comp and rng.random() < 0.15:
                attrs = comp.pop("attributes")
                if "DRAM" in str(comp.get("class")) and "technology" not in attrs:
                    attrs["technology"] = "DRAM"
                comp.update(attrs)
    elif rng.random() < 0.2:
        k = rng.randrange(len(arch["storage"]))
        st = arch["storage"][k]
        arch["storage"][k] = {"name": st["name"], "class": "SRAM" if st.get("technology") != "DRAM" else "DRAM",
                              "attributes": {a: v for a, v in st.items() if a != "name"}}
    storage, compute, subtrees = _components(doc)
    # variables standing for values (now and then one standing for another)
    if rng.random() < 0.4:
        variables: dict[str, Any] = {}
        for a in rng.sample(storage, min(len(storage), rng.randint(1, 3))):
            keys = [k for k in _NUMERIC_KEYS if isinstance(a.get(k), (int, float)) and not isinstance(a.get(k), bool)]
            if not keys:
                continue
            k = rng.choice(keys)
            var = f"v_{k.replace('-', '_')}_{len(variables)}"
            if rng.random() < 0.25:
                variables[var] = var + "_value"
                variables[var + "_value"] = a[k]
            else:
                variables[var] = a[k]
            a[k] = var
        if variables:
            doc["variables"] = variables
    # a count in hex or octal
    for a in storage:
        if isinstance(a.get("entries"), int) and not isinstance(a.get("entries"), bool) and rng.random() < 0.06:
            a["entries"] = rng.choice([hex(a["entries"]), "0" + oct(a["entries"])[2:]])
    # flags timeloop-model reads that change nothing for a dense model when false
    for a in storage:
        if rng.random() < 0.08:
            a[rng.choice(["allow_overbooking", "compression_supported", "decompression_supported",
                          "tile_partition_supported", "concordant_compressed_tile_traversal"])] = False
    # the constraints timeloop-model checks maps against, written the other ways it reads them
    block, where = _model_block(doc)
    entries = _block_list(block)
    if entries is not None:
        for e in entries:
            if e.get("type") == "bypass" and rng.random() < 0.2:
                e["type"] = "bypassing"
            if rng.random() < 0.15:
                inner = {k: e.pop(k) for k in ("keep", "bypass", "factors", "permutation") if k in e}
                if inner:
                    e["attributes"] = inner
        if rng.random() < 0.3 and names:
            entries.append({"target": names[0], "type": rng.choice(["utilization", "parallelism"]),
                            "min": rng.choice([0, 0.1, 0.25])})
        if rng.random() < 0.2 and names:
            entries.append({"target": rng.choice(names), "type": "max_overbooked_proportion",
                            "proportion": rng.choice([0.0, 0.1])})
        if rng.random() < 0.3:  # one list of constraints per target
            grouped: dict[str, list[dict[str, Any]]] = {}
            for e in entries:
                t = e.pop("target")
                grouped.setdefault(t, []).append(e)
            entries[:] = [{"target": t, "constraints": cs} for t, cs in grouped.items()]
        for e in entries:
            if "target" in e and "constraints" not in e and rng.random() < 0.15:
                e["name"] = e.pop("target")
    # networks no storage level names (timeloop-model builds them and connects none), a component in the root
    if tree and subtrees and rng.random() < 0.3:
        sub = rng.choice(subtrees)
        net_attrs: dict[str, Any] = {"datawidth": rng.choice([8, 16])}
        if rng.random() < 0.5:
            net_attrs["energy-per-hop"] = rng.choice([0.5, 2])
        sub.setdefault("local", []).append({"name": "NoC", "class": rng.choice(["XY_NoC", "Legacy", "ReductionTree"]),
                                            "attributes": net_attrs})
    if tree and rng.random() < 0.1:
        arch.setdefault("local", []).append({"name": "Phantom", "class": "SRAM",
                                             "attributes": {"entries": 64, "word-bits": 8}})
    return doc


# probes: one change to a file, with what Tileplan should say of it: "refuse" where timeloop-model stops too, and
# "unmodelled" where timeloop-model runs it and Tileplan refuses by design (naming the field)
PROBES: dict[str, str] = {
    "no_version": "refuse", "version_0_4": "refuse", "float_count": "refuse", "sci_count": "refuse",
    "entries_and_sizeKB": "refuse", "unknown_constraint_type": "refuse", "constraint_without_type": "refuse",
    "utilization_not_innermost": "refuse", "keep_twice": "refuse", "network_class_typo": "refuse",
    "undefined_variable": "refuse", "explicit_network": "unmodelled", "allow_overbooking": "unmodelled",
    "variable_for_a_fraction": "unmodelled", "sram_without_size": "refuse", "two_computes": "refuse",
}


def probe(doc: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """`doc` (a tree-form file as the rounds make it) with the probe's one change, or None where it does not apply."""
    import copy

    doc = copy.deepcopy(doc)
    key = "arch" if "arch" in doc else "architecture"
    arch = doc[key]
    if "subtree" not in arch:
        return None
    storage, compute, subtrees = _components(doc)
    onchip = storage[:-1]
    names = _storage_names(doc)
    block, _ = _model_block(doc)
    entries = _block_list(block)
    if kind == "no_version":
        arch.pop("version", None)
    elif kind == "version_0_4":
        arch["version"] = 0.4
    elif kind in ("float_count", "sci_count", "entries_and_sizeKB", "undefined_variable"):
        sized = [a for a in onchip if isinstance(a.get("entries"), int) and not isinstance(a.get("entries"), bool)]
        if not sized:
            return None
        a = sized[0]
        if kind == "float_count":
            a["entries"] = float(a["entries"])
        elif kind == "sci_count":
            a["entries"] = f"{a['entries']:.0e}".replace("+0", "").replace("+", "")
        elif kind == "entries_and_sizeKB":
            a["sizeKB"] = max(1, a["entries"] // 1024)
        else:
            a["entries"] = "undefined_depth"
    elif kind in ("unknown_constraint_type", "constraint_without_type", "utilization_not_innermost", "keep_twice"):
        if entries is None or len(names) < 2:
            return None
        if kind == "unknown_constraint_type":
            entries.append({"target": names[0], "type": "temporal_factors", "factors": "R=1"})
        elif kind == "constraint_without_type":
            entries.append({"target": names[0], "factors": "R=1"})
        elif kind == "utilization_not_innermost":
            entries.append({"target": names[1], "type": "utilization", "min": 0.1})
        else:
            entries.append({"target": names[0], "type": "datatype", "keep": ["Weights"]})
            entries.append({"target": names[0], "type": "datatype", "keep": ["Weights"]})
    elif kind in ("network_class_typo", "explicit_network"):
        if not subtrees:
            return None
        noc = {"name": "NoC", "class": "XY_NoC" if kind == "explicit_network" else "XY_NoC_2",
               "attributes": {"datawidth": 8, "energy-per-hop": 1}}
        subtrees[0].setdefault("local", []).append(noc)
        if kind == "explicit_network":
            walked: list[tuple[dict[str, Any], int, list[Any], int]] = []
            _walk(arch, 1, walked)
            comps = [c for c, _, _, _ in walked if _is_storage(c)]
            if len(comps) < 2:
                return None
            outer, inner = comps[-2], comps[-1]  # the innermost storage and the one above it
            oa = outer["attributes"] if "attributes" in outer else outer
            ia = inner["attributes"] if "attributes" in inner else inner
            oa["network_read"] = oa["network_update"] = "NoC"
            ia["network_fill"] = ia["network_drain"] = "NoC"
    elif kind == "variable_for_a_fraction":  # timeloop-model reads the name as 0 there
        if not onchip:
            return None
        onchip[0]["read_bandwidth"] = "bw_var"
        doc["variables"] = {**doc.get("variables", {}), "bw_var": 4}
    elif kind == "sram_without_size":
        top = next((c for c in _tree_components(arch) if _is_storage(c)), None)
        if top is None or "DRAM" not in str(top.get("class")):
            return None
        a = top.get("attributes", top)
        for k in ("entries", "depth", "memory_depth", "data_storage_depth", "sizeKB", "technology"):
            a.pop(k, None)
        top["class"] = "SRAM"
    elif kind == "two_computes":
        walked2: list[tuple[dict[str, Any], int, list[Any], int]] = []
        _walk(arch, 1, walked2)
        mac = next(((c, loc) for c, _, loc, _ in walked2 if not _is_storage(c)), None)
        if mac is None:
            return None
        mac[1].append({**mac[0], "name": "MAC2"})
    elif kind == "allow_overbooking":
        if not onchip:
            return None
        onchip[0]["allow_overbooking"] = True
    return doc
