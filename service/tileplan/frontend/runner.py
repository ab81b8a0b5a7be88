"""Run a compiled model (the artifact tar) on this machine: build its host target (`make host`), call
`tileplan_emu_run` through ctypes, return the outputs and every step's emulated cycles.

    result = run_artifact(tar_bytes, {"input": x})     # outputs by name, cycles per step, step names
    result = emulate_files(files, {"input": x})        # the same from the artifact's files (compile_model)

Builds are cached by the artifact's content (per-user cache directory), so running an artifact twice, or
compiling the same model again, builds it once.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tileplan.errors import InputError, TileplanError

LIBRARY = "build/host/libtileplan_model.so"
_LOADED: dict[str, ctypes.CDLL] = {}


class ArtifactError(TileplanError):
    """The artifact could not be built or its run trapped (the message says which step and why).  `output`: the
    build's compiler output, in the message too (for a local `tileplan run`), but never sent to a client of the
    service: gcc's errors quote the lines of whatever file it read (`brief` is the message without it)."""

    def __init__(self, brief: str, output: str = "") -> None:
        super().__init__(f"{brief}:\n{output}" if output else brief)
        self.brief, self.output = brief, output


class NoToolchain(ArtifactError):
    """This machine has no C compiler or make: the host target cannot be built here."""


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    cycles: list[float]  # per step (0 for host steps)
    steps: list[dict[str, Any]]  # the manifest's steps
    manifest: dict[str, Any]
    dram_bytes: list[float] = field(default_factory=list)  # per step: DRAM bytes the accelerator moved (0: host)

    def accelerator_dram_bytes(self) -> float:
        return float(sum(self.dram_bytes))

    def accelerator_cycles(self) -> float:
        return float(sum(c for c, s in zip(self.cycles, self.steps) if s["kind"] == "accel"))

    def table(self) -> str:
        rows = [f"{'step':>4}  {'where':11} {'op':28} {'name':32} {'emulated cycles':>15}"]
        for i, (s, c) in enumerate(zip(self.steps, self.cycles)):
            where = "accelerator" if s["kind"] == "accel" else "host"
            rows.append(f"{i:>4}  {where:11} {s['op'][:28]:28} {s['name'][:32]:32} "
                        f"{(f'{c:.0f}' if s['kind'] == 'accel' else '-'):>15}")
        rows.append(f"{'':>4}  {'total':11} {'':28} {'':32} {self.accelerator_cycles():15.0f}")
        return "\n".join(rows)


MAX_ARTIFACT_BYTES = 4 << 30  # unpacked bytes of an artifact's files (the weights: at most 512 MiB of tensors)


def read_artifact(data: bytes) -> dict[str, bytes]:
    """The files of an artifact tar (paths relative to its top directory)."""
    try:
        tar = tarfile.open(fileobj=io.BytesIO(data), mode="r:*")
    except tarfile.TarError as exc:
        raise InputError(("artifact",), f"not a tar archive: {exc}") from None
    files: dict[str, bytes] = {}
    unpacked = 0
    with tar:
        for m in tar.getmembers():
            if not m.isfile():
                continue
            parts = Path(m.name).parts
            if len(parts) < 2 or ".." in parts or Path(m.name).is_absolute():
                raise InputError(("artifact",), f"unexpected member {m.name!r}")
            unpacked += m.size
            if unpacked > MAX_ARTIFACT_BYTES:  # (a compressed tar: a few KB can declare a 2^40-byte member)
                raise InputError(("artifact",), f"over {MAX_ARTIFACT_BYTES} bytes unpacked (member {m.name!r} of "
                                 f"{m.size} bytes); a Tileplan program is smaller", "too_large")
            f = tar.extractfile(m)
            assert f is not None
            files[str(Path(*parts[1:]))] = f.read()
    if "tileplan.json" not in files or "Makefile" not in files:
        raise InputError(("artifact",), "not a Tileplan model artifact (no tileplan.json / Makefile)")
    return files


def _cache_root() -> Path:
    from tileplan.codegen.emulator.build import default_cache_dir

    return default_cache_dir() / "models"


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.M)
_OBJECT = re.compile(r"\s-c\s+(\S+\.c)\s+-o\s+(build/host/\S+\.o)\s*$")


def _object_key(command: str, source: str, files: dict[str, bytes], cc: str) -> str | None:
    """The object cache's key of one `make host` compile: the command as make runs it, the compiler's identity,
    the source and every header it includes by name ("...", searched as the command's -I. -Iemulator do),
    transitively.  None when an include is not among `files` (no key: the object is not cached)."""
    st = os.stat(cc)
    h = hashlib.sha256(f"{command}\0{cc}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    todo, seen = [source], set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        data = files.get(name)
        if data is None:
            return None
        h.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
        for inc in _INCLUDE.findall(data):
            rel = inc.decode()
            here = str(Path(name).parent / rel) if Path(name).parent != Path(".") else rel
            found = next((c for c in (here, rel, f"emulator/{rel}") if c in files), None)
            if found is None:
                return None
            todo.append(found)
    return h.hexdigest()[:32]


def _host_compiles(root: Path, make: str, cc: str, targets: list[str]) -> list[tuple[str, str, str]]:
    """(command, source, object) of every compile `make host` would run for `targets` in `root` (make -n -B:
    the Makefile's own commands, whatever its flags)."""
    proc = subprocess.run([make, "-n", "-B", *targets, f"CC={cc}"], cwd=root, capture_output=True, text=True)
    if proc.returncode != 0:
        return []
    out = []
    for line in proc.stdout.splitlines():
        m = _OBJECT.search(line)
        if m and not line.startswith(("mkdir", "@")):
            out.append((line.strip(), m.group(1), m.group(2)))
    return out


def _objects_dir() -> Path:
    return _cache_root() / "objects"


@dataclass
class Prebuild:
    """Objects of the host build compiled in the background while the compile goes on (`prebuild`; as many at
    once as the machine has cores); `build` waits for them (`wait`) and uses every one whose key matches (the
    same command on the same inputs)."""

    jobs: list[Future[None]] = field(default_factory=list)
    scratch: list[Path] = field(default_factory=list)
    pool: ThreadPoolExecutor | None = None
    # object keys submitted (one compile per key: the compile's host thread and its main thread may both ask for
    # a host file); the lock makes `prebuild` safe from several threads
    keys: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self, key: str) -> bool:
        """True the first time `key` is asked for (the caller then submits its compile), False after."""
        with self.lock:
            if key in self.keys:
                return False
            self.keys.add(key)
            return True

    def submit(self, command: str, cwd: Path, obj: Path, dest: Path) -> None:
        with self.lock:
            if self.pool is None:
                self.pool = ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1)))
            self.jobs.append(self.pool.submit(_compile_into, command, cwd, obj, dest))

    def wait(self) -> None:
        with self.lock:
            jobs, self.jobs = self.jobs, []
        for job in jobs:
            job.result()
        with self.lock:
            pool, self.pool = self.pool, None
            scratch, self.scratch = self.scratch, []
        if pool is not None:
            pool.shutdown()
        for d in scratch:
            shutil.rmtree(d, ignore_errors=True)


def _compile_into(command: str, cwd: Path, obj: Path, dest: Path) -> None:
    """Run one compile; its object goes to `dest` (the object cache) when it succeeds (a failure is make's to
    report, when it compiles the file itself)."""
    proc = subprocess.run(command, shell=True, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if proc.returncode == 0 and obj.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}")
        shutil.copyfile(obj, tmp)
        os.replace(tmp, dest)


def prebuild(files: dict[str, bytes], sources: list[str], into: Prebuild) -> None:
    """Start compiling `sources` (paths in `files`, which holds the artifact's Makefile and what they include)
    as `make host` will, in the background, into the object cache; nothing when there is no toolchain."""
    tree = _prebuild_tree(files, sources, into)
    if tree is None:
        return
    tmp, cc, commands = tree
    for source, (command, obj) in commands.items():
        _submit(into, tmp, cc, command, source, obj, files)


def prebuild_later(files: dict[str, bytes], sources: list[str], into: Prebuild) -> Callable[[str, bytes], None]:
    """`prebuild` for sources whose text is not known yet: the temporary tree (empty stand-ins for `sources`)
    and make's commands for all of them now, in one `make -n`; the function returned takes one source's path
    and text and starts its compile (a path not among `sources` is ignored). Nothing when there is no
    toolchain."""
    tree = _prebuild_tree({**{s: b"" for s in sources}, **files}, sources, into)
    if tree is None:
        return lambda source, text: None
    tmp, cc, commands = tree

    def start(source: str, text: bytes) -> None:
        if source not in commands:
            return
        (tmp / source).write_bytes(text)
        command, obj = commands[source]
        _submit(into, tmp, cc, command, source, obj, {**files, source: text})

    return start


def _prebuild_tree(files: dict[str, bytes], sources: list[str],
                   into: Prebuild) -> tuple[Path, str, dict[str, tuple[str, str]]] | None:
    """A temporary tree of `files` (scratch of `into`) and, per source, the (command, object) `make host` runs
    for it; None without a toolchain."""
    from tileplan.codegen.emulator.build import NoCompiler, compiler

    make = shutil.which("make")
    try:
        cc = compiler()
    except NoCompiler:
        return None
    if make is None or "Makefile" not in files:
        return None
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".pre-"))
    with into.lock:
        into.scratch.append(tmp)
    for name, data in files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(data)
    for name in ("tileplan_model.h", "tp_ops.h", "gemmini.h", "gemmini_params.h"):  # make's prerequisites
        if not (tmp / name).exists():  # (not in `files`: a source that includes it gets no key)
            (tmp / name).write_bytes(b"")
    targets = [f"build/host/{Path(s).with_suffix('.o')}" for s in sources]
    return tmp, cc, {source: (command, obj) for command, source, obj in _host_compiles(tmp, make, cc, targets)}


def _submit(into: Prebuild, tmp: Path, cc: str, command: str, source: str, obj: str, files: dict[str, bytes]) -> None:
    key = _object_key(command, source, files, cc)
    dest = _objects_dir() / f"{key}.o"
    if key is None or dest.exists() or not into.claim(key):
        return
    (tmp / obj).parent.mkdir(parents=True, exist_ok=True)
    into.submit(command, tmp, tmp / obj, dest)


def _seed_objects(root: Path, files: dict[str, bytes], make: str, cc: str) -> list[tuple[Path, Path]]:
    """Copy every object of `make host` found in the object cache into `root`'s build tree (after the sources
    were written there, so make sees it newer than its prerequisites and does not compile it again).  Returns
    (object in the tree, its cache entry) of each keyed object the cache did not have, for `_keep_objects`."""
    missing = []
    for command, source, obj in _host_compiles(root, make, cc, ["host"]):
        key = _object_key(command, source, files, cc)
        if key is None:
            continue
        cached = _objects_dir() / f"{key}.o"
        if cached.exists():
            (root / obj).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cached, root / obj)
        else:
            missing.append((root / obj, cached))
    return missing


def _keep_objects(made: list[tuple[Path, Path]]) -> None:
    """Put the objects a build compiled into the object cache, so that the next build sharing a file (every
    artifact for one accelerator shares the emulator, the costliest compile; models share kernels) copies it."""
    for obj, dest in made:
        if obj.exists() and not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{threading.get_ident()}")
            shutil.copyfile(obj, tmp)
            os.replace(tmp, dest)


def build_key(files: dict[str, bytes]) -> str:
    """The build directory's name: every file `make host` and the run read.  Not the README, nor the
    manifest's summary: the compile writes the emulated run's cycles into both after its build, and the
    artifact it returns must find that build (`tileplan run` after `tileplan compile` compiles nothing)."""
    digest = hashlib.sha256()
    for name in sorted(files):
        if name == "README.md":
            continue
        data = files[name]
        if name == "tileplan.json":
            manifest = json.loads(data)
            if isinstance(manifest, dict):
                manifest.pop("summary", None)
                data = json.dumps(manifest, sort_keys=True).encode()
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:24]


def build(files: dict[str, bytes], pre: Prebuild | None = None) -> Path:
    """Write the files to a content-addressed directory and `make host` there; returns the library's path.
    `pre`: objects compiled in the background for this build (waited for; used where their keys match)."""
    from tileplan.codegen.emulator.build import NoCompiler, compiler

    root = _cache_root() / build_key(files)
    lib = root / LIBRARY
    if lib.exists():
        return lib
    try:
        cc = compiler()
    except NoCompiler as exc:
        raise NoToolchain(str(exc)) from None
    make = shutil.which("make")
    if make is None:
        raise NoToolchain("no `make` on PATH: cannot build the artifact's host target")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=".build-"))
    try:
        for name, data in files.items():
            p = tmp / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        if pre is not None:
            pre.wait()
        made = _seed_objects(tmp, files, make, cc)
        proc = subprocess.run([make, "-s", f"-j{min(4, os.cpu_count() or 1)}", "host", f"CC={cc}"], cwd=tmp,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise ArtifactError(f"building the artifact's host target failed (make exit {proc.returncode})",
                                proc.stderr[-4000:])
        _keep_objects(made)
        try:
            os.replace(tmp, root)
        except OSError:  # built concurrently by someone else: theirs is the same
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return lib


def _load(lib: Path) -> ctypes.CDLL:
    key = str(lib)
    if key not in _LOADED:
        h = ctypes.CDLL(key)
        h.tileplan_emu_run.restype = ctypes.c_int
        h.tileplan_emu_run.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_int]
        _LOADED[key] = h
    return _LOADED[key]


def _feeds(manifest: dict[str, Any], inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    specs = manifest["inputs"]
    names = [s["name"] for s in specs]
    if len(inputs) == 1 and len(specs) == 1 and names[0] not in inputs:
        inputs = {names[0]: next(iter(inputs.values()))}
    unknown = set(inputs) - set(names)
    if unknown:
        raise InputError(("input", sorted(unknown)[0]), f"the model has no input of that name; its inputs are {names}")
    out = []
    for s in specs:
        if s["name"] not in inputs:
            raise InputError(("input", s["name"]), f"missing: give {s['dtype']} {s['shape']}")
        a = np.asarray(inputs[s["name"]])
        if list(a.shape) != list(s["shape"]):
            raise InputError(("input", s["name"]), f"shape {list(a.shape)}, the model takes {s['shape']}")
        if a.dtype != np.dtype(s["dtype"]):
            if not np.can_cast(a.dtype, np.dtype(s["dtype"]), casting="same_kind"):
                raise InputError(("input", s["name"]), f"dtype {a.dtype}, the model takes {s['dtype']}")
            a = a.astype(s["dtype"])
        out.append(np.ascontiguousarray(a))
    return out


def emulate_files(files: dict[str, bytes], inputs: dict[str, np.ndarray], cache: bool = False,
                  pre: Prebuild | None = None) -> RunResult:
    """Build (cached) and run.  `cache`: keep the run's outputs and cycles beside the build, keyed by the
    inputs, and answer a repeated run from there (the program and the emulator are deterministic).  `pre`:
    objects compiled in the background for the build (`prebuild`)."""
    manifest = json.loads(files["tileplan.json"])
    feeds = _feeds(manifest, inputs)
    try:
        path = build(files, pre)
    finally:
        if pre is not None:
            pre.wait()  # (a build found in the cache waited for nothing)
    memo = None
    if cache:
        h = hashlib.sha256()
        for a in feeds:
            h.update(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
        memo = path.parent / f"run-{h.hexdigest()[:24]}.npz"
        if memo.exists():
            with np.load(memo) as z:
                outs_c = {o["name"]: z[f"out{i}"] for i, o in enumerate(manifest["outputs"])}
                moved = [float(b) for b in z["dram"]] if "dram" in z else []
                return RunResult(outs_c, [float(c) for c in z["cycles"]], manifest["steps"], manifest, moved)
    lib = _load(path)
    outs = [np.zeros(o["shape"], dtype=o["dtype"]) for o in manifest["outputs"]]
    steps = manifest["steps"]
    cycles = (ctypes.c_double * max(1, len(steps)))()
    ins = (ctypes.c_void_p * max(1, len(feeds)))(*[a.ctypes.data for a in feeds])
    outp = (ctypes.c_void_p * max(1, len(outs)))(*[a.ctypes.data for a in outs])
    trap = ctypes.create_string_buffer(512)
    if lib.tileplan_emu_run(ins, outp, cycles, trap, len(trap)):
        raise ArtifactError(f"the emulator trapped: {trap.value.decode(errors='replace')}")
    dram = (ctypes.c_double * max(1, len(steps)))()
    lib.tileplan_emu_dram_bytes(dram)
    if memo is not None:
        tmp = memo.with_name(f".{memo.stem}.{os.getpid()}.npz")
        arrays: dict[str, Any] = {f"out{i}": a for i, a in enumerate(outs)}
        arrays["cycles"] = np.array(list(cycles)[:len(steps)])
        arrays["dram"] = np.array(list(dram)[:len(steps)])
        savez: Any = np.savez
        savez(tmp, **arrays)
        os.replace(tmp, memo)
    return RunResult({o["name"]: a for o, a in zip(manifest["outputs"], outs)}, list(cycles)[:len(steps)], steps,
                     manifest, list(dram)[:len(steps)])


def run_artifact(data: bytes, inputs: dict[str, np.ndarray]) -> RunResult:
    return emulate_files(read_artifact(data), inputs)
