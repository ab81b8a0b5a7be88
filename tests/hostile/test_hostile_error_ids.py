"""An unexpected exception where a compile, a solve or a module build turns it into a client's message (an OSError
naming the server's temporary directory, say) reaches the client as a generic message with an error id, never its
text: the traceback is in the server's log under that id. The project's own errors keep their specific messages.

The compile runs its real `compile_in_process` in this process (not a solver process), so a stage can be made to
fail and the log be read here; everything else (the API, the model check, the store) is the real app's."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from service_procs import FC

from tileplan.api.app import create_app
from tileplan.errors import InputError
from tileplan.frontend import zoo
from tileplan.frontend.runner import ArtifactError
from tileplan.settings import Settings

SECRET = "/tmp/tileplan-codegen-0/kernels/dense_0.c"
ERROR_ID = re.compile(r"error id ([0-9a-f]{12})")


def _no_space(*args: Any, **kwargs: Any) -> Any:
    raise OSError(28, "No space left on device", SECRET)


@pytest.fixture(scope="module")
def mlp() -> bytes:
    return zoo.build("mlp", "qdq")


@pytest.fixture()
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    from tileplan.jobs import solve

    async def in_this_process(self: Any, db_url: str, compile_id: str, *, timeout: float) -> dict[str, Any]:
        return await asyncio.to_thread(solve.compile_in_process, db_url, compile_id)

    monkeypatch.setattr(solve.SolverPool, "compile", in_this_process)
    with TestClient(create_app(Settings(data_dir=tmp_path, solver_processes=1, wait_limit_s=120))) as c:
        yield c
    for url in [u for u in solve._STORES if str(tmp_path) in u]:  # this test's store, opened by compile_in_process
        solve._STORES.pop(url).close()


def _compile(client: TestClient, mlp: bytes, seed: int) -> Any:
    return client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(mlp).decode(),
                                         "options": {"time_limit_s": 2, "seed": seed}})


def _logged_under(caplog: pytest.LogCaptureFixture, ref: str) -> logging.LogRecord:
    found = [r for r in caplog.records if ref in r.getMessage()]
    assert len(found) == 1, caplog.text
    return found[0]


def test_an_unexpected_compile_error_names_an_id_not_a_path(client: TestClient, mlp: bytes,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    import tileplan.frontend.compile as stages

    monkeypatch.setattr(stages, "compile_model", _no_space)
    with caplog.at_level(logging.ERROR):
        r = _compile(client, mlp, 1)
    # a failure of the server's: the documented 500 to a waiting POST ("asking again retries"), not the model's 422
    assert r.status_code == 500, r.text
    assert SECRET not in r.text and "tileplan-codegen" not in r.text and "OSError" not in r.text
    assert "No space left" not in r.text
    item = r.json()["detail"][0]
    assert item["type"] == "compile_error" and item["loc"] == []
    ref = ERROR_ID.search(item["msg"])
    assert ref is not None, item
    # stored and reported as the compile's error (a 200 to GET /compiles/{id}), with the same id
    doc = client.get(f"/compiles/{r.json()['id']}")
    assert doc.status_code == 200 and doc.json()["status"] == "failed"
    assert doc.json()["error"] == {"loc": [], "msg": item["msg"], "type": "compile_error"} and SECRET not in doc.text
    assert SECRET not in client.get(f"/compiles/{r.json()['id']}/artifact").text
    record = _logged_under(caplog, ref.group(1))
    assert record.exc_info is not None and SECRET in caplog.text  # the traceback, under the id


@pytest.mark.parametrize(("exc", "status", "said", "hidden"), [
    (ArtifactError("the emulator trapped: scratchpad row 9000 out of range", f"gcc: {SECRET}: error"), 500,
     "the emulator trapped: scratchpad row 9000 out of range", SECRET),
    (InputError(("model", "dense_0"), "this node's weights are not int8", "unsupported"), 422,
     "this node's weights are not int8", "error id"),
])
def test_expected_compile_errors_keep_their_message(client: TestClient, mlp: bytes, monkeypatch: pytest.MonkeyPatch,
                                                    exc: Exception, status: int, said: str, hidden: str) -> None:
    import tileplan.frontend.compile as stages

    def fails(*args: Any, **kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr(stages, "compile_model", fails)
    r = _compile(client, mlp, 2)
    assert r.status_code == status, r.text
    assert said in r.json()["detail"][0]["msg"] and hidden not in r.text


def test_an_unexpected_solver_error_names_an_id_not_its_text(monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    import tileplan.plan
    from tileplan.hardware.catalog import get_hardware
    from tileplan.jobs.solve import solve_layer

    monkeypatch.setattr(tileplan.plan, "make_plan", _no_space)
    hw = get_hardware("gemmini-16x16").model_dump(mode="json")
    with caplog.at_level(logging.ERROR):
        out = solve_layer(hw, FC, {})
    assert out["ok"] is False and out["error"]["type"] == "solver_error", out
    assert SECRET not in str(out) and "No space" not in str(out)
    ref = ERROR_ID.search(out["error"]["msg"])
    assert ref is not None and _logged_under(caplog, ref.group(1)).exc_info is not None


def test_a_layer_whose_solve_raises_an_oserror_fails_with_an_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """POST /schedule's layer runner: an OSError from the pool (not a crash of ours) fails the layer with an id."""
    from tileplan.jobs import solve

    async def no_space(*args: Any, **kwargs: Any) -> Any:
        _no_space()

    monkeypatch.setattr(solve.SolverPool, "solve", no_space)
    with caplog.at_level(logging.ERROR), TestClient(create_app(Settings(data_dir=tmp_path, solver_processes=1,
                                                                        max_attempts=2))) as c:
        r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC]})
    assert r.status_code == 500, r.text
    assert SECRET not in r.text and "No space" not in r.text
    err = r.json()["errors"][0]
    assert err["type"] == "solver_crashed", err
    ref = ERROR_ID.search(err["msg"])
    assert ref is not None and _logged_under(caplog, ref.group(1)).exc_info is not None


def test_an_unexpected_codegen_error_names_an_id_not_its_text(monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A module build (GET /plans/{key}/module's reason, `options.codegen`'s warning) likewise."""
    import tileplan.codegen.pipeline
    from tileplan.jobs import solve

    monkeypatch.setattr(tileplan.codegen.pipeline, "build_module", _no_space)
    with caplog.at_level(logging.ERROR):
        out = solve._module(None, FC, None)  # (the mapping and hardware are only passed to the failing stage)
    assert out["ok"] is False and SECRET not in out["error"] and "No space" not in out["error"], out
    ref = ERROR_ID.search(out["error"])
    assert ref is not None and _logged_under(caplog, ref.group(1)).exc_info is not None
