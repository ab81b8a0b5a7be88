"""Gemmini's DMA runs decoupled from the CPU: only gemmini_fence() makes an mvout's results visible and lets the
CPU overwrite what an mvin reads.  The emulator traps on every CPU access that would race with un-fenced DMA
(deferred mvout rows, protected pages), within a run and between runs of one session, and the generated kernels
fence before the CPU touches anything the accelerator wrote."""

from __future__ import annotations

import random
import re
import shutil
import subprocess

import numpy as np
import pytest
from plans import random_mapping

from tileplan.codegen.emulator import HEADER_DIR, Emulator, GemminiTrap, TimingParams
from tileplan.codegen.emulator.build import EMU_SONAME, compiler, emulator_library
from tileplan.codegen.pipeline import (
    Epilogue,
    emulator_for,
    generate,
    random_inputs,
    reference,
    run,
)
from tileplan.hardware.catalog import get_hardware
from tileplan.workload import parse_layer

HW16 = get_hardware("gemmini-16x16")
CONV = parse_layer({"op": "conv2d", "name": "conv", "in_channels": 20, "out_channels": 24, "in_h": 9, "in_w": 10,
                    "kernel": 3, "padding": 1, "stride": [2, 1]})
_EMU: list[Emulator] = []


def emu() -> Emulator:
    if not _EMU:
        _EMU.append(Emulator(dim=4, spad_rows=256, acc_rows=64, timing=TimingParams.for_dim(4)))
    return _EMU[0]


def _old_order(src: str) -> str:
    """The kernel as generated before the fix: the CPU copies the padded output into `out`, then fences."""
    assert src.count("  tp_fence();\n") == 1
    body_end = src.index("}\n\n/* Calling convention")
    return src[:body_end].replace("  tp_fence();\n", "") + "  tp_fence();\n" + src[body_end:]


def test_the_old_order_traps_and_the_generated_order_runs():
    """A kernel whose stores go to a padded copy of the output that the CPU copies into `out`: copying before the
    fence (what Tileplan generated before) traps on the CPU's first read; the generated order (fence, then copy)
    and the default (stores straight into `out`, one fence at the end) run bit-exact."""
    mapping = random_mapping(CONV.dims(), random.Random(3))
    art = generate(CONV, HW16, mapping, Epilogue(scale=0.02, relu=True), direct_store=False)
    inputs = random_inputs(art.geometry, 0)
    want = reference(art.geometry, art.epilogue, **inputs)
    copy = art.c_source
    assert re.search(r"tp_fence\(\);\n(.*\n)*\s+out\[.*\] = out_p\[", copy), "the copy follows the fence"
    np.testing.assert_array_equal(run(art, inputs).buffers["out"], want)

    art.c_source = _old_order(copy)
    with pytest.raises(GemminiTrap) as info:
        run(art, inputs)
    msg = str(info.value)
    assert info.value.mnemonic == "mvout" and "CPU read of DRAM" in msg and "before a gemmini_fence()" in msg

    direct = generate(CONV, HW16, mapping, Epilogue(scale=0.02, relu=True))
    assert "int8_t *out_p" not in direct.c_source and direct.workspace_bytes < art.workspace_bytes
    assert direct.c_source.index("tp_store(") < direct.c_source.index("tp_fence();")
    np.testing.assert_array_equal(run(direct, inputs).buffers["out"], want)


def test_a_kernel_without_its_fence_traps():
    """Returning before the fence: the results never reached DRAM, whoever reads them."""
    art = generate(CONV, HW16, random_mapping(CONV.dims(), random.Random(3)), Epilogue(scale=0.02))
    art.c_source = art.c_source.replace("  tp_fence();\n", "")
    with pytest.raises(GemminiTrap, match="returned before a gemmini_fence"):
        run(art, random_inputs(art.geometry, 0))


PROGRAM = r"""
#include "gemmini.h"
#include <string.h>
#define ACC (1u << 31)
void kernel_entry(void **a) {
  int8_t *x = a[0], *y = a[1];
  int32_t *p = a[2];
  gemmini_config_ld(4);
  gemmini_config_st(4);
  gemmini_extended_mvin(x, 0, 4, 4);          /* x -> scratchpad rows 0..3 */
  gemmini_extended_mvout(y, 0, 4, 4);         /* rows 0..3 -> y[0..15] */
  switch (p[0]) {
    case 1: x[3] = 7; break;                  /* CPU write to what the mvin reads, before the fence */
    case 2: p[1] = x[3]; break;               /* CPU read of what the mvin reads: fine */
    case 3: p[1] = y[5]; break;               /* CPU read of what the mvout writes, before the fence */
    case 4: gemmini_extended_mvin(y, 8, 4, 4); break;   /* a load of what an un-fenced mvout writes */
    case 5: p[1] = y[3000]; y[3001] = 9; break;  /* same page as the mvout's rows, other bytes: fine */
    case 6: y[4] = 1; break;                  /* CPU write to what the mvout writes, before the fence */
  }
  gemmini_fence();
  p[2] = y[5];                                /* after the fence: the mvout's data */
}
"""


@pytest.mark.parametrize("case, trap", [
    (0, None), (1, "CPU write of DRAM at .* that this mvin reads"), (2, None),
    (3, "CPU read of DRAM at .* that this mvout writes"), (4, "reads DRAM at .* that mvout instruction #3 writes"),
    (5, None), (6, "CPU write of DRAM at .* that this mvout writes")])
def test_cpu_access_before_the_fence(case, trap):
    x = np.arange(16, dtype=np.int8) + 1
    y = np.zeros(4096, np.int8)
    p = np.array([case, -1, -1], np.int32)
    if trap:
        with pytest.raises(GemminiTrap, match=trap):
            emu().run(PROGRAM, {"x": x, "y": y, "p": p})
        return
    res = emu().run(PROGRAM, {"x": x, "y": y, "p": p})
    np.testing.assert_array_equal(res.buffers["y"][:16], x)  # the mvout's rows, at the fence
    assert res.buffers["p"][2] == x[5]
    if case == 2:
        assert res.buffers["p"][1] == x[3]
    if case == 5:
        assert res.buffers["p"][1] == 0 and res.buffers["y"][3001] == 9
    # the emulator is usable after a trap, and the buffers are plain memory again (readable, writable)
    res.buffers["y"][:] = 1


SESSION = r"""
/* Two sessions of one emulator from C: DMA left un-fenced by one run stays watched until a fence. */
#include "gemmini.h"
#include "gemmini_emu.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static int8_t *buf;
static void store(void **a) { (void)a; gemmini_config_ld(4); gemmini_config_st(4);
  gemmini_extended_mvin(buf, 0, 4, 4); gemmini_extended_mvout(buf + 64, 0, 4, 4); }
static void cpu_read(void **a) { ((volatile int8_t *)a)[0] = buf[64 + 2]; }
static void fence(void **a) { (void)a; gemmini_fence(); }

int main(void) {
  emu_timing_t t = {0};
  t.dram_bytes_per_cycle = 8; t.dma_request_bytes = 64; t.compute_row_cycles = 1;
  emu_t *e = emu_create(4, 64, 16, 4, &t);
  buf = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (int i = 0; i < 16; i++) buf[i] = (int8_t)(i + 1);
  int8_t sink[8];
  for (int round = 0; round < 3; round++) {
    emu_reset(e);
    emu_add_region(e, buf, 8192, 1);
    int r1 = emu_run_entry(e, store, NULL), r2;
    if (round == 0) r2 = emu_run_entry(e, cpu_read, (void **)sink);      /* the next run reads: trap in it */
    else if (round == 1) { sink[0] = buf[64 + 2]; r2 = emu_run_entry(e, fence, NULL); } /* between runs */
    else { r2 = emu_run_entry(e, fence, NULL); sink[0] = buf[64 + 2]; }  /* fenced first: fine */
    printf("%d %d %d %s\n", r1, r2, sink[0], emu_trap_message(e));
  }
  emu_destroy(e);
  return 0;
}
"""


def test_un_fenced_dma_is_watched_across_runs_of_a_session(tmp_path):
    """The emulator's C interface, as a program that drives it itself: an mvout one run leaves un-fenced traps
    a CPU read in the next run, or between the runs (recorded, returned by the next run); after a fence the read
    sees the data."""
    (tmp_path / "s.c").write_text(SESSION)
    shutil.copyfile(emulator_library(), tmp_path / EMU_SONAME)  # found by its soname, as a user would link it
    exe = tmp_path / "s"
    subprocess.run([compiler(), "-O2", "-Wall", "-Werror", "-I", str(HEADER_DIR), "-o", str(exe),
                    str(tmp_path / "s.c"), f"-L{tmp_path}", "-lgemmini_emu", f"-Wl,-rpath,{tmp_path}"],
                   check=True, capture_output=True)
    rows = [line.split(" ", 3) for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                          text=True).stdout.splitlines()]
    assert [r[:2] for r in rows] == [["0", "1"], ["0", "1"], ["0", "0"]]
    assert "CPU read of DRAM" in rows[0][3] and "CPU read of DRAM" in rows[1][3] and rows[2][3] == ""
    assert rows[2][2] == "3"  # buf[2] = 3 reached buf[66] at the fence


DRIVER = r"""
#include <stdint.h>
#include "gemmini_emu.h"
void l1(const int8_t *I, const int8_t *W, const int32_t *bias, int8_t *out, uint8_t *workspace);
void l2(const int8_t *I, const int8_t *W, const int32_t *bias, int8_t *out, uint8_t *workspace);

void model_entry(void **a) {
  int8_t *mid = a[3];
  double *cycles = a[8];
  cycles[0] = emu_current_cycles();
  l1(a[0], a[1], a[2], mid, a[7]);
  cycles[1] = emu_current_cycles();
  for (int i = 0; i < N_MID; i++) mid[i] = mid[i] > 50 ? 50 : mid[i];   /* CPU code between the kernels */
  l2(mid, a[4], a[5], a[6], a[7]);
  cycles[2] = emu_current_cycles();
}
"""


def test_several_kernels_in_one_program():
    """Two generated kernels (distinct names, each its own translation unit) and CPU code between them link into
    one program and run in one emulator session; the program reads the emulated cycles between the kernels.
    Each kernel fences before it returns, so the CPU may read the first one's output; without that fence the
    same program traps."""
    l1 = parse_layer({"op": "conv2d", "name": "l1", "in_channels": 8, "out_channels": 16, "in_h": 6, "in_w": 7,
                      "kernel": 3, "padding": 1})
    l2 = parse_layer({"op": "conv2d", "name": "l2", "in_channels": 16, "out_channels": 12, "in_h": 6, "in_w": 7,
                      "kernel": 1})
    rng = random.Random(11)
    a1 = generate(l1, HW16, random_mapping(l1.dims(), rng), Epilogue(scale=0.01, relu=True), name="l1")
    a2 = generate(l2, HW16, random_mapping(l2.dims(), rng), Epilogue(scale=0.02), name="l2")
    in1, in2 = random_inputs(a1.geometry, 1), random_inputs(a2.geometry, 2)
    mid = reference(a1.geometry, a1.epilogue, **in1)
    want = reference(a2.geometry, a2.epilogue, np.minimum(mid, 50), in2["W"], in2["bias"])
    work = max(a1.workspace_bytes, a2.workspace_bytes)
    bufs = {"I": in1["I"], "W1": in1["W"], "b1": in1["bias"], "mid": np.zeros_like(mid), "W2": in2["W"],
            "b2": in2["bias"], "out": np.zeros_like(want), "work": np.zeros(work, np.uint8), "cycles": np.zeros(3)}
    driver = DRIVER.replace("N_MID", str(mid.size))
    e = emulator_for(a1)
    res = e.run([a1.c_source, a2.c_source, driver], bufs, entry="model_entry", readonly=("I", "W1", "b1", "W2", "b2"))
    np.testing.assert_array_equal(res.buffers["mid"], np.minimum(mid, 50))
    np.testing.assert_array_equal(res.buffers["out"], want)
    c0, c1, c2 = res.buffers["cycles"]
    alone = run(a1, in1, emulator=e)
    assert c0 == 0 and c1 == pytest.approx(alone.cycles - e.timing.run_cycles, abs=1.0) and c2 > c1
    assert res.cycles == pytest.approx(c2 + e.timing.run_cycles, abs=1.0)
    assert res.counts["fence"] == 2

    unfenced = a1.c_source.replace("  tp_fence();\n", "")
    with pytest.raises(GemminiTrap, match="CPU (read|write) of DRAM .* that this mvout writes"):
        e.run([unfenced, a2.c_source, driver], bufs, entry="model_entry", readonly=("I", "W1", "b1", "W2", "b2"))


@pytest.mark.parametrize("direct_store", [True, False])
def test_nchw_output_copies_follow_the_fence(direct_store):
    """An NCHW output: the stores write an NHWC staging copy (or, direct_store=False, the padded out_p and the CPU
    copies that into the staging copy) and the CPU transposes it into `out`, every CPU copy after the fence: the
    kernel runs (the emulator traps a CPU read of un-fenced mvout rows) and is bit-exact."""
    from tileplan.codegen.targets.gemmini import KernelABI

    mapping = random_mapping(CONV.dims(), random.Random(3))
    art = generate(CONV, HW16, mapping, Epilogue(scale=0.02, relu=True), direct_store=direct_store,
                   abi=KernelABI("NCHW"))
    assert ("int8_t *out_p" in art.c_source) != direct_store and "int8_t *out_nhwc" in art.c_source
    inputs = random_inputs(art.geometry, 0)
    want = reference(art.geometry, art.epilogue, **inputs)
    bufs = {**inputs, "I": np.ascontiguousarray(inputs["I"].transpose(0, 3, 1, 2)),
            "out": np.zeros(want.transpose(0, 3, 1, 2).shape, np.int8),
            "workspace": np.zeros(max(64, art.workspace_bytes), np.uint8)}
    res = emulator_for(art).run(art.c_source, bufs, entry=art.entry, readonly=("I", "W", "bias"))
    np.testing.assert_array_equal(res.buffers["out"], want.transpose(0, 3, 1, 2))
