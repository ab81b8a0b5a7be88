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

from tileplan.errors import InputError
from tileplan.hardware import HardwareDescriptor
from tileplan.mapping import LevelMapping, Mapping
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

    @property
    def layer_key(self) -> str:
        """Identity of the layer shape (the unit of leave-one-layer-out cross-validation)."""
        d = self.layer.dims()
        return "C{C}_K{K}_P{P}_Q{Q}_R{R}_S{S}".format(**d) + f"_s{self.layer.stride[0]}x{self.layer.stride[1]}"


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
        temporal, spatial = [], []
        for tok in tokens:
            t = _TOKEN.match(tok)
            if not t:
                raise InputError(("mapping",), f"bad factor {tok!r} in {text!r}")
            dim, factor, x = t.group(1), int(t.group(2)), t.group(3)
            if factor == 1:
                continue
            (spatial if x else temporal).append((dim, factor))
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
    return FireSimRow(index, hw, layer, parse_mapping_string(text), float(row["target.gemmini_cycle"]), text)


def load_rows(csv_path: str | Path) -> list[FireSimRow]:
    with open(csv_path, newline="") as f:
        return [parse_row(i, row) for i, row in enumerate(csv.DictReader(f))]
