"""The host library of a generated module: TVM's llvm build of the scheduled module, linked against Tileplan's
Gemmini emulator (libgemmini_emu.so) through a small C glue file.

The scheduled module is tensorized a second time with the host implementations of the tile intrinsics
(`tp_host_init` / `tp_host_call` / `tp_host_store`, schedule_layer(host=True)) and wrapped in `tp_host_begin()` /
`tp_host_end()`.  TVM compiles it for the host CPU: the padding copies (I_p, W_p, bias_p) and the un-padding of
the output run as compiled loops, and every tile intrinsic calls the glue, which runs the C kernel's own per-call
instruction stream (`call_support_c`, the same tp_init / tp_call / tp_store) on the emulator.  So the library
produces the C kernel's outputs and the same instruction stream, cycle for cycle.

    path = build_host_library(art, out_dir)       # out_dir/lib<name>_host.so + out_dir/libgemmini_emu.so
    res = run_host(art, inputs)                   # like pipeline.run(art, inputs), through the host library

The library's ABI is TVM's: `tvm.runtime.load_module(path)["main"](I, W, bias, out, bias_p)` (bias_p: int32
scratch of shape (G_p, K_p)); the glue exports `tp_host_attach(emu_t *)` (run on this emulator; without it the
first call creates one with the target's timing), `tp_host_cycles()`, `tp_host_trap()` (NULL, or why the
emulator trapped).  It needs libgemmini_emu.so beside it (RUNPATH $ORIGIN).
"""

from __future__ import annotations

import ctypes
import hashlib
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from tileplan.codegen.emulator import HEADER_DIR, Emulator, RunResult
from tileplan.codegen.emulator.build import (
    CFLAGS,
    EMU_SONAME,
    _run_cc,
    compiler,
    default_cache_dir,
    emulator_library,
    include_dir,
)
from tileplan.codegen.registry import CodegenError
from tileplan.codegen.targets import gemmini as G

GLUE_EXPORTS = ("tp_host_begin", "tp_host_end", "tp_host_init", "tp_host_call", "tp_host_store", "tp_host_attach",
                "tp_host_cycles", "tp_host_trap")


def library_name(art: Any) -> str:
    return f"lib{art.name}_host.so"


def glue_source(art: Any) -> str:
    """C glue of one artifact: the kernel's per-call support code, the configuration prologue, and the
    tp_host_* entry points that run them inside emulator sessions."""
    lay, geo = art.layout, art.geometry
    pd = lay.padded
    sizes = {  # bytes of the host-side buffers the emulator's DMA reads or writes (registered as DRAM regions)
        "TP_I_P_BYTES": pd["N"] * pd["G"] * geo.Hp * geo.Wp * pd["C"],
        "TP_W_P_BYTES": pd["G"] * pd["R"] * pd["S"] * pd["C"] * pd["K"],
        "TP_BIAS_P_BYTES": pd["G"] * pd["K"] * 4,
        # what tp_store writes: the caller's NHWC output, or the padded out_p
        "TP_OUT_BYTES": (geo.N * geo.P * geo.Q * geo.G * geo.K if lay.store_direct
                         else pd["N"] * pd["G"] * pd["P"] * pd["Q"] * pd["K"]),
    }
    t = art.target
    timing = ", ".join(repr(float(v)) for v in asdict(art.timing).values())
    lines = [f"/* Host glue of {art.name}: TVM's llvm build of the module calls these; see tileplan.codegen.host. */",
             "#include <stddef.h>", "#include <stdint.h>", '#include "gemmini.h"', '#include "gemmini_emu.h"', "",
             *art.config.kernel_checks(art.hardware or "the target"), "",
             G.call_support_c(lay), ""]
    lines += [f"#define {k} {v}ull" for k, v in sizes.items()]
    lines += [f"#define TP_ACC_BASE {art.acc_base_row}u",
              f"#define TP_EMU_DIMS {t.dim}u, {t.spad_rows}u, {t.acc_rows}u, {G.max_block_len(t.dim)}u",
              f"static const emu_timing_t tp_timing = {{{timing}}};",
              "static void tp_prologue(void) {", *[f"  {x}" for x in art.prologue], "}", _GLUE_C]
    return "\n".join(lines)


_GLUE_C = r"""
static emu_t *tp_emu;
static int tp_trapped;
static const void *tp_regions[8];
static int tp_n_regions;

void tp_host_attach(emu_t *e) { tp_emu = e; }
double tp_host_cycles(void) {
  emu_stats_t st;
  if (!tp_emu) return 0.0;
  emu_get_stats(tp_emu, &st);
  return st.cycles;
}
const char *tp_host_trap(void) {
  if (!tp_emu) return tp_trapped ? "no emulator (emu_create failed)" : NULL;
  /* also a trap recorded between sessions (TVM's code touching DRAM the DMA was still using) */
  return (tp_trapped || emu_trap_message(tp_emu)[0]) ? emu_trap_message(tp_emu) : NULL;
}

/* Run fn(args) as part of the current emulated run.  After a trap the run is void: later calls do nothing and
   tp_host_trap() says what went wrong (a trap must not unwind through TVM's frames). */
static int32_t tp_session(emu_entry_t fn, void **args) {
  if (tp_trapped) return -1;
  tp_trapped = emu_run_entry(tp_emu, fn, args);
  return tp_trapped ? -1 : 0;
}

/* The emulator's DMA may touch only registered DRAM; TVM allocates I_p, W_p and bias_p (and out_p where the
   stores do not write the caller's output), so each is registered the first time a tile of it is seen (its
   base = tile pointer - tile offset). */
static void tp_region(const void *base, uint64_t bytes, int writable) {
  for (int i = 0; i < tp_n_regions; i++)
    if (tp_regions[i] == base) return;
  if (tp_n_regions < (int)(sizeof tp_regions / sizeof tp_regions[0])) tp_regions[tp_n_regions++] = base;
  emu_add_region(tp_emu, (void *)base, bytes, writable);
}

/* The accumulator tile's row address: what the C emitter makes of __tp_local_addr (base row + offset / DIM). */
static uint32_t tp_acc_addr(int32_t c_off) { return TP_ACC_ADDR | (TP_ACC_BASE + (uint32_t)(c_off / TP_DIM)); }

static void tp_begin_entry(void **a) { (void)a; tp_prologue(); }
static void tp_end_entry(void **a) { (void)a; tp_fence(); }
static void tp_init_entry(void **a) { tp_init((const int32_t *)a[0], *(const uint32_t *)a[1]); }
static void tp_call_entry(void **a) {
  tp_call((const int8_t *)a[0], *(const int32_t *)a[1], (const int8_t *)a[2], *(const int32_t *)a[3],
          *(const uint32_t *)a[4]);
}
static void tp_store_entry(void **a) { tp_store((int8_t *)a[0], *(const int32_t *)a[1], *(const uint32_t *)a[2]); }

int32_t tp_host_begin(void) {
  if (!tp_emu) tp_emu = emu_create(TP_EMU_DIMS, &tp_timing);
  tp_trapped = tp_emu == NULL;
  if (tp_trapped) return -1;
  emu_reset(tp_emu);
  tp_n_regions = 0;
  return tp_session(tp_begin_entry, NULL);
}

int32_t tp_host_end(void) { return tp_session(tp_end_entry, NULL); }

int32_t tp_host_init(const int32_t *bias, int32_t b_off, int32_t c_off) {
  uint32_t acc = tp_acc_addr(c_off);
  void *a[2] = {(void *)bias, &acc};
  if (tp_trapped) return -1;
  tp_region(bias - b_off, TP_BIAS_P_BYTES, 0);
  return tp_session(tp_init_entry, a);
}

int32_t tp_host_call(const int8_t *in, int32_t i_off, const int8_t *wt, int32_t w_off, int32_t c_off) {
  uint32_t acc = tp_acc_addr(c_off);
  void *a[5] = {(void *)in, &i_off, (void *)wt, &w_off, &acc};
  if (tp_trapped) return -1;
  tp_region(in - i_off, TP_I_P_BYTES, 0);
  tp_region(wt - w_off, TP_W_P_BYTES, 0);
  return tp_session(tp_call_entry, a);
}

int32_t tp_host_store(int8_t *out, int32_t o_off, int32_t c_off) {
  uint32_t acc = tp_acc_addr(c_off);
  void *a[3] = {out, &o_off, &acc};
  if (tp_trapped) return -1;
  tp_region(TP_STORE_DIRECT ? out : out - o_off, TP_OUT_BYTES, 1);
  return tp_session(tp_store_entry, a);
}
"""


def compile_host_module(art: Any) -> Any:
    """TVM's llvm build of the artifact's module with the host implementations of the tile intrinsics."""
    import tvm

    from tileplan.codegen.schedule import schedule_layer, with_host_session

    layer, mapping, arch, double_buffer, stream, direct_store = art.inputs
    sched = schedule_layer(layer, mapping, arch, art.epilogue, art.target, double_buffer, host=True, stream=stream,
                           direct_store=direct_store)
    if sched.realization.tile != art.realization.tile:  # the same plan realises the same tiles
        raise CodegenError("the host module's tiles differ from the kernel's")
    mod = tvm.IRModule({"main": with_host_session(sched.mod["main"])})
    with tvm.transform.PassContext(opt_level=3, config={"tirx.disable_storage_rewrite": True}):
        return tvm.compile(mod, target="llvm")


def build_host_library(art: Any, out_dir: Path) -> Path:
    """Write out_dir/lib<name>_host.so (the llvm host module + glue) and out_dir/libgemmini_emu.so beside it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(emulator_library(), out_dir / EMU_SONAME)
    ex = compile_host_module(art)
    with tempfile.TemporaryDirectory() as tmp:
        glue_c, glue_o = Path(tmp) / "glue.c", Path(tmp) / "glue.o"
        glue_c.write_text(glue_source(art))
        _run_cc([compiler(), *CFLAGS, "-Werror", "-c", "-I", str(include_dir(art.config)), "-I", str(HEADER_DIR),
                 "-o", str(glue_o), str(glue_c)])
        target = out_dir / library_name(art)
        # the emulator library goes in as an input after the glue object, so the linker records it as NEEDED
        # (by its soname) whatever --as-needed default the compiler has; RUNPATH $ORIGIN finds the copy beside it
        ex.export_library(str(target), addons=[str(glue_o), str(out_dir / EMU_SONAME)],
                          options=["-Wl,-rpath,$ORIGIN", "-lm"])
    return target


def cached_host_library(art: Any) -> Path:
    """build_host_library into the per-user codegen cache, keyed by what the library is built from."""
    key = hashlib.sha256("\0".join([glue_source(art), art.tvmscript, str(emulator_library()),
                                    art.config.params_header()]).encode())
    out_dir = default_cache_dir() / f"host-{key.hexdigest()[:20]}"
    target = out_dir / library_name(art)
    return target if target.exists() else build_host_library(art, out_dir)


def run_host(art: Any, inputs: dict[str, np.ndarray], emulator: Emulator | None = None) -> RunResult:
    """Run the artifact through its host library (TVM runtime + glue) on the emulator `pipeline.run` uses;
    `buffers["out"]` is the NHWC output.  Raises GemminiTrap if the emulator trapped."""
    import tvm

    from tileplan.codegen.pipeline import emulator_for

    emu = emulator or emulator_for(art)
    path = cached_host_library(art)
    glue = ctypes.CDLL(str(path))
    missing = [s for s in GLUE_EXPORTS if not hasattr(glue, s)]
    if missing:  # a missing symbol would kill the process on first call instead of raising
        raise CodegenError(f"host library {path} lacks {missing}")
    glue.tp_host_trap.restype = ctypes.c_char_p
    glue.tp_host_attach.argtypes = [ctypes.c_void_p]
    glue.tp_host_attach(emu.handle)
    geo, lay = art.geometry, art.layout
    out = np.zeros((geo.N, geo.P, geo.Q, geo.G * geo.K), np.int8)
    bias_p = np.zeros((lay.padded["G"], lay.padded["K"]), np.int32)
    args = [np.ascontiguousarray(inputs[k]) for k in ("I", "W", "bias")] + [out, bias_p]
    tensors = [tvm.runtime.tensor(a) for a in args]
    tvm.runtime.load_module(str(path))["main"](*tensors)
    if glue.tp_host_trap() is not None:
        emu.raise_trap()
    emu.check_fenced()
    return emu.result({"out": tensors[3].numpy()})


__all__ = ["build_host_library", "cached_host_library", "compile_host_module", "glue_source", "library_name",
           "run_host"]
