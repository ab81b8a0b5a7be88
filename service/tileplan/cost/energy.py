"""Energy per access, for descriptors that do not state their own.

Default table (pJ, 16-40 nm class process, 8-bit operands), in the spirit of Accelergy's tables and the
Eyeriss energy ratios (register : on-chip SRAM : DRAM ~ 1 : 6 : 200 relative to a MAC):

| what                                   | read, pJ/byte                  | write, pJ/byte   |
|----------------------------------------|--------------------------------|------------------|
| int8 MAC (int32 accumulate included)   | 0.2 pJ per MAC                 |                  |
| registers, buffers <= 1 KiB / instance | 0.05                           | 0.05             |
| SRAM of S KiB per instance             | 0.3 + 0.12 * sqrt(S)           | 1.2 x read       |
|   (4 KiB: 0.54, 64 KiB: 1.26, 256 KiB: 2.22, 1 MiB: 4.14)                                   |
| DRAM (LPDDR4-class, ~15 pJ/bit)        | 120                            | 120              |

Per word = per byte x the level's word width (an int32 accumulator word costs 4 x its per-byte figure).
A descriptor's own `energy:` on a level, or `pe_array.mac_energy_pj`, replaces the default.
The Timeloop-semantics model prices levels without their own `energy:` by Timeloop's built-in table instead
(`cost/timeloop_energy.py`), as timeloop-model does without Accelergy.
Metrics report energy per level (`energy_breakdown_pj`) and per level and tensor
(`energy_by_tensor_pj`); both sum to `energy_pj`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence

from tileplan.hardware import AccessEnergy, Architecture, ResolvedLevel

MAC_PJ = 0.2
DRAM_PJ_PER_BYTE = 120.0
REGISTER_PJ_PER_BYTE = 0.05
SRAM_BASE_PJ_PER_BYTE = 0.3
SRAM_SQRT_KIB_PJ_PER_BYTE = 0.12
SRAM_WRITE_FACTOR = 1.2


def level_energy(level: ResolvedLevel) -> AccessEnergy:
    if level.energy is not None:
        return level.energy
    return _default_energy(level.capacity)


@functools.lru_cache(maxsize=1024)
def _default_energy(capacity: int | None) -> AccessEnergy:
    """The default table's figures for a level of `capacity` bytes per instance (a frozen model, shared)."""
    if capacity is None:
        return AccessEnergy(read_pj_per_byte=DRAM_PJ_PER_BYTE, write_pj_per_byte=DRAM_PJ_PER_BYTE)
    if capacity <= 1024:
        return AccessEnergy(read_pj_per_byte=REGISTER_PJ_PER_BYTE, write_pj_per_byte=REGISTER_PJ_PER_BYTE)
    read = SRAM_BASE_PJ_PER_BYTE + SRAM_SQRT_KIB_PJ_PER_BYTE * math.sqrt(capacity / 1024)
    return AccessEnergy(read_pj_per_byte=read, write_pj_per_byte=SRAM_WRITE_FACTOR * read)


def per_word(level: ResolvedLevel) -> AccessEnergy:
    """The level's access energy per stored word (its word width times the per-byte figure)."""
    e = level_energy(level)
    return AccessEnergy(
        read_pj_per_byte=e.read_pj_per_byte * level.word_bytes, write_pj_per_byte=e.write_pj_per_byte * level.word_bytes
    )


def tensor_energy_breakdown(
    arch: Architecture,
    reads: Sequence[Mapping[str, float]],
    writes: Sequence[Mapping[str, float]],
    mac_pj: float,
) -> dict[str, dict[str, float]]:
    """pJ per level and tensor from bytes read / written per level and tensor; MAC energy under 'MAC'."""
    out: dict[str, dict[str, float]] = {}
    for i, lv in enumerate(arch.levels):
        e = level_energy(lv)
        tensors = sorted(set(reads[i]) | set(writes[i]))
        out[lv.name] = {
            t: reads[i].get(t, 0.0) * e.read_pj_per_byte + writes[i].get(t, 0.0) * e.write_pj_per_byte for t in tensors
        }
    out["MAC"] = {"MAC": mac_pj}
    return out
