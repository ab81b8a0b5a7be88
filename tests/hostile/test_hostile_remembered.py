"""POST /compile remembers request bodies by digest (an identical body is answered without being read again), per API
process. What a body means must then not change under another API process: a registered hardware name can be
registered, replaced or deleted through any of them, and the others' memories would not know (two apps on one
database here, as two `tileplan serve` processes behind one address would be)."""

from __future__ import annotations

import base64
from pathlib import Path

from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.frontend import zoo
from tileplan.hardware.catalog import catalog
from tileplan.settings import Settings


def test_a_body_naming_registered_hardware_is_not_answered_from_another_processes_memory(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, solver_processes=1)
    request = {"hardware": "team-npu", "model": base64.b64encode(zoo.build("mlp", "qdq")).decode(),
               "options": {"time_limit_s": 2}, "wait": False}
    small = {**catalog()["gemmini-8x8"].model_dump(mode="json"), "name": "team-npu"}
    large = {**catalog()["gemmini-16x16"].model_dump(mode="json"), "name": "team-npu"}
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        r = a.post("/compile", json=request)
        assert r.status_code == 422 and r.json()["detail"][0]["type"] == "unknown_hardware", r.text
        assert b.post("/hardware", json=small).status_code == 201
        r = a.post("/compile", json=request)  # before: the same 422, answered from a's memory of the body
        assert r.status_code in (200, 202), r.text
        first = r.json()["id"]
        assert b.put("/hardware/team-npu", json=large).status_code == 200
        r = a.post("/compile", json=request)  # before: the compile for the 8x8 descriptor, from a's memory
        assert r.status_code in (200, 202), r.text
        assert r.json()["id"] != first
        assert b.delete(f"/compiles/{first}").status_code == 204
        assert b.delete(f"/compiles/{r.json()['id']}").status_code == 204


def test_a_compile_recorded_after_its_client_left_is_run_not_left_queued(tmp_path: Path) -> None:
    """A client that leaves while its model is being checked lets the check finish (its process is not restarted for
    that); the check records the compile. Before, nobody ran it: its row stayed "queued" (holding its owner's quota)
    until an identical request came, or the server restarted."""
    import asyncio
    import json
    import os

    from tileplan.jobs import intake

    model = zoo.build("mlp", "qdq")
    doc = {"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(), "options": {"time_limit_s": 2},
           "wait": False}
    path = tmp_path / "body.json"
    path.write_text(json.dumps(doc))
    with TestClient(create_app(Settings(data_dir=tmp_path / "data", solver_processes=1))) as c:
        compiler = c.app.state.compiler  # type: ignore[attr-defined]
        store = c.app.state.store  # type: ignore[attr-defined]
        real = compiler._intake

        async def client_leaves_during_the_check() -> None:
            async def intake_call(lane: object, fn: object, *args: object, **kw: object) -> object:
                if fn is not intake.admit:
                    return await real(lane, fn, *args, **kw)
                calls = compiler.intake_calls
                call = asyncio.ensure_future(real(lane, fn, *args, **kw))
                while compiler.intake_calls == calls:  # until the check is running in its process
                    await asyncio.sleep(0.01)
                call.cancel()  # (what a client leaving does: POST /compile's unless_gone cancels the admit)
                return await call

            compiler._intake = intake_call
            try:
                await compiler.admit("application/json", str(path), "client-a", lambda d: _body(d))
            except asyncio.CancelledError:
                pass
            else:
                raise AssertionError("the admit was not cancelled")
            finally:
                compiler._intake = real

        c.portal.call(client_leaves_during_the_check)
        assert os.path.exists(path)
        statuses = []
        for _ in range(600):  # the check finishes in its process; its compile must then be run (or be gone)
            rows = store.list_compiles(limit=10)
            statuses = [r.status for r in rows]
            if rows and all(s != "queued" for s in statuses):
                break
            c.portal.call(asyncio.sleep, 0.2)
        assert statuses and "queued" not in statuses, statuses


def _body(doc: dict[str, object]) -> object:
    from tileplan.api.routes.compiles import _validate

    return _validate(doc)
