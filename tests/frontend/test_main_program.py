"""The artifact is a whole program: main.c reads the input file, runs tileplan_run, writes the output file and
prints every step's cycles.  `make riscv` links it for RISC-V (Debian's riscv64-linux-gnu-gcc, the stand-in
gemmini.h); `make host-main` builds the same main over the emulator, which is how its file handling is run here;
GEMMINI_INCLUDE points the kernels at another header, whose missing features stop the build."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from frontend_helpers import OPTIONS, compile_bytes

from tileplan.frontend import zoo
from tileplan.frontend.program import c_string
from tileplan.frontend.runner import read_artifact, run_artifact


@pytest.fixture(scope="module")
def resnet_block():
    data = zoo.build("resnet_block", "qdq")
    return data, compile_bytes(data)


def _extract(artifact: bytes, where: Path) -> Path:
    with tarfile.open(fileobj=io.BytesIO(artifact)) as tar:
        tar.extractall(where, filter="data")
    return next(where.iterdir())


def _need_riscv() -> None:
    if shutil.which("riscv64-linux-gnu-gcc") is None:
        pytest.skip("riscv64-linux-gnu-gcc is not installed (Debian: gcc-riscv64-linux-gnu; .ci/run installs it)")


def _in_bin(data: bytes, seed: int) -> tuple[dict[str, np.ndarray], bytes]:
    feeds = zoo.sample_inputs(data, seed=seed)
    return feeds, b"".join(np.ascontiguousarray(x).tobytes() for x in feeds.values())


def test_host_main_reads_runs_writes_and_prints_cycles(resnet_block, tmp_path):
    """build/host/model IN OUT: the outputs' bytes are exactly tileplan run's, and each step's printed cycles are
    the emulated ones."""
    data, res = resnet_block
    root = _extract(res.artifact, tmp_path)
    proc = subprocess.run(["make", "-s", "-j2", "host-main"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr[-3000:]
    feeds, raw = _in_bin(data, seed=5)
    (tmp_path / "in.bin").write_bytes(raw)
    proc = subprocess.run([str(root / "build" / "host" / "model"), str(tmp_path / "in.bin"),
                           str(tmp_path / "out.bin")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    want = run_artifact(res.artifact, feeds)
    assert (tmp_path / "out.bin").read_bytes() == b"".join(np.ascontiguousarray(x).tobytes()
                                                           for x in want.outputs.values())
    rows = re.findall(r"^\s*(\d+) (accel|host)\s+(\d+)\s+(.*)$", proc.stdout, re.MULTILINE)
    assert [int(r[0]) for r in rows] == list(range(len(want.steps)))
    assert [r[1] for r in rows] == [s["kind"] for s in want.steps]
    assert [r[3] for r in rows] == [s["name"] for s in want.steps]
    assert [int(r[2]) for r in rows] == [round(c) for c in want.cycles]
    assert any(int(r[2]) > 0 for r in rows if r[1] == "accel")
    assert f"total {round(sum(want.cycles))} emulated cycles" in proc.stdout


def test_host_main_refuses_a_wrong_input_file(resnet_block, tmp_path):
    data, res = resnet_block
    root = _extract(res.artifact, tmp_path)
    subprocess.run(["make", "-s", "-j2", "host-main"], cwd=root, check=True, capture_output=True)
    model = str(root / "build" / "host" / "model")
    _, raw = _in_bin(data, seed=1)
    for name, body in (("short.bin", raw[:-1]), ("long.bin", raw + b"\0")):
        (tmp_path / name).write_bytes(body)
        proc = subprocess.run([model, str(tmp_path / name), str(tmp_path / "o.bin")], capture_output=True, text=True)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert f"exactly {len(raw)} bytes" in proc.stderr and not (tmp_path / "o.bin").exists()
    proc = subprocess.run([model, str(tmp_path / "missing.bin"), str(tmp_path / "o.bin")], capture_output=True,
                          text=True)
    assert proc.returncode == 1 and "cannot open" in proc.stderr
    proc = subprocess.run([model], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("usage:")


def test_make_riscv_links_a_static_program(resnet_block, tmp_path):
    """`make riscv`: build/riscv/model.riscv, a static RISC-V executable with main, without the emulator; the
    glue reads rdcycle around every step unless TILEPLAN_NO_RDCYCLE=1."""
    _need_riscv()
    _, res = resnet_block
    root = _extract(res.artifact, tmp_path)
    shutil.rmtree(root / "emulator")  # the RISC-V build must not need the emulator
    proc = subprocess.run(["make", "-s", "-j2", "riscv"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr[-3000:]
    exe = root / "build" / "riscv" / "model.riscv"
    head = subprocess.run(["riscv64-linux-gnu-readelf", "-h", "-s", str(exe)], capture_output=True,
                          text=True).stdout
    assert "RISC-V" in head and "EXEC" in head and re.search(r"\bmain$", head, re.MULTILINE)
    assert "Requesting program interpreter" not in subprocess.run(
        ["riscv64-linux-gnu-readelf", "-l", str(exe)], capture_output=True, text=True).stdout  # static
    dump = subprocess.run(["riscv64-linux-gnu-objdump", "-d", str(root / "build" / "riscv" / "model.o")],
                          capture_output=True, text=True).stdout
    steps = res.summary["total"]["steps"]
    assert len(re.findall(r"\t(rdcycle|csrr\s+\w+,\s*cycle)\b", dump)) >= steps + 1
    subprocess.run(["make", "-s", "clean"], cwd=root, check=True)
    proc = subprocess.run(["make", "-s", "-j2", "riscv", "TILEPLAN_NO_RDCYCLE=1"], cwd=root, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr[-3000:]
    dump = subprocess.run(["riscv64-linux-gnu-objdump", "-d", str(root / "build" / "riscv" / "model.o")],
                          capture_output=True, text=True).stdout
    assert not re.search(r"\t(rdcycle|csrr\s+\w+,\s*cycle)\b", dump)


def test_riscv_program_runs_under_linux_user_emulation(tmp_path):
    """model.riscv on RISC-V Linux (QEMU's user-mode emulator, Debian's qemu-user; no Gemmini there, so the
    program of the all-host build, offload off): it reads in.bin, writes out.bin byte for byte equal to the host
    build's main over the same steps, and prints a rdcycle count for every step."""
    _need_riscv()
    if shutil.which("qemu-riscv64") is None:
        pytest.skip("qemu-riscv64 is not installed (Debian: qemu-user; .ci/run installs it)")
    data = zoo.build("resnet_block", "qdq")
    res = compile_bytes(data, options=OPTIONS.model_copy(update={"offload": False}))
    assert res.summary["total"]["accelerator_ops"] == 0
    root = _extract(res.artifact, tmp_path)
    proc = subprocess.run(["make", "-s", "-j2", "riscv", "host-main"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr[-3000:]
    _, raw = _in_bin(data, seed=4)
    (root / "in.bin").write_bytes(raw)
    host = subprocess.run(["build/host/model", "in.bin", "host.bin"], cwd=root, capture_output=True, text=True)
    rv = subprocess.run(["qemu-riscv64", "build/riscv/model.riscv", "in.bin", "rv.bin"], cwd=root,
                        capture_output=True, text=True)
    assert host.returncode == 0 and rv.returncode == 0, (host.stderr, rv.stderr)
    assert (root / "rv.bin").read_bytes() == (root / "host.bin").read_bytes()
    rows = re.findall(r"^\s*(\d+) (accel|host)\s+(\d+)\s+(.*)$", rv.stdout, re.MULTILINE)
    assert len(rows) == res.summary["total"]["steps"] and all(int(r[2]) > 0 for r in rows), rv.stdout
    short = subprocess.run(["qemu-riscv64", "build/riscv/model.riscv", "host.bin", "x.bin"], cwd=root,
                           capture_output=True, text=True)
    assert short.returncode == 1 and "must hold exactly" in short.stderr


def test_gemmini_include_without_full_width_reads_stops_the_build(resnet_block, tmp_path):
    """GEMMINI_INCLUDE=DIR compiles the kernels against DIR's gemmini.h / gemmini_params.h.  A configuration
    without ACC_READ_FULL_WIDTH (Gemmini's default) cannot run kernels that store int32 accumulators: the build
    stops with the reason, naming the macro, instead of producing a program that computes garbage."""
    _need_riscv()
    _, res = resnet_block
    files = read_artifact(res.artifact)
    acc_kernels = [n for n, src in files.items() if n.startswith("kernels/") and b"#define TP_ACC_OUT 1" in src]
    assert acc_kernels, "the block's convs requantize on the CPU: their kernels store int32 accumulators"
    root = _extract(res.artifact, tmp_path / "a")
    stand_in = (root / "gemmini.h").read_text()
    (root / "gemmini.h").write_text("#error the build must take GEMMINI_INCLUDE's gemmini.h\n")
    for name, drop in (("full", None), ("nofull", "#define ACC_READ_FULL_WIDTH\n")):
        inc = tmp_path / name / "include"
        inc.mkdir(parents=True)
        (inc / "gemmini.h").write_text(stand_in)
        params = (root / "gemmini_params.h").read_text()
        if drop:
            assert drop in params
            params = params.replace(drop, "")
        (inc / "gemmini_params.h").write_text(params)
        proc = subprocess.run(["make", "-s", "-k", "riscv", f"GEMMINI_INCLUDE={inc}"], cwd=root,
                              capture_output=True, text=True)
        if drop is None:
            assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr[-3000:]
        else:
            assert proc.returncode != 0
            errors = re.findall(r"^(\S+?):\d+:\d+: error: #error (.*)$", proc.stderr, re.MULTILINE)
            assert {Path(f).name for f, _ in errors} == {Path(k).name for k in acc_kernels}, proc.stderr[-3000:]
            assert all("must define ACC_READ_FULL_WIDTH" in m for _, m in errors)
        subprocess.run(["make", "-s", "clean"], cwd=root, check=True)


def test_step_names_are_c_string_literals():
    assert c_string('a"b\\c') == '"a\\042b\\134c"'
    assert c_string("conv/1??=x") == '"conv/1\\077\\077=x"'
    assert c_string("é") == '"\\303\\251"'


@pytest.mark.parametrize("group", ["pointwise", "inverted_residual"])
def test_staged_accumulator_reads_give_the_fused_programs_bytes(tmp_path, group):
    """`make host-main TILEPLAN_STAGE_ACC_READS=1` (the build Spike + libgemmini can run: tileplan.fusion.staging)
    of a program with a fused group (a symmetric pointwise chain: tileplan.fusion.kernel; an inverted residual,
    expand -> depthwise -> project: tileplan.fusion.ir_kernel, two accumulator reads) writes the same output
    file as the build without it, and prints more cycles for the fused step only (its intermediates now go
    through DRAM); the other steps are untouched."""
    g = zoo._Graph(5)
    if group == "pointwise":
        y = g.conv(g.conv("input", 16, 48, k=1, relu="relu", name="pw1"), 48, 24, k=1, relu="relu", name="pw2")
    else:
        y = g.conv("input", 16, 48, k=1, relu="relu6", name="expand")
        y = g.conv(g.conv(y, 48, 48, stride=1, group=48, relu="relu6", name="dw"), 48, 24, k=1, relu="", name="pw2")
    y = g.dense(g.op("Flatten", [g.op("GlobalAveragePool", [y], "gap")], "flatten"), 24, 4, name="fc")
    data = zoo.quantize(g.model("pw", {"input": [2, 16, 12, 12]}, y, [2, 4]), symmetric=True)
    res = compile_bytes(data)
    meta = json.loads(read_artifact(res.artifact)["tileplan.json"])
    fused = [s["name"] for s in meta["steps"] if s["function"].startswith("tpf_")]
    assert fused == (["pw1+pw2"] if group == "pointwise" else ["expand+dw+pw2"]), fused
    _, raw = _in_bin(data, seed=2)
    (tmp_path / "in.bin").write_bytes(raw)
    outs, cycles = [], []
    for i, extra in enumerate(([], ["TILEPLAN_STAGE_ACC_READS=1"])):
        root = _extract(res.artifact, tmp_path / str(i))
        subprocess.run(["make", "-s", "-j2", "host-main", *extra], cwd=root, check=True, capture_output=True)
        proc = subprocess.run([str(root / "build/host/model"), str(tmp_path / "in.bin"), str(tmp_path / f"o{i}.bin")],
                              capture_output=True, text=True, check=True)
        outs.append((tmp_path / f"o{i}.bin").read_bytes())
        cycles.append({r[1]: int(r[0]) for r in re.findall(r"^\s*\d+ (?:accel|host)\s+(\d+)\s+(.*)$", proc.stdout,
                                                             re.MULTILINE)})
    assert outs[0] == outs[1]
    assert set(cycles[0]) == set(cycles[1])
    for name, c in cycles[0].items():
        assert (cycles[1][name] > c) if name in fused else (cycles[1][name] == c), name
