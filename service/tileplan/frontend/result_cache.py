"""The compile result cache of `tileplan compile`: a repeated compile of the same model answered without TVM.

A compile is a function of the model's bytes, the hardware descriptor, the options, the input shapes, the
calibration data, the plan store it reads and writes, and Tileplan's own code (with the versions of the
libraries that lower and quantize).  The CLI keys the artifact and the summary by all of these and answers a
repeated compile from the entry before anything heavy is imported: a warm compile that changed nothing costs the
interpreter's start and two hashes (the plan, kernel, host-lowering and build caches each save one step of a
compile that did change something; this saves the whole of one that did not).

Entries live beside the other build caches (`default_cache_dir()/compiles/<key>/`), are written atomically, and a
damaged one is compiled again.  Only this module's light imports run on a hit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

_SOURCES = (".py", ".c", ".h", ".j2")
_LIBRARIES = ("apache-tvm", "tvm", "onnx", "onnxruntime", "numpy", "highspy", "pyomo")


def cache_dir() -> Path:
    """`tileplan.codegen.emulator.build.default_cache_dir()` (not imported: it pulls in the emulator)."""
    return Path(tempfile.gettempdir()) / f"tileplan-codegen-{os.getuid()}" / "compiles"


@lru_cache(maxsize=1)
def code_digest() -> str:
    """Tileplan's code (every source, template and C file of the package) and the versions of the libraries a
    compile's result depends on: an entry made by other code is never answered."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.suffix in _SOURCES and p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(hashlib.sha256(p.read_bytes()).digest())
    for lib in _LIBRARIES:
        try:
            h.update(f"{lib}={metadata.version(lib)}\0".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=-\0".encode())
    return h.hexdigest()


def key(model: bytes, hardware: dict[str, Any], options: dict[str, Any], input_shapes: dict[str, list[int]] | None,
        calibration: bytes | None, plans: str | None) -> str:
    """The entry's name: every input of the compile (see the module's docstring); `plans` names the plan store
    (a compile against another store is a new compile, so that store gets the plans)."""
    doc = {"model": hashlib.sha256(model).hexdigest(), "hardware": hardware, "options": options,
           "input_shapes": input_shapes or {},
           "calibration": hashlib.sha256(calibration).hexdigest() if calibration is not None else None,
           "plans": plans, "code": code_digest()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:32]


def get(k: str) -> tuple[bytes, dict[str, Any]] | None:
    """(artifact, summary) of entry `k`, or None (absent or damaged)."""
    d = cache_dir() / k
    try:
        return (d / "artifact.tar").read_bytes(), json.loads((d / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def put(k: str, artifact: bytes, summary: dict[str, Any]) -> None:
    root = cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".put-"))
    try:
        (tmp / "artifact.tar").write_bytes(artifact)
        (tmp / "summary.json").write_text(json.dumps(summary))
        if (root / k).exists():  # damaged (get found nothing usable there)
            shutil.rmtree(root / k, ignore_errors=True)
        try:
            os.replace(tmp, root / k)
        except OSError:  # written concurrently by another compile of the same inputs: theirs is as good
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
