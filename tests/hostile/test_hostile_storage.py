"""Case 6 of issue 23: nothing was ever deleted (each compile could store 128 MiB forever; one 90 MB model left a
266 MB database and a 181 MB WAL). Now: a per-owner quota on stored compiles (409), DELETE /compiles/{id} for its
owners (an admin: any), and retention by age and total size, least recently used first, applied by the server,
with SQLite's space given back to the file system."""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.api.auth import fingerprint
from tileplan.frontend import zoo
from tileplan.settings import Settings
from tileplan.store import Store

TOKENS = ["alice-token", "bob-token", "root-token:admin"]
ALICE, BOB, ROOT = ({"authorization": f"Bearer {t}-token"} for t in ("alice", "bob", "root"))
MiB = 1 << 20


def put(store: Store, compile_id: str, size: int, *owners: str, done: bool = True) -> None:
    """A finished compile of `size` model bytes (plus as many of artifact), held by `owners`."""
    request = {"hardware": {"name": "hw"}, "options": {}, "input_shapes": {}}
    for owner in owners or (None,):
        store.create_compile(compile_id, model=os.urandom(size), model_name="m", hardware="hw", request=request,
                             deadline=time.time() + 600, owner=owner)
    if done:
        store.start_compile(compile_id)
        store.finish_compile(compile_id, {"ops": []}, os.urandom(size))


def files_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.suffix != ".migrate-lock")


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("storage"), solver_processes=1, tokens=TOKENS,
                        compile_quota_bytes=3 * MiB)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_a_new_compile_over_the_owner_quota_is_a_409_storing_nothing(client: TestClient) -> None:
    store: Store = client.app.state.store  # type: ignore[attr-defined]
    put(store, "q" * 64, MiB + MiB // 2, fingerprint("alice-token"))  # 3 MiB held: at the quota
    before = store.compile_bytes()
    model = zoo.build("mlp", "qdq")
    body = {"hardware": "gemmini-16x16", "model": base64.b64encode(model).decode(), "wait": False,
            "options": {"time_limit_s": 1, "emulate": False}}
    r = client.post("/compile", json=body, headers=ALICE)
    assert r.status_code == 409, r.text
    err = r.json()["detail"][0]
    assert err["type"] == "quota_exceeded" and err["loc"] == ["body", "model"] and "quota" in err["msg"]
    assert store.compile_bytes() == before and len(store.list_compiles()) == 1
    assert client.delete("/compiles/" + "q" * 64, headers=ALICE).status_code == 204  # frees the quota
    assert store.owner_compile_bytes(fingerprint("alice-token")) == 0


def test_delete_is_for_the_owners_and_an_admin(client: TestClient) -> None:
    store: Store = client.app.state.store  # type: ignore[attr-defined]
    alice, bob = fingerprint("alice-token"), fingerprint("bob-token")
    put(store, "a" * 64, 1000, alice)
    put(store, "s" * 64, 1000, alice, bob)  # the same request from both: one compile, held by both
    put(store, "b" * 64, 1000, bob)
    assert client.delete("/compiles/" + "a" * 64).status_code == 401
    r = client.delete("/compiles/" + "a" * 64, headers=BOB)
    assert r.status_code == 403 and r.json()["detail"][0]["loc"] == ["path", "compile_id"]
    assert client.delete("/compiles/" + "a" * 64, headers=ALICE).status_code == 204
    assert client.get("/compiles/" + "a" * 64).status_code == 404
    assert client.delete("/compiles/" + "a" * 64, headers=ALICE).status_code == 404
    assert client.delete("/compiles/" + "s" * 64, headers=ALICE).status_code == 204  # bob still holds it
    assert client.get("/compiles/" + "s" * 64).status_code == 200
    assert store.owner_compile_bytes(alice) == 0 and store.owner_compile_bytes(bob) > 0
    assert client.delete("/compiles/" + "s" * 64, headers=BOB).status_code == 204
    assert client.get("/compiles/" + "s" * 64).status_code == 404
    assert client.delete("/compiles/" + "b" * 64, headers=ROOT).status_code == 204  # an admin: any
    assert client.get("/compiles/" + "b" * 64).status_code == 404


def test_retention_deletes_least_recently_used_and_sqlite_gives_the_space_back(tmp_path: Path) -> None:
    db = tmp_path / "retention.db"
    store = Store(f"sqlite:///{db}")
    for i in range(6):
        put(store, f"c{i}", 2 * MiB, "o")  # ~4 MiB each
    put(store, "running", 2 * MiB, "o", done=False)  # never deleted while it is not finished
    store.touch_compile("c0")  # used again: now the most recently used
    store.create_job("old", hardware="hw", request={}, layers=[("k", 0)], cached={"k"}, deadline=time.time() + 60)
    store.finish_layer("old", "k")  # (a job of all-cached layers is finished by its first progress)
    # nothing to delete; the file holds what was stored (storing an artifact no longer rewrites its compile's model)
    assert store.apply_retention(compile_max_age_s=3600, compile_max_bytes=1 << 40, job_max_age_s=3600) == {
        "compiles": 0, "jobs": 0}
    full = files_bytes(db)
    assert 24 * MiB < full < store.compile_bytes() + 2 * MiB, (full, store.compile_bytes())
    gone = store.apply_retention(compile_max_age_s=3600, compile_max_bytes=13 * MiB, job_max_age_s=1e-6)
    left = {c.id for c in store.list_compiles()}
    assert left == {"running", "c5", "c0"}, left  # c1..c4 were the least recently used
    assert gone == {"compiles": 4, "jobs": 1} and store.get_job("old") is None
    assert store.compile_bytes() <= 13 * MiB
    assert files_bytes(db) < full - 14 * MiB  # 16 MiB deleted: the file and its WAL shrank with them
    time.sleep(0.01)
    store.apply_retention(compile_max_age_s=1e-6, compile_max_bytes=1 << 40, job_max_age_s=3600)
    assert {c.id for c in store.list_compiles()} == {"running"}  # by age: every finished one
    store.close()


def test_updating_a_compile_does_not_rewrite_its_model_or_artifact(tmp_path: Path) -> None:
    """SQLite rewrites a whole row on every UPDATE: with the model and artifact in the compile's row, each progress
    step, status change and use of a compile wrote its model again (a 64 MB model: ~40 MB and ~1 s per update,
    measured). They live in a table of their own now, written once."""
    import sqlite3

    db = tmp_path / "rows.db"
    store = Store(f"sqlite:///{db}")
    put(store, "big", 8 * MiB, "o", done=False)
    store.start_compile("big")
    store.reclaim()  # (checkpoints the WAL: what follows is all it holds)
    for i in range(10):
        store.compile_progress("big", i, 10)
    store.touch_compile("big")
    wal = db.parent / (db.name + "-wal")
    assert wal.stat().st_size < MiB, wal.stat().st_size  # was 17 MB: the model written again and again
    assert store.finish_compile("big", {"ops": []}, b"tar" * 1000)
    assert store.compile_model_bytes("big") is not None and store.compile_artifact("big") == b"tar" * 1000
    assert store.get_compile("big").artifact_bytes == 3000
    store.close()
    with sqlite3.connect(db) as conn:  # (the compile's row holds no bytes of either)
        cols = {r[1] for r in conn.execute("PRAGMA table_info(compiles)")}
    assert not cols & {"model", "artifact"}


def test_the_server_applies_retention(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, solver_processes=1, compile_store_max_bytes=5 * MiB)
    store = Store(settings.db_url())
    for i in range(3):
        put(store, f"c{i}", MiB, "addr:testclient")
    store.close()
    with TestClient(create_app(settings)) as c:
        end = time.monotonic() + 60
        while len(c.get("/compiles").json()["compiles"]) > 2 and time.monotonic() < end:
            time.sleep(0.1)
        assert [x["id"] for x in c.get("/compiles").json()["compiles"]] == ["c2", "c1"]
        # without tokens the owner is the client's address: this client's compile is its to delete
        assert c.delete("/compiles/c1").status_code == 204


def test_quota_delete_and_retention_on_postgresql(fresh_pg: str) -> None:
    """The same store operations on PostgreSQL (the quota's check under an advisory lock, bytea lengths)."""
    from tileplan.settings import normalise_db_url
    from tileplan.store.repository import QuotaExceeded

    store = Store(normalise_db_url(fresh_pg))
    try:
        put(store, "p1", MiB, "alice", "bob")
        held = store.owner_compile_bytes("alice")
        assert held == store.owner_compile_bytes("bob") > 2 * MiB
        request = {"hardware": {"name": "hw"}, "options": {}, "input_shapes": {}}
        with pytest.raises(QuotaExceeded):
            store.create_compile("p2", model=b"x" * MiB, model_name="m", hardware="hw", request=request,
                                 deadline=time.time() + 60, owner="alice", quota=held + MiB)
        assert store.get_compile("p2") is None
        assert store.create_compile("p2", model=b"x" * 1000, model_name="m", hardware="hw", request=request,
                                    deadline=time.time() + 60, owner="alice", quota=held + MiB)
        store.fail_compile("p2", {"loc": [], "msg": "bad", "type": "value_error"}, final=True)
        assert store.get_compile("p2").stored_bytes < 1000  # the dropped model no longer counts
        assert store.delete_compile("p1", "carol") == "forbidden"
        assert store.delete_compile("p1", "alice") == "released" and store.owner_compile_bytes("alice") < MiB
        assert store.apply_retention(compile_max_age_s=3600, compile_max_bytes=MiB, job_max_age_s=3600) == {
            "compiles": 1, "jobs": 0}
        assert [c.id for c in store.list_compiles()] == ["p2"]
    finally:
        store.close()
