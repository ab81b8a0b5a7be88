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
