"""The artifact: its files, the documented entry point, the RISC-V build with only gemmini.h, the arena's
liveness plan, the runner's door, and the planner contract (identical layers planned once)."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile

import numpy as np
import pytest
from frontend_helpers import HW, OPTIONS, compile_bytes, planner

from tileplan.archives import extract
from tileplan.frontend import zoo
from tileplan.frontend.program import Program, Step, Tensor, plan_arena
from tileplan.frontend.runner import read_artifact


@pytest.fixture(scope="module")
def resnet_block():
    data = zoo.build("resnet_block", "qdq")
    return data, compile_bytes(data)


def test_artifact_files_and_header(resnet_block):
    data, res = resnet_block
    files = read_artifact(res.artifact)
    kernels = [f for f in files if f.startswith("kernels/")]
    assert len(kernels) == res.summary["total"]["kernels"] >= 1
    assert any(f.startswith("host/") for f in files)
    for f in ("model.c", "tileplan_model.h", "tp_ops.h", "weights.S", "weights.bin", "Makefile", "README.md",
              "tileplan.json", "gemmini.h", "emulator/gemmini_emu.c", "emulator/tp_emulate.c"):
        assert f in files, f
    header = files["tileplan_model.h"].decode()
    assert "int tileplan_run(const float *in_input, float *out_fc_out);" in header
    assert 'input  0 "input": float [1x3x16x16]' in header and 'output 0 "fc_out": float [1x10]' in header
    manifest = json.loads(files["tileplan.json"])
    assert manifest["inputs"][0]["shape"] == [1, 3, 16, 16]
    assert len(files["weights.bin"]) == res.summary["total"]["weights_bytes"]
    # the kernels include nothing but gemmini.h and the C library; the host ops not even gemmini.h
    for name, src in files.items():
        if name.startswith("kernels/"):
            includes = {ln.split()[1] for ln in src.decode().splitlines() if ln.startswith("#include")}
            assert includes <= {"<math.h>", "<stdint.h>", '"gemmini.h"'}, (name, includes)
        if name.startswith("host/"):
            assert '"gemmini.h"' not in src.decode()
    # the summary names the plans of the offloaded ops, each planned once per distinct layer
    keys = {o["plan_key"] for o in res.summary["ops"] if o.get("plan_key")}
    assert len(keys) == res.summary["total"]["plans"] <= res.summary["total"]["accelerator_ops"]


def test_riscv_target_compiles_with_only_gemmini_h(resnet_block, tmp_path):
    if shutil.which("riscv64-linux-gnu-gcc") is None:
        pytest.skip("riscv64-linux-gnu-gcc is not installed (Debian: gcc-riscv64-linux-gnu; .ci/run installs it)")
    _, res = resnet_block
    with tarfile.open(fileobj=io.BytesIO(res.artifact)) as tar:
        extract(tar, tmp_path)
    root = next(tmp_path.iterdir())
    shutil.rmtree(root / "emulator")  # the RISC-V build must not need the emulator
    proc = subprocess.run(["make", "-s", "riscv"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning:" not in proc.stderr, proc.stderr[-3000:]  # -Wall: what a user's build log would show
    objs = sorted(p.name for p in (root / "build" / "riscv").rglob("*.o"))
    assert "model.o" in objs and "weights.o" in objs and len(objs) >= 3
    out = subprocess.run(["riscv64-linux-gnu-readelf", "-h", str(root / "build" / "riscv" / "model.o")],
                         capture_output=True, text=True).stdout
    assert "RISC-V" in out


def test_host_target_builds_without_warnings(resnet_block, tmp_path):
    """`make host` (-Wall) of the program and its emulator runtime: a clean build log, as a user's CI sees it."""
    _, res = resnet_block
    with tarfile.open(fileobj=io.BytesIO(res.artifact)) as tar:
        extract(tar, tmp_path)
    root = next(tmp_path.iterdir())
    proc = subprocess.run(["make", "-s", "-j2", "host"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning:" not in proc.stderr, proc.stderr[-3000:]


def test_run_door_writes_the_output(resnet_block, tmp_path):
    data, res = resnet_block
    tar = tmp_path / "m.tar"
    tar.write_bytes(res.artifact)
    x = zoo.sample_inputs(data, seed=9)["input"]
    np.save(tmp_path / "in.npy", x)
    proc = subprocess.run([sys.executable, "-m", "tileplan.run", str(tar), "--input", str(tmp_path / "in.npy"),
                           "--output", str(tmp_path / "out.npy"), "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    accel = [s for s in doc["steps"] if s["kind"] == "accel"]
    assert accel and all(s["cycles_emulated"] > 0 for s in accel)
    assert doc["cycles_emulated"] == sum(s["cycles_emulated"] for s in accel)
    import onnxruntime as ort

    want = ort.InferenceSession(data).run(None, {"input": x})[0]
    got = np.load(tmp_path / "out.npy")
    assert got.shape == want.shape and np.abs(got - want).max() <= 0.05
    proc = subprocess.run([sys.executable, "-m", "tileplan.run", str(tar), "--input", str(tmp_path / "in.npy"),
                           "--input", f"other={tmp_path / 'in.npy'}"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr


def test_identical_layers_planned_once():
    calls = []

    def counting(layer, hw, options):
        calls.append(layer.model_dump_json(exclude={"name", "count"}))
        return planner(layer, hw, options)

    data = zoo.build("resnet18", "qdq", size=32, width=8, classes=10)
    from tileplan.frontend.compile import compile_model

    res = compile_model(data, HW, OPTIONS.model_copy(update={"emulate": False}), planner=counting)
    assert len(calls) == len(set(calls)) == res.summary["total"]["plans"]
    assert res.summary["total"]["accelerator_ops"] == 21 > len(calls)


def test_arena_plan_never_overlaps_live_tensors():
    rng = np.random.default_rng(0)
    tensors = [Tensor(i, "int8", (int(rng.integers(1, 5000)),), "arena") for i in range(40)]
    steps = []
    for i in range(30):  # each step reads two earlier tensors and writes one
        ins = [tensors[j] for j in rng.integers(0, i + 1, 2)]
        steps.append(Step("host", f"s{i}", "f", ins, [tensors[i + 1]],
                          Tensor(100 + i, "uint8", (int(rng.integers(1, 999)),), "workspace")))
    prog = Program(steps, [], [], [])
    plan_arena(prog)
    live = {}
    for i, st in enumerate(prog.steps):
        for t in [*st.inputs, *st.outputs, *st.temporaries()]:
            a, z = live.get(t.id, (i, i))
            live[t.id] = (min(a, i), max(z, i))
    placed = {t.id: t for st in prog.steps for t in [*st.inputs, *st.outputs, *st.temporaries()]}
    ids = sorted(placed)
    for x in ids:
        for y in ids:
            if x >= y:
                continue
            (a1, z1), (a2, z2) = live[x], live[y]
            if z1 < a2 or z2 < a1:
                continue  # never live together
            t1, t2 = placed[x], placed[y]
            assert t1.offset + t1.nbytes <= t2.offset or t2.offset + t2.nbytes <= t1.offset, (x, y)
    assert prog.arena_bytes < sum(t.nbytes for t in placed.values())  # reuse happened
    assert all(t.offset % 64 == 0 for t in placed.values())


def test_compiles_are_deterministic():
    """The same model compiles to byte-identical artifacts (builds and runs are cached by content)."""
    data = zoo.build("attention", "qdq")
    from tileplan.frontend.compile import compile_model

    opts = OPTIONS.model_copy(update={"emulate": False})
    a = compile_model(data, HW, opts, planner=planner).artifact
    b = compile_model(data, HW, opts, planner=planner).artifact
    assert a == b


def test_worker_processes_and_the_plan_store(tmp_path):
    """workers=2 solves the store's misses and generates kernels in forked processes and stores the plans; the
    same compile again, serial, answers every plan from the store and makes byte for byte the same program."""
    from tileplan.frontend.compile import StorePlanner, compile_model, store_planner
    from tileplan.store.repository import Store

    data = zoo.build("cnn_small", "qdq", seed=5)
    opts = OPTIONS.model_copy(update={"emulate": False})
    store = Store(f"sqlite:///{tmp_path / 'plans.db'}")
    try:
        parallel = compile_model(data, HW, opts, planner=store_planner(store), workers=2)
        keys = {o["plan_key"] for o in parallel.summary["ops"] if o.get("plan_key")}
        assert keys and all(store.get_plan(k) is not None for k in keys)  # what GET /plans serves

        class Counting(StorePlanner):
            hits = 0

            def lookup(self, *a):
                found = super().lookup(*a)
                Counting.hits += found is not None
                return found

            def save(self, *a):
                raise AssertionError("nothing should be solved again")

        seen: list[tuple[int, int]] = []
        again = compile_model(data, HW, opts, planner=Counting(store), workers=1,
                              progress=lambda done, total: seen.append((done, total)))
        assert again.artifact == parallel.artifact
        assert Counting.hits == len(keys)
        n = parallel.summary["total"]["accelerator_ops"]  # serial: one step of progress per op, then the program
        assert seen == [(i, n + 1) for i in range(1, n + 2)]
    finally:
        store.close()


def test_prebuilt_objects_are_used_only_when_their_key_matches(resnet_block, tmp_path, monkeypatch):
    """runner.prebuild compiles a kernel in the background as `make host` would, into the object cache; a build
    of the artifact then takes that object and compiles the rest; a kernel whose source bytes differ from the
    prebuilt one is compiled again."""
    from tileplan.codegen.emulator.build import compiler
    from tileplan.frontend import runner

    monkeypatch.setattr(runner, "_cache_root", lambda: tmp_path / "models")
    _, res = resnet_block
    files = read_artifact(res.artifact)
    kernel, other = sorted(k for k in files if k.startswith("kernels/"))[:2]
    base = {k: files[k] for k in ("Makefile", "gemmini.h", "gemmini_params.h", "emulator/gemmini_emu.c",
                                  "emulator/gemmini_emu.h")}
    pre = runner.Prebuild()
    runner.prebuild({**base, kernel: files[kernel], other: files[other] + b"\n/* not the artifact's */\n"},
                    [kernel, other], pre)
    assert len(pre.jobs) == 2
    pre.wait()
    assert len(list((tmp_path / "models" / "objects").glob("*.o"))) == 2
    root = tmp_path / "build"
    for name, blob in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(blob)
    make, cc = shutil.which("make"), compiler()
    assert make is not None
    runner._seed_objects(root, files, make, cc)
    dry = subprocess.run([make, "-n", "host", f"CC={cc}"], cwd=root, capture_output=True, text=True, check=True)
    assert f"-c {kernel} " not in dry.stdout  # taken from the cache
    assert f"-c {other} " in dry.stdout and "-c model.c " in dry.stdout
    subprocess.run([make, "-s", "host", f"CC={cc}"], cwd=root, capture_output=True, check=True)
    assert (root / runner.LIBRARY).exists()


def test_running_the_compiled_artifact_builds_nothing(resnet_block, tmp_path, monkeypatch):
    """The compile writes the emulated run's cycles into the artifact's manifest and README after its build: the
    artifact it returns is still that build (`tileplan run` after `tileplan compile` compiles nothing), while a
    change to anything make or the run reads is another build."""
    from tileplan.frontend import runner

    data, res = resnet_block
    files = read_artifact(res.artifact)
    manifest = json.loads(files["tileplan.json"])
    assert manifest["summary"]["total"]["cycles_emulated"] > 0  # the emulated run's numbers are in it
    before = {**files, "README.md": b"other text",
              "tileplan.json": json.dumps({**manifest, "summary": {"before": "the run"}}).encode()}
    assert runner.build_key(before) == runner.build_key(files)
    for name in ("tileplan.json", "model.c", "weights.bin"):
        changed = dict(files)
        if name == "tileplan.json":
            changed[name] = json.dumps({**manifest, "outputs": manifest["outputs"][::-1] + [{}]}).encode()
        else:
            changed[name] = files[name] + b"\n"
        assert runner.build_key(changed) != runner.build_key(files), name
    monkeypatch.setattr(runner, "_cache_root", lambda: tmp_path / "models")
    made: list[list[str]] = []
    real_run = subprocess.run

    def counting_run(args, *a, **kw):  # type: ignore[no-untyped-def]
        if "host" in args and "-n" not in args:
            made.append(list(args))
        return real_run(args, *a, **kw)

    monkeypatch.setattr(runner.subprocess, "run", counting_run)
    first = runner.build(before)
    assert len(made) == 1
    assert runner.build(files) == first and len(made) == 1


def test_a_build_keeps_its_objects_for_the_next_artifact(resnet_block, tmp_path, monkeypatch):
    """Every object a build compiles goes to the object cache: the next artifact for the same accelerator copies
    the emulator (the costliest compile) and the kernels it shares instead of compiling them, and runs the same."""
    from tileplan.frontend import runner

    monkeypatch.setattr(runner, "_cache_root", lambda: tmp_path / "models")
    data, res = resnet_block
    files = read_artifact(res.artifact)
    runner.build(files)
    other = {**files, "model.c": files["model.c"] + b"\n/* another artifact */\n"}
    compiled: list[str] = []
    real_run = subprocess.run

    def seeing_run(args, *a, **kw):  # type: ignore[no-untyped-def]
        out = real_run(args, *a, **kw)
        if "host" in args and "-n" not in args:  # make's own run: what it compiled, asked afterwards
            dry = real_run([args[0], "-n", "host", args[-1]], cwd=kw["cwd"], capture_output=True, text=True)
            compiled.append(dry.stdout)
        return out

    root = tmp_path / "seeded"
    for name, blob in other.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(blob)
    make, cc = shutil.which("make"), __import__("tileplan.codegen.emulator.build", fromlist=["compiler"]).compiler()
    assert make is not None
    # every object of the first build is in the cache (the emulator's too): only the changed source is missing
    assert [m for m, _ in runner._seed_objects(root, other, make, cc)] == [root / "build/host/model.o"]
    dry = subprocess.run([make, "-n", "host", f"CC={cc}"], cwd=root, capture_output=True, text=True, check=True)
    assert "-c emulator/gemmini_emu.c " not in dry.stdout and "-c model.c " in dry.stdout
    monkeypatch.setattr(runner.subprocess, "run", seeing_run)
    feeds = {i["name"]: np.zeros(i["shape"], dtype=i["dtype"]) for i in json.loads(files["tileplan.json"])["inputs"]}
    got = runner.emulate_files(other, feeds).outputs
    want = runner.emulate_files(files, feeds).outputs
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)


def test_host_files_are_handed_out_as_their_functions_are_made(tmp_path, monkeypatch):
    """lower_host_cached's `on_units` gets the stems of host_units(the part's sources) first and then every file,
    each once and with the same text, as the lowering prints them (a compile's background build starts on each
    then), and again all of them from a cache hit; with `defer` the cache entry is written only when the deferred
    work runs."""
    import tempfile

    from tileplan.frontend import compile as compile_mod
    from tileplan.frontend import host_ops, onnx_import, patterns

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(compile_mod, "HOST_UNIT_FUNCTIONS", 2)  # several files from a small model's functions
    imported = onnx_import.load_model(zoo.build("attention", "qdq"), None, False, None, 8, 0)
    mod, nodes = onnx_import.to_relax(imported)
    fused, _ = patterns.fuse(mod, nodes, lambda q: False)
    compat, _ = host_ops.onnxruntime_compatible(host_ops.offload(fused, {}))
    got: list[tuple[str, str]] = []
    stems: list[list[str]] = []
    later: list = []

    def on_units(names):
        stems.append(list(names))
        return lambda stem, text: got.append((stem, text))

    part = compile_mod.lower_host_cached(compat, 1, on_units, later)
    units = compile_mod.host_units(part.sources)
    assert len(units) > 2
    assert sorted(got) == sorted(units.items()) and stems == [[stem for stem, _ in got]] and set(stems[0]) == set(units)
    assert len(later) == 1 and not list((tmp_path / "tileplan-codegen-0" / "host").glob("*.json"))
    later[0]()
    again: list[tuple[str, str]] = []
    monkeypatch.setattr(host_ops, "lower_host", None)  # a cache hit does not lower
    hit = compile_mod.lower_host_cached(compat, 1, lambda names: lambda stem, text: again.append((stem, text)))
    assert sorted(again) == sorted(units.items()) and hit.sources == part.sources and hit.decls == part.decls


def test_host_unit_groups_are_host_units_files():
    """host_unit_groups (from the names alone) and host_unit_text give host_units' files exactly, whatever the
    number of functions and a name that is a file's stem too."""
    from tileplan.frontend.compile import host_unit_groups, host_unit_text, host_units

    for n in (1, 2, 3, 25, 49, 200):
        names = [f"tp_host_f{i}" for i in range(n)] + (["tp_host_unit0"] if n > 2 else [])
        sources = {m: f"#include <math.h>\n#include <stdint.h>\nvoid {m}(void) {{}}\n" for m in names}
        groups = host_unit_groups(names)
        assert sorted(m for _, g in groups for m in g) == sorted(names)
        assert {stem: host_unit_text(stem, g, sources) for stem, g in groups} == host_units(sources)


def test_a_prebuild_compiles_an_object_once(resnet_block, tmp_path, monkeypatch):
    """The same source asked of one Prebuild twice (a compile's host thread and its main thread both ask for the
    host files) is compiled once."""
    import threading

    from tileplan.frontend import runner

    monkeypatch.setattr(runner, "_cache_root", lambda: tmp_path / "models")
    _, res = resnet_block
    files = read_artifact(res.artifact)
    kernel = sorted(k for k in files if k.startswith("kernels/"))[0]
    base = {k: files[k] for k in ("Makefile", "gemmini.h", "gemmini_params.h")}
    gate = threading.Event()  # the first compile is still running when the second ask comes
    real = runner._compile_into

    def held(*args):
        gate.wait(30)
        real(*args)

    monkeypatch.setattr(runner, "_compile_into", held)
    pre = runner.Prebuild()
    runner.prebuild({**base, kernel: files[kernel]}, [kernel], pre)
    runner.prebuild({**base, kernel: files[kernel]}, [kernel], pre)
    gate.set()
    assert len(pre.jobs) == 1
    pre.wait()
    assert len(list((tmp_path / "models" / "objects").glob("*.o"))) == 1


def test_a_prebuild_of_sources_given_later_makes_the_same_objects(resnet_block, tmp_path, monkeypatch):
    """runner.prebuild_later asks make for every source's command once, up front; each source compiled when its
    text comes is the object `prebuild` (and so the build) would make: asked for again, nothing is compiled."""
    from tileplan.frontend import runner

    monkeypatch.setattr(runner, "_cache_root", lambda: tmp_path / "models")
    _, res = resnet_block
    files = read_artifact(res.artifact)
    first, second = sorted(k for k in files if k.startswith("kernels/"))[:2]
    base = {k: files[k] for k in ("Makefile", "gemmini.h", "gemmini_params.h")}
    runs = []
    real = runner._host_compiles
    monkeypatch.setattr(runner, "_host_compiles", lambda *a: runs.append(a) or real(*a))
    pre = runner.Prebuild()
    start = runner.prebuild_later(base, [first, second], pre)
    assert len(runs) == 1 and not pre.jobs
    start(first, files[first])
    start("kernels/not_asked_for.c", b"int x;")
    assert len(pre.jobs) == 1
    pre.wait()
    assert len(list((tmp_path / "models" / "objects").glob("*.o"))) == 1
    runner.prebuild({**base, first: files[first]}, [first], pre)
    assert not pre.jobs  # the same key: already in the object cache


def test_host_functions_made_in_workers_are_the_same(tmp_path, monkeypatch):
    """workers=2 lowers the host part in a thread while the worker processes plan and generate kernels (fresh
    caches each time, so the lowering runs): the same artifact byte for byte as one process makes; and the host
    functions' C made in forked processes (what a compile without the thread does with workers=2) is the same
    text as one process makes."""
    import tempfile
    import threading

    from tileplan.frontend import compile as compile_mod
    from tileplan.frontend.compile import compile_model

    data = zoo.build("bert_encoder", "qdq")
    opts = OPTIONS.model_copy(update={"emulate": False})
    made: list[tuple[int, int, bool]] = []  # (the compile's workers, functions, made in the compile's thread)
    real = compile_mod._emit_host_functions
    workers = [0]

    def emit(jobs, w):
        made.append((workers[0], len(jobs), threading.current_thread() is threading.main_thread()))
        one = real(jobs, w)
        forked = real(jobs, 2)
        assert [f.source for f in forked] == [f.source for f in one]
        return one

    monkeypatch.setattr(compile_mod, "_emit_host_functions", emit)
    arts = []
    for w in (1, 2):
        workers[0] = w
        (tmp_path / f"w{w}").mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / f"w{w}"))
        arts.append(compile_model(data, HW, opts, planner=planner, workers=w).artifact)
    # (one call per host file: a model whose host part spans several files makes several calls per compile)
    serial, threaded = [m for m in made if m[0] == 1], [m for m in made if m[0] == 2]
    assert serial and threaded and sum(m[1] for m in serial) >= 8  # enough functions for the workers
    assert sum(m[1] for m in serial) == sum(m[1] for m in threaded)
    assert all(m[2] for m in serial) and not any(m[2] for m in threaded)  # serial: the compile's thread; else the host's
    assert arts[0] == arts[1]


def test_long_host_function_names_are_shortened_uniquely():
    """TVM names a fused host function after every op in it (DenseNet's concatenation of a dozen dequantized
    inputs: 250+ characters), and its C goes to host/<name>.c: longer than a file name may be."""
    from tileplan.frontend.program import short_ident

    parts = [f"dequantize{i}" for i in range(168, 210, 3)] + ["concatenate57", "quantize142", "batch_norm57"]
    long_a, long_b = "fused_" + "_".join(parts), "fused_" + "_".join(parts[1:])
    a, b = short_ident(long_a, "tp_host_"), short_ident(long_b, "tp_host_")
    assert len("tp_host_" + long_a) > 200 and len(a) <= 96 and len(b) <= 96 and a != b
    assert a.startswith("tp_host_fused_dequantize168") and a.isidentifier()
    assert short_ident("fused_relu", "tp_host_") == "tp_host_fused_relu"  # short names are unchanged


def test_host_functions_are_compiled_in_few_files():
    """Each host function's C once, in at most HOST_UNITS_MAX files with one copy of the shared preamble (one file
    per function cost ViT-B/16 178 compiler runs); the program built from them runs (compile_model emulates it)."""
    from tileplan.frontend.compile import HOST_UNITS_MAX, host_units

    data = zoo.build("attention", "qdq")
    res = compile_bytes(data)
    files = read_artifact(res.artifact)
    host = {k: v.decode() for k, v in files.items() if k.startswith("host/")}
    assert 1 <= len(host) <= HOST_UNITS_MAX
    decls = {m for f in ("tp_ops.h", "tileplan_model.h", "model.c")
             for m in re.findall(r"void (tp_host_\w+)\(", files[f].decode())}
    assert len(decls) > len(host)  # several functions share a file
    text = "\n".join(host.values())
    for name in decls:
        assert text.count(f"void {name}(") == 1, name
    for src in host.values():
        assert src.count("static inline int32_t tp_floordiv(") == 1
    assert res.summary["total"]["cycles_emulated"]
    # 200 functions: no more than HOST_UNITS_MAX files, each function in exactly one
    many = {f"tp_host_f{i}": f"#include <math.h>\n#include <stdint.h>\nvoid tp_host_f{i}(void) {{}}\n" for i in range(200)}
    units = host_units(many)
    assert len(units) == HOST_UNITS_MAX
    assert sorted(n for u in units.values() for n in many if f"void {n}(" in u) == sorted(many)
    assert host_units({"tp_host_a": "x"}) == {"tp_host_a": "x"}
