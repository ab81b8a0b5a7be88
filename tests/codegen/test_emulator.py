"""Gemmini emulator: bit-exact tiled matmuls, every trap, and a sane timing model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tileplan.codegen.emulator import Emulator, GemminiTrap, TimingParams, isa
from tileplan.codegen.emulator.isa import GARBAGE_ADDR, Dram, acc_addr

KERNEL = (Path(__file__).parent / "matmul_kernel.c").read_text()
WS, OS = isa.WEIGHT_STATIONARY, isa.OUTPUT_STATIONARY

_EMUS: dict[tuple, Emulator] = {}


def emu(dim: int = 16, spad_rows: int = 16384, acc_rows: int = 1024, **timing: float) -> Emulator:
    # Instruction-level checks measure the units: no per-program latency or host pacing unless a test asks.
    timing = {"run_cycles": 0.0, "call_floor_cycles": 0.0, **timing}
    key = (dim, spad_rows, acc_rows, tuple(sorted(timing.items())))
    if key not in _EMUS:
        _EMUS[key] = Emulator(dim=dim, spad_rows=spad_rows, acc_rows=acc_rows,
                              timing=TimingParams.for_dim(dim, **timing))
    return _EMUS[key]


def reference(a, b, bias, scale, relu):
    acc = a.astype(np.int64) @ b.astype(np.int64) + bias.astype(np.int64)
    acc = acc.astype(np.int32)
    y = np.rint(acc.astype(np.float32) * np.float32(scale))
    if relu:
        y = np.maximum(y, 0)
    return np.clip(y, -128, 127).astype(np.int8)


def run_kernel(e, m, k, n, *, relu=False, df=WS, tiles=(2, 2, 2), bias=True, scale=1.0, seed=0, **timing):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    bv = rng.integers(-20000, 20000, size=n, dtype=np.int32)
    params = np.zeros(10, np.int32)
    params[:9] = [m, k, n, int(relu), df, *tiles, int(bias)]
    params[9] = np.array([scale], np.float32).view(np.int32)[0]
    c = np.zeros((m, n), np.int8)
    res = e.run(KERNEL, {"p": params, "A": a, "B": b, "bias": bv, "C": c}, readonly=("p", "A", "B", "bias"))
    want = reference(a, b, bv if bias else np.zeros(n, np.int32), scale, relu)
    return res, want


# --------------------------------------------------------------------------------------------------------------
# Bit-exact results

@pytest.mark.parametrize("dim", [8, 16, 32])
@pytest.mark.parametrize("df", [WS, OS])
def test_tiled_matmul_bit_exact(dim, df):
    e = emu(dim)
    rng = np.random.default_rng(dim * 10 + df)
    for trial in range(6):
        m, k, n = (int(x) for x in rng.integers(1, 3 * dim + 7, size=3))
        tiles = tuple(int(x) for x in rng.integers(1, 4, size=3))
        scale = float(rng.choice([1.0, 0.5, 0.0123, 1 / 3, 2.75]))
        relu = bool(trial % 2)
        res, want = run_kernel(e, m, k, n, relu=relu, df=df, tiles=tiles, bias=bool(trial % 3), scale=scale,
                               seed=trial)
        np.testing.assert_array_equal(res.buffers["C"], want, err_msg=f"{m}x{k}x{n} tiles={tiles} scale={scale}")
        assert res.macs == m * k * n
        assert res.counts["mvout"] == -(-m // dim) * -(-n // dim)


def test_saturation_and_relu_are_exercised():
    e = emu(16)
    res, want = run_kernel(e, 20, 40, 24, relu=True, scale=0.01, seed=3)
    np.testing.assert_array_equal(res.buffers["C"], want)
    assert (want == 0).any() and (want == 127).any()          # ReLU clamps, int8 saturates high
    res, want = run_kernel(e, 20, 40, 24, relu=False, scale=0.01, seed=3)
    np.testing.assert_array_equal(res.buffers["C"], want)
    assert (want == -128).any()                               # and low


def test_round_half_to_even_on_mvout():
    e = emu(4, spad_rows=64, acc_rows=16)
    acc = np.array([[1, 3, 5, 7], [-1, -3, -5, -7], [2, 6, 10, 254], [-255, -257, 9, 11]], np.int32)
    out = np.zeros((4, 4), np.int8)
    prog = [isa.config_ld(16, id=0), isa.mvin(Dram("acc"), acc_addr(0), 4, 4),
            isa.config_st(4, acc_scale=0.5), isa.mvout(Dram("out"), acc_addr(0), 4, 4), isa.fence()]
    got = e.run(prog, {"acc": acc, "out": out}).buffers["out"]
    want = np.clip(np.rint(acc.astype(np.float32) * np.float32(0.5)), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(got, want)
    assert got[0, 0] == 0 and got[0, 1] == 2 and got[1, 0] == 0 and got[1, 1] == -2  # 0.5 -> 0, 1.5 -> 2


def test_mvin_scale_full_width_mvout_and_os_shift():
    e = emu(4, spad_rows=64, acc_rows=16)
    a = np.array([[3, -3, 5, 100], [1, 2, 3, 4], [-7, 7, 9, -9], [0, 1, -1, 127]], np.int8)
    eye = np.eye(4, dtype=np.int8)
    out32 = np.zeros((4, 4), np.int32)
    out8 = np.zeros((4, 4), np.int8)
    prog = [isa.config_ex(OS, sys_act=isa.NO_ACTIVATION, sys_shift=1),
            isa.config_ld(4, scale=0.5, id=0), isa.config_ld(4, id=1), isa.config_st(16),
            isa.mvin(Dram("a"), 0, 4, 4), isa.mvin(Dram("eye"), 8, 4, 4, channel=1),
            isa.preload(GARBAGE_ADDR, acc_addr(0), 4, 4, 4, 4), isa.compute_preloaded(0, 8, 4, 4, 4, 4),
            isa.mvout(Dram("out32"), acc_addr(0, read_full=True), 4, 4),
            isa.preload(GARBAGE_ADDR, 16, 4, 4, 4, 4), isa.compute_preloaded(8, 0, 4, 4, 4, 4),
            isa.config_st(4), isa.mvout(Dram("out8"), 16, 4, 4), isa.fence()]
    r = e.run(prog, {"a": a, "eye": eye, "out32": out32, "out8": out8})
    a_scaled = np.clip(np.rint(a.astype(np.float32) * np.float32(0.5)), -128, 127).astype(np.int32)
    np.testing.assert_array_equal(r.buffers["out32"], a_scaled)            # full-width int32 mvout
    x = a_scaled                                                             # eye @ a_scaled, then >> 1 (RNE)
    q = x >> 1
    rounded = q + ((x & 1) & (q & 1))                                        # half to even
    np.testing.assert_array_equal(r.buffers["out8"], rounded.astype(np.int8))


def test_mvin_rows_narrower_than_the_array_overwrite_whole_rows():
    """A mvin row narrower than DIM (scratchpad; accumulator from int32 and from int8) writes its values and zeros
    the rest of the row, whatever the row held before (the emulator copies such rows without a per-value pass)."""
    e = emu(4, spad_rows=64, acc_rows=16)
    rng = np.random.default_rng(3)
    full8 = rng.integers(-128, 128, size=(4, 4), dtype=np.int8)
    narrow8 = rng.integers(-128, 128, size=(4, 2), dtype=np.int8)
    full32 = rng.integers(-2**31, 2**31, size=(4, 4), dtype=np.int64).astype(np.int32)
    narrow32 = rng.integers(-2**31, 2**31, size=(4, 3), dtype=np.int64).astype(np.int32)
    out8 = np.zeros((4, 4), np.int8)
    out32 = np.zeros((8, 4), np.int32)
    prog = [isa.config_ld(4, id=0), isa.mvin(Dram("full8"), 0, 4, 4),
            isa.config_ld(2, id=1), isa.mvin(Dram("narrow8"), 0, 2, 4, channel=1),
            isa.config_ld(16, id=2), isa.mvin(Dram("full32"), acc_addr(0), 4, 4, channel=2),
            isa.config_ld(12, id=2), isa.mvin(Dram("narrow32"), acc_addr(0), 3, 4, channel=2),
            isa.config_ld(2, shrunk=True, id=2), isa.mvin(Dram("narrow8"), acc_addr(4), 2, 4, channel=2),
            isa.config_st(4), isa.mvout(Dram("out8"), 0, 4, 4),
            isa.config_st(16), isa.mvout(Dram("out32"), acc_addr(0, read_full=True), 4, 4),
            isa.mvout(Dram("out32", 64), acc_addr(4, read_full=True), 4, 4), isa.fence()]
    r = e.run(prog, {"full8": full8, "narrow8": narrow8, "full32": full32, "narrow32": narrow32, "out8": out8,
                     "out32": out32})
    np.testing.assert_array_equal(r.buffers["out8"], np.pad(narrow8, ((0, 0), (0, 2))))
    np.testing.assert_array_equal(r.buffers["out32"][:4], np.pad(narrow32, ((0, 0), (0, 1))))
    np.testing.assert_array_equal(r.buffers["out32"][4:], np.pad(narrow8.astype(np.int32), ((0, 0), (0, 2))))


def test_instruction_list_matches_c_program():
    """The same tiled matmul as a Python instruction list gives the same bits and the same cycle count."""
    dim, m, k, n = 8, 19, 21, 13
    e = emu(dim)
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
    prog = [isa.config_ex(WS), isa.config_ld(k, id=0), isa.config_ld(n, id=1), isa.config_st(n, acc_scale=0.05)]
    blocks = lambda x: range(0, x, dim)  # noqa: E731
    for i in blocks(m):
        for j in blocks(n):
            r_, c_ = min(dim, m - i), min(dim, n - j)
            for kb, kk in enumerate(blocks(k)):
                kc = min(dim, k - kk)
                prog += [isa.mvin(Dram("A", i * k + kk), 0, kc, r_), isa.mvin(Dram("B", kk * n + j), dim, c_, kc, 1),
                         isa.preload(dim, acc_addr(0, accumulate=kb > 0), c_, kc, c_, r_),
                         isa.compute_preloaded(0, GARBAGE_ADDR, kc, r_, c_, r_)]
            prog.append(isa.mvout(Dram("C", i * n + j), acc_addr(0), c_, r_))
    prog.append(isa.fence())
    res = e.run(prog, {"A": a, "B": b, "C": np.zeros((m, n), np.int8)})
    np.testing.assert_array_equal(res.buffers["C"], reference(a, b, np.zeros(n, np.int32), 0.05, False))


# --------------------------------------------------------------------------------------------------------------
# Traps

def _trap(prog, bufs=None, dim=4):
    e = emu(dim, spad_rows=64, acc_rows=16)
    bufs = bufs if bufs is not None else {"x": np.zeros((16, 64), np.int8), "y": np.zeros((16, 16), np.int32)}
    with pytest.raises(GemminiTrap) as info:
        e.run(prog, bufs)
    return info.value


SETUP = [isa.config_ld(64), isa.config_st(64)]
TRAPS = {
    "spad_out_of_bounds": (SETUP + [isa.mvin(Dram("x"), 62, 4, 4)], 2, "mvin", "out of bounds"),
    "acc_out_of_bounds": (SETUP + [isa.mvin(Dram("x"), acc_addr(14), 4, 4)], 2, "mvin", "out of bounds"),
    "too_many_rows": (SETUP + [isa.mvin(Dram("x"), 0, 4, 5)], 2, "mvin", "rows exceed"),
    "too_many_spad_cols": (SETUP + [isa.mvin(Dram("x"), 0, 17, 4)], 2, "mvin", "columns exceed"),
    "too_many_acc_cols": (SETUP + [isa.mvin(Dram("x"), acc_addr(0), 5, 4)], 2, "mvin", "columns exceed"),
    "mvout_too_many_cols": (SETUP + [isa.mvin(Dram("x"), 0, 4, 4), isa.mvout(Dram("x"), 0, 5, 4)], 3, "mvout",
                            "columns exceed"),
    "never_written_mvout": (SETUP + [isa.mvout(Dram("x"), acc_addr(3), 4, 4)], 2, "mvout", "never written"),
    "never_written_operand": (SETUP + [isa.mvin(Dram("x"), 0, 4, 4), isa.preload(0, acc_addr(0), 4, 4, 4, 4),
                                       isa.compute_preloaded(8, GARBAGE_ADDR, 4, 4, 4, 4)],
                              4, "compute_preloaded", "never written"),
    "accumulate_unwritten": (SETUP + [isa.mvin(Dram("x"), 0, 4, 4),
                                      isa.preload(0, acc_addr(0, accumulate=True), 4, 4, 4, 4),
                                      isa.compute_preloaded(0, GARBAGE_ADDR, 4, 4, 4, 4)],
                             4, "compute_preloaded", "never written"),
    "compute_without_preload": (SETUP + [isa.mvin(Dram("x"), 0, 4, 4),
                                         isa.compute_preloaded(0, GARBAGE_ADDR, 4, 4, 4, 4)],
                                3, "compute_preloaded", "without a preceding preload"),
    "dram_outside_buffers": (SETUP + [isa.mvin(Dram("x", 16 * 64 - 2), 0, 4, 4)], 2, "mvin", "outside every"),
    "preload_block_too_big": (SETUP + [isa.preload(0, acc_addr(0), 5, 4, 4, 4)], 2, "preload", "exceed DIM"),
    "bad_dataflow": ([isa.config_ex(7)], 0, "config_ex", "unknown dataflow"),
    "mvout_acc_out_of_bounds": (SETUP + [isa.mvout(Dram("x"), acc_addr(15), 4, 2)], 2, "mvout", "out of bounds"),
}


@pytest.mark.parametrize("name", sorted(TRAPS))
def test_trap(name):
    prog, index, mnemonic, text = TRAPS[name]
    t = _trap(prog)
    assert t.index == index and t.mnemonic == mnemonic
    assert text in str(t) and f"#{index} ({mnemonic})" in str(t)


def test_read_only_buffer_trap_and_c_program_trap():
    e = emu(4, spad_rows=64, acc_rows=16)
    prog = SETUP + [isa.mvin(Dram("x"), 0, 4, 4), isa.mvout(Dram("ro"), 0, 4, 4)]
    with pytest.raises(GemminiTrap, match="read-only"):
        e.run(prog, {"x": np.zeros((16, 64), np.int8), "ro": np.zeros(64, np.int8)}, readonly=("ro",))
    src = '#include "gemmini.h"\nvoid kernel_entry(void **args) {\n gemmini_config_ld(4);\n' \
          ' gemmini_extended_mvin(args[0], 0, 4, 4);\n gemmini_extended_mvin(args[0], 70, 4, 4);\n}\n'
    with pytest.raises(GemminiTrap) as info:
        e.run(src, {"x": np.zeros(16, np.int8)})
    assert info.value.index == 2 and info.value.mnemonic == "mvin"
    # the emulator is usable again after a trap
    ok = e.run(src.replace("70", "4"), {"x": np.zeros(16, np.int8)})
    assert ok.counts == {"config_ld": 1, "mvin": 2}


# --------------------------------------------------------------------------------------------------------------
# Timing

def test_cycles_grow_with_size_and_respect_bounds():
    e = emu(16)
    prev = 0
    for size in (16, 32, 64, 128):
        res, want = run_kernel(e, size, size, size, tiles=(4, 4, 4), bias=False)
        np.testing.assert_array_equal(res.buffers["C"], want)
        ideal_compute = size ** 3 / 256
        ideal_dram = (res.dram_bytes_in + res.dram_bytes_out) / e.timing.dram_bytes_per_cycle
        assert res.cycles >= max(ideal_compute, ideal_dram)
        assert res.cycles > prev
        if prev:
            assert res.cycles < 12 * prev            # 8x the work: well under quadratic blow-up
        prev = res.cycles
    # overlap: decoupled queues finish sooner than doing everything back to back
    assert res.cycles < sum(res.busy.values())
    assert res.cycles >= max(res.busy.values())


def test_bandwidth_and_request_size_matter():
    slow = emu(16, dram_bytes_per_cycle=2.0)
    fast = emu(16, dram_bytes_per_cycle=16.0)
    r_slow, _ = run_kernel(slow, 64, 64, 64, tiles=(1, 1, 4), bias=False)
    r_fast, _ = run_kernel(fast, 64, 64, 64, tiles=(1, 1, 4), bias=False)
    assert r_slow.cycles > 2 * r_fast.cycles
    # a 65-byte row needs two requests, a 64-byte row one when it starts on a 64-byte block: rows x requests x
    # request cost + bytes / bandwidth
    e = emu(32, dram_bytes_per_cycle=8.0, dma_request_cycles=2.0)
    x = np.zeros((16, 128), np.int8)
    c64 = e.run([isa.config_ld(128), isa.mvin(Dram("x"), 0, 64, 16)], {"x": x}).cycles
    c65 = e.run([isa.config_ld(128), isa.mvin(Dram("x"), 0, 65, 16)], {"x": x}).cycles
    assert c64 == 16 * 2 + 16 * 64 / 8 and c65 == 16 * 2 * 2 + 16 * 65 / 8
    # rows 80 bytes apart start 0, 16, 32, 48 bytes into a block: a 64-byte row there touches 1, 2, 2, 2 blocks, one
    # request each (DMA.scala; the cost model's _row_req counts the same)
    x = np.zeros((16, 80), np.int8)
    r80 = e.run([isa.config_ld(80), isa.mvin(Dram("x"), 0, 64, 16)], {"x": x})
    assert r80.features["ld_req"] == 4 * (1 + 2 + 2 + 2)
    assert r80.cycles == 28 * 2 + 16 * 64 / 8
    # zero-fill (address 0) moves no bytes, only requests; a stride-0 load reads its row once
    z = e.run([isa.config_ld(80), isa.Instruction("mvin", (0, 0, 64, 16))], {"x": x})
    assert z.cycles == 16 * 2 and z.dram_bytes_in == 0
    s0 = e.run([isa.config_ld(0), isa.mvin(Dram("x"), 0, 64, 16)], {"x": x})
    assert s0.cycles == 16 * 2 + 64 / 8 and s0.dram_bytes_in == 64


def test_raw_dependence_waits_for_the_load():
    t = TimingParams.for_dim(16)
    e = emu(16)
    x = np.zeros((16, 16), np.int8)
    base = [isa.config_ld(16), isa.mvin(Dram("x"), 0, 16, 16), isa.mvin(Dram("x"), 16, 16, 16)]
    dep = base + [isa.preload(16, acc_addr(0), 16, 16, 16, 16), isa.compute_preloaded(0, GARBAGE_ADDR, 16, 16, 16, 16)]
    r = e.run(dep, {"x": x})
    load_done = 2 * 256 / t.dram_bytes_per_cycle + t.dma_latency
    assert r.cycles >= load_done + t.compute_op_cycles + 16 * t.compute_row_cycles + t.compute_latency
    # a compute that reads rows no pending load writes does not wait for that load
    indep = [isa.config_ld(16), isa.mvin(Dram("x"), 0, 16, 16), isa.mvin(Dram("x"), 16, 16, 16),
             isa.preload(16, acc_addr(0), 16, 16, 16, 16), isa.compute_preloaded(0, GARBAGE_ADDR, 16, 16, 16, 16),
             isa.mvin(Dram("x"), 32, 16, 16)]
    r2 = e.run(indep, {"x": x})
    # (at most one more mvin's time: its bytes and one DMA request per 16 B row)
    assert r2.cycles < r.cycles + 256 / t.dram_bytes_per_cycle + 16 * t.dma_request_cycles + t.issue_cycles + 1


def test_parameters_reach_the_model():
    """The instruction-level timeline (timeline_cycles) reads every timing parameter, the host's issue time too."""
    r1, _ = run_kernel(emu(16), 32, 32, 32, bias=False)
    r2, _ = run_kernel(emu(16, issue_cycles=50.0), 32, 32, 32, bias=False)
    assert r2.timeline_cycles > r1.timeline_cycles + 40 * r1.instructions / 2
    with pytest.raises(ValueError):
        TimingParams(dram_bytes_per_cycle=0).validate()


def test_host_paces_calls_and_a_program_pays_its_latency_once():
    """config_ex opens a call no sooner than call_floor_cycles after the previous one (the host sets each call
    up while the last runs): ten calls with no work take nine floors; calls with more work than the floor hide
    it. run_cycles is added once per program. (The timeline; the reported cycles time each call as the cost model
    does: ten empty calls last ten floors.)"""
    opens = [isa.config_ex(WS)] * 10
    assert emu(16, call_cycles=0.0, call_floor_cycles=300.0).run(opens, {}).timeline_cycles == 9 * 300
    got = emu(16, call_cycles=0.0, call_floor_cycles=300.0, run_cycles=800.0).run(opens, {})
    assert got.timeline_cycles == 9 * 300 + 800
    assert got.cycles == 10 * 300 + 800 and got.calls == 10
    x = np.zeros((16, 16), np.int8)
    call = [isa.config_ex(WS), isa.config_ld(16)] + [isa.mvin(Dram("x"), 16 * (i % 4), 16, 16) for i in range(8)]
    for field in ("timeline_cycles", "cycles"):
        slow = getattr(emu(16, call_cycles=0.0, call_floor_cycles=0.0, dram_bytes_per_cycle=1.0).run(call * 3, {"x": x}),
                       field)
        paced = getattr(emu(16, call_cycles=0.0, call_floor_cycles=300.0, dram_bytes_per_cycle=1.0).run(
            call * 3, {"x": x}), field)
        assert slow > 3 * 300 and paced == slow  # 8 x 256 B at 1 B/cycle per call: the floor is hidden


def test_default_timing_is_the_calibrated_mapping_for_the_catalog_gemmini():
    """TimingParams' defaults claim to be timing_for(gemmini-16x16): keep them so when the model is refitted."""
    from dataclasses import asdict

    import pytest

    from tileplan.codegen.emulator import TimingParams
    from tileplan.codegen.pipeline import timing_for
    from tileplan.hardware.catalog import get_hardware

    derived = asdict(timing_for(get_hardware("gemmini-16x16")))
    for name, value in asdict(TimingParams()).items():
        assert value == pytest.approx(derived[name], rel=1e-3, abs=1e-9), name


def test_narrow_stores_wait_behind_their_block_as_the_model_counts():
    """An mvout of 16 rows two bytes apart (two output channels) puts 16 requests into one 64-byte block: they are
    served one after another, so all but ~1.5 of them wait (block_req; cost model: _store_chain_one, the same
    count); 16-byte rows 64 bytes apart share no block. The wait is block_wait_cycles per waiting request."""
    from tileplan.cost.gemmini import _store_chain_one

    acc = np.zeros((16, 16), np.int32)

    def store(cols: int, stride: int, wait: float = 11.0):
        out = np.zeros((16, max(stride, cols)), np.int8)
        prog = [isa.config_ex(WS), isa.config_ld(64, id=0), isa.mvin(Dram("acc"), acc_addr(0), 16, 16),
                isa.config_st(stride), isa.mvout(Dram("out"), acc_addr(0), cols, 16), isa.fence()]
        return emu(16, block_wait_cycles=wait).run(prog, {"acc": acc, "out": out})

    narrow = store(2, 2)
    want = float(_store_chain_one(16, 2, 2))
    assert want > 9
    assert narrow.features["block_req"] == pytest.approx(want)
    assert store(16, 64).features["block_req"] == 0
    assert narrow.cycles - store(2, 2, wait=0.0).cycles == pytest.approx(11.0 * want, abs=1)


def test_a_read_from_the_accumulator_is_scaled_activated_and_clipped():
    """Gemmini's execute unit reads an operand from the accumulator through the accumulator's scale unit with
    config_ex's activation and acc_scale (ExecuteController: read_req.scale := acc_scale, act := activation, full
    := false): the array multiplies relu(acc) * acc_scale rounded half to even and clipped to int8, the values an
    mvout with that scale and activation would store."""
    e = emu(4, spad_rows=64, acc_rows=16)
    acc = np.array([[1, 3, 5, 7], [-1, -3, -5, -7], [2, 6, 10, 254], [-255, 300, 9, 11]], np.int32)
    eye = np.eye(4, dtype=np.int8)
    got = np.zeros((4, 4), np.int8)
    stored = np.zeros((4, 4), np.int8)
    for relu in (False, True):
        act = isa.RELU if relu else isa.NO_ACTIVATION
        prog = [isa.config_ld(16, id=0), isa.mvin(Dram("acc"), acc_addr(0), 4, 4),
                isa.config_ld(4, id=1), isa.mvin(Dram("eye"), 0, 4, 4, channel=1),
                isa.config_ex(WS, sys_act=act, acc_scale=0.5),
                isa.preload(0, acc_addr(8), 4, 4, 4, 4), isa.compute_preloaded(acc_addr(0), GARBAGE_ADDR, 4, 4, 4, 4),
                isa.config_st(4), isa.mvout(Dram("got"), acc_addr(8), 4, 4),
                isa.config_st(4, acc_act=act, acc_scale=0.5), isa.mvout(Dram("stored"), acc_addr(0), 4, 4),
                isa.fence()]
        r = e.run(prog, {"acc": acc, "eye": eye, "got": got, "stored": stored})
        want = np.rint(acc.astype(np.float32) * np.float32(0.5))
        want = np.clip(np.maximum(want, 0) if relu else want, -128, 127).astype(np.int8)
        np.testing.assert_array_equal(r.buffers["got"], want)           # A @ I = A as the array saw it
        np.testing.assert_array_equal(r.buffers["got"], r.buffers["stored"])  # = what mvout stores
        assert r.buffers["got"][2, 3] == 127 and r.buffers["got"][0, 0] == 0  # clipped; 0.5 -> 0 (half to even)


def test_channel_tiles_of_a_tensor_beyond_the_llc_wait_on_dram_longer():
    """As the cost model's far_req: a strided request on a buffer larger than the LLC (llc_bytes) counts there too,
    and costs llc_miss_cycles more; on a buffer between the L2 and the LLC only dram_req counts."""
    def run(rows: int, llc_miss: float) -> tuple[float, float, float]:
        x = np.zeros((rows, 1024), np.int8)
        prog = [isa.config_ld(1024)]
        for lo in (0, 512):
            prog.append(isa.config_ex(WS))
            for r0 in range(0, rows, 16):
                prog.append(isa.mvin(Dram("x", r0 * 1024 + lo), 0, 64, 16))
        # (dram_byte_cycles and refill_cycles 0: DRAM's own rate and the memory bus would bound these loads too and
        # hide the term measured here)
        res = emu(16, llc_bytes=4 << 20, llc_miss_cycles=llc_miss, dram_byte_cycles=0.0, refill_cycles=0.0).run(
            prog, {"x": x})
        return res.features["dram_req"], res.features["far_req"], res.cycles

    assert run(1024, 0.0)[:2] == (2048, 0)  # 1 MiB: beyond the L2, within the LLC
    near, far, cycles = run(8192, 0.0)  # 8 MiB: beyond both
    assert (near, far) == (16384, 16384)
    assert run(8192, 10.0)[2] == pytest.approx(cycles + 10.0 * far, rel=1e-9)


def _strided_stores_far() -> tuple[int, np.ndarray, list[Any]]:
    """Two calls, each writing 16 of the 32 columns of an 8 MiB buffer's rows (64 bytes apart): every store is a
    strided request DRAM serves. (rows, the output buffer, the program)"""
    n = 8 << 20 >> 6  # rows
    y = np.zeros((n, 64), np.int8)
    prog = [isa.config_ld(16), isa.config_st(64)]
    for lo in (0, 16):
        prog += [isa.config_ex(WS), isa.mvin(Dram("x", 0), 0, 16, 16)]
        prog += [isa.mvout(Dram("y", r0 * 64 + lo), 0, 16, 16) for r0 in range(0, n, 16)]
    prog.append(isa.fence())
    return n, y, prog


def test_strided_stores_beyond_the_llc_move_their_block_twice_over_the_memory_bus():
    """As the cost model's refill bound: a strided request DRAM serves (far_req) moves its 64-byte block over the
    memory bus (refill_cycles each), a store's block twice (the L2 fills it and writes it back: far_st_req), and a
    call's DMA lasts at least that. Two calls, each writing 16 of the 32 columns of an 8 MiB buffer's rows (64 bytes
    apart): every store is such a request."""
    n, y, prog = _strided_stores_far()

    def run(refill: float) -> tuple[dict[str, float], float]:
        # (llc_miss_cycles 0: each store's two waits on DRAM would outlast the bound here and hide it)
        res = emu(16, llc_bytes=4 << 20, refill_cycles=refill, llc_miss_cycles=0.0).run(
            prog, {"x": np.zeros((16, 16), np.int8), "y": y})
        return res.features, res.cycles

    features, cycles = run(8.0)
    assert features["st_req"] == features["far_req"] == features["far_st_req"] == 2 * n
    assert cycles == pytest.approx(2 * 2 * n * 8.0, abs=2.0)  # (emu: no run_cycles)
    assert run(0.0)[1] < cycles


def test_strided_stores_beyond_the_llc_wait_on_dram_twice():
    """As the cost model's far_req + far_st_req: a strided store DRAM serves waits llc_miss_cycles twice (the L2 fills
    its block, then writes it back), a load once. The program of the test above, the memory bus left out."""
    n, y, prog = _strided_stores_far()

    def run(llc_miss: float) -> tuple[dict[str, float], float]:
        res = emu(16, llc_bytes=4 << 20, refill_cycles=0.0, dram_byte_cycles=0.0, llc_miss_cycles=llc_miss).run(
            prog, {"x": np.zeros((16, 16), np.int8), "y": y})
        return res.features, res.cycles

    features, base = run(0.0)
    assert features["far_st_req"] == 2 * n
    assert run(10.0)[1] == pytest.approx(base + 10.0 * (features["far_req"] + features["far_st_req"]), rel=1e-9)


def test_whole_rows_dram_reads_wait_as_strided_requests_do():
    """As the cost model's whole_far_reads: a load of whole 64-byte rows from a buffer larger than the LLC (far_bytes,
    no strided request) makes one DRAM read per block, each waiting dram_request_cycles + llc_miss_cycles as a strided
    request DRAM serves does (8 MiB read in 16-row mvins: 131,072 reads), and crossing the memory bus."""
    x = np.zeros((8192 * 16, 64), np.int8)
    prog = [isa.config_ld(64), isa.config_ex(WS)]
    prog += [isa.mvin(Dram("x", r0 * 64), 0, 64, 16) for r0 in range(0, 8192 * 16, 16)]
    prog.append(isa.fence())

    def run(**timing: float) -> tuple[dict[str, float], float]:
        res = emu(16, llc_bytes=4 << 20, dram_byte_cycles=0.0, **timing).run(prog, {"x": x})
        return res.features, res.cycles

    reads = x.nbytes / 64
    features, base = run(llc_miss_cycles=0.0, dram_request_cycles=0.0, refill_cycles=0.0)
    assert features["far_bytes"] == x.nbytes and features["far_req"] == features["dram_req"] == 0
    assert run(llc_miss_cycles=10.0, dram_request_cycles=1.0, refill_cycles=0.0)[1] == pytest.approx(
        base + 11.0 * reads, rel=1e-9)
    # the memory bus: 8 cycles a block, above the DMA's own time for these reads
    assert run(llc_miss_cycles=0.0, dram_request_cycles=0.0, refill_cycles=8.0)[1] == pytest.approx(
        max(base, 8.0 * reads), rel=1e-9)


def test_stores_behind_their_block_wait_on_top_of_drams_own_rate():
    """As the cost model's _cycle_terms: a call's DMA is at least the bytes DRAM reads for it x dram_byte_cycles, and
    the store requests waiting behind others to their 64-byte block (block_req x block_wait_cycles) come on top of
    that bound, not inside it (a call that reads 8 MiB beyond the LLC and stores 2-byte rows 2 bytes apart)."""
    x = np.zeros((8192 * 16, 64), np.int8)  # 8 MiB, read in whole 64-byte rows: far_bytes, no strided request
    y = np.zeros((64, 2), np.int8)

    def run(block_wait: float) -> tuple[float, float, float]:
        prog = [isa.config_ld(64), isa.config_ex(WS)]
        prog += [isa.mvin(Dram("x", r0 * 64), 0, 64, 16) for r0 in range(0, 8192 * 16, 16)]
        prog += [isa.config_st(2)] + [isa.mvout(Dram("y", r0 * 2), 0, 2, 16) for r0 in range(0, 64, 16)]
        prog.append(isa.fence())
        res = emu(16, llc_bytes=4 << 20, block_wait_cycles=block_wait).run(prog, {"x": x, "y": y})
        return res.features["far_bytes"], res.features["block_req"], res.cycles

    far, waiting, cycles = run(0.0)
    # each 16-row mvout: 32 bytes, in one 64-byte block or two (the expected count over where its first row starts)
    assert far == x.nbytes and waiting == pytest.approx(4 * (16 / (1 + 31 / 64) - 1))
    assert run(10.0)[2] == pytest.approx(cycles + 10.0 * waiting, abs=1.0)  # (cycles are whole)


def test_rows_read_whole_in_pieces_or_up_to_their_padding_stream_and_channel_tiles_wait_on_dram():
    """Requests on a tensor beyond the L2 wait on DRAM (dram_req) only for a strided tile: a call that moves rows
    short of the columns the run reads of them (the cost model's channel tile narrower than the tensor's rows,
    _beyond_l2). A row moved whole as many 64-byte mvins is not one, however many pieces; nor is a row of a copy
    padded to the tile grid read up to its padding (1,000 of 1,024 bytes, which no transfer reads: the model's
    tile of all of a tensor's channels). Two calls that each move half of every row are."""
    rows = 640  # x 1,024 B: beyond the 512 KiB L2
    x = np.zeros((rows, 1024), np.int8)

    def run(pieces: list[list[tuple[int, int]]]) -> float:
        prog = [isa.config_ld(1024)]
        for call in pieces:
            prog.append(isa.config_ex(WS))
            for lo, hi in call:
                for r0 in range(0, rows, 16):
                    prog.append(isa.mvin(Dram("x", r0 * 1024 + lo), 0, hi - lo, 16))
        return emu(16).run(prog, {"x": x}).features["dram_req"]

    whole = [(c, min(c + 64, 1024)) for c in range(0, 1024, 64)]  # 16 mvins per row, 64 B each
    assert run([whole]) == 0
    padded = [(c, min(c + 64, 1000)) for c in range(0, 1000, 64)]
    assert run([padded, padded]) == 0
    halves = [[(c, c + 64) for c in range(0, 512, 64)], [(c, c + 64) for c in range(512, 1024, 64)]]
    assert run(halves) == rows * 16  # a request per 64 B of every row, all of them strided
    # the same padded copy read as two column tiles: strided, as the model counts a tile short of the channels
    assert run([padded[:8], padded[8:]]) == rows * 16


def test_call_slots_overlap_a_calls_computes_with_the_next_calls_dma():
    """As the cost model's two call slots (tileplan.cost.gemmini._slot_loop): with call_slots, a call's execute
    overlaps the next call's DMA (the last call's, the first call's), not its own. Two calls: one that only loads
    (DMA d), one that only computes (execute x). Each paired with itself they last d + x; paired with the next, the
    loading call's empty execute meets the computing call's empty DMA, and the computing call's execute meets the
    loads: max(d, x) (overlap_loss 0, no call floor; the run's fill term is the same either way)."""
    x = np.zeros((64, 16), np.int8)
    loads = [isa.config_ex(WS), isa.config_ld(16)] + [isa.mvin(Dram("x", 16 * 16 * i), 16 * i, 16, 16)
                                                      for i in range(4)]
    computes = [isa.config_ex(WS)]
    for i in range(4):
        computes += [isa.preload(16 * i, acc_addr(16 * i), 16, 16, 16, 16),
                     isa.compute_preloaded(16 * ((i + 1) % 4), GARBAGE_ADDR, 16, 16, 16, 16)]
    prog = loads + computes + [isa.fence()]

    def run(slots: float) -> Any:
        return emu(16, overlap_loss=0.0, call_slots=slots, dram_bytes_per_cycle=1.0).run(prog, {"x": x})

    alone, paired = run(0.0), run(1.0)
    t = TimingParams.for_dim(16, dram_bytes_per_cycle=1.0)
    f = alone.features
    d = f["ld_req"] * t.dma_request_cycles + f["ld_bytes"] / 1.0
    ex = f["ex_rows"] + f["ex_ops"] * t.compute_op_cycles + f["preloads"] * t.preload_cycles
    assert d > 0 and ex > 0
    assert alone.cycles - paired.cycles == pytest.approx(min(d, ex), abs=1.0)
