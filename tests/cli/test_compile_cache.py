"""`tileplan compile` answers a repeated compile from its compile cache (tileplan.frontend.result_cache): the same
artifact and summary, without TVM; anything the compile reads that changed makes it compile again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tileplan.frontend import zoo

CACHED = "answered from the compile cache"


def _compile(model: Path, tmp: Path, *extra: str) -> tuple[dict, bytes, str]:
    out = tmp / "out"
    env = {**os.environ, "TMPDIR": str(tmp / "caches")}
    (tmp / "caches").mkdir(exist_ok=True)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tileplan.cli", "compile", str(model), "--hw",
                           "gemmini-16x16", "--out", str(out), "--plans-db", f"sqlite:///{tmp}/plans.db", "--jobs",
                           "2", "--json", *extra], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout), (out / f"{model.stem}.tar").read_bytes(), proc.stderr


def _imported_tvm(stderr: str) -> bool:
    """Whether -X importtime lists the package `tvm`, at whatever depth (it is indented under whichever module
    imported it first: `tvm.relax.frontend.onnx` imports it before `tvm` itself is listed)."""
    return any(line.startswith("import time:") and line.split("|")[-1].strip() == "tvm" for line in stderr.splitlines())


def test_a_repeated_compile_is_answered_from_the_cache_without_tvm(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(zoo.build("cnn_small", "qdq"))
    first, tar1, err1 = _compile(model, tmp_path)
    assert not any(CACHED in n for n in first["notes"])
    assert _imported_tvm(err1)
    again, tar2, err2 = _compile(model, tmp_path)
    assert any(CACHED in n for n in again["notes"])
    assert tar2 == tar1
    assert again["ops"] == first["ops"] and again["total"]["cycles_emulated"] == first["total"]["cycles_emulated"]
    assert not _imported_tvm(err2)
    # another option is another compile; --no-cache compiles (and stores nothing)
    other, _, _ = _compile(model, tmp_path, "--no-emulate")
    assert not any(CACHED in n for n in other["notes"]) and other["total"]["cycles_emulated"] is None
    fresh, _, _ = _compile(model, tmp_path, "--no-cache")
    assert not any(CACHED in n for n in fresh["notes"])


def test_another_model_or_plan_store_is_another_compile(tmp_path: Path) -> None:
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(zoo.build("cnn_small", "qdq"))
    b.write_bytes(zoo.build("cnn_small", "qdq", seed=1))
    _compile(a, tmp_path)
    s, _, _ = _compile(b, tmp_path)
    assert not any(CACHED in n for n in s["notes"])
    s, _, _ = _compile(a, tmp_path, "--plans-db", f"sqlite:///{tmp_path}/other.db")
    assert not any(CACHED in n for n in s["notes"])


def test_a_damaged_entry_is_compiled_again(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(zoo.build("cnn_small", "qdq"))
    first, tar1, _ = _compile(model, tmp_path)
    entries = list((tmp_path / "caches").glob("tileplan-codegen-*/compiles/*/summary.json"))
    assert len(entries) == 1
    entries[0].write_text("{not json")
    again, tar2, _ = _compile(model, tmp_path)
    assert not any(CACHED in n for n in again["notes"]) and tar2 == tar1
    third, _, _ = _compile(model, tmp_path)
    assert any(CACHED in n for n in third["notes"])
