"""Hostile probes, ninth round (branch hostile9): each was a 5xx (or worse) and is now a 4xx naming the field.

1. A Range whose constant bounds are not finite (limit inf, delta NaN) or a ConstantOfShape / Expand whose constant
   shape holds inf: the up-front count of the elements such a node would make called `int()` / `math.ceil` on the
   value and raised OverflowError / ValueError, a 500 on POST /compile and POST /schedule.
2. Calibration data (options.quantize) that is not samples of the model's inputs: another shape or rank, another
   dtype, inf or NaN. onnxruntime (or the quantizer's MinMax) failed in the compile: a 500 counted as the server's
   fault, so every identical request ran the compile again. Now a 422 at `calibration.<input>` before anything is
   stored (shapes and dtypes from the .npy headers), or from the compile (values, once loaded).
3. Calibration data near float32's largest value: an op's output overflows, onnxruntime's quantizer writes scale inf
   for it, the op's requantization multiplier is 0 and TVM folded the kernel's accumulation away (ScheduleError, a
   500). Such an op now runs on the host.
4. A multipart form with two `model` (or `request`) parts: the last one was compiled, silently. Now a 422 naming the
   part.
5. Downloads of a large artifact: each held the whole tar in the API process until its (slow) client had read it, and
   each rewrote the compile's SQLite row (model and artifact) to set `used_at`. Eight slow downloads of one 64 MB
   program took the API from 280 to 1,060 MiB; now 335 MiB with 24 (the tar streamed from a file written once).
6. A compile whose process native code crashes (SIGSEGV in TVM's importer or lowering): failed as the server's (a
   500) and run again by the next identical request, crashing a process again, before the second attempt blamed the
   memory cap. Now a 422 at once naming the signal (the slot reports the signal that ended its process).
7. A compile's progress, written to its row once per op: SQLite rewrites the whole row, model included, so a 64 MB
   model's compile wrote 64 MB and held the database's write lock for 0.3 s per op. Now at most 21 writes. And the
   artifact came back through the API process to be stored (140 MiB kept by the API after a 64 MB model's compile):
   the compile's process stores it now.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hostile_models import qdq_in as _qdq_in

from tileplan.api.app import create_app
from tileplan.errors import InputError
from tileplan.frontend.onnx_bytes import parse_model
from tileplan.settings import Settings


def non_finite(case: str) -> bytes:
    from onnx import helper, numpy_helper

    f = np.float32
    if case.startswith("range"):
        start, limit, delta = {"range_inf": (0, np.inf, 1), "range_nan": (0, 5, np.nan),
                               "range_ninf": (-np.inf, 0, 1)}[case]
        nodes = [helper.make_node("Range", ["a", "b", "c"], ["r"], name="bad")]
        inits = [numpy_helper.from_array(np.array(v, f), n) for n, v in (("a", start), ("b", limit), ("c", delta))]
    else:  # a shape of floats: int() of inf (the checker, which would refuse its type, runs after the count)
        op = "ConstantOfShape" if case == "cos_inf" else "Expand"
        nodes = [helper.make_node(op, ["shp"] if op == "ConstantOfShape" else ["dq", "shp"], ["r"], name="bad")]
        inits = [numpy_helper.from_array(np.array([1, np.inf], f), "shp")]
    return _qdq_in([*nodes, helper.make_node("Identity", ["dq"], ["y"], name="out")], inits).SerializeToString()


NON_FINITE = ["range_inf", "range_nan", "range_ninf", "cos_inf", "expand_inf"]


@pytest.mark.parametrize("case", NON_FINITE)
def test_a_constant_that_is_not_finite_is_refused_naming_the_node(case: str) -> None:
    with pytest.raises(InputError) as e:
        parse_model(non_finite(case))
    assert e.value.loc == ("model", "bad")
    assert "not finite" in e.value.msg


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile9"), solver_processes=1, wait_limit_s=120)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("case", ["range_inf", "range_nan"])
def test_compile_and_schedule_refuse_a_range_to_infinity_with_a_422(client: TestClient, case: str) -> None:
    model = base64.b64encode(non_finite(case)).decode()
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": model, "options": {"time_limit_s": 2},
                                      "wait": True})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "model", "bad"]
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "model": model})
    assert r.status_code == 422, r.text
    assert "not finite" in r.text


# -- 2: calibration data that is not samples of the model's inputs ------------------------------------------------


def float_mlp() -> bytes:
    """x [1, 16] -> MatMul -> y: a float model for options.quantize."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.RandomState(0).randn(16, 16).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "flt",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def npz(x: np.ndarray) -> bytes:
    import io

    b = io.BytesIO()
    np.savez(b, x=x)
    return b.getvalue()


CALIBRATIONS = {  # each was a 500 (onnxruntime's or the quantizer's error in the compile, tried again every time)
    "shape": np.zeros((4, 7), np.float32),
    "rank": np.zeros((4, 1, 16, 3), np.float32),
    "empty sample": np.zeros((4, 0, 16), np.float32),
    "dtype": np.zeros((4, 1, 16), np.float64),
    "nan": np.full((4, 1, 16), np.nan, np.float32),
    "inf": np.stack([np.full((1, 16), -np.inf, np.float32), np.full((1, 16), np.inf, np.float32)]),
}


@pytest.mark.parametrize("case", list(CALIBRATIONS))
def test_calibration_that_is_not_the_inputs_samples_is_a_422_at_the_array(client: TestClient, case: str) -> None:
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(float_mlp()).decode(),
                                      "calibration": base64.b64encode(npz(CALIBRATIONS[case])).decode(),
                                      "options": {"time_limit_s": 2, "quantize": True}, "wait": True})
    assert r.status_code == 422, r.text
    body = r.json()
    err = (body.get("detail") or [body.get("error")])[0]
    assert err["loc"] == ["body", "calibration", "x"], err


def test_calibration_past_float32s_range_compiles_the_op_on_the_host(client: TestClient) -> None:
    """Calibration of 3e38: the MatMul's output overflows float32, onnxruntime's quantizer gives it scale inf and the
    op's requantization multiplier is 0, over which TVM folded the kernel's accumulation away (a ScheduleError, a
    500). The op now runs on the host, as ONNX defines it."""
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(float_mlp()).decode(),
                                      "calibration": base64.b64encode(npz(np.full((2, 1, 16), 3e38,
                                                                                  np.float32))).decode(),
                                      "options": {"time_limit_s": 2, "quantize": True}, "wait": True})
    assert r.status_code == 200, r.text
    assert "requantization multiplier is 0" in r.text


# -- 4: a form with two parts of one name ---------------------------------------------------------------------------


def _form(*parts: tuple[str, bytes, str | None]) -> bytes:
    out = b""
    for name, data, filename in parts:
        disp = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
        out += f"--XyZ\r\nContent-Disposition: {disp}\r\n\r\n".encode() + data + b"\r\n"
    return out + b"--XyZ--\r\n"


@pytest.mark.parametrize("twice", ["model", "request"])
def test_a_form_with_two_parts_of_one_name_is_a_422_naming_it(client: TestClient, twice: str) -> None:
    """Two `model` parts (a garbage one first) compiled the last one, silently: which did the client mean?"""
    import json

    from onnx import helper

    model = _qdq_in([helper.make_node("Identity", ["dq"], ["y"], name="out")], []).SerializeToString()
    request = json.dumps({"hardware": "gemmini-16x16", "options": {"time_limit_s": 2}, "wait": True}).encode()
    parts = [("model", model, "m.onnx"), ("request", request, None)]
    parts.insert(0, ("model", b"not this one", "a.onnx") if twice == "model" else ("request", b"{}", None))
    r = client.post("/compile", content=_form(*parts), headers={"content-type": "multipart/form-data; boundary=XyZ"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", twice]
    assert "more than one part" in r.json()["detail"][0]["msg"]


# -- 5: downloads of a large artifact held in the API's memory ------------------------------------------------------


def int8_mlp(n: int) -> bytes:
    """x [1, n] -> MatMul by an n x n int8 weight (QDQ): an artifact about n*n bytes."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z"),
             numpy_helper.from_array(np.random.RandomState(0).randint(-127, 127, (n, n)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ws")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["dq"], name="dq"),
             helper.make_node("DequantizeLinear", ["wq", "ws", "z"], ["w"], name="dw"),
             helper.make_node("MatMul", ["dq", "w"], ["mm"], name="mm"),
             helper.make_node("QuantizeLinear", ["mm", "s", "z"], ["q2"], name="q2"),
             helper.make_node("DequantizeLinear", ["q2", "s", "z"], ["y"], name="dq2")]
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_artifact_is_streamed_from_a_file_and_a_download_does_not_rewrite_the_compile(client: TestClient) -> None:
    """Measured on `tileplan serve` (a 64 MB model, emulate false): each GET .../artifact held the whole tar in the API
    process until its client had read it, and its `used_at` update rewrote the compile's row (model and artifact:
    SQLite rewrites a row whole), ~260 MiB for a moment each; eight slow downloads took the API from 280 to 1,060 MiB.
    Now the tar is written once to a file the downloads stream from, and `used_at` is set at most once a minute."""
    from pathlib import Path

    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(int8_mlp(512)).decode(),
                                      "options": {"time_limit_s": 2, "emulate": False}, "wait": True})
    assert r.status_code == 200, r.text
    cid = r.json()["id"]
    store = client.app.state.store  # type: ignore[attr-defined]
    want = store.compile_artifact(cid)
    used = store.get_compile(cid).used_at
    with client.stream("GET", f"/compiles/{cid}/artifact") as s:
        assert s.status_code == 200
        assert int(s.headers["content-length"]) == len(want)
        chunks = s.iter_bytes()
        first = next(chunks)
        assert client.delete(f"/compiles/{cid}").status_code == 204  # deleted mid-download: the download reads on
        got = first + b"".join(chunks)
    assert got == want
    cache = Path(client.app.state.settings.data_dir) / "artifact-cache"  # type: ignore[attr-defined]
    assert [p.stat().st_size for p in cache.glob("*.tar")] == [len(want)]
    assert store.get_compile(cid) is None
    assert client.get(f"/compiles/{cid}/artifact").status_code == 404  # (the file is not served for a deleted one)
    assert used is not None


def test_a_spool_file_left_half_written_by_a_killed_process_is_pruned(tmp_path: Any) -> None:
    """A process killed while writing an artifact's spool file left its `.tmp` in the artifact cache for good: the
    prune counted only finished `.tar` files, so such leftovers grew the data directory past the cache's bound."""
    import os
    import time
    from pathlib import Path

    from tileplan.api.routes import compiles

    cache = Path(tmp_path)
    old, fresh, kept = cache / "a.tmp", cache / "b.tmp", cache / "k.tar"
    for p in (old, fresh, kept):
        p.write_bytes(b"x" * 10)
    long_ago = time.time() - compiles.STALE_SPOOL_S - 60
    os.utime(old, (long_ago, long_ago))
    compiles._prune(cache, keep=kept)
    assert not old.exists()  # left by a killed writer
    assert fresh.exists()  # another process may be writing it right now
    assert kept.exists()


def test_using_a_compile_again_within_a_minute_does_not_write_its_row(tmp_path: Any) -> None:
    from tileplan.store import Store

    store = Store(f"sqlite:///{tmp_path / 't.db'}")
    store.create_compile("c" * 64, model=b"m" * 1000, model_name="m", hardware="h", request={}, deadline=2e9)
    before = store.get_compile("c" * 64).used_at
    store.touch_compile("c" * 64, Store.TOUCH_EVERY_S)  # (as GET .../artifact does)
    assert store.hold_compile("c" * 64, "someone")
    assert store.get_compile("c" * 64).used_at == before


def test_the_cli_refuses_calibration_of_another_shape_in_one_line(capsys: pytest.CaptureFixture[str],
                                                                   tmp_path: Any) -> None:
    """`tileplan compile --quantize --calibration` with arrays of another shape: onnxruntime's traceback."""
    from tileplan.cli import main

    (tmp_path / "f.onnx").write_bytes(float_mlp())
    (tmp_path / "c.npz").write_bytes(npz(CALIBRATIONS["shape"]))
    code = main(["compile", str(tmp_path / "f.onnx"), "--hw", "gemmini-16x16", "--out", str(tmp_path / "out"),
                 "--quantize", "--calibration", str(tmp_path / "c.npz"), "--no-emulate"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "calibration.x" in lines[0], lines


# -- 6: a compile whose process native code crashes -----------------------------------------------------------------


def test_a_slot_process_ended_by_a_signal_says_which() -> None:
    import asyncio
    import os
    import signal

    from tileplan.jobs.slots import ProcessSlots, SlotCrashed

    async def run() -> tuple[int | None, int]:
        slots = ProcessSlots(1, name="hostile9")
        try:
            crashed: int | None = None
            try:
                await slots.run(_segfault, timeout=60)
            except SlotCrashed as exc:
                crashed = exc.signal
            return crashed, await slots.run(os.getpid, timeout=60)  # and the slot has a fresh process
        finally:
            slots.close()

    sig, pid = asyncio.run(run())
    assert sig == signal.SIGSEGV and pid > 0


def test_the_death_signal_of_a_process_still_dying_is_waited_for() -> None:
    """CI saw `signal None` for a segfaulted slot process: the pool fails its futures before its own thread reaps the
    process (and a faulting process may still be dumping core), and the signal was read after a 0.2 s join. A
    process that takes 0.5 s to die still has its signal read."""
    import multiprocessing
    import signal
    import types

    from tileplan.jobs.slots import _death_signal

    proc = multiprocessing.get_context("fork").Process(target=_segfault_later, args=(0.5,))
    proc.start()
    try:
        assert _death_signal(types.SimpleNamespace(_processes={proc.pid: proc})) == signal.SIGSEGV
    finally:
        proc.kill()  # (if it failed to die: a child left behind spun in its inherited handler for the rest of the run)
        proc.join(5)


def _segfault_later(delay_s: float) -> None:
    import os
    import signal
    import time

    # the default action, not a handler inherited from the test process: TVM's library (loaded by earlier tests)
    # symbolizes a C++ backtrace on SIGSEGV, which took over 10 s in a whole-suite run; this process is to take
    # `delay_s` to die
    signal.signal(signal.SIGSEGV, signal.SIG_DFL)
    time.sleep(delay_s)
    os.kill(os.getpid(), signal.SIGSEGV)


def _segfault() -> None:
    import ctypes

    ctypes.string_at(0)


def test_a_compile_that_crashes_native_code_fails_at_once_as_the_models(client: TestClient) -> None:
    """A model on which TVM's importer or lowering segfaults: the compile's process died, the compile was failed as
    the server's (a 500, `compile_crashed`) and run again by the next identical request, which crashed the process
    again, before the second attempt blamed the memory cap. A segfault is the model's doing every time: a 422 at once,
    naming the signal."""
    import signal

    from tileplan.jobs.solve import SolverCrashed

    class Crashing:
        async def compile(self, *_a: Any, **_k: Any) -> dict[str, Any]:
            raise SolverCrashed("the compiling process died", int(signal.SIGSEGV))

    compiler = client.app.state.compiler  # type: ignore[attr-defined]
    pool_of = compiler._pool_of
    compiler._pool_of = Crashing
    try:
        from onnx import helper

        model = _qdq_in([helper.make_node("Relu", ["dq"], ["y"], name="segv")], [], width=24).SerializeToString()
        body = {"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(),
                "options": {"time_limit_s": 2}, "wait": True}
        r = client.post("/compile", json=body)
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["type"] == "compiler_crashed" and "SIGSEGV" in err["msg"], err
        assert client.post("/compile", json=body).status_code == 422  # answered again, not run again
        assert client.app.state.store.get_compile(r.json()["id"]).attempts == 1  # type: ignore[attr-defined]
    finally:
        compiler._pool_of = pool_of


# -- 7: a compile's progress rewriting its model ---------------------------------------------------------------------


def test_a_compiles_progress_is_written_in_a_bounded_number_of_steps() -> None:
    """Measured: each progress write of a compile of a 64 MB model wrote 64 MB (SQLite rewrites the row, model and
    all) and held the database's write lock 0.3 s; one per op, so hundreds of ops were tens of GB. Now at most 21."""
    from tileplan.jobs.solve import _Progress

    class Store:
        writes: list[tuple[int, int]] = []

        def compile_progress(self, _cid: str, done: int, total: int) -> None:
            self.writes.append((done, total))

    store = Store()
    progress = _Progress(store, "c" * 64)
    for i in range(1, 501):
        progress(i, 500)
    progress(500, 500)
    assert len(store.writes) <= _Progress.PROGRESS_STEPS + 2 and store.writes[-1] == (500, 500), store.writes
    assert store.writes[0] == (1, 500)  # (the first op's shows the compile started)


def test_the_compiles_process_stores_its_artifact_itself(tmp_path: Any) -> None:
    """The artifact came back to the API process to be stored: a 64 MB model's compile grew the API from 140 to 280
    MiB, which it kept (measured on `tileplan serve`); now 146 MiB."""
    import time

    from tileplan.frontend.compile import CompileOptions
    from tileplan.hardware.catalog import get_hardware
    from tileplan.jobs.solve import compile_in_process
    from tileplan.store import Store

    url = f"sqlite:///{tmp_path / 't.db'}"
    store = Store(url)
    request = {"hardware": get_hardware("gemmini-16x16").model_dump(mode="json"),
               "options": CompileOptions(time_limit_s=2, emulate=False).model_dump(mode="json"), "input_shapes": {}}
    assert store.create_compile("c" * 64, model=int8_mlp(64), model_name="big", hardware="gemmini-16x16",
                                request=request, deadline=time.time() + 600)
    store.start_compile("c" * 64)
    out = compile_in_process(url, "c" * 64)
    assert out["ok"] and out["stored"] and "artifact" not in out, out
    found = store.get_compile("c" * 64)
    assert found is not None and found.status == "done" and store.compile_artifact("c" * 64)
