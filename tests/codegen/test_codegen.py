"""Plan -> TVM -> C -> emulator: bit-exact results on random shapes and mappings, and the artifacts' properties."""

from __future__ import annotations

import math
import random
import re
import subprocess

import numpy as np
import pytest

from tileplan.codegen import registry
from tileplan.codegen.emulator import HEADER_DIR
from tileplan.codegen.emulator.build import compile_object
from tileplan.codegen.pipeline import Epilogue, generate, random_inputs, reference, run
from tileplan.codegen.registry import CodegenError
from tileplan.hardware.catalog import get_hardware
from tileplan.check import check
from tileplan.mapping import Mapping
from tileplan.problem import Problem
from tileplan.workload import parse_layer

from plans import random_layer, random_mapping

HW16 = get_hardware("gemmini-16x16")
N_RANDOM = 210  # random (layer, mapping, epilogue) cases, split over the chunks below
CHUNKS = 6


def _case(seed: int):
    rng = random.Random(seed)
    kind = "matmul" if rng.random() < 0.55 else "conv"
    layer = parse_layer(random_layer(rng, kind))
    mapping = random_mapping(layer.dims(), rng, dataflow=rng.choice(["weight_stationary", "output_stationary"]))
    epi = Epilogue(scale=rng.choice([1.0, 0.5, 0.05, 0.0031, 1 / 3, 2.5e-4]), relu=rng.random() < 0.5)
    return layer, mapping, epi


def _check(layer, mapping, epi, hw=HW16, seed=0):
    bad = [v for v in check(Problem.from_layer(layer), hw, mapping) if "multiply to" in v or "levels" in v]
    assert not bad, bad  # test mappings are exact factorizations (capacity is the realisation's business)
    art = generate(layer, hw, mapping, epi)
    inputs = random_inputs(art.geometry, seed)
    res = run(art, inputs)
    want = reference(art.geometry, epi, **inputs)
    np.testing.assert_array_equal(res.buffers["out"], want,
                                  err_msg=f"{layer.model_dump()} | {mapping.describe()} | {art.notes}")
    return art, res


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_shapes_bit_exact(chunk):
    """>= 200 random matmuls / convolutions (grouped, depthwise, strided, dilated, padded) under random mappings,
    both dataflows, with and without double buffering: bit-exact against NumPy, and no trap."""
    per = N_RANDOM // CHUNKS
    kinds = set()
    for seed in range(chunk * per, (chunk + 1) * per):
        layer, mapping, epi = _case(seed)
        art, res = _check(layer, mapping, epi, seed=seed)
        kinds.add(art.tag)
        # every block compute is a full DIM^3 block of the padded nest: MACs are those of the padded loop bounds
        assert res.macs == math.prod(art.realization.padded(d) for d in "ngpqkrsc")
        assert res.macs >= math.prod(layer.dims().values())
    assert "gemmini.matmul" in kinds and "gemmini.conv2d" in kinds


@pytest.mark.parametrize("hw_name", ["gemmini-8x8", "gemmini-32x32"])
def test_other_array_sizes(hw_name):
    hw = get_hardware(hw_name)
    dim = hw.pe_array.rows
    rng = random.Random(dim)
    for seed in range(4):
        layer = parse_layer(random_layer(rng, "matmul" if seed % 2 else "conv"))
        mapping = random_mapping(layer.dims(), rng, dim=dim)
        art, _ = _check(layer, mapping, Epilogue(scale=0.01, relu=True), hw=hw, seed=seed)
        assert art.target.dim == dim


def _mm_mapping(dram, spad, acc, db=True, dataflow="weight_stationary"):
    return Mapping.model_validate({"levels": [
        {"name": "Registers"}, {"name": "Accumulator", "temporal": acc, "spatial": [["C", 16]]},
        {"name": "Scratchpad", "temporal": spad, "spatial": [["K", 16]]}, {"name": "DRAM", "temporal": dram}],
        "double_buffered": {"Scratchpad": ["I", "W"]} if db else {}, "dataflow": dataflow})


def test_double_buffering_pipelines_and_saves_cycles():
    layer = parse_layer({"op": "matmul", "M": 64, "K": 512, "N": 64})
    args = ([["C", 32], ["P", 2]], [["K", 4]], [["P", 32]])
    a_db, r_db = _check(layer, _mm_mapping(*args, db=True), Epilogue(scale=0.001))
    a_sb, r_sb = _check(layer, _mm_mapping(*args, db=False), Epilogue(scale=0.001))
    pingpong = re.compile(r"tp_floormod\([^;]*, 2\)")
    assert pingpong.search(a_db.c_source) and not pingpong.search(a_sb.c_source)  # ping-pong buffers
    assert a_db.spad_rows_used == 2 * a_sb.spad_rows_used
    assert r_db.cycles < 0.8 * r_sb.cycles  # loads of the next tile overlap the computes of this one
    assert r_db.counts == r_sb.counts


def test_mapping_drives_the_loop_nest():
    """The DRAM loop order of the mapping is the loop order of the code; tiles set the local buffer sizes."""
    layer = parse_layer({"op": "matmul", "M": 128, "K": 64, "N": 128})
    a1, r1 = _check(layer, _mm_mapping([["K", 8], ["P", 4]], [["C", 4]], [["P", 32]]), Epilogue())
    a2, r2 = _check(layer, _mm_mapping([["P", 4], ["K", 8]], [["C", 4]], [["P", 32]]), Epilogue())
    def dram_loops(a):
        return [d for d in a.realization.dram_order if a.realization.trips("dram", d) > 1]

    assert dram_loops(a1) == ["q", "k"] and dram_loops(a2) == ["k", "q"]  # mapping lists innermost first
    assert a1.c_source != a2.c_source and r1.counts == r2.counts
    # K at the scratchpad instead of DRAM: the input tile stays while all of K passes -> 8x fewer input loads
    a3, r3 = _check(layer, _mm_mapping([["P", 4]], [["K", 8], ["C", 4]], [["P", 32]]), Epilogue())
    assert r3.counts["mvin"] * 8 == r1.counts["mvin"] and r3.counts["mvin2"] == r1.counts["mvin2"]
    assert a3.spad_rows_used > a1.spad_rows_used


def test_reduction_outside_outputs_is_reordered_and_noted():
    layer = parse_layer({"op": "matmul", "M": 32, "K": 64, "N": 32})
    art, _ = _check(layer, _mm_mapping([["P", 2], ["C", 4]], [["K", 2]], [["P", 16]]), Epilogue(scale=0.1))
    assert any("reduction loops moved" in n for n in art.notes)


def test_fits_small_accumulator_by_shrinking():
    """A plan whose tile exceeds the accumulator is shrunk to fit (noted), still exact, within capacity."""
    layer = parse_layer({"op": "matmul", "M": 256, "K": 32, "N": 256})
    art, _ = _check(layer, _mm_mapping([], [["K", 16], ["C", 2], ["P", 2]], [["P", 128]], db=False), Epilogue())
    assert any("shrunk" in n for n in art.notes)
    assert art.acc_rows_used <= art.target.acc_rows


def test_generated_c_compiles_alone_against_the_header(tmp_path):
    layer = parse_layer({"op": "conv2d", "in_channels": 20, "out_channels": 24, "in_h": 9, "in_w": 10,
                         "kernel": 3, "padding": 1, "stride": [2, 1]})
    art = generate(layer, HW16, random_mapping(layer.dims(), random.Random(3)), Epilogue(scale=0.02, relu=True))
    includes = re.findall(r"#include\s+[<\"]([^>\"]+)[>\"]", art.c_source)
    assert set(includes) <= {"gemmini.h", "stdint.h", "math.h"}
    obj = compile_object(art.c_source, tmp_path)
    syms = subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout
    undefined = {line.split()[-1] for line in syms.splitlines() if " U " in line}
    assert {"gemmini_extended_mvin", "gemmini_extended_preload", "gemmini_extended_mvout"} <= undefined
    assert all(s.startswith("gemmini_") or s in ("nearbyintf",) for s in undefined), undefined
    # a program that is not C fails to compile (the check is real)
    with pytest.raises(Exception):
        compile_object(art.c_source.replace("gemmini_fence();", "gemmini_fence(1, 2);"), tmp_path / "bad")


def test_tvmscript_is_printed_and_reparses():
    import tvm

    layer = parse_layer({"op": "matmul", "M": 40, "K": 30, "N": 20})
    art = generate(layer, HW16, random_mapping(layer.dims(), random.Random(1)), Epilogue())
    assert "gemmini_extended_compute_preloaded" in art.tvmscript and 'scope="global.spad"' in art.tvmscript
    mod = tvm.script.from_source(art.tvmscript)
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]


def test_registry_and_errors():
    assert {"gemmini.conv2d", "gemmini.matmul", "gemmini.depthwise_conv2d"} <= set(registry.core_compute_tags())
    assert {"gemmini.compute", "gemmini.mvin_spad", "gemmini.mvin_bias", "gemmini.mvout"} <= set(
        registry.hw_intrinsic_names())
    with pytest.raises(CodegenError):
        registry.core_compute("nope.conv")
    layer = parse_layer({"op": "matmul", "M": 16, "K": 16, "N": 16})
    with pytest.raises(CodegenError, match="zero point"):
        generate(layer, HW16, random_mapping(layer.dims(), random.Random(0)), Epilogue(zero_point=3))
    assert (HEADER_DIR / "gemmini.h").exists()
