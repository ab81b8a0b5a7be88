"""A plan deleted while a waiting POST /schedule was being answered (found with 150 concurrent requests: 60 distinct
layers, 30 identical waited ones, DELETE /plans/{key} of listed plans): the POST answered 410 "a plan of this job was
deleted", though its client did nothing wrong and the plan it asked for is solved again on asking. Any write token can
delete any cached plan (it is one shared cache), so a client deleting plans in a loop made other clients' requests
fail. A waited POST whose plans went between its job's end and its answer now schedules them again (a bounded number
of times); GET /jobs/{id} of such a job still says 410 (its answer is gone)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.settings import Settings

LAYER = {"name": "fc", "op": "matmul", "M": 4, "K": 16, "N": 24}


@pytest.fixture()
def client(tmp_path: Any) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path, solver_processes=1, wait_limit_s=120)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_a_plan_deleted_as_its_job_ends_is_solved_again_not_a_410(client: TestClient) -> None:
    scheduler = client.app.state.scheduler  # type: ignore[attr-defined]
    store = client.app.state.store  # type: ignore[attr-defined]
    real_wait = scheduler.queue.wait
    deleted: list[str] = []

    async def wait_then_delete(job_id: str, limit: float) -> Any:
        st = await real_wait(job_id, limit)
        if not deleted:  # another client's DELETE /plans/{key} lands between the job's end and its answer
            for key in store.get_job(job_id).request["keys"]:
                assert store.delete_plan(key)
                deleted.append(key)
        return st

    scheduler.queue.wait = wait_then_delete
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [LAYER],
                                       "options": {"time_limit_s": 2}, "wait": True})
    assert deleted, "the deletion never ran"
    assert r.status_code == 200, r.text[:500]
    plans = r.json()["plans"]
    assert [p["key"] for p in plans] == deleted and client.get(f"/plans/{deleted[0]}").status_code == 200
