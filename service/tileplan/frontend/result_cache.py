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
from pathlib import Path
from typing import Any

from tileplan import provenance


def cache_dir() -> Path:
    """`tileplan.codegen.emulator.build.default_cache_dir()` (not imported: it pulls in the emulator)."""
    return Path(tempfile.gettempdir()) / f"tileplan-codegen-{os.getuid()}" / "compiles"


def key(model: bytes, hardware: dict[str, Any], options: dict[str, Any], input_shapes: dict[str, list[int]] | None,
        calibration: bytes | None, plans: str | None) -> str:
    """The entry's name: every input of the compile (see the module's docstring); `plans` names the plan store
    (a compile against another store is a new compile, so that store gets the plans)."""
    from tileplan.frontend import ort_math

    doc = {"model": hashlib.sha256(model).hexdigest(), "hardware": hardware, "options": options,
           "input_shapes": input_shapes or {},
           "calibration": hashlib.sha256(calibration).hexdigest() if calibration is not None else None,
           "plans": plans, "code": provenance.code_digest(),
           "mlas_exp": ort_math.exp_variant()}  # (the host C states the compiling CPU's onnxruntime Exp kernel)
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
