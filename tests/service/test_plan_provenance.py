"""A plan is cached under the code that made it: after an upgrade that changes the mappers, the cost model or
anything else of Tileplan's code, a stored plan is solved again, not answered with the old code's mapping and
cycles (before, the key held a version string bumped by hand, and 11 commits to the cost model and mappers went by
without a bump)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tileplan import provenance
from tileplan.api.app import create_app
from tileplan.settings import Settings

MM = {"op": "matmul", "M": 32, "K": 64, "N": 32}


def app(data_dir) -> TestClient:
    return TestClient(create_app(Settings(data_dir=data_dir, solver_processes=1, wait_limit_s=300)))


def schedule(client: TestClient) -> dict:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [MM],
                                       "options": {"time_limit_s": 1.0, "baseline": False}})
    assert r.status_code == 200, r.text
    return r.json()["plans"][0]


def test_a_plan_made_by_other_code_is_solved_again(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    with app(tmp_path) as client:
        first = schedule(client)
        assert first["cached"] is False
        assert schedule(client)["cached"] is True  # the same code: the stored plan
    monkeypatch.setattr(provenance, "code_digest", lambda: "f" * 64)  # as after an upgrade: the server restarted
    with app(tmp_path) as client:
        other = schedule(client)
        assert other["cached"] is False and other["key"] != first["key"]
        assert "ffffffffffff" in client.get("/healthz").json()["solver_version"]
        assert client.get(f"/plans/{first['key']}").status_code == 200  # the old plan is still stored


def test_the_code_digest_covers_the_planning_code() -> None:
    from pathlib import Path

    import tileplan.cost
    import tileplan.mappers

    files = provenance.source_files()
    for pkg in (tileplan.mappers, tileplan.cost):
        root = Path(str(pkg.__file__)).parent
        assert any(p.parent == root for p in files), root
    assert len(provenance.code_digest()) == 64
