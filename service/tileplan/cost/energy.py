"""Energy per access, for descriptors that do not state their own.

Rough figures for a 16-40 nm process with 8-bit data, in the spirit of Accelergy's tables and the
Eyeriss energy ratios (register : on-chip SRAM : DRAM ~ 1 : 6 : 200 relative to a MAC):
- int8 MAC: 0.2 pJ (int32 accumulate included);
- registers / tiny buffers (<= 1 KiB per instance): 0.05 pJ per byte;
- SRAM: read 0.3 + 0.12 * sqrt(KiB per instance) pJ per byte (4 KiB: 0.54, 64 KiB: 1.26, 256 KiB: 2.22),
  writes 20% dearer;
- DRAM (LPDDR4-class, ~15 pJ/bit): 120 pJ per byte read or written.
"""

from __future__ import annotations

import math

from tileplan.hardware import AccessEnergy, ResolvedLevel

MAC_PJ = 0.2
DRAM_PJ_PER_BYTE = 120.0
REGISTER_PJ_PER_BYTE = 0.05


def level_energy(level: ResolvedLevel) -> AccessEnergy:
    if level.energy is not None:
        return level.energy
    if level.capacity is None:
        return AccessEnergy(read_pj_per_byte=DRAM_PJ_PER_BYTE, write_pj_per_byte=DRAM_PJ_PER_BYTE)
    if level.capacity <= 1024:
        return AccessEnergy(read_pj_per_byte=REGISTER_PJ_PER_BYTE, write_pj_per_byte=REGISTER_PJ_PER_BYTE)
    read = 0.3 + 0.12 * math.sqrt(level.capacity / 1024)
    return AccessEnergy(read_pj_per_byte=read, write_pj_per_byte=1.2 * read)
