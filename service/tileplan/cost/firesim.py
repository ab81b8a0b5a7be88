"""FireSim measurements of Gemmini, read into what a user sends: hardware, layer, mapping.

Two data sets, both published with DOSA (Hong et al., MICRO 2023):
- the random-mapping set (ucb-bar/dosa, `data/firesim_training_data/firesim_results.csv`, BSD-2-Clause,
  Copyright (c) 2022 Charles Hong): 1,567 random mappings of 66 layer shapes on a 128x128 Gemmini;
- the artifact runs (ucb-bar/gemmini-rocc-tests, `gemmini-data-collection/artifact/`, bench/data/dosa_artifact):
  whole networks on 16x16 Gemminis with other buffer sizes, each layer under a DOSA mapping and under Gemmini's
  own tiler (`tiled_conv_auto` / `tiled_matmul_auto`).

Every run becomes a `FireSimRun`: the Gemmini configuration as DOSA's Timeloop-style architecture YAML (what a
user of DOSA has; `dosa_arch_yaml`), the layer, and a contract Mapping — exactly what `POST /evaluate` takes. The
calibration and the benches cost these runs through the same function the API calls
(`tileplan.cost.gemmini.gemmini_calls`), so no door has an execution of its own.

What DOSA's FireSim harness (gemmini-data-collection: layers/extract_data_csv.py, templates/conv_tilings.c,
matmul_tilings.c and the fork's include/gemmini.h) did with a mapping is applied here, when a run is read into a
Mapping, never inside the model:
- Timeloop's CNN layer (and DOSA's mapping strings) run P and R along the output's width and Q and S along its
  height; Tileplan's P / R are rows. A convolution's string is read with the axes swapped (`parse_mapping_string`).
- convolutions ran SQUARE: in_dim = P x stride, padding R // 2, out_dim = (in_dim + 2 (R // 2) - R) // stride + 1
  (so P x P outputs even where the layer says Q != P, and one more row and column for even kernels); the
  row/column tiles stay, the DRAM factors cover the square layer;
- Q = R = S = 1 layers ran as tiled_matmul(I = P, K = C, J = K) whose tiles are max(1, tile >> 4) blocks of the
  software array size (pe_dim, below), not the mapping's element counts: the Mapping gets those tiles;
- the harness builds one binary per software array size `--pe_dim` = the power of two covering the spatial
  factors; the cost model does the same for every mapping (`tileplan.execution.occupied_array`);
- the K and C DRAM loops step by their tiles, as the Mapping says (a reading where K steps by the spatial factor
  fits the data 2-8x worse: costmodel.md, "Readings");
- no bias (the harness's NO_BIAS): the layers have none, as a user who does not declare one gets.
The register-level P/Q factors count once in the tile (the stored extract_data_csv.py multiplies them in a
second time; rows 1105/1106/1113/1116 of the random set differ only in where a P factor sits and measure within
0.2% of each other).

The tiler runs (`kind == "library"`) get the tile the library chose (`dse.auto_tiling` when recorded; else the
one gemmini-auto computes) as a Mapping (`library_mapping`). The runs' library sized its tiles for the default
256 KiB / 64 KiB buffers whatever the configuration (130 of the 143 recorded tiles equal gemmini-auto's there).
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from tileplan.errors import InputError
from tileplan.hardware import HardwareDescriptor
from tileplan.hardware.catalog import load_descriptor
from tileplan.mapping import LevelMapping, Mapping
from tileplan.problem import Problem
from tileplan.workload import Conv2dLayer, MatmulLayer

LEVEL_NAMES = ("Registers", "Accumulator", "Scratchpad", "DRAM")  # L0 .. L3
_LEVEL = re.compile(r"^L(\d)\[([WIO]*)\]$")
_TOKEN = re.compile(r"^([NKCPQRS])(\d+)(X?)$")
_SWAP = {"P": "Q", "Q": "P", "R": "S", "S": "R"}
AUTO_TILE_FIELDS = ("krows", "kcols", "ocols", "orows", "kchs", "ochs", "batches")  # order of dse.auto_tiling
CONV_ARGS = ("batches", "orows", "ocols", "ochs", "krows", "kcols", "kchs")  # plan_gemmini's tiles order
DOSA_DRAM_BANDWIDTH = 8  # words/cycle of DOSA's Gemmini template (a nominal figure, see cost.gemmini)


@dataclass(frozen=True)
class FireSimRun:
    """One FireSim measurement as a user would ask about it (`request()` is the POST /evaluate body)."""

    source: str  # data file stem ("dnn_resnet50", "gemmini_firesim_random_mappings")
    index: int  # data row
    kind: str  # "mapping" (a DOSA mapping through the harness) or "library" (Gemmini's own tiler)
    layer: Conv2dLayer | MatmulLayer
    hardware_yaml: str  # DOSA's Timeloop-style architecture of the run's configuration
    mapping: Mapping
    cycles: float
    mapping_text: str  # the row's DOSA mapping string
    layer_key: str  # the layer shape (unit of leave-one-layer-out cross-validation)
    config: str  # the Gemmini configuration (unit of leave-one-configuration-out)
    library_tile: dict[str, int] | None = None  # the tiler's recorded tile (dse.auto_tiling), if any
    timeloop_estimate: float | None = None  # DOSA's own Timeloop-style cycle estimate shipped with the row

    @property
    def network(self) -> str:
        return self.source.split("_", 1)[1] if self.source.split("_", 1)[0] in ("dnn", "both", "analytical") else self.source

    @property
    def hardware(self) -> HardwareDescriptor:
        return _hardware(self.hardware_yaml)

    @property
    def problem(self) -> Problem:
        return Problem.from_layer(self.layer)

    @property
    def op(self) -> str:
        d = self.problem.dims
        return "matmul" if d["Q"] == d["R"] == d["S"] == 1 else "conv"

    def hardware_request(self) -> dict[str, str]:
        return {"name": self.config, "format": "timeloop", "source": self.hardware_yaml}

    def request(self) -> dict[str, Any]:
        """The POST /evaluate body for this run."""
        return {
            "hardware": self.hardware_request(),
            "layer": self.layer.model_dump(mode="json", exclude={"count"}),
            "mapping": self.mapping.model_dump(mode="json"),
        }


@lru_cache(maxsize=64)
def _hardware(text: str) -> HardwareDescriptor:
    return load_descriptor(text, fmt="timeloop", name="dosa-gemmini")


def _tokens(text: str) -> list[tuple[int, list[tuple[str, int, bool]]]]:
    """(level, [(dim, factor, spatial)]) per level of a DOSA mapping string, outermost level first."""
    out = []
    for part in (p.strip() for p in text.split(" - ")):
        head, *tokens = part.split()
        m = _LEVEL.match(head)
        if not m:
            raise InputError(("mapping",), f"bad level header {head!r} in {text!r}")
        factors = []
        for tok in tokens:
            t = _TOKEN.match(tok)
            if not t:
                raise InputError(("mapping",), f"bad factor {tok!r} in {text!r}")
            factors.append((t.group(1), int(t.group(2)), bool(t.group(3))))
        out.append((int(m.group(1)), factors))
    if sorted(level for level, _ in out) != [0, 1, 2, 3]:
        raise InputError(("mapping",), f"expected levels L0..L3, got {[level for level, _ in out]} in {text!r}")
    return out


def is_matmul_string(text: str) -> bool:
    """A layer with Q = R = S = 1 (its string has no Q, R or S factor above 1): DOSA's harness runs tiled_matmul."""
    return not any(d in "QRS" and f > 1 for _, fs in _tokens(text) for d, f, _ in fs)


def parse_mapping_string(text: str, swap_axes: bool | None = None) -> Mapping:
    """`L3[WIO] K8 Q28 - L2[WI] N1 K4X - ...` -> contract Mapping (levels innermost first, loops innermost first).

    DOSA writes Timeloop's CNN-layer dimensions, where P and R run along the output's width and Q and S along
    its height; Tileplan's P and R are rows, so a convolution's factors are read with P <-> Q and R <-> S
    (`swap_axes`, default: for every convolution, i.e. unless the string is a matmul's, `is_matmul_string`)."""
    swap = (not is_matmul_string(text)) if swap_axes is None else swap_axes
    levels: dict[int, LevelMapping] = {}
    for idx, factors in _tokens(text):
        temporal: list[tuple[str, int]] = []
        spatial: list[tuple[str, int]] = []
        for d, f, x in factors:
            if f == 1:
                continue
            d = _SWAP.get(d, d) if swap else d
            (spatial if x else temporal).append((d, f))
        # The string writes loops outer to inner; the contract wants innermost first.
        levels[idx] = LevelMapping.model_validate(
            {"name": LEVEL_NAMES[idx], "temporal": list(reversed(temporal)), "spatial": spatial}
        )
    return Mapping(levels=[levels[i] for i in range(4)], dataflow="weight_stationary")


def dosa_arch_yaml(row: dict[str, str]) -> str:
    """The row's Gemmini configuration as DOSA's Timeloop v0.3 architecture (examples/timeloop/gemmini_arch_v03.yaml
    is one): DRAM at DOSA's nominal 8 words/cycle, the scratchpad, one accumulator slice per array column, one
    register per PE."""
    mesh = int(row["arch.meshX"])
    acc_entries, acc_inst = int(row["arch.mem1_entries"]), int(row["arch.mem1_instances"])
    acc_bits = int(row["arch.mem1_word-bits"])
    spad_entries, spad_bits = int(row["arch.mem2_entries"]), int(row["arch.mem2_word-bits"])
    spad_width = int(row.get("arch.mem2_width") or 128)
    return f"""architecture:
  version: 0.3
  subtree:
  - name: System
    local:
    - name: DRAM
      class: DRAM
      attributes: {{instances: 1, word-bits: 8, block_size: 64, shared_bandwidth: {DOSA_DRAM_BANDWIDTH}}}
    subtree:
    - name: Chip
      local:
      - name: Scratchpad
        class: SRAM
        attributes: {{entries: {spad_entries}, depth: {spad_entries * spad_bits // spad_width}, width: {spad_width},
                     instances: 1, meshX: 1, word-bits: {spad_bits}, n_rdwr_ports: 1, n_banks: 1, shared_bandwidth: 32}}
      subtree:
      - name: PECols[0..{mesh - 1}]
        local:
        - name: Accumulator
          class: SRAM
          attributes: {{entries: {acc_entries}, depth: {acc_entries}, width: {acc_bits}, instances: {acc_inst},
                       word-bits: {acc_bits}, network-word-bits: 16, n_rdwr_ports: 2, n_banks: 2, shared_bandwidth: 2}}
        subtree:
        - name: PERows[0..{mesh - 1}]
          local:
          - name: Registers
            class: SRAM
            attributes: {{depth: 1, width: 8, entries: 1, instances: {mesh * mesh}, word-bits: 8, n_rdwr_ports: 2, n_banks: 1}}
          - name: MACC
            class: intmac
            attributes: {{datawidth: 8, word-bits: 8}}
"""


def _pe_dim(spatial_k: int, spatial_c: int, dim: int) -> int:
    pe = 1
    while pe < min(dim, max(spatial_k, spatial_c, 2)):
        pe *= 2
    return pe


def _set_dram(mapping: Mapping, dram: dict[str, int], padded: dict[str, int]) -> Mapping:
    """The mapping with its DRAM factors of some dimensions replaced (innermost first, others kept)."""
    top = mapping.levels[-1]
    temporal = [(d, dram[d]) if d in dram else (d, f) for d, f in top.temporal]
    temporal += [(d, f) for d, f in dram.items() if d not in {x for x, _ in top.temporal}]  # type: ignore[misc]
    temporal = [(d, f) for d, f in temporal if f > 1]
    levels = [*mapping.levels[:-1], top.model_copy(update={"temporal": temporal})]
    return mapping.model_copy(update={"levels": levels, "padded_dims": {**mapping.padded_dims, **padded}})


def _cover(total: int, tile: int) -> tuple[int, int | None]:
    """(DRAM factor, padded bound or None) of `total` cut into tiles of `tile`."""
    n = -(-total // tile)
    return n, (n * tile if n * tile != total else None)


READINGS = ("harness", "stated", "stated-unswapped")


def dosa_run_inputs(row: dict[str, str], reading: str = "harness") -> tuple[Conv2dLayer | MatmulLayer, Mapping]:
    """The layer DOSA's harness ran for a row and its mapping as the harness executed it (module docstring).

    Other readings, to measure how much the harness's quirks matter to a user who does not know them:
    "stated" = the layer as the row states it (P x Q outputs, no padding) and DOSA's factors as they are (axes
    swapped as Timeloop's CNN layer says); "stated-unswapped" = the same with DOSA's P / R taken as Tileplan's."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {READINGS}")
    text = row["mapping.mapping"]
    dim = int(row["arch.meshX"])
    c, k, n = int(row["prob.C"]), int(row["prob.K"]), int(row["prob.N"])
    p, q, r, s = (int(row[f"prob.{x}"]) for x in "PQRS")
    stride = int(row["prob.Wstride"])
    matmul = q == 1 and r == 1 and s == 1
    if reading != "harness":
        mapping = parse_mapping_string(text, swap_axes=not (reading == "stated-unswapped" or matmul))
        hs = int(row["prob.Hstride"])
        if matmul:
            return MatmulLayer(M=p * n, K=c, N=k), mapping
        if reading == "stated":  # Tileplan rows = DOSA's Q / S under the H stride
            return Conv2dLayer(in_channels=c, out_channels=k, in_h=(q - 1) * hs + s, in_w=(p - 1) * stride + r,
                               kernel=(s, r), stride=(hs, stride), batch=n), mapping
        return Conv2dLayer(in_channels=c, out_channels=k, in_h=(p - 1) * stride + r, in_w=(q - 1) * hs + s,
                           kernel=(r, s), stride=(stride, hs), batch=n), mapping
    mapping = parse_mapping_string(text)
    if matmul:
        return _harness_matmul(text, dim, n, p, c, k, mapping)
    in_dim, pad = p * stride, r // 2
    layer = Conv2dLayer(
        in_channels=c, out_channels=k, in_h=in_dim, in_w=in_dim, kernel=(r, r), stride=(stride, stride),
        padding=(pad, pad), batch=n,
    )
    out = (in_dim + 2 * pad - r) // stride + 1
    dram: dict[str, int] = {}
    padded: dict[str, int] = {}
    for d in ("P", "Q"):
        tile = math.prod(lv.temporal_factor(d) * lv.spatial_factor(d) for lv in mapping.levels[:-1])
        dram[d], pb = _cover(out, tile)
        if pb is not None:
            padded[d] = pb
    return layer, _set_dram(mapping, dram, padded)


def _harness_matmul(
    text: str, dim: int, n: int, p: int, c: int, k: int, mapping: Mapping
) -> tuple[MatmulLayer, Mapping]:
    """tiled_matmul(I = P, K = C, J = K) with max(1, tile >> 4) pe_dim-blocks per tile (the harness's reading of
    the mapping), written as a Mapping whose spatial factors keep pe_dim and whose tiles are those blocks."""
    layer = MatmulLayer(M=p * n, K=c, N=k)
    below = mapping.levels[:-1]
    sk = math.prod(lv.spatial_factor("K") for lv in below)
    sc = math.prod(lv.spatial_factor("C") for lv in below)
    pe = _pe_dim(sk, sc, dim)
    tiles, spatial, dram, padded = {}, {}, {}, {}
    for d, total, sp in (("P", p * n, 1), ("K", k, sk), ("C", c, sc)):
        elems = math.prod(lv.temporal_factor(d) * lv.spatial_factor(d) for lv in below)
        t = min(total, max(1, elems >> 4) * pe)
        spatial[d] = sp if t % sp == 0 else math.gcd(t, pe)
        tiles[d] = t
        dram[d], pb = _cover(total, t)
        if pb is not None:
            padded[d] = pb
    levels = [
        LevelMapping(name=LEVEL_NAMES[0]),
        LevelMapping(
            name=LEVEL_NAMES[1],
            temporal=[(d, tiles[d] // spatial[d]) for d in ("P", "C", "K") if tiles[d] // spatial[d] > 1],
            spatial=[("C", spatial["C"])] if spatial["C"] > 1 else [],
        ),
        LevelMapping(name=LEVEL_NAMES[2], spatial=[("K", spatial["K"])] if spatial["K"] > 1 else []),
        LevelMapping(name=LEVEL_NAMES[3], temporal=[(d, dram[d]) for d in ("C", "K", "P") if dram[d] > 1]),
    ]
    return layer, Mapping.model_validate({"levels": levels, "padded_dims": padded, "dataflow": "weight_stationary"})


def library_mapping(
    layer: Conv2dLayer | MatmulLayer, hw: HardwareDescriptor, tile: dict[str, int] | None, sizing: HardwareDescriptor
) -> Mapping:
    """Gemmini's tiler run of a layer as a Mapping on `hw` (executor "library"): the recorded tile (dse.auto_tiling
    fields, elements), else the one gemmini.h computes for `sizing`'s buffers; each tile at its own size, the last
    tile of a dimension clipped as the library clips it (grid "literal")."""
    from tileplan.check import check_arch
    from tileplan.mappers.gemmini_auto import find_shape, plan_gemmini

    problem = Problem.from_layer(layer)
    shape = find_shape(hw)
    if shape is None:
        raise ValueError(f"{hw.name} is not Gemmini-shaped")
    tiles: tuple[int, ...] | None = None
    if tile is None:
        sizing_shape = find_shape(sizing)
        assert sizing_shape is not None
        auto = plan_gemmini(problem, sizing_shape)
        tiles = tuple(auto.tile[f] for f in (("tile_I", "tile_J", "tile_K") if "tile_I" in auto.tile else CONV_ARGS))
    elif isinstance(layer, MatmulLayer):
        tiles = tuple(-(-tile[f] // shape.dim) for f in ("ocols", "ochs", "kchs"))
    else:
        tiles = tuple(tile[f] for f in CONV_ARGS)
    mapping = plan_gemmini(problem, shape, grid="literal", tiles=tiles).mapping
    if check_arch(problem, shape.arch, mapping):
        # gemmini.h counts a tile's rows its own way; the checker's halo-exact, padded-channel count can put a
        # tile that fits half the scratchpad a little over it twice (as gemmini-auto notes): declared single
        # buffered, it is legal, and the library's calls overlap all the same.
        mapping = mapping.model_copy(update={"double_buffered": {}})
    return mapping.model_copy(update={"executor": "library-auto"})


def _layer_key(row: dict[str, str]) -> str:
    d = {x: row[f"prob.{x}"] for x in "CKPQRS"}
    return "C{C}_K{K}_P{P}_Q{Q}_R{R}_S{S}".format(**d) + f"_s{row['prob.Hstride']}x{row['prob.Wstride']}"


def _config(row: dict[str, str]) -> str:
    return (f"gemmini-{row['arch.meshX']}x{row['arch.meshX']}-acc{row['arch.mem1_entries']}x{row['arch.mem1_instances']}"
            f"-spad{row['arch.mem2_entries']}")


def mapping_run(source: str, index: int, row: dict[str, str], reading: str = "harness") -> FireSimRun:
    if int(row["arch.pe"]) != int(row["arch.meshX"]) ** 2:
        raise InputError(("arch.pe",), f"row {index}: {row['arch.pe']} PEs is not meshX^2")
    layer, mapping = dosa_run_inputs(row, reading)
    return FireSimRun(
        source=source, index=index, kind="mapping", layer=layer, hardware_yaml=dosa_arch_yaml(row), mapping=mapping,
        cycles=float(row["target.gemmini_cycle"]), mapping_text=row["mapping.mapping"], layer_key=_layer_key(row),
        config=_config(row),
        # DOSA's artifact rows carry its own model's estimate; in the random-mapping set that column repeats the
        # measurement, so it is no estimate there
        timeloop_estimate=float(row["target.cycle"]) if "target.gemmini_auto_cycle" in row else None,
    )


def load_rows(csv_path: str | Path, reading: str = "harness") -> list[FireSimRun]:
    """The random-mapping set: one run per row."""
    source = Path(csv_path).stem
    with open(csv_path, newline="") as f:
        return [mapping_run(source, i, row, reading) for i, row in enumerate(csv.DictReader(f))]


def load_artifact(csv_path: str | Path, reading: str = "harness") -> list[FireSimRun]:
    """Both measurements of every row of one artifact CSV: the DOSA mapping and the library's tiler."""
    source = Path(csv_path).stem
    out: list[FireSimRun] = []
    with open(csv_path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            mapped = mapping_run(source, i, row, reading)
            text = row.get("dse.auto_tiling") or ""
            tile = dict(zip(AUTO_TILE_FIELDS, map(int, text.split("_")))) if text.count("_") == 6 else None
            dim = int(row["arch.meshX"])
            # The runs' library sized its tiles for the default 256 KiB / 64 KiB buffers (and 79 of its 222 tiles
            # overflow the configuration's own), so its runs are read as on that configuration: buffer sizes do
            # not enter the cycles, only whether a tile is legal.
            sizing_yaml = dosa_arch_yaml({
                **row, "arch.mem1_entries": str(64 * 1024 // 4 // dim), "arch.mem1_instances": str(dim),
                "arch.mem2_entries": str(256 * 1024),
            }) if dim == 16 else mapped.hardware_yaml
            sizing = _hardware(sizing_yaml)
            layer = mapped.layer
            out.append(mapped)
            out.append(FireSimRun(
                source=source, index=i, kind="library", layer=layer, hardware_yaml=sizing_yaml,
                mapping=library_mapping(layer, sizing, tile, sizing),
                cycles=float(row["target.gemmini_auto_cycle"]), mapping_text=mapped.mapping_text,
                layer_key=mapped.layer_key, config=mapped.config, library_tile=tile,
            ))
    return out
