"""gemmini_params.h: the configuration a Gemmini program is compiled for.

Gemmini's software reads its configuration from `gemmini_params.h`, which its generator writes for each chip:
DIM, the scratchpad (BANK_NUM banks of BANK_ROWS rows) and accumulator (ACC_ROWS) sizes, the largest DMA
request (MAX_BYTES) and the element, accumulator and scale types.  `GemminiConfig` is that configuration for
Tileplan's int8 targets; `params_header()` writes the header with the macro and type names of Gemmini's (the ones
the stand-in gemmini.h and Gemmini's own gemmini.h read), `kernel_checks()` the preprocessor checks a generated
kernel carries so that it does not build against a header of another configuration.

    cfg = GemminiConfig(dim=16, spad_rows=16384, acc_rows=1024)
    Path("gemmini_params.h").write_text(cfg.params_header())
"""

from __future__ import annotations

from dataclasses import dataclass

ADDR_LEN = 32  # bits of a local address; bits 31 / 30 / 29 are the accumulator / accumulate / read-full flags


@dataclass(frozen=True)
class GemminiConfig:
    dim: int = 16
    spad_rows: int = 16384  # BANK_NUM x BANK_ROWS rows of DIM int8
    acc_rows: int = 1024  # rows of DIM int32
    max_bytes: int = 64  # the largest DMA request: a scratchpad mvin row carries MAX_BYTES / DIM blocks

    def __post_init__(self) -> None:
        for name in ("dim", "spad_rows", "acc_rows", "max_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if max(self.spad_rows, self.acc_rows) >= 1 << (ADDR_LEN - 3):
            raise ValueError("scratchpad and accumulator rows must fit the 29 row bits of a local address")

    @property
    def bank_num(self) -> int:
        """Scratchpad banks: Gemmini's default 4 where the rows split evenly (only the product is used here)."""
        return 4 if self.spad_rows % 4 == 0 else 1

    @property
    def bank_rows(self) -> int:
        return self.spad_rows // self.bank_num

    @property
    def max_block_len(self) -> int:
        """MAX_BLOCK_LEN: DIM-wide int8 blocks one scratchpad mvin row may carry (MAX_BYTES / DIM, at least 1)."""
        return max(1, self.max_bytes // self.dim)

    @property
    def max_block_len_acc(self) -> int:
        return max(1, self.max_bytes // (self.dim * 4))

    def describe(self) -> str:
        return (f"DIM {self.dim}, scratchpad {self.bank_num} x {self.bank_rows} rows, accumulator {self.acc_rows} "
                f"rows, MAX_BYTES {self.max_bytes}, elem_t int8, acc_t int32, float scales")

    def params_header(self) -> str:
        """gemmini_params.h of this configuration (Gemmini's macro and type names, int8 / int32 / float scales)."""
        return _PARAMS.format(c=self, addr_len=ADDR_LEN)

    def kernel_checks(self, what: str) -> list[str]:
        """C lines that stop a kernel generated for this configuration from compiling against a gemmini_params.h
        of another one (`what` names the target in the message)."""
        cond = (f"DIM != {self.dim} || BANK_NUM * BANK_ROWS != {self.spad_rows} || ACC_ROWS != {self.acc_rows} "
                f"|| MAX_BYTES != {self.max_bytes} || ADDR_LEN != {ADDR_LEN}")
        defined = " || ".join(f"!defined({m})" for m in ("DIM", "BANK_NUM", "BANK_ROWS", "ACC_ROWS", "MAX_BYTES",
                                                           "ADDR_LEN"))
        wanted = (f"DIM {self.dim}, {self.spad_rows} scratchpad rows, {self.acc_rows} accumulator rows, "
                  f"MAX_BYTES {self.max_bytes}")
        return [
            f"/* Built for this gemmini_params.h configuration ({what}): {self.describe()}. */",
            f"#if {defined}",
            '#error "gemmini.h did not define the configuration (gemmini_params.h)"',
            f"#elif {cond}",
            f'#error "this kernel was generated for {what}: {wanted}; gemmini_params.h describes another Gemmini"',
            "#endif",
            "#if defined(ELEM_T_IS_FLOAT) || !defined(ACC_SCALE_T_IS_FLOAT)",
            '#error "this kernel needs int8 elements and float accumulator scales (gemmini_params.h)"',
            "#endif",
            '_Static_assert(sizeof(elem_t) == 1 && (elem_t)-1 < 0, "elem_t must be int8");',
            '_Static_assert(sizeof(acc_t) == 4 && (acc_t)-1 < 0, "acc_t must be int32");',
            '_Static_assert(sizeof(acc_scale_t) == 4, "acc_scale_t must be float");',
        ]


_PARAMS = """\
/* gemmini_params.h -- the Gemmini configuration a program is built for: {c.dim}x{c.dim} int8 array,
 * scratchpad {c.bank_num} banks x {c.bank_rows} rows, accumulator {c.acc_rows} rows, {c.max_bytes}-byte DMA requests.
 * Written by Tileplan (tileplan.codegen.emulator.params) with the names of Gemmini's generated header. */
#ifndef GEMMINI_PARAMS_H
#define GEMMINI_PARAMS_H

#include <limits.h>
#include <stdint.h>

#define XCUSTOM_ACC 3
#define DIM {c.dim}
#define ADDR_LEN {addr_len}
#define BANK_NUM {c.bank_num}
#define BANK_ROWS {c.bank_rows}
#define ACC_ROWS {c.acc_rows}
#define MAX_BYTES {c.max_bytes}
#define MAX_BLOCK_LEN {c.max_block_len}
#define MAX_BLOCK_LEN_ACC {c.max_block_len_acc}

typedef int8_t elem_t;
static const elem_t elem_t_max = 127;
static const elem_t elem_t_min = -128;
typedef int32_t acc_t;
typedef int64_t full_t;

#define HAS_MVIN_SCALE
typedef float scale_t;
typedef uint32_t scale_t_bits;

typedef int32_t scale_acc_t;
typedef uint32_t scale_acc_t_bits;

typedef float acc_scale_t;
typedef uint32_t acc_scale_t_bits;

#define MVIN_SCALE_IDENTITY 1.0
#define ACC_SCALE_IDENTITY 1.0

#define ACC_SCALE_T_IS_FLOAT
#define ACC_SCALE_EXP_BITS 8
#define ACC_SCALE_SIG_BITS 24

/* mvout of the accumulator with address bit 29 set returns the int32 values (Gemmini's acc_read_full_width) */
#define ACC_READ_FULL_WIDTH

#endif /* GEMMINI_PARAMS_H */
"""
