"""Timeloop's built-in energy table: what timeloop-model charges when no Accelergy estimate is given.

The Timeloop-semantics model (`cost/timeloop.py`) prices each action the way timeloop-model at the commit CoSA pins
does without Accelergy (its `pat` functions), from the attributes the architecture file states, so a held-out
architecture is priced by the same rules and no constant is fitted to any reference:

| action | energy (pJ) |
|---|---|
| one access of an on-chip array (SRAM or register file) | `sram_access_pj(height, width)`: a line through the Eyeriss data points 1.0 at 0.5 KiB and 6.0 at 100 KiB for a 16-bit access, scaled by the access width in bits / 16 |
| one access of DRAM (the backing store unless its class or `technology` says otherwise; an on-chip level whose class says DRAM) | 200 per 16 bits of the access |
| one multiply-accumulate | 1.0 x (bits of A / 16) x (bits of B / 16) (int8: 0.25, 16-bit: 1.0) |
| network hops and routers, temporal and spatial reduction | 0 (Timeloop's table has no wire, router or adder energy; a level's stated network energies: `cost/timeloop_network.py`) |
| one address generated, where a level states `addr-gen-energy` | that figure, per word read (updated, for outputs) or filled, per cluster |

Geometry, as Timeloop derives it per instance: an access moves one block of `block_size` words; the array is
`width = word bits x block_size x cluster_size` bits wide and `ceil(entries / block_size)` rows high, and the
access energy is shared by the `cluster_size` instances of the array. A run's reads, fills and updates at an
instance count ceil(words / block_size) accesses each; a clustered level is charged per cluster used
(`min(instances used, instances / cluster_size)`), not per instance.

A level's own `energy:` (per byte, e.g. from a Timeloop file's `vector-access-energy`) replaces the table's
figure and is counted the same way; so does `pe_array.mac_energy_pj` (a file's arithmetic `energy`).

Checked against the recorded timeloop-model runs (bench/data/timeloop_reference): with the recorded per-level
counts these rules give each of the 398 accepted cases' total energy to within 1e-4.
"""

from __future__ import annotations

import math

from tileplan.hardware import ResolvedLevel

SRAM_SMALL_KIB, SRAM_SMALL_PJ = 0.5, 1.0  # Eyeriss: a 16-bit access of a 0.5 KiB array
SRAM_LARGE_KIB, SRAM_LARGE_PJ = 100.0, 6.0  # and of a 100 KiB one
DRAM_PJ_PER_16_BITS = 200.0
MULT16_PJ = 1.0  # a 16 x 16-bit multiply-accumulate


def sram_access_pj(height: int, width_bits: int) -> float:
    """One access of a `height` x `width_bits` array (Timeloop's line through the two Eyeriss points)."""
    slope = (SRAM_LARGE_PJ - SRAM_SMALL_PJ) / (SRAM_LARGE_KIB - SRAM_SMALL_KIB)
    kib = width_bits * height / (8 * 1024)
    return (slope * (kib - SRAM_SMALL_KIB) + SRAM_SMALL_PJ) * width_bits / 16


def dram_access_pj(width_bits: int) -> float:
    return DRAM_PJ_PER_16_BITS * width_bits / 16


def mac_pj(bits_a: int, bits_b: int) -> float:
    return MULT16_PJ * (bits_a / 16) * (bits_b / 16)


def block_access_pj(level: ResolvedLevel) -> tuple[float, float]:
    """Energy of one read and of one write (fill or update) of one block at one instance of `level`: the
    descriptor's own figures where it states them (per byte, so a block costs block_size words of them), else
    Timeloop's table on the level's geometry."""
    word_bits = round(level.word_bytes * 8)
    if level.energy is not None:
        block_bytes = level.word_bytes * level.block_size
        return level.energy.read_pj_per_byte * block_bytes, level.energy.write_pj_per_byte * block_bytes
    if level.technology == "DRAM":
        e = dram_access_pj(word_bits * level.block_size)
        return e, e
    if level.capacity is None:  # an SRAM backing store: its stated size (none stated: Timeloop charges nothing)
        entries = level.source_entries or 0
    else:
        # entries per instance as the source file declares its instances (Gemmini's one accumulator, not its slices)
        # the whole array (Timeloop prices it by its size, not by what multiple-buffering leaves a tile)
        entries = round((level.array_bytes or level.capacity) / level.word_bytes)
        if level.source_instances:
            entries = entries * level.instances // level.source_instances
    width = word_bits * level.block_size * level.cluster_size
    height = -(-entries // level.block_size)
    e = sram_access_pj(height, width) / level.cluster_size if entries else 0.0
    return e, e


def accesses(words: float, block_size: int) -> int:
    """Block accesses for `words` words at one instance (Timeloop rounds up per action)."""
    return math.ceil(words / block_size - 1e-9) if words > 0 else 0


def storage_pj(level: ResolvedLevel, reads: float, fills: float, updates: float, instances_used: int,
               read_write: bool = False) -> float:
    """One tensor's energy at a level: reads, fills and updates per instance, on `instances_used` instances; plus,
    where the file states `addr-gen-energy`, one address per word read and filled (per word updated and filled for
    the read-write outputs, `read_write`), charged per cluster as timeloop-model does."""
    read_pj, write_pj = block_access_pj(level)
    b = level.block_size
    per_instance = accesses(reads, b) * read_pj + (accesses(fills, b) + accesses(updates, b)) * write_pj
    if level.addr_gen_pj:
        per_instance += level.addr_gen_pj * ((updates if read_write else reads) + fills)
    total_instances = level.source_instances or level.instances
    return per_instance * min(instances_used, total_instances // level.cluster_size)
