"""Compile the emulator (and programs that call the Gemmini API) with the system C compiler, cached by content.

Programs include the stand-in gemmini.h, which reads the configuration from gemmini_params.h: `include_dir(cfg)`
is a directory holding both, with the params header of the emulator's configuration (params.GemminiConfig).
`cross_compile_object` compiles a program for RISC-V (Debian's gcc-riscv64-linux-gnu): there the same header
emits Gemmini's custom-3 instructions.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from .params import GemminiConfig

HERE = Path(__file__).resolve().parent
EMU_SOURCE = HERE / "gemmini_emu.c"
HEADER = HERE / "gemmini.h"
PARAMS_HEADER = HERE / "gemmini_params.h"  # the default configuration (GemminiConfig())
EMU_HEADER = HERE / "gemmini_emu.h"
# What CI compiles generated kernels for RISC-V with (Debian: gcc-riscv64-linux-gnu); RISCV_CC overrides it.
RISCV_CC = "riscv64-linux-gnu-gcc"
RISCV_CFLAGS = ("-c", "-O2", "-Wall", "-Werror")
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
    proc = subprocess.run(args, check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(args)}\n{proc.stderr}")


def riscv_compiler() -> str:
    cc = shutil.which(os.environ.get("RISCV_CC", RISCV_CC))
    if cc is None:
        raise NoCompiler(f"no RISC-V C compiler ({os.environ.get('RISCV_CC', RISCV_CC)}) on PATH: install "
                         "Debian's gcc-riscv64-linux-gnu (apt-get install gcc-riscv64-linux-gnu)")
    return cc


def riscv_objdump() -> str:
    """objdump of the same cross toolchain (Debian's binutils-riscv64-linux-gnu)."""
    tool = re.sub(r"gcc(-[0-9.]+)?$", "objdump", riscv_compiler())
    if shutil.which(tool) is None:
        raise NoCompiler(f"no {tool}: install Debian's binutils-riscv64-linux-gnu")
    return tool


def rocc_words(obj: Path) -> list[int]:
    """The RoCC custom-3 instruction words (opcode 0x7b) of a RISC-V object: Gemmini's instructions."""
    dump = subprocess.run([riscv_objdump(), "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    words = []
    for line in dump.splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and re.fullmatch(r"[0-9a-f]{8}", parts[1].strip()):
            word = int(parts[1].strip(), 16)
            if word & 0x7F == 0x7B:
                words.append(word)
    return words


def include_dir(config: GemminiConfig | None = None, cache_dir: Path | None = None) -> Path:
    """A directory with the stand-in gemmini.h and the gemmini_params.h of `config` (the shipped directory for
    the default configuration)."""
    config = config or GemminiConfig()
    params = config.params_header()
    if params == PARAMS_HEADER.read_text():
        return HERE
    header = HEADER.read_text()
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    target = cache / f"include-{_digest(header.encode(), params.encode())}"
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".include-"))
        (tmp / "gemmini.h").write_text(header)
        (tmp / "gemmini_params.h").write_text(params)
        try:
            os.rename(tmp, target)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _atomic_build(target: Path, build: Callable[[Path], None]) -> Path:
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
    key = _digest(EMU_SOURCE.read_bytes(), HEADER.read_bytes(), PARAMS_HEADER.read_bytes(), EMU_HEADER.read_bytes(),
                  " ".join(CFLAGS).encode(), EMU_SONAME.encode())
    target = cache / f"libgemmini_emu-{key}.so"

    def build(out: Path) -> None:
        _run_cc([compiler(), *CFLAGS, "-shared", f"-Wl,-soname,{EMU_SONAME}", "-I", str(HERE), "-o", str(out),
                 str(EMU_SOURCE), "-lm", "-pthread"])

    return _atomic_build(target, build)


def program_library(sources: str | Sequence[str], emu_lib: Path, cache_dir: Path | None = None,
                    extra_flags: tuple[str, ...] = (), config: GemminiConfig | None = None) -> Path:
    """Compile a C program that calls the Gemmini API (one source, or several translation units linked into one
    program) into a shared object linked against the emulator, for the configuration `config`."""
    srcs = [sources] if isinstance(sources, str) else list(sources)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    inc = include_dir(config, cache_dir)
    key = _digest(*(s.encode() for s in srcs), HEADER.read_bytes(), (inc / "gemmini_params.h").read_bytes(),
                  str(emu_lib).encode(), " ".join(extra_flags).encode())
    target = cache / f"prog-{key}.so"

    def build(out: Path) -> None:
        with tempfile.TemporaryDirectory(dir=cache) as d:
            files = []
            for i, src in enumerate(srcs):
                files.append(Path(d) / f"unit{i}.c")
                files[-1].write_text(src)
            # gemmini.h and gemmini_params.h of the configuration first; gemmini_emu.h for programs driving the
            # emulator themselves (e.g. reading emu_current_cycles() between kernels)
            _run_cc([compiler(), *CFLAGS, *extra_flags, "-shared", "-I", str(inc), "-I", str(HERE), "-o", str(out),
                     *map(str, files), str(emu_lib), f"-Wl,-rpath,{emu_lib.parent}", "-lm"])

    return _atomic_build(target, build)


def compile_object(source: str, out_dir: Path, extra_flags: tuple[str, ...] = (),
                   config: GemminiConfig | None = None) -> Path:
    """`gcc -c -Werror` a source against the stand-in gemmini.h (host) for `config`; returns the object."""
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "kernel.c"
    src.write_text(source)
    obj = out_dir / "kernel.o"
    _run_cc([compiler(), *CFLAGS, "-Werror", *extra_flags, "-c", "-I", str(include_dir(config)), "-o", str(obj),
             str(src)])
    return obj


def cross_compile_object(source: str, out_dir: Path, config: GemminiConfig | None = None,
                         extra_flags: tuple[str, ...] = ()) -> Path:
    """`riscv64-linux-gnu-gcc -c -O2 -Wall -Werror` a source against the stand-in gemmini.h for `config`: the
    object holds Gemmini's RoCC instructions.  Raises NoCompiler without the cross compiler."""
    cc = riscv_compiler()
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / "kernel.c"
    src.write_text(source)
    obj = out_dir / "kernel.rv64.o"
    _run_cc([cc, *RISCV_CFLAGS, *extra_flags, "-I", str(include_dir(config)), "-o", str(obj), str(src)])
    return obj
