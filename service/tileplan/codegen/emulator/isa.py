"""Decoded Gemmini instructions, for programs given to the emulator as Python lists.

Each constructor mirrors the argument list of the gemmini.h macro of the same name (config_ld: its longest common
form, gemmini_extended4_config_ld; config_ex: gemmini_extended_config_ex; mvin with a `channel` for mvin2 /
mvin3).  DRAM operands are `Dram(buffer_name, byte_offset)` references into the buffers passed to `Emulator.run`.
A program that stores (mvout) must end with fence() for its results to reach the buffers, as on Gemmini.
"""

from __future__ import annotations

from dataclasses import dataclass

GARBAGE_ADDR = 0xFFFFFFFF
ACC_ADDR = 1 << 31
ACCUMULATE = 1 << 30
READ_FULL = 1 << 29

OUTPUT_STATIONARY = 0
WEIGHT_STATIONARY = 1
NO_ACTIVATION = 0
RELU = 1

OPCODES = ("config_ex", "config_ld", "config_st", "mvin", "mvin2", "mvin3", "mvout", "preload",
           "compute_preloaded", "compute_accumulated", "fence", "flush")
OPCODE = {name: i for i, name in enumerate(OPCODES)}


def acc_addr(row: int, accumulate: bool = False, read_full: bool = False) -> int:
    """Local address of accumulator row `row` with the given flag bits."""
    return ACC_ADDR | (ACCUMULATE if accumulate else 0) | (READ_FULL if read_full else 0) | row


@dataclass(frozen=True)
class Dram:
    """A byte address inside one of the DRAM buffers handed to the emulator."""

    buffer: str
    offset: int = 0

    def __add__(self, nbytes: int) -> Dram:
        return Dram(self.buffer, self.offset + int(nbytes))


@dataclass(frozen=True)
class Instruction:
    op: str
    args: tuple[int | Dram, ...] = ()
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.op not in OPCODE:
            raise ValueError(f"unknown Gemmini instruction {self.op!r}")


def config_ex(dataflow: int, sys_act: int = NO_ACTIVATION, sys_shift: int = 0, a_stride: int = 1,
              a_transpose: bool = False, b_transpose: bool = False, acc_scale: float = 1.0) -> Instruction:
    """`acc_scale` (gemmini_extended3_config_ex's sys_acc_scale): the scale of operands the execute unit reads from
    the accumulator (they pass the scale unit with config_ex's activation and are clipped to int8)."""
    return Instruction("config_ex", (dataflow, sys_act, sys_shift, a_stride, int(a_transpose), int(b_transpose)),
                       acc_scale)


def config_ld(stride: int, scale: float = 1.0, shrunk: bool = False, block_mvin_stride: int = 16,
              id: int = 0) -> Instruction:  # `id`: Gemmini's argument name
    return Instruction("config_ld", (stride, int(shrunk), block_mvin_stride, id), scale)


def config_st(stride: int, acc_act: int = NO_ACTIVATION, acc_scale: float = 1.0) -> Instruction:
    return Instruction("config_st", (stride, acc_act), acc_scale)


def mvin(dram: Dram, spad_addr: int, cols: int, rows: int, channel: int = 0) -> Instruction:
    return Instruction(("mvin", "mvin2", "mvin3")[channel], (dram, spad_addr, cols, rows))


def mvout(dram: Dram, spad_addr: int, cols: int, rows: int) -> Instruction:
    return Instruction("mvout", (dram, spad_addr, cols, rows))


def preload(bd: int, c: int, bd_cols: int, bd_rows: int, c_cols: int, c_rows: int) -> Instruction:
    return Instruction("preload", (bd, c, bd_cols, bd_rows, c_cols, c_rows))


def compute_preloaded(a: int, bd: int, a_cols: int, a_rows: int, bd_cols: int, bd_rows: int) -> Instruction:
    return Instruction("compute_preloaded", (a, bd, a_cols, a_rows, bd_cols, bd_rows))


def compute_accumulated(a: int, bd: int, a_cols: int, a_rows: int, bd_cols: int, bd_rows: int) -> Instruction:
    return Instruction("compute_accumulated", (a, bd, a_cols, a_rows, bd_cols, bd_rows))


def fence() -> Instruction:
    return Instruction("fence")


def flush(skip: int = 0) -> Instruction:
    return Instruction("flush", (skip,))
