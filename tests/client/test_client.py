"""TileplanClient against an httpx MockTransport: retries, 202 polling, errors, typed results."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tileplan_client import BadInput, JobFailed, Plan, ServiceError, TileplanClient

PLAN = {
    "key": "a" * 64, "layer": {"name": "fc", "op": "matmul"}, "hardware": "gemmini-16x16", "mapper": "cosa",
    "mapping": {"levels": []},
    "metrics": {"cycles": 100.0, "energy_pj": 5.0, "utilization": 0.5, "dram_bytes": 10.0, "ideal_cycles": 50.0,
                "bound": "compute"},
    "baseline": {"mapper": "gemmini-auto", "mapping": {"levels": []},
                 "metrics": {"cycles": 250.0, "energy_pj": 9.0, "utilization": 0.2, "dram_bytes": 20.0,
                             "ideal_cycles": 50.0, "bound": "DRAM"}},
    "solver": {"status": "optimal", "seconds": 0.1}, "cached": False, "links": {"self": "/plans/" + "a" * 64},
}
DONE = {"id": "j1", "status": "done", "plans": [PLAN], "summary": {"layers": 1, "unique_layers": 1, "cached": 0,
                                                                   "solved": 1, "cycles": 100.0, "energy_pj": 5.0}}


def client_for(handler: Any, **kw: Any) -> TileplanClient:
    return TileplanClient("http://svc", "tok", transport=httpx.MockTransport(handler), poll_interval=0.01, **kw)


def test_typed_result_and_token() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json=DONE)

    res = client_for(handler).schedule("gemmini-16x16", [{"op": "matmul", "M": 1, "K": 2, "N": 3}], mapper="cosa")
    assert res.status == "done" and res.plans[0].metrics.cycles == 100.0
    assert res.plans[0].speedup == pytest.approx(2.5) and not res.plans[0].slower_than_baseline
    assert res.summary.solved == 1 and res.plans[0].cached_at is None
    cached = Plan.from_dict({**PLAN, "cached": True, "cached_at": "2026-12-01T13:00:00+00:00"})
    assert cached.cached and cached.cached_at == "2026-12-01T13:00:00+00:00"
    assert seen[0].headers["authorization"] == "Bearer tok"
    body = json.loads(seen[0].content)
    assert body["options"] == {"mapper": "cosa"} and body["hardware"] == "gemmini-16x16"


def test_polls_a_202_job_until_done() -> None:
    polls = {"n": 0}
    progress: list[tuple[int, int]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.method == "POST":
            return httpx.Response(202, json={"id": "j1", "status": "queued", "progress": {"done": 0, "total": 1},
                                             "links": {"self": "/jobs/j1"}})
        polls["n"] += 1
        if polls["n"] < 3:
            return httpx.Response(200, json={"id": "j1", "status": "running", "progress": {"done": 0, "total": 1}})
        return httpx.Response(200, json={**DONE, "progress": {"done": 1, "total": 1}})

    res = client_for(handler).schedule("gemmini-16x16", [{}], on_progress=lambda j: progress.append((j.done, j.total)))
    assert res.plans[0].key == "a" * 64 and polls["n"] == 3
    assert progress[0] == (0, 1) and progress[-1] == (1, 1)


def test_retries_unavailable_then_succeeds() -> None:
    calls = {"n": 0}

    def handler(req: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx.ConnectError("refused")
        if calls["n"] == 2:
            return httpx.Response(503, json={"detail": [{"loc": [], "msg": "busy", "type": "x"}]})
        return httpx.Response(200, json=DONE)

    assert client_for(handler, retries=3).schedule("g", [{}]).status == "done"
    assert calls["n"] == 3


def test_gives_up_after_retries() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    with pytest.raises(ServiceError, match="cannot reach"):
        client_for(handler, retries=1).schedule("g", [{}])


def test_bad_input_and_server_errors() -> None:
    detail = [{"loc": ["body", "layers", 0, "kernel"], "msg": "too big", "type": "value_error"}]

    def bad(req: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"detail": detail})

    with pytest.raises(BadInput) as exc:
        client_for(bad).schedule("g", [{}])
    assert exc.value.status == 422 and "layers.0.kernel: too big" in str(exc.value)

    def broken(req: httpx.Request) -> httpx.Response:
        return httpx.Response(500, json={"detail": [{"loc": [], "msg": "internal error (reference x)", "type": "i"}]})

    with pytest.raises(ServiceError) as err:
        client_for(broken).schedule("g", [{}])
    assert err.value.status == 500


def test_failed_job_and_timeout() -> None:
    def failing(req: httpx.Request) -> httpx.Response:
        if req.method == "POST":
            return httpx.Response(202, json={"id": "j", "status": "queued", "progress": {"done": 0, "total": 1}})
        return httpx.Response(200, json={"id": "j", "status": "failed", "progress": {"done": 0, "total": 1},
                                         "errors": [{"loc": ["layers", 0], "msg": "no legal mapping",
                                                     "type": "infeasible"}]})

    with pytest.raises(JobFailed) as exc:
        client_for(failing).schedule("g", [{}])
    assert exc.value.input_fault and "layers.0: no legal mapping" in str(exc.value)

    def forever(req: httpx.Request) -> httpx.Response:
        return httpx.Response(202 if req.method == "POST" else 200,
                              json={"id": "j", "status": "running", "progress": {"done": 0, "total": 1}})

    with pytest.raises(ServiceError, match="not done after"):
        client_for(forever).schedule("g", [{}], timeout=0.2)


# -- the rest of the API: modules, Timeloop, hardware, jobs, the async twin, typed errors -------------------------

NAMED = {**PLAN, "layer": {"name": "conv3", "op": "matmul"},
         "links": {"self": "/plans/" + "a" * 64 + "?name=conv3", "module": "/plans/" + "a" * 64 + "/module?name=conv3",
                   "timeloop": "/plans/" + "a" * 64 + "/timeloop?name=conv3"}}


def api(req: httpx.Request) -> httpx.Response:
    """A canned service: enough of every endpoint for the SDK's requests and typed answers."""
    path, q = req.url.path, dict(req.url.params)
    if path.endswith("/module"):
        if path.startswith("/plans/" + "b" * 64):
            return httpx.Response(422, json={"detail": [{"loc": ["path", "key"], "msg": "no module: no code generator",
                                                         "type": "codegen_error"}]})
        name = q.get("name", "fc")
        body = f"void {name}(void);".encode() if q["format"] != "tar" else b"TAR:" + name.encode()
        headers = {"x-model-cycles": "123.5", "x-codegen-notes": json.dumps(["K padded"])}
        if q["format"] == "tar":
            headers["content-disposition"] = f'attachment; filename="{name}.tar"'
        return httpx.Response(200, content=body, headers=headers)
    if path.endswith("/timeloop"):
        return httpx.Response(200, text=f"# {q}\nmapping: []\n")
    if path == "/hardware":
        return httpx.Response(200, json={"hardware": [{"name": "gemmini-16x16", "description": "16x16",
                                                       "source": "catalog", "links": {"self": "/hardware/g"}}]})
    if path.startswith("/plans/"):
        if "c" * 64 in path:
            return httpx.Response(404, json={"detail": [{"loc": ["path", "key"], "msg": "no plan", "type": "not_found"}]})
        return httpx.Response(200, json={**PLAN, "layer": {"name": q.get("name", "fc")}})
    if path == "/evaluate":
        return httpx.Response(200, json={"valid": True, "metrics": PLAN["metrics"], "violations": []})
    if path == "/jobs/j9":
        return httpx.Response(200, json={**DONE, "id": "j9", "notes": ["model: 1 ConvTranspose node(s) not planned"],
                                         "created_at": "2026-12-01T10:00:00+00:00",
                                         "summary": {**DONE["summary"], "baseline_mapper": "gemmini-auto",
                                                     "seconds": 1.5}})
    if path == "/schedule":
        if json.loads(req.content)["hardware"] == "simba":
            return httpx.Response(422, json={**DONE, "detail": [{"loc": ["body", "options", "codegen"],
                                                                  "msg": "no code generator for simba",
                                                                  "type": "codegen_unsupported"}]})
        return httpx.Response(202, json={"id": "j9", "status": "queued", "progress": {"done": 0, "total": 1}})
    return httpx.Response(404, json={"detail": [{"loc": [], "msg": "?", "type": "not_found"}]})


def test_module_timeloop_hardware_evaluate_and_wait() -> None:
    from tileplan_client import Hardware, NotFound

    c = client_for(api)
    plan = Plan.from_dict(NAMED)
    m = c.module(plan)  # a plan from an answer: its module under the layer name that answer gave it
    assert m.format == "c" and m.text == "void conv3(void);" and m.model_cycles == 123.5 and m.notes == ["K padded"]
    tar = c.module(plan, "tar")
    assert tar.filename == "conv3.tar" and tar.data == b"TAR:conv3"
    with pytest.raises(ValueError):
        tar.text  # noqa: B018
    assert c.module("a" * 64, "c", name="other").text == "void other(void);"
    assert c.plan(plan).name == "conv3"  # the plan's own link keeps the name too
    assert "'name': 'conv3'" in c.timeloop(plan) and "'bundle': 'true'" in c.timeloop(plan, bundle=True)
    (hw,) = c.hardware()
    assert isinstance(hw, Hardware) and hw.name == "gemmini-16x16" and hw.source == "catalog"
    ev = c.evaluate("gemmini-16x16", {"op": "matmul", "M": 1, "K": 1, "N": 1}, {"levels": []})
    assert ev.valid and ev.metrics is not None and ev.metrics.cycles == 100.0
    job = c.submit("gemmini-16x16", [{"op": "matmul"}])
    assert job.status == "queued" and job.result is None
    res = c.wait(job)
    assert res.notes == ["model: 1 ConvTranspose node(s) not planned"]
    assert res.summary.baseline_mapper == "gemmini-auto" and res.summary.seconds == 1.5
    assert c.job("j9").created_at == "2026-12-01T10:00:00+00:00"
    with pytest.raises(NotFound) as nf:
        c.plan("c" * 64)
    assert nf.value.status == 404 and nf.value.type == "not_found"
    with pytest.raises(BadInput) as bad:
        c.module("b" * 64)
    assert bad.value.status == 422 and "no code generator" in str(bad.value)


def test_codegen_refusal_carries_the_plans() -> None:
    with pytest.raises(BadInput) as exc:
        client_for(api).schedule("simba", [{"op": "matmul"}], options={"codegen": True})
    assert exc.value.type == "codegen_unsupported" and exc.value.result is not None
    assert exc.value.result.plans[0].key == "a" * 64


def test_async_twin() -> None:
    import asyncio

    from tileplan_client import AsyncTileplanClient, JobFailed

    async def go() -> None:
        async with AsyncTileplanClient("http://svc", transport=httpx.MockTransport(api), poll_interval=0.01) as c:
            res = await c.schedule("gemmini-16x16", [{"op": "matmul"}])
            assert res.plans[0].speedup == pytest.approx(2.5) and res.summary.baseline_mapper == "gemmini-auto"
            assert (await c.module(Plan.from_dict(NAMED))).text == "void conv3(void);"
            assert (await c.hardware())[0].name == "gemmini-16x16"
            assert (await c.evaluate("g", {}, {})).valid
            assert "mapping" in await c.timeloop("a" * 64)
            assert (await c.plan("a" * 64)).key == "a" * 64
        failing = httpx.MockTransport(lambda req: httpx.Response(200, json={
            "id": "j", "status": "failed", "progress": {"done": 0, "total": 1},
            "errors": [{"loc": ["layers", 0], "msg": "no legal mapping", "type": "infeasible"}]}))
        async with AsyncTileplanClient("http://svc", transport=failing) as c:
            with pytest.raises(JobFailed):
                await c.wait("j")

    asyncio.run(go())


def test_client_loop_nest_matches_the_service() -> None:
    """The client prints a loop nest exactly as the service's tileplan.loopnest does."""
    from tileplan.loopnest import legend, loop_nest_text, used_dims
    from tileplan_client import nest

    mappings = [
        {"levels": [{"name": "Registers", "temporal": [["P", 32]], "spatial": []},
                    {"name": "Accumulator", "temporal": [["C", 4], ["K", 4]], "spatial": [["C", 16]]},
                    {"name": "Scratchpad", "temporal": [], "spatial": [["K", 12]]},
                    {"name": "DRAM", "temporal": [["Q", 7], ["K", 1]], "spatial": []}],
         "double_buffered": {"Scratchpad": ["I", "W"]}, "padded_dims": {"K": 48}},
        {"levels": []},
    ]
    keeps = {"Registers": ["W"], "Accumulator": ["O"], "Scratchpad": ["I", "W"], "DRAM": ["I", "O", "W"]}
    for m in mappings:
        assert nest.loop_nest_text(m) == loop_nest_text(m)
        assert nest.loop_nest_text(m, keeps) == loop_nest_text(m, keeps)
        assert nest.legend(nest.used_dims(m)) == legend(used_dims(m))


def test_cli_progress_bar_follows_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    from tileplan_client.cli import progress_bar
    from tileplan_client.models import Job

    update, close = progress_bar(True)
    for done in (0, 1, 3):
        update(Job(id="j", status="running", done=done, total=3, errors=[]))
    close()
    err = capsys.readouterr().err
    assert "layers" in err and "3/3" in err and "running" in err
    update, close = progress_bar(False)  # off a terminal: nothing
    update(Job(id="j", status="running", done=1, total=3, errors=[]))
    close()
    assert capsys.readouterr().err == ""


def test_compile_polls_until_done_or_failed() -> None:
    """`compile`: the model uploaded as multipart, a 202 polled with progress until done; a compile that fails
    while polled raises CompileFailed naming the node, and says whose fault it was."""
    from tileplan_client import CompileFailed

    summary = {"ops": [{"name": "fc", "op": "matmul", "where": "accelerator", "reason": "int8", "plan_key": "k",
                        "cycles_emulated": 10, "cycles_model": 9.5, "speedup": 1.2},
                       {"name": "pool", "op": "maxpool", "where": "host", "reason": "no accelerator op"}],
               "total": {"ops": 2, "accelerator_ops": 1}, "notes": ["on the host: 1 MaxPool"]}
    state = {"polls": 0, "fail": False}
    posted: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.method == "POST":
            posted.append(req)
            return httpx.Response(202, json={"id": "c1", "status": "queued", "model": "m", "hardware": "hw",
                                             "progress": {"ops_done": 0, "ops_total": 0}})
        state["polls"] += 1
        if state["polls"] < 3:
            return httpx.Response(200, json={"id": "c1", "status": "running", "progress": {"ops_done": 1,
                                                                                          "ops_total": 2}})
        if state["fail"]:
            return httpx.Response(200, json={"id": "c1", "status": "failed", "progress": {}, "error": {
                "loc": ["model", "odd"], "msg": "Odd node 'odd' cannot be imported", "type": "value_error"}})
        return httpx.Response(200, json={"id": "c1", "status": "done", "progress": {"ops_done": 2, "ops_total": 2},
                                         "summary": summary, "notes": summary["notes"]})

    seen: list[tuple[str, int]] = []
    c = client_for(handler).compile("hw", b"onnx-bytes", input_shapes={"x": (1, 3)}, quantize=True,
                                    on_progress=lambda c: seen.append((c.status, c.ops_done)))
    assert c.status == "done" and [o.name for o in c.host_ops] == ["pool"] and c.ops[0].speedup == 1.2
    assert c.notes == ["on the host: 1 MaxPool"] and ("running", 1) in seen
    form = posted[0].content
    assert b'name="model"' in form and b"onnx-bytes" in form
    assert b'"input_shapes": {"x": [1, 3]}' in form and b'"quantize": true' in form
    state.update(polls=0, fail=True)
    with pytest.raises(CompileFailed) as e:
        client_for(handler).compile("hw", b"onnx-bytes")
    assert e.value.input_fault and e.value.error["loc"] == ["model", "odd"] and "odd" in str(e.value)
