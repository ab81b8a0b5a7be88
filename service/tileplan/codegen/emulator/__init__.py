"""Gemmini emulator: a C functional + timing model driven from Python through ctypes.

    emu = Emulator(dim=16, spad_rows=16384, acc_rows=1024)
    res = emu.run(c_source, {"A": a, "B": b, "C": c}, entry="kernel_entry")   # or a list of isa.Instruction
    res.buffers["C"], res.cycles, res.counts

A C program (one source, or a list of translation units linked together) includes gemmini.h and defines
`void <entry>(void **args)`; args[i] is the i-th buffer (in the order given).  It is compiled against the
stand-in gemmini.h with the gemmini_params.h of the emulator's configuration (`Emulator.config`).
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from . import isa
from .build import BuildError, emulator_library, program_library
from .params import GemminiConfig

__all__ = ["Emulator", "TimingParams", "RunResult", "GemminiTrap", "BuildError", "GemminiConfig", "isa",
           "HEADER_DIR"]

HEADER_DIR = Path(__file__).resolve().parent


class GemminiTrap(RuntimeError):
    """The emulated program did something the hardware would not do correctly."""

    def __init__(self, message: str, index: int, mnemonic: str) -> None:
        super().__init__(message)
        self.index = index
        self.mnemonic = mnemonic


@dataclass(frozen=True)
class TimingParams:
    """Parameters of the instruction-level timing model (the C struct emu_timing_t, field for field; the
    model itself is described in gemmini_emu.c).

    Tileplan does not guess these: `tileplan.codegen.pipeline.timing_for(hw)` derives them from the
    calibrated cost model (`CostParams.for_descriptor(hw)`) and the descriptor.  The defaults here are that
    mapping for the shipped 16x16 Gemmini (the fitted parameters; a test keeps them equal)."""

    dram_bytes_per_cycle: float = 16 * 0.7197  # the DMA's peak x dram_efficiency
    dma_request_bytes: float = 64.0
    dma_request_cycles: float = 1.0279
    dma_latency: float = 0.0
    issue_cycles: float = 0.0
    config_cycles: float = 0.0
    call_cycles: float = 0.0
    preload_cycles: float = 0.2196 * 16
    compute_row_cycles: float = 1.0
    compute_op_cycles: float = 0.0361  # CostParams.op_overhead_cycles
    compute_latency: float = 0.0
    overlap_loss: float = 0.1688
    queue_load: float = 0.0  # 0: unbounded (double-buffered halves bound the run-ahead)
    queue_exec: float = 0.0
    queue_store: float = 0.0
    call_floor_cycles: float = 274.52  # tiled_conv's issue time (a matmul's is CostParams.call_floor_matmul)
    run_cycles: float = 779.29
    compute_floor_cycles: float = 0.4673 * 16  # CostParams.compute_floor_dims x DIM
    # the cost model's per-call timing, which the reported cycles follow (gemmini_emu.c, "Reported cycles")
    dram_request_cycles: float = 1.4099  # CostParams.dram_request_cycles
    block_wait_cycles: float = 9.2343  # CostParams.block_wait_cycles
    l2_bytes: float = 512 * 1024  # CostParams.l2_bytes
    llc_miss_cycles: float = 8.3865  # CostParams.llc_miss_cycles
    llc_bytes: float = 4 * 1024 * 1024  # CostParams.llc_bytes
    calls_overlap: float = 1.0  # 1: two calls in flight (the code double buffers), 0: one at a time
    dram_byte_cycles: float = 0.1508  # CostParams.dram_byte_cycles (loads from tensors beyond the LLC)
    refill_cycles: float = 8.0  # 64-byte block / CostParams.mem_bus_bytes (strided requests DRAM serves)
    # 1: a call's computes overlap the next call's DMA, not its own (loop_conv_ws's two call slots: the library's
    # convolution calls, tileplan.cost.gemmini._slot_loop), 0: its own
    call_slots: float = 0.0

    @classmethod
    def for_dim(cls, dim: int, **overrides: float) -> TimingParams:
        """The defaults with the DIM-dependent preload cost scaled to a DIM x DIM array."""
        values = dict(preload_cycles=cls.preload_cycles / 16 * dim, compute_floor_cycles=cls.compute_floor_cycles / 16 * dim)
        values.update(overrides)
        return cls(**values)

    def validate(self) -> None:
        for name, v in asdict(self).items():
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"timing.{name} must be finite and >= 0, got {v}")
        if self.dram_bytes_per_cycle <= 0 or self.dma_request_bytes <= 0:
            raise ValueError("DRAM bandwidth and request size must be positive")


class _CTiming(ctypes.Structure):
    _fields_ = [(name, ctypes.c_double) for name in TimingParams.__dataclass_fields__]


_N_OPS = len(isa.OPCODES)


class _CStats(ctypes.Structure):
    _fields_ = [("cycles", ctypes.c_double), ("instructions", ctypes.c_uint64),
                ("counts", ctypes.c_uint64 * _N_OPS), ("dram_bytes_in", ctypes.c_uint64),
                ("dram_bytes_out", ctypes.c_uint64), ("macs", ctypes.c_uint64), ("busy", ctypes.c_double * 3),
                ("timeline_cycles", ctypes.c_double), ("calls", ctypes.c_uint64),
                ("features", ctypes.c_double * 12)]

# emu_stats_t.features, in order: the cost model's call features (tileplan.cost.gemmini.FEATURE_COLUMNS) summed
CALL_FEATURES = ("ld_req", "ld_bytes", "st_req", "st_bytes", "ex_rows", "ex_ops", "preloads", "dram_req",
                 "block_req", "far_req", "far_bytes", "far_st_req")


class _CInst(ctypes.Structure):
    _fields_ = [("op", ctypes.c_int32), ("pad", ctypes.c_int32), ("a", ctypes.c_uint64 * 6), ("f", ctypes.c_double)]


_ENTRY = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))


@dataclass
class RunResult:
    buffers: dict[str, np.ndarray]
    cycles: int
    instructions: int
    counts: dict[str, int]
    dram_bytes_in: int
    dram_bytes_out: int
    macs: int
    busy: dict[str, float] = field(default_factory=dict)
    # `cycles` is the calibrated cost model's per-call timing of the instructions the run issued (the one Gemmini
    # timing); the instruction-level timeline (units, hazards, contention) ends at `timeline_cycles`
    timeline_cycles: int = 0
    calls: int = 0  # library calls (config_ex) the run opened
    features: dict[str, float] = field(default_factory=dict)  # CALL_FEATURES summed over the calls

    def utilization(self, dim: int) -> float:
        """Fraction of the array's peak (dim*dim MACs per cycle) actually used."""
        return self.macs / (dim * dim * self.cycles) if self.cycles else 0.0


_LIBS: dict[Path, ctypes.CDLL] = {}


def _own_pages(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of `a` that shares no memory page with anything else: the emulator protects the pages
    of buffers DMA is using until the fence (gemmini_emu.c, "Memory ordering"), which must not stop other code."""
    a = np.asarray(a)
    page = mmap.PAGESIZE
    raw = np.zeros(-(-max(a.nbytes, 1) // page) * page + page, np.uint8)
    start = (-raw.ctypes.data) % page
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _load_emulator(cache_dir: Path | None) -> ctypes.CDLL:
    path = emulator_library(cache_dir)
    lib = _LIBS.get(path)
    if lib is None:
        lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        lib.emu_create.restype = ctypes.c_void_p
        lib.emu_create.argtypes = [ctypes.c_uint32] * 4 + [ctypes.POINTER(_CTiming)]
        lib.emu_destroy.argtypes = [ctypes.c_void_p]
        lib.emu_reset.argtypes = [ctypes.c_void_p]
        lib.emu_add_region.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
        lib.emu_add_tensor.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64]
        lib.emu_run_entry.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
        lib.emu_run_list.argtypes = [ctypes.c_void_p, ctypes.POINTER(_CInst), ctypes.c_uint64]
        lib.emu_get_stats.argtypes = [ctypes.c_void_p, ctypes.POINTER(_CStats)]
        lib.emu_trap_message.restype = ctypes.c_char_p
        lib.emu_trap_message.argtypes = [ctypes.c_void_p]
        lib.emu_trap_index.restype = ctypes.c_int64
        lib.emu_trap_index.argtypes = [ctypes.c_void_p]
        lib.emu_trap_op.argtypes = [ctypes.c_void_p]
        lib.emu_op_name.restype = ctypes.c_char_p
        lib.emu_unfenced_mvout.restype = ctypes.c_int64
        lib.emu_unfenced_mvout.argtypes = [ctypes.c_void_p]
        lib.emu_discard_dma.argtypes = [ctypes.c_void_p]
        lib.emu_cycles_now.restype = ctypes.c_double
        lib.emu_cycles_now.argtypes = [ctypes.c_void_p]
        _LIBS[path] = lib
    return lib


class Emulator:
    """One emulated Gemmini: DIM x DIM array, scratchpad and accumulator sizes in rows, timing parameters."""

    def __init__(self, dim: int = 16, spad_rows: int = 16384, acc_rows: int = 1024, max_mvin_blocks: int = 4,
                 timing: TimingParams | None = None, cache_dir: str | Path | None = None) -> None:
        if dim < 1 or dim > 64:
            raise ValueError(f"dim must be in 1..64, got {dim}")
        if dim * max_mvin_blocks > 4096:
            raise ValueError("dim * max_mvin_blocks must be <= 4096")
        self.dim, self.spad_rows, self.acc_rows, self.max_mvin_blocks = dim, spad_rows, acc_rows, max_mvin_blocks
        # the gemmini_params.h programs are compiled with: MAX_BLOCK_LEN = max_mvin_blocks
        self.config = GemminiConfig(dim=dim, spad_rows=spad_rows, acc_rows=acc_rows, max_bytes=dim * max_mvin_blocks)
        self.timing = timing if timing is not None else TimingParams.for_dim(dim)
        self.timing.validate()
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._lib = _load_emulator(self.cache_dir)
        ct = _CTiming(**asdict(self.timing))
        self._h = self._lib.emu_create(dim, spad_rows, acc_rows, max_mvin_blocks, ctypes.byref(ct))
        if not self._h:
            raise ValueError(f"emulator rejected dim={dim} spad_rows={spad_rows} acc_rows={acc_rows}")
        self._programs: dict[str, ctypes.CDLL] = {}

    def __del__(self) -> None:
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.emu_destroy(h)

    # -- programs -----------------------------------------------------------------------------------------
    def load_program(self, source: str | Sequence[str], extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
        """Compile (cached) and load a C program that calls the Gemmini API: one source, or several translation
        units linked into one program (e.g. several generated kernels and the code that calls them)."""
        sources = (source,) if isinstance(source, str) else tuple(source)
        key = "\0".join(sources) + "\0\0" + " ".join(extra_flags)
        lib = self._programs.get(key)
        if lib is None:
            path = program_library(sources, emulator_library(self.cache_dir), self.cache_dir, extra_flags,
                                   self.config)
            lib = ctypes.CDLL(str(path))
            self._programs[key] = lib
        return lib

    def run(self, program: str | Path | Sequence[str] | Sequence[isa.Instruction], buffers: Mapping[str, np.ndarray],
            entry: str = "kernel_entry", readonly: Sequence[str] = (),
            args: Sequence[tuple[str, int]] | None = None,
            tensors: Sequence[tuple[str, int, int]] | None = None) -> RunResult:
        """Run a program on fresh state.  Buffers are copied (C-contiguous, each on pages of its own); the copies
        are returned.

        `program` is C source defining `void entry(void **args)` (or a list of C sources linked into one program,
        or the Path of a shared object already built, linked against the emulator library) or a list of decoded
        instructions.  Raises GemminiTrap if the program traps, including when it returns before the results of an
        mvout were fenced (they would not be visible to the caller).

        By default each buffer is one DRAM region, one tensor (emu_add_tensor) and one argument of the entry, in
        order.  A whole-model program's step sees memory otherwise (frontend/templates/tp_emulate.c.j2): its
        arguments lie inside a few regions (the arena, the weights blob) and only its input and weights are
        registered as tensors; `args` gives the entry's arguments as (buffer, byte offset) and `tensors` the
        registered tensors as (buffer, byte offset, bytes).
        """
        bufs = {name: _own_pages(a) for name, a in buffers.items()}
        lib = self._lib
        lib.emu_reset(self._h)
        for name, a in bufs.items():
            lib.emu_add_region(self._h, a.ctypes.data, a.nbytes, 0 if name in readonly else 1)
        for name, off, size in (tensors if tensors is not None else [(n, 0, a.nbytes) for n, a in bufs.items()]):
            lib.emu_add_tensor(self._h, bufs[name].ctypes.data + off, size)  # (far_bytes)
        if isinstance(program, (str, Path)) or (program and all(isinstance(p, str) for p in program)):
            prog = ctypes.CDLL(str(program)) if isinstance(program, Path) else self.load_program(program)  # type: ignore[arg-type]
            try:
                fn = getattr(prog, entry)
            except AttributeError:
                raise BuildError(f"program defines no function {entry!r}") from None
            ptrs = ([a.ctypes.data for a in bufs.values()] if args is None
                    else [bufs[name].ctypes.data + off for name, off in args])
            args_c = (ctypes.c_void_p * max(1, len(ptrs)))(*ptrs)
            trapped = lib.emu_run_entry(self._h, ctypes.cast(fn, ctypes.c_void_p), args_c)
        else:
            encoded = self._encode(program, bufs)  # type: ignore[arg-type]
            trapped = lib.emu_run_list(self._h, encoded, len(program))
        if trapped:
            self.raise_trap()
        self.check_fenced()
        return self.result(bufs)

    def check_fenced(self) -> None:
        """At the end of a program: raise GemminiTrap if an mvout was never fenced (its rows never reach DRAM);
        either way stop watching the buffers (un-fenced loads are forgotten: the caller owns its buffers again)."""
        lib = self._lib
        index = int(lib.emu_unfenced_mvout(self._h))
        lib.emu_discard_dma(self._h)
        if index >= 0:
            raise GemminiTrap(f"instruction #{index} (mvout): the program returned before a gemmini_fence() made "
                              "this mvout's results visible (they never reached DRAM)", index, "mvout")

    def cycles_now(self) -> float:
        """Emulated cycles of what has been issued so far (without the once-per-program run_cycles)."""
        return float(self._lib.emu_cycles_now(self._h))

    # -- runs driven from elsewhere (a host library that calls emu_run_entry itself) --------------------------
    @property
    def handle(self) -> int:
        """The emu_t* (gemmini_emu.h) of this emulator, for C code that runs programs on it."""
        return int(self._h)

    def raise_trap(self) -> None:
        """Raise the trap the last run recorded as a GemminiTrap."""
        lib = self._lib
        op = lib.emu_trap_op(self._h)
        raise GemminiTrap(lib.emu_trap_message(self._h).decode(), int(lib.emu_trap_index(self._h)),
                          lib.emu_op_name(op).decode())

    def result(self, bufs: dict[str, np.ndarray]) -> RunResult:
        """The statistics of the last run, with the buffers it produced."""
        st = _CStats()
        self._lib.emu_get_stats(self._h, ctypes.byref(st))
        return RunResult(
            buffers=bufs, cycles=int(st.cycles), instructions=int(st.instructions),
            counts={name: int(st.counts[i]) for i, name in enumerate(isa.OPCODES) if st.counts[i]},
            dram_bytes_in=int(st.dram_bytes_in), dram_bytes_out=int(st.dram_bytes_out), macs=int(st.macs),
            busy={"load": st.busy[0], "execute": st.busy[1], "store": st.busy[2]},
            timeline_cycles=int(st.timeline_cycles), calls=int(st.calls),
            features={name: float(st.features[i]) for i, name in enumerate(CALL_FEATURES)})

    @staticmethod
    def _encode(program: Sequence[isa.Instruction], bufs: Mapping[str, np.ndarray]) -> ctypes.Array:
        arr = (_CInst * max(1, len(program)))()
        for i, ins in enumerate(program):
            arr[i].op = isa.OPCODE[ins.op]
            arr[i].f = ins.scale
            for j, v in enumerate(ins.args):
                if isinstance(v, isa.Dram):
                    if v.buffer not in bufs:
                        raise KeyError(f"instruction {i} ({ins.op}) names unknown buffer {v.buffer!r}")
                    v = bufs[v.buffer].ctypes.data + v.offset
                arr[i].a[j] = int(v) & 0xFFFFFFFFFFFFFFFF
        return arr
