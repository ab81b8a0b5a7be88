"""POST /schedule's answers from the cache kept as bytes (tileplan.api.answers): the same answer as assembling it
afresh, never a stale one (the app in-process: SQLite, local solver pool)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tileplan.api.answers import KeptAnswer, KeptAnswers, split_at_seconds
from tileplan.api.app import create_app
from tileplan.settings import Settings

FAST = {"time_limit_s": 1.0}
MM = {"name": "mm", "op": "matmul", "M": 32, "K": 48, "N": 32}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("kept"), solver_processes=1)
    with TestClient(create_app(settings)) as c:
        yield c


def post(client: TestClient, body: dict):  # the same bytes every time (the kept answers' key)
    return client.post("/schedule", content=json.dumps(body), headers={"content-type": "application/json"})


def schedule(client: TestClient, body: dict) -> dict:
    r = post(client, body)
    assert r.status_code == 200, r.text
    return r.json()


def without_seconds(answer: dict) -> dict:
    return {**answer, "summary": {k: v for k, v in answer["summary"].items() if k != "seconds"}}


def test_a_kept_answer_is_the_answer_assembled_afresh(client: TestClient) -> None:
    kept: KeptAnswers = client.app.state.kept_answers  # type: ignore[attr-defined]
    body = {"hardware": "gemmini-16x16", "layers": [MM, {**MM, "name": "again"}], "options": FAST}
    solved = schedule(client, body)
    assert solved["summary"]["solved"] == 1  # the two layers are one plan
    before = len(kept)
    afresh = schedule(client, body)  # from the cache, assembled; kept from now on
    assert len(kept) == before + 1
    again = schedule(client, body)
    assert without_seconds(again) == without_seconds(afresh)
    assert again["summary"]["seconds"] >= 0 and [p["cached"] for p in again["plans"]] == [True, True]
    assert [p["layer"]["name"] for p in again["plans"]] == ["mm", "again"]  # each asker's name, as assembled


def test_a_deleted_plan_is_never_answered_from_a_kept_answer(client: TestClient) -> None:
    """On SQLite every hit looks its plans up: a plan deleted behind the server's back (another process, the
    same file) is noticed, and the request is answered the ordinary way."""
    from tileplan.store import Store

    kept: KeptAnswers = client.app.state.kept_answers  # type: ignore[attr-defined]
    body = {"hardware": "gemmini-16x16", "layers": [{**MM, "N": 16}], "options": FAST}
    schedule(client, body)
    key = schedule(client, body)["plans"][0]["key"]
    assert schedule(client, body)["plans"][0]["cached"] is True  # the kept answer
    held = len(kept)
    other = Store(client.app.state.store.url, migrate=False)  # type: ignore[attr-defined]
    try:
        assert other.delete_plan(key)
    finally:
        other.close()
    r = post(client, body)
    assert r.status_code in (200, 202), r.text  # solved again (or being solved), not the kept bytes
    if r.status_code == 200:
        assert r.json()["plans"][0]["cached"] is False
    assert len(kept) == held - 1


def test_on_sqlite_a_hit_looks_its_plans_up_only_after_another_connection_committed(client: TestClient) -> None:
    """A repeated hit with nothing committed to the file since its last check skips the lookup (SQLite's
    `data_version` says so); a commit by another connection (here an unrelated plan, as a solver would insert)
    makes the next hit look its plans up again, and as they are unchanged the kept answer still serves."""
    from tileplan.store import Store

    state = client.app.state  # type: ignore[attr-defined]
    kept: KeptAnswers = state.kept_answers
    body = {"hardware": "gemmini-16x16", "layers": [{**MM, "N": 48}], "options": FAST}
    schedule(client, body)
    schedule(client, body)  # assembled from the cache, kept from now on
    lookups: list[list[str]] = []
    real = state.scheduler.cached_rows

    async def counted(keys: list[str]):
        lookups.append(keys)
        return await real(keys)

    state.scheduler.cached_rows = counted
    try:
        schedule(client, body)  # the first hit checks (the entry was kept at the assembly's own lookup)
        checks = len(lookups)
        for _ in range(3):
            assert schedule(client, body)["plans"][0]["cached"] is True
        assert len(lookups) == checks  # nothing committed since: no lookups
        other = Store(state.store.url, migrate=False)
        try:
            unrelated = schedule(client, {**body, "layers": [{**MM, "N": 80}]})["plans"][0]["key"]
            assert other.delete_plan(unrelated)  # a commit by another connection, not touching this answer's plan
        finally:
            other.close()
        held = len(kept)
        assert schedule(client, body)["plans"][0]["cached"] is True
        mine = [k for k in lookups if k != [unrelated]]  # (the unrelated request looked its own plan up)
        assert len(mine) == checks + 1 and len(kept) == held  # looked up once, still kept
        schedule(client, body)
        assert len([k for k in lookups if k != [unrelated]]) == checks + 1
    finally:
        state.scheduler.cached_rows = real


def test_bad_bodies_still_fail_validation(client: TestClient) -> None:
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [MM], "options": {"time_limit_s": -1}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "options"]


def test_kept_answers_are_bounded_by_bytes_least_recently_used_out() -> None:
    head, tail = split_at_seconds('{"plans":[{"solver":{"seconds": 9}}],"summary":{"cycles": 1, "seconds": 0.5},"x":1}')
    assert head.endswith(b'"seconds": ') and tail == b'},"x":1}' and b'"solver":{"seconds": 9}' in head
    entry = KeptAnswer(("k",), (1,), head, tail, layers=1)
    assert json.loads(entry.body(0.25))["summary"]["seconds"] == 0.25
    kept = KeptAnswers(max_bytes=3 * entry.size)
    for i in range(5):
        kept.put(bytes([i]), entry)
        kept.get(bytes([0]))  # the first stays in use
    assert len(kept) == 3 and kept.get(bytes([0])) is entry and kept.get(bytes([1])) is None
    generation = kept.generation
    kept.forget("k")  # its plan was deleted: every answer holding it goes
    assert len(kept) == 0
    kept.put(b"late", entry, generation)  # built from a lookup made before that deletion: not kept
    assert len(kept) == 0


def test_on_postgresql_a_plan_deleted_by_another_process_drops_the_kept_answer(fresh_pg: str, tmp_path) -> None:
    """Kept answers on PostgreSQL skip their lookup while the deletion listener is connected: a plan deleted
    through another connection (another API process, say) must still never be answered from the kept bytes."""
    import time

    from tileplan.store import Store

    settings = Settings(data_dir=tmp_path, database_url=fresh_pg, solver_processes=1)
    with TestClient(create_app(settings)) as client:
        kept: KeptAnswers = client.app.state.kept_answers  # type: ignore[attr-defined]
        end = time.monotonic() + 10
        while not kept.watched and time.monotonic() < end:
            time.sleep(0.05)
        assert kept.watched
        body = {"hardware": "gemmini-16x16", "layers": [MM], "options": FAST}
        schedule(client, body)
        key = schedule(client, body)["plans"][0]["key"]
        assert len(kept) == 1 and schedule(client, body)["plans"][0]["cached"] is True
        other = Store(fresh_pg, migrate=False)
        try:
            assert other.delete_plan(key)
        finally:
            other.close()
        end = time.monotonic() + 10
        while len(kept) and time.monotonic() < end:
            time.sleep(0.05)
        assert len(kept) == 0
        r = post(client, body)
        assert r.status_code in (200, 202), r.text
        if r.status_code == 200:
            assert r.json()["plans"][0]["cached"] is False


def test_a_kept_answer_still_needs_the_token_when_reads_are_protected(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path, solver_processes=1, tokens=["t1"], protect_reads=True)
    with TestClient(create_app(settings)) as client:
        kept: KeptAnswers = client.app.state.kept_answers  # type: ignore[attr-defined]
        body = json.dumps({"hardware": "gemmini-16x16", "layers": [MM], "options": FAST})
        auth = {"content-type": "application/json", "authorization": "Bearer t1"}
        for _ in range(3):
            r = client.post("/schedule", content=body, headers=auth)
            assert r.status_code == 200, r.text
        assert len(kept) == 1
        r = client.post("/schedule", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 401 and r.json()["detail"][0]["loc"] == ["header", "authorization"]
