"""Compile the emulator (and programs that call the Gemmini API) with the system C compiler, cached by content."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
EMU_SOURCE = HERE / "gemmini_emu.c"
HEADER = HERE / "gemmini.h"
EMU_HEADER = HERE / "gemmini_emu.h"
CFLAGS = ("-O2", "-std=c11", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter")
# The emulator's soname: a library linked against it (a TVM host module) finds the copy a process has already
# loaded instead of loading a second emulator with its own "current emulator" state.
EMU_SONAME = "libgemmini_emu.so"


class BuildError(RuntimeError):
    """The C compiler rejected a source file; the message holds its diagnostics."""


class NoCompiler(BuildError):
    """There is no C compiler on this machine (a slim deployment image): nothing can be compiled here."""


def default_cache_dir() -> Path:
    """Per-user cache for compiled shared objects (content-addressed, safe to delete)."""
    return Path(tempfile.gettempdir()) / f"tileplan-codegen-{os.getuid()}"


def compiler() -> str:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise NoCompiler("no C compiler (gcc or cc) found on PATH")
    return cc


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()[:20]


def _run_cc(args: list[str]) -> None:
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(args)}\n{proc.stderr}")


def _atomic_build(target: Path, build: "callable[[Path], None]") -> Path:
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
    os.close(fd)
    try:
        build(Path(tmp))
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def emulator_library(cache_dir: Path | None = None) -> Path:
    """Path of libgemmini_emu.so built from the shipped sources (built on first use)."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    key = _digest(EMU_SOURCE.read_bytes(), HEADER.read_bytes(), EMU_HEADER.read_bytes(), " ".join(CFLAGS).encode(),
                  EMU_SONAME.encode())
    target = cache / f"libgemmini_emu-{key}.so"

    def build(out: Path) -> None:
        _run_cc([compiler(), *CFLAGS, "-shared", f"-Wl,-soname,{EMU_SONAME}", "-I", str(HERE), "-o", str(out),
                 str(EMU_SOURCE), "-lm"])

    return _atomic_build(target, build)


def program_library(source: str, emu_lib: Path, cache_dir: Path | None = None,
                    extra_flags: tuple[str, ...] = ()) -> Path:
    """Compile a C program that calls the Gemmini API into a shared object linked against the emulator."""
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    key = _digest(source.encode(), HEADER.read_bytes(), str(emu_lib).encode(), " ".join(extra_flags).encode())
    target = cache / f"prog-{key}.so"

    def build(out: Path) -> None:
        with tempfile.TemporaryDirectory(dir=cache) as d:
            src = Path(d) / "program.c"
            src.write_text(source)
            _run_cc([compiler(), *CFLAGS, *extra_flags, "-shared", "-I", str(HERE), "-o", str(out), str(src),
                     str(emu_lib), f"-Wl,-rpath,{emu_lib.parent}", "-lm"])

    return _atomic_build(target, build)


def compile_object(source: str, out_dir: Path, extra_flags: tuple[str, ...] = ()) -> Path:
    """`gcc -c` a source against the declaring gemmini.h only (used to check generated C)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "kernel.c"
    src.write_text(source)
    obj = out_dir / "kernel.o"
    _run_cc([compiler(), *CFLAGS, "-Werror", *extra_flags, "-c", "-I", str(HERE), "-o", str(obj), str(src)])
    return obj
