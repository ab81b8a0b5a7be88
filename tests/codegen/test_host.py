"""The host library (TVM's llvm build of a module, linked against the emulator) and the module's tar archive."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from plans import random_mapping

from tileplan.archives import extract
from tileplan.codegen import host
from tileplan.codegen.emulator.build import NoCompiler, compiler, riscv_compiler
from tileplan.codegen.host import run_host
from tileplan.codegen.pipeline import Epilogue, generate, random_inputs, reference, run
from tileplan.hardware.catalog import get_hardware
from tileplan.workload import parse_layer

HW16 = get_hardware("gemmini-16x16")
LAYERS = {
    "mm_edges": {"op": "matmul", "M": 40, "K": 70, "N": 36},
    "conv_pad_stride": {"op": "conv2d", "in_channels": 20, "out_channels": 24, "in_h": 9, "in_w": 10, "kernel": 3,
                        "padding": 1, "stride": [2, 1]},
    "dw": {"op": "conv2d", "in_channels": 6, "out_channels": 6, "groups": 6, "in_h": 7, "in_w": 8, "kernel": 3,
           "padding": 1},
}


def _artifact(key: str, seed: int = 0):
    layer = parse_layer({**LAYERS[key], "name": key})
    mapping = random_mapping(layer.dims(), random.Random(seed))
    return generate(layer, HW16, mapping, Epilogue(scale=0.02, relu=True), name=key)


@pytest.mark.parametrize("key", sorted(LAYERS))
def test_host_library_runs_the_kernels_instruction_stream(key):
    """Through TVM's runtime, the host library gives the C kernel's outputs (bit-exact) and, since its tile
    intrinsics run the kernel's own per-call code, the same instructions and emulated cycles."""
    art = _artifact(key)
    inputs = random_inputs(art.geometry, 1)
    want = reference(art.geometry, art.epilogue, **inputs)
    kernel, lib = run(art, inputs), run_host(art, inputs)
    np.testing.assert_array_equal(lib.buffers["out"], want)
    np.testing.assert_array_equal(kernel.buffers["out"], want)
    assert (lib.cycles, lib.counts) == (kernel.cycles, kernel.counts)


_LOAD_ALONE = r"""
import ctypes, json, sys
import numpy as np, tvm                     # no Tileplan: what a user of the archive has
d, name = sys.argv[1], sys.argv[2]
lib = f"{d}/lib{name}_host.so"
arrays = np.load(f"{d}/inputs.npz")
args = [tvm.runtime.tensor(arrays[k]) for k in ("I", "W", "bias", "out", "bias_p")]
tvm.runtime.load_module(lib)["main"](*args)
glue = ctypes.CDLL(lib)
glue.tp_host_cycles.restype, glue.tp_host_trap.restype = ctypes.c_double, ctypes.c_char_p
np.save(f"{d}/out.npy", args[3].numpy())
print(json.dumps({"cycles": glue.tp_host_cycles(), "trap": (glue.tp_host_trap() or b"").decode()}))
"""


def test_tar_carries_a_host_library_that_loads_and_runs_alone(tmp_path):
    art = _artifact("conv_pad_stride", seed=3)
    with tarfile.open(fileobj=io.BytesIO(art.tar_bytes())) as tar:
        names = {m.name for m in tar.getmembers()}
        extract(tar, tmp_path)
    d = tmp_path / art.name
    assert names == {f"{art.name}/{f}" for f in (f"{art.name}.c", "gemmini.h", "gemmini_params.h",
                                                   f"{art.name}.tvmscript.py", "BUILD.md", "gemmini_emu.h",
                                                   f"lib{art.name}_host.so", "libgemmini_emu.so")}
    assert (d / f"{art.name}.c").read_text() == art.c_source
    note = (d / "BUILD.md").read_text()
    assert f"lib{art.name}_host.so" in note and "tvm.runtime.load_module" in note and "no host library" not in note
    # the note states the configuration the kernel assumes, which the archive's gemmini_params.h describes
    assert "| 16 | 4 x 4096 = 16384 rows | 1024 rows | 64 | int8 / int32 | float |" in note
    assert "refuses to build" in note and (d / "gemmini_params.h").read_text() == art.config.params_header()
    # the kernel builds from the archive alone, as the note says: for the host (emulator) and for RISC-V
    for cc, obj in ((compiler(), "k.o"), (riscv_compiler(), "k.rv64.o")):
        subprocess.run([cc, "-O2", "-Wall", "-Werror", "-c", f"{art.name}.c", "-o", obj], cwd=d, check=True,
                       capture_output=True)
    lib = d / f"lib{art.name}_host.so"
    dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    assert "Shared library: [libgemmini_emu.so]" in dyn and "$ORIGIN" in dyn  # finds the emulator beside it
    syms = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    assert set(host.GLUE_EXPORTS) | {"__tvm_ffi_main"} <= {line.split()[-1] for line in syms.splitlines()}

    # a fresh interpreter with only tvm and numpy (the glue creates its own emulator) runs it like the kernel
    inputs = random_inputs(art.geometry, 2)
    lay, g = art.layout, art.geometry
    np.savez(d / "inputs.npz", **inputs, out=np.zeros((g.N, g.P, g.Q, g.G * g.K), np.int8),
             bias_p=np.zeros((lay.padded["G"], lay.padded["K"]), np.int32))
    proc = subprocess.run([sys.executable, "-c", _LOAD_ALONE, str(d), art.name], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["trap"] == ""
    np.testing.assert_array_equal(np.load(d / "out.npy"), reference(g, art.epilogue, **inputs))
    assert got["cycles"] == run(art, inputs).cycles


def test_tar_without_a_compiler_says_so(monkeypatch):
    """Where nothing can be compiled (a slim image) the archive keeps the C, the TVMScript and a note saying why
    the host library is missing, rather than failing the whole module."""
    def none() -> str:
        raise NoCompiler("no C compiler (gcc or cc) found on PATH")

    monkeypatch.setattr(host, "compiler", none)
    art = _artifact("mm_edges", seed=5)
    with tarfile.open(fileobj=io.BytesIO(art.tar_bytes())) as tar:
        members = {m.name.split("/")[-1]: tar.extractfile(m).read() for m in tar.getmembers()}
    assert not any(n.endswith(".so") for n in members)
    assert f"{art.name}.c" in members and b"no host library" in members["BUILD.md"]
