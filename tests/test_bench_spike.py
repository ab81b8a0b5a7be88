"""bench/spike.py's reading of main.c's output: the step table it prints and the output file it writes (the bench
judges Spike's run by them; a wrong split or a byte comparison by element would misreport a disagreement)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_bench):  # type: ignore[no-untyped-def]
    return load_bench("spike")


def test_steps_reads_main_c_table(bench) -> None:  # type: ignore[no-untyped-def]
    out = ("step kind  cycles  op\n   0 host              412  input_QuantizeLinear\n"
           "   1 accel           3148  conv1\n  12 accel             7  layer1.0 conv2\ntotal 3567 cycles\n")
    assert bench.steps(out) == [("input_QuantizeLinear", "host", 412), ("conv1", "accel", 3148),
                                ("layer1.0 conv2", "accel", 7)]


def test_decode_splits_outputs_back_to_back(bench) -> None:  # type: ignore[no-untyped-def]
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([-1, 2, -3], dtype=np.int8)
    meta = [{"name": "a", "shape": [2, 3], "dtype": "float32"}, {"name": "b", "shape": [3], "dtype": "int8"}]
    got = bench.decode(a.tobytes() + b.tobytes(), meta)
    assert np.array_equal(got["a"], a) and np.array_equal(got["b"], b)
    with pytest.raises(ValueError):
        bench.decode(a.tobytes(), meta)
    with pytest.raises(ValueError):
        bench.decode(a.tobytes() + b.tobytes() + b"\0", meta)


def test_differing_counts_bits_not_values(bench) -> None:  # type: ignore[no-untyped-def]
    x = np.array([0.0, 1.0, np.nan, 2.0], dtype=np.float32)
    y = np.array([-0.0, 1.0, np.nan, 3.0], dtype=np.float32)
    assert bench.differing({"o": x}, {"o": y}) == 2  # -0.0 and 3.0; the two NaNs have the same bits
    assert bench.differing({"o": x}, {"o": x.copy()}) == 0


def test_table_names_both_onnxruntime_judges(bench) -> None:  # type: ignore[no-untyped-def]
    """A row carries the default session's and the integer reference's agreement in their own columns; a row kept
    from a run before the ort-int8 column shows '-' there, not the default session's numbers."""
    import argparse

    args = argparse.Namespace(judges="j")
    base = {"hw": "gemmini-16x16", "steps": 3, "accel_steps": 1, "elements": 10, "differ_emu": 0,
            "bytes_equal": True, "spike_steps": [("conv", "accel", 5)], "emu_steps": [("conv", "accel", 7)],
            "spike_s": 0.1, "ort": {"differ": 7, "equal": 0.3, "within1": 1.0, "max": 1.0}}
    new = {**base, "model": "new", "ort_int8": {"differ": 0, "equal": 1.0, "within1": 1.0, "max": 0.0}}
    old = {**base, "model": "old"}
    rows = {line.split(" | ")[0]: line for line in bench.write(args, [new, old], ["r"]).splitlines()
            if line.startswith("| new ") or line.startswith("| old ")}
    assert "| 7, 30.0% / 100.0% / 1 | 0, 100.0% / 100.0% / 0 | 5 / 5 | 7 |" in rows["| new"]
    assert "| 7, 30.0% / 100.0% / 1 | - | 5 / 5 | 7 |" in rows["| old"]


def test_table_shows_fused_steps(bench) -> None:  # type: ignore[no-untyped-def]
    """A program with fused-layer groups says how many of its accelerator steps run one (their Spike build is
    staged); one without says nothing more."""
    import argparse

    base = {"hw": "gemmini-16x16", "steps": 12, "accel_steps": 6, "elements": 10, "differ_emu": 0,
            "bytes_equal": True, "spike_steps": [("conv", "accel", 5)], "emu_steps": [("conv", "accel", 7)],
            "spike_s": 0.1, "ort": {"differ": 0, "equal": 1.0, "within1": 1.0, "max": 0.0}}
    table = bench.write(argparse.Namespace(judges="j"), [{**base, "model": "f", "fused_steps": 1},
                                                          {**base, "model": "u", "fused_steps": 0}], ["r"])
    assert "| f | gemmini-16x16 | 12 (6, 1 fused) |" in table
    assert "| u | gemmini-16x16 | 12 (6) |" in table
    table = bench.write(argparse.Namespace(judges="j"), [{**base, "model": "ir", "fused_steps": 3, "fused_three": 2}],
                        ["r"])
    assert "| ir | gemmini-16x16 | 12 (6, 3 fused (2 of 3 ops)) |" in table
