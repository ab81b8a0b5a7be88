"""The FireSim calibration data set (DOSA, ucb-bar/dosa, BSD-2-Clause, Copyright (c) 2022 Charles Hong).

Each CSV row is one measured run: a Gemmini configuration (`arch.*`), a conv layer (`prob.*`), a
Timeloop-style mapping string and the cycles FireSim measured (`target.gemmini_cycle`). This module turns
a row into the objects the rest of Tileplan works on: a HardwareDescriptor shaped like the catalog's
Gemmini entries (Registers, Accumulator, Scratchpad, DRAM), a Conv2dLayer and a contract Mapping.

Mapping strings list levels outermost first and, within a level, temporal loops outer to inner, e.g.
`L3[WIO] K8 Q28 - L2[WI] N1 K4X - L1[O] K2 S7 R7 Q4 P7 C3X - L0[W] P16`; a trailing X marks a spatial
factor. The contract Mapping is the other way round (levels innermost first, loops innermost first).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import cast

from tileplan.cost.gemmini import Execution, library_matmul_keeps
from tileplan.dims import Dim
from tileplan.errors import InputError
from tileplan.hardware import HardwareDescriptor
from tileplan.mapping import Factor, LevelMapping, Mapping
from tileplan.workload import Conv2dLayer

LEVEL_NAMES = ("Registers", "Accumulator", "Scratchpad", "DRAM")  # L0 .. L3
_LEVEL = re.compile(r"^L(\d)\[([WIO]*)\]$")
_TOKEN = re.compile(r"^([NKCPQRS])(\d+)(X?)$")


@dataclass(frozen=True)
class FireSimRow:
    index: int  # 0-based data row
    hardware: HardwareDescriptor
    layer: Conv2dLayer
    mapping: Mapping
    cycles: float
    mapping_text: str
    execution: Execution  # how DOSA's FireSim harness actually ran the mapping (see dosa_execution)

    @property
    def layer_key(self) -> str:
        """Identity of the layer shape (the unit of leave-one-layer-out cross-validation)."""
        d = self.layer.dims()
        return "C{C}_K{K}_P{P}_Q{Q}_R{R}_S{S}".format(**d) + f"_s{self.layer.stride[0]}x{self.layer.stride[1]}"


def _factors(text: str) -> tuple[dict[str, int], dict[str, int], dict[str, int], str]:
    """DOSA's reading of a mapping string: temporal factors of L0..L2 per dim, spatial (X) factors, L0
    factors, and the DRAM permutation string (innermost DRAM loop first, missing dims appended)."""
    temporal: dict[str, int] = {}
    spatial: dict[str, int] = {}
    reg: dict[str, int] = {}
    dram: list[str] = []
    for part in text.split(" - "):
        head, *tokens = part.split()
        level = int(_LEVEL.match(head).group(1))  # type: ignore[union-attr]
        for tok in tokens:
            t = _TOKEN.match(tok)
            if not t:
                raise InputError(("mapping",), f"bad factor {tok!r} in {text!r}")
            d, f, x = t.group(1), int(t.group(2)), t.group(3)
            if level == 3:
                dram.append(d)
            elif x:
                spatial[d] = f
            else:
                temporal[d] = temporal.get(d, 1) * f
                if level == 0:
                    reg[d] = reg.get(d, 1) * f
    perm = "".join(reversed(dram))
    perm += "".join(d for d in "CRSKPQN" if d not in perm)
    return temporal, spatial, reg, perm


def dosa_execution(row: dict[str, str], dim: int) -> Execution:
    """The library call DOSA's FireSim harness made for a CSV row (facts of ucb-bar/gemmini-rocc-tests,
    gemmini-data-collection: layers/extract_data_csv.py, templates/conv_tilings.c, matmul_tilings.c and the
    fork's include/gemmini.h):

    - the harness builds one test binary per software array size pe_dim = the next power of two >=
      max(spatial K, spatial C, 2) (gemmini_data_collection.py's `--pe_dim`), and both kinds of call work in
      pe_dim-wide blocks: a mapping with small spatial factors runs as on a small array;
    - Q = R = S = 1 layers run as tiled_matmul(I=P, K=C, J=K) with tile_I/J/K = max(1, tile >> 4) pe_dim-blocks;
    - all others run as a SQUARE tiled_conv: in_dim = P * stride, padding = R // 2,
      out_dim = (in_dim + 2 * (R // 2) - R) // stride + 1, kernel R x R;
    - tile sizes: product of the L0..L2 factors per dim (spatial included); P -> output cols, Q -> output
      rows, R -> kernel cols, S -> kernel rows. (The stored extract_data_csv.py multiplies the L0 P and Q
      factors in a second time; the runs of this data set contradict it: mappings that differ only in where a
      P factor sits below DRAM measure the same, e.g. rows 1105/1106/1113/1116 within 0.2%, and refitted under
      the doubled reading the model's in-sample MAPE on this set is 23.7% against 17.5% read once, while DOSA's
      artifact runs fit both readings alike (18.2% and 18.3%; costmodel.md, "Readings"), so one rule serves both);
    - the output-channel and input-channel DRAM loops step by their tiles. (The fork's source can be read as
      stepping K by the spatial K factor, every call computing the whole K tile; the measurements contradict
      it: on the 128x128 runs that reading fits worse (costmodel.md, "Readings"), and on DOSA's 16x16 runs
      (bench/data/dosa_artifact) it over-predicts every mapping with a temporal K factor below DRAM 2-8x,
      while stepping by the tile predicts them within 15%);
    - no bias (the harness's NO_BIAS), so no accumulator initialisation loads;
    - the DRAM permutation follows the L3 loop order (it does not change the cost, see gemmini.py).
    """
    temporal, spatial, reg, _perm = _factors(row["mapping.mapping"])
    g = lambda d: temporal.get(d, 1)  # noqa: E731
    c, k, n = int(row["prob.C"]), int(row["prob.K"]), int(row["prob.N"])
    p, q, r, s = (int(row[f"prob.{x}"]) for x in "PQRS")
    stride = int(row["prob.Wstride"])
    t_cols = g("P")
    t_rows = g("Q")
    t_k = g("K") * spatial.get("K", 1)
    t_c = g("C") * spatial.get("C", 1)
    # The harness builds one test binary per software "pe_dim": the smallest power of two covering the
    # spatial K and C factors. Evidence: tiled_matmul steps its DRAM loops in pe_dim-blocks (the measured
    # cycles of every matmul row are >= ~125 x the number of calls this implies), and convolutions whose
    # execution tiles are equal but whose spatial factors differ measure up to 7x apart, in proportion to
    # the array they use (costmodel.md, "Readings").
    pe_dim = 1
    while pe_dim < min(dim, max(spatial.get("K", 1), spatial.get("C", 1), 2)):
        pe_dim *= 2
    if q == 1 and r == 1 and s == 1:
        blk = lambda t: max(1, t >> 4)  # noqa: E731
        return Execution(
            kind="matmul", dim=pe_dim, batch=n, groups=1, out_h=p, out_w=1, k=k, c=c, r=1, s=1, stride=(1, 1),
            pad=(0, 0), in_h=p, in_w=1, t_n=1, t_h=blk(t_cols), t_w=1, t_k=blk(t_k), t_c=blk(t_c), t_r=1, t_s=1,
            k_step=0, c_step=0, bias=False,
        )
    in_dim = p * stride
    pad = r // 2
    out_dim = (in_dim + 2 * pad - r) // stride + 1
    return Execution(
        kind="conv", dim=pe_dim, batch=n, groups=1, out_h=out_dim, out_w=out_dim, k=k, c=c, r=r, s=r,
        stride=(stride, stride), pad=(pad, pad), in_h=in_dim, in_w=in_dim,
        t_n=max(1, g("N")), t_h=t_rows, t_w=t_cols, t_k=t_k, t_c=t_c, t_r=g("S"), t_s=g("R"),
        k_step=t_k, c_step=t_c, bias=False,
    )


def parse_mapping_string(text: str) -> Mapping:
    """`L3[WIO] K8 Q28 - L2[WI] N1 K4X - ...` -> contract Mapping (levels innermost first)."""
    parts = [p.strip() for p in text.split(" - ")]
    levels: dict[int, LevelMapping] = {}
    for part in parts:
        head, *tokens = part.split()
        m = _LEVEL.match(head)
        if not m:
            raise InputError(("mapping",), f"bad level header {head!r} in {text!r}")
        idx = int(m.group(1))
        temporal: list[Factor] = []
        spatial: list[Factor] = []
        for tok in tokens:
            t = _TOKEN.match(tok)
            if not t:
                raise InputError(("mapping",), f"bad factor {tok!r} in {text!r}")
            dim, factor, x = t.group(1), int(t.group(2)), t.group(3)
            if factor == 1:
                continue
            (spatial if x else temporal).append((cast(Dim, dim), factor))  # one of _TOKEN's letters
        # The string writes loops outer to inner; the contract wants innermost first.
        levels[idx] = LevelMapping(name=LEVEL_NAMES[idx], temporal=list(reversed(temporal)), spatial=spatial)
    if sorted(levels) != [0, 1, 2, 3]:
        raise InputError(("mapping",), f"expected levels L0..L3, got {sorted(levels)} in {text!r}")
    return Mapping(levels=[levels[i] for i in range(4)], dataflow="weight_stationary")


def gemmini_descriptor(dim: int, spad_bytes: int, acc_bytes: int, name: str | None = None) -> HardwareDescriptor:
    """A Gemmini of DIM x DIM PEs, shaped like the catalog entries (WS only, as the data set runs WS)."""
    return HardwareDescriptor.model_validate(
        {
            "name": name or f"gemmini-{dim}x{dim}-firesim",
            "description": "Gemmini configuration of the DOSA FireSim data set",
            "pe_array": {
                "rows": dim,
                "cols": dim,
                "dataflows": [
                    {
                        "name": "weight_stationary",
                        "levels": {"Accumulator": {"spatial_dims": ["C"]}, "Scratchpad": {"spatial_dims": ["K"]}},
                    }
                ],
            },
            "memory_levels": [
                {"name": "Registers", "capacity": dim * dim * 4, "word_bits": 32, "instances": dim * dim, "keeps": ["W"]},
                {
                    "name": "Accumulator", "capacity": acc_bytes, "word_bits": 32, "instances": dim, "keeps": ["O"],
                    "bandwidth": 8, "buffer_count": 2, "array_axis": "rows",
                },
                {
                    "name": "Scratchpad", "capacity": spad_bytes, "word_bits": 8, "instances": 1, "keeps": ["I", "W"],
                    "bandwidth": 2 * dim, "buffer_count": 2, "array_axis": "cols",
                },
                # One 16 B DMA beat per cycle (gemmini.md); the fast FC runs of the data move > 11 B/cycle.
                {"name": "DRAM", "keeps": ["W", "I", "O"], "bandwidth": 16},
            ],
        }
    )


@lru_cache(maxsize=16)
def _descriptor(dim: int, spad: int, acc: int) -> HardwareDescriptor:
    return gemmini_descriptor(dim, spad, acc)


def parse_row(index: int, row: dict[str, str]) -> FireSimRow:
    dim = int(row["arch.meshX"])
    if int(row["arch.pe"]) != dim * dim:
        raise InputError(("arch.pe",), f"row {index}: {row['arch.pe']} PEs is not meshX^2 = {dim * dim}")
    # Accumulator: entries per instance x instances x word bits; scratchpad: entries of 8-bit words.
    acc = int(row["arch.mem1_entries"]) * int(row["arch.mem1_instances"]) * int(row["arch.mem1_word-bits"]) // 8
    spad = int(row["arch.mem2_entries"]) * int(row["arch.mem2_word-bits"]) // 8
    hw = _descriptor(dim, spad, acc)
    c, k, n = int(row["prob.C"]), int(row["prob.K"]), int(row["prob.N"])
    p, q, r, s = (int(row[f"prob.{x}"]) for x in "PQRS")
    sh, sw = int(row["prob.Hstride"]), int(row["prob.Wstride"])
    dh, dw = int(row["prob.Hdilation"]), int(row["prob.Wdilation"])
    # Unpadded input that yields exactly P x Q outputs.
    layer = Conv2dLayer(
        name=f"firesim_{index}", batch=n, in_channels=c, out_channels=k,
        in_h=(p - 1) * sh + (r - 1) * dh + 1, in_w=(q - 1) * sw + (s - 1) * dw + 1,
        kernel=(r, s), stride=(sh, sw), dilation=(dh, dw),
    )
    text = row["mapping.mapping"]
    return FireSimRow(
        index, hw, layer, parse_mapping_string(text), float(row["target.gemmini_cycle"]), text, dosa_execution(row, dim)
    )


def load_rows(csv_path: str | Path) -> list[FireSimRow]:
    with open(csv_path, newline="") as f:
        return [parse_row(i, row) for i, row in enumerate(csv.DictReader(f))]


# --------------------------------------------------------------------------------------------------
# DOSA's 16x16 artifact runs (bench/data/dosa_artifact): per layer, FireSim cycles of a DOSA mapping run
# through the same harness and of Gemmini's own tiled_conv_auto / tiled_matmul_auto, on 16x16 Gemminis with
# other scratchpad and accumulator sizes. Used to validate, never to fit: the parameters are fitted on the
# random-mapping data set above only.

AUTO_TILE_FIELDS = ("krows", "kcols", "ocols", "orows", "kchs", "ochs", "batches")  # order of dse.auto_tiling


@dataclass(frozen=True)
class ArtifactRun:
    source: str  # file stem, e.g. "dnn_resnet50"
    index: int
    layer_key: str
    kind: str  # "mapping" (DOSA's mapping via the harness) or "library" (Gemmini's own auto-tiler)
    hardware: HardwareDescriptor
    execution: Execution
    cycles: float
    mapping_text: str  # the row's DOSA mapping string (what a "mapping" run ran)
    library_tile: dict[str, int] | None = None  # the auto-tiler's tile as measured (dse.auto_tiling), if recorded


def _library_execution(row: dict[str, str], hw: HardwareDescriptor, tile: dict[str, int] | None) -> Execution:
    """The library call sequence of a row's layer: its recorded auto-tiler tile, else the one Tileplan's
    gemmini-auto computes for the default 256 KiB / 64 KiB configuration of a 16x16 array (the runs' library
    sized its tiles for the default buffers whatever the configuration: 130 of the 143 recorded tiles equal
    gemmini-auto's on gemmini-16x16), or for the row's own buffers on other array sizes."""
    dim = hw.pe_array.rows
    sizing = _descriptor(dim, 256 * 1024, 64 * 1024) if dim == 16 else hw
    from tileplan.mappers.gemmini_auto import gemmini_auto
    from tileplan.problem import Problem
    from tileplan.workload import MatmulLayer

    c, k, n = int(row["prob.C"]), int(row["prob.K"]), int(row["prob.N"])
    p, q, r = int(row["prob.P"]), int(row["prob.Q"]), int(row["prob.R"])
    stride = int(row["prob.Wstride"])
    if q == 1 and r == 1:
        if tile is None:
            t = gemmini_auto(Problem.from_layer(MatmulLayer(M=p * n, K=c, N=k)), sizing).tile
            ti, tj, tk = t["tile_I"], t["tile_J"], t["tile_K"]
        else:
            ti, tj, tk = (-(-tile[f] // dim) for f in ("ocols", "ochs", "kchs"))
        order, reuse = library_matmul_keeps(ti * dim >= p * n, tj * dim >= k, tk * dim >= c)
        return Execution(
            kind="matmul", dim=dim, batch=n, groups=1, out_h=p, out_w=1, k=k, c=c, r=1, s=1, stride=(1, 1),
            pad=(0, 0), in_h=p, in_w=1, t_n=1, t_h=ti, t_w=1, t_k=tj, t_c=tk, t_r=1, t_s=1, k_step=0, c_step=0,
            bias=False, order=order, reuse=reuse,
        )
    in_dim, pad = p * stride, r // 2  # the harness's square layer (see dosa_execution)
    if tile is None:
        layer = Conv2dLayer(in_channels=c, out_channels=k, in_h=in_dim, in_w=in_dim, kernel=(r, r), stride=(stride, stride),
                            padding=(pad, pad), batch=n)
        plan = gemmini_auto(Problem.from_layer(layer), sizing)
        tile = {f: plan.tile[f] for f in AUTO_TILE_FIELDS}
    out_dim = (in_dim + 2 * pad - r) // stride + 1
    return Execution(
        kind="conv", dim=dim, batch=n, groups=1, out_h=out_dim, out_w=out_dim, k=k, c=c, r=r, s=r,
        stride=(stride, stride), pad=(pad, pad), in_h=in_dim, in_w=in_dim, t_n=tile["batches"], t_h=tile["orows"],
        t_w=tile["ocols"], t_k=tile["ochs"], t_c=tile["kchs"], t_r=tile["krows"], t_s=tile["kcols"],
        k_step=tile["ochs"], c_step=tile["kchs"], bias=False,
    )


def load_artifact(csv_path: str | Path) -> list[ArtifactRun]:
    """Both measurements of every row of one artifact CSV."""
    source = Path(csv_path).stem
    out: list[ArtifactRun] = []
    with open(csv_path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            mapped = parse_row(i, row)
            text = row.get("dse.auto_tiling") or ""
            tile = dict(zip(AUTO_TILE_FIELDS, map(int, text.split("_")))) if text.count("_") == 6 else None
            out.append(ArtifactRun(
                source, i, mapped.layer_key, "mapping", mapped.hardware, mapped.execution, mapped.cycles, mapped.mapping_text
            ))
            out.append(ArtifactRun(
                source, i, mapped.layer_key, "library", mapped.hardware, _library_execution(row, mapped.hardware, tile),
                float(row["target.gemmini_auto_cycle"]), mapped.mapping_text, tile,
            ))
    return out
