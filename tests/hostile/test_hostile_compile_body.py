"""Issue 23, case 4: POST /compile within the API's memory budget, and an identical request not read again.

A 90 MB model sent as JSON took the API to 915 MiB: the body, its JSON string, the decoded bytes and ONNX's copies
were all in the API process at once, and every identical POST checked the model again. Now the body is streamed to
a temporary file and read (JSON or multipart), like the model, in an intake process under the worker memory cap;
an identical body is answered from the compile it made before anything is parsed, for whoever sends it (its owner
comes to hold the compile, under its quota: a quota refused in the intake process is still a 409).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_procs import start_api

from tileplan.api.app import create_app
from tileplan.frontend import zoo
from tileplan.settings import Settings

TOKENS = {"alice": {"authorization": "Bearer alice-token"}, "bob": {"authorization": "Bearer bob-token"}}
OPTIONS = {"time_limit_s": 2}


def big_model(mib: int) -> bytes:
    """The MLP with an extra (unused) int8 initializer of `mib` MiB: a large model ONNX reads in full."""
    import onnx
    from onnx import numpy_helper

    m = onnx.load_model_from_string(zoo.build("mlp", "qdq"))
    pad = np.random.default_rng(0).integers(-128, 127, size=mib << 20, dtype=np.int8)
    m.graph.initializer.append(numpy_helper.from_array(pad, "padding"))
    return m.SerializeToString()


def hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_large_model_does_not_grow_the_api(tmp_path: Path) -> None:
    model = big_model(48)
    proc = start_api(tmp_path, max_compile_bytes=str(96 << 20), compile_check_time_limit_s="300")
    try:
        with httpx.Client(base_url=proc.url, timeout=600) as client:
            client.get("/compiles")
            before = hwm_mib(proc.popen.pid)
            # the model is read in full (decoded, parsed, checked) before the input name is found wrong
            shapes = {"nope": [4, 64]}
            r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(),
                                              "options": OPTIONS, "input_shapes": shapes})
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == ["body", "input_shapes", "nope"]
            r = client.post("/compile", files={"model": ("m.onnx", model)},
                            data={"request": json.dumps({"hardware": "gemmini-16x16", "input_shapes": shapes})})
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == ["body", "input_shapes", "nope"]
            grew = hwm_mib(proc.popen.pid) - before
            assert grew < 48, f"the API grew by {grew:.0f} MiB for a 48 MiB model"  # (it held ~6 copies before)
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile_body"), solver_processes=1, wait_limit_s=300,
                        tokens=["alice-token", "bob-token"])
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def _body() -> dict[str, Any]:
    return {"hardware": "gemmini-16x16", "model": base64.b64encode(zoo.build("mlp", "qdq")).decode(),
            "options": OPTIONS}


def test_an_identical_request_is_answered_without_reading_the_model_again(client: TestClient) -> None:
    body = json.dumps(_body()).encode()
    headers = {"content-type": "application/json"}
    r = client.post("/compile", content=body, headers={**headers, **TOKENS["alice"]})
    assert r.status_code == 200, r.text
    cid = r.json()["id"]
    compiler = client.app.state.compiler  # type: ignore[attr-defined]
    reads = compiler.intake_calls
    again = client.post("/compile", content=body, headers={**headers, **TOKENS["alice"]})
    assert again.status_code == 200 and again.json()["id"] == cid
    assert compiler.intake_calls == reads  # nothing parsed, nothing checked
    # another owner sending the same body comes to hold the compile (and may let go of it)
    bob = client.post("/compile", content=body, headers={**headers, **TOKENS["bob"]})
    assert bob.status_code == 200 and bob.json()["id"] == cid
    assert compiler.intake_calls == reads
    store = client.app.state.store  # type: ignore[attr-defined]
    assert len(store.compile_holders(cid)) == 2
    assert client.delete(f"/compiles/{cid}", headers=TOKENS["bob"]).status_code == 204
    assert client.get(f"/compiles/{cid}", headers=TOKENS["alice"]).status_code == 200  # alice keeps it
    # anonymous clients still cannot write, body known or not
    assert client.post("/compile", content=body, headers=headers).status_code == 401


def test_a_quota_refused_in_the_intake_process_is_a_409(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, solver_processes=1, wait_limit_s=300, compile_quota_bytes=1000)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        r = c.post("/compile", json=_body())
        assert r.status_code == 409, r.text
        assert r.json()["detail"][0]["type"] == "quota_exceeded"
        assert c.get("/compiles").json()["compiles"] == []


def test_an_identical_refused_request_is_refused_again_unread(client: TestClient) -> None:
    body = json.dumps({**_body(), "input_shapes": {"nope": [1, 64]}}).encode()
    headers = {"content-type": "application/json", **TOKENS["alice"]}
    r = client.post("/compile", content=body, headers=headers)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "input_shapes", "nope"], r.text
    compiler = client.app.state.compiler  # type: ignore[attr-defined]
    reads = compiler.intake_calls
    again = client.post("/compile", content=body, headers=headers)
    assert again.status_code == 422 and again.json() == r.json()
    assert compiler.intake_calls == reads


def test_a_client_leaving_does_not_restart_the_intake_process() -> None:
    """Under load, killing and restarting an intake process for every client that gave up made every next small
    request wait for a process start, and give up in turn (bench/hostile.py): a cancelled call is let finish."""
    import asyncio
    import os
    import time

    from tileplan.jobs.slots import ProcessSlots

    async def scenario() -> tuple[int, int, int]:
        slots = ProcessSlots(1, name="t")
        try:
            first = await slots.run(os.getpid, timeout=60)
            call = asyncio.ensure_future(slots.run(time.sleep, 0.5, timeout=60, kill_on_cancel=False))
            await asyncio.sleep(0.2)
            call.cancel()
            second = await slots.run(os.getpid, timeout=60)  # waits for the sleep to end, in the same process
            return first, second, slots.killed
        finally:
            slots.close()

    first, second, killed = asyncio.run(scenario())
    assert first == second and killed == 0


@pytest.mark.parametrize("form", ["json", "multipart"])
def test_json_nested_deeper_than_python_reads_is_a_422(client: TestClient, form: str) -> None:
    """A 2 KB body of 1,000 nested arrays made json.load raise RecursionError in the intake process: POST /compile
    answered 500 where /schedule and /evaluate answer 422 (the same body, the same message)."""
    deep = "[" * 100_000 + "]" * 100_000
    if form == "json":
        r = client.post("/compile", content=deep.encode(), headers={"content-type": "application/json",
                                                                     **TOKENS["alice"]})
        where = ["body"]
    else:
        r = client.post("/compile", files={"model": ("m.onnx", zoo.build("mlp", "qdq"))}, data={"request": deep},
                        headers=TOKENS["alice"])
        where = ["body", "request"]
    assert r.status_code == 422, r.text
    detail = r.json()["detail"][0]
    assert detail["loc"] == where and detail["msg"] == "malformed JSON: nested too deeply", detail
    assert detail["type"] == "json_invalid"
