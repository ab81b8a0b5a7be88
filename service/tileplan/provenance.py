"""Which code made a result: a digest of Tileplan's own sources and of the libraries' versions a result depends
on. Every cache whose entries outlive a process keys them by it (stored plans through `plan.solver_version`, the
compile result cache), so an entry made by other code — an upgrade, a patched checkout — is never answered.
Light on purpose: a warm compile computes it before anything heavy is imported."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import metadata
from pathlib import Path

_SOURCES = (".py", ".c", ".h", ".j2")
# what a plan (HiGHS through Pyomo), a kernel or host code (TVM) and an imported or quantized model (onnx,
# onnxruntime, numpy) depend on
_LIBRARIES = ("apache-tvm", "tvm", "onnx", "onnxruntime", "numpy", "highspy", "pyomo")


def source_files() -> list[Path]:
    """Every source, template and C file of the package, in a stable order."""
    root = Path(__file__).resolve().parent
    return sorted(p for p in root.rglob("*") if p.suffix in _SOURCES and p.is_file())


@lru_cache(maxsize=1)
def code_digest() -> str:
    """sha256 over the package's files (path and content) and the libraries' versions."""
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in source_files():
        h.update(str(p.relative_to(root)).encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    for lib in _LIBRARIES:
        try:
            h.update(f"{lib}={metadata.version(lib)}\0".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{lib}=-\0".encode())
    return h.hexdigest()
