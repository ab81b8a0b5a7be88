"""The plan cache on SQLite and PostgreSQL: immutable plans, claims, job progress, batched async reads."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import pytest

from tileplan.settings import normalise_db_url
from tileplan.store import Store
from tileplan.store.repository import AsyncPlanReader


def plan(key: str, cycles: float = 100.0) -> dict:
    return {"key": key, "layer": {"op": "matmul", "name": key[:4]}, "hardware": "hw", "mapper": "cosa",
            "mapping": {"levels": []}, "metrics": {"cycles": cycles, "energy_pj": 1.0},
            "baseline": {"mapper": "b", "mapping": {}, "metrics": {"cycles": 2 * cycles}}, "solver": {"seconds": 0.1},
            "cached": False, "links": {}}


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    url = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("fresh_pg")
    s = Store(normalise_db_url(url))
    yield s
    s.close()


def test_plans_are_immutable_and_round_trip(store: Store) -> None:
    assert store.put_plan(plan("a" * 64, 100.0), {"name": "hw"}) is True
    assert store.put_plan(plan("a" * 64, 999.0)) is False  # a key, once written, never changes
    got = store.get_plans(["a" * 64, "b" * 64])
    assert list(got) == ["a" * 64] and got["a" * 64].cycles == 100.0 and got["a" * 64].baseline_cycles == 200.0
    import json

    doc = json.loads(got["a" * 64].to_json(cached=True, hardware="mine", layer='{"name":"x"}'))
    assert doc["cached"] is True and doc["hardware"] == "mine" and doc["layer"] == {"name": "x"}
    assert doc["metrics"]["cycles"] == 100.0 and doc["key"] == "a" * 64
    assert store.plan_descriptor("a" * 64) == {"name": "hw"}
    assert store.delete_plan("a" * 64) and not store.get_plans(["a" * 64])


def test_claims_exclude_others_until_released_or_expired(store: Store) -> None:
    k = "c" * 64
    assert store.claim(k, "job1", ttl_s=30)
    assert not store.claim(k, "job2", ttl_s=30)
    assert store.claim(k, "job1", ttl_s=30)  # a retried job takes its own claim back
    store.release(k, "job1")
    assert store.claim(k, "job2", ttl_s=0.2)
    time.sleep(0.3)
    assert store.claim(k, "job3", ttl_s=30)  # expired: free for others
    assert store.claim_holder(k)[0] == "job3"


def test_job_progress_and_failure(store: Store) -> None:
    layers = [("k1" + "0" * 62, 0), ("k2" + "0" * 62, 1), ("k3" + "0" * 62, 3)]
    store.create_job("j1", hardware="hw", request={"keys": []}, layers=layers, cached={layers[0][0]},
                     deadline=time.time() + 60)
    assert store.job_status("j1") == ("queued", 1, 3)
    assert store.start_layer("j1", layers[1][0], "w:1") == 1
    assert store.job_status("j1")[0] == "running"
    assert store.finish_layer("j1", layers[1][0]) == "running"
    err = {"loc": ["layers", 3], "msg": "no legal mapping", "type": "infeasible"}
    assert store.finish_layer("j1", layers[2][0], err) == "failed"
    job = store.get_job("j1")
    assert (job.done, job.failed, job.total) == (2, 1, 3) and job.errors == [err] and job.finished_at
    store.create_job("j2", hardware="hw", request={}, layers=layers[:1], cached=set(), deadline=time.time() - 1)
    assert store.expire_jobs() == ["j2"]
    assert store.get_job("j2").errors[0]["type"] == "time_limit"


def test_batched_async_reads_answer_each_caller_with_its_own_keys(fresh_pg: str) -> None:
    store = Store(normalise_db_url(fresh_pg))
    keys = [f"{i:064x}" for i in range(30)]
    for i, k in enumerate(keys):
        store.put_plan(plan(k, float(i)))

    async def run() -> None:
        reader = AsyncPlanReader(store.url)
        await reader.open()
        try:
            rng = random.Random(0)
            asks = [rng.sample(keys, rng.randint(1, 4)) + (["f" * 64] if i % 5 == 0 else []) for i in range(200)]
            answers = await asyncio.gather(*(reader.get_plans(a) for a in asks))
            for ask, got in zip(asks, answers):
                assert set(got) == {k for k in ask if k in keys}
                assert all(got[k].cycles == float(keys.index(k)) for k in got)
        finally:
            await reader.close()

    asyncio.run(run())
    store.close()


def test_dense_and_matmul_are_one_op_when_listing(store: Store) -> None:
    """`dense` is an alias of `matmul`: a plan first asked for as dense is found by ?op=matmul and vice versa."""
    d = plan("d" * 64)
    d["layer"] = {"op": "dense", "name": "fc"}
    store.put_plan(d)
    store.put_plan(plan("m" * 64))
    for op in ("matmul", "dense"):
        assert {p.key for p in store.list_plans(op=op)} == {"d" * 64, "m" * 64}, op
    assert store.list_plans(op="conv2d") == []


def test_compiles_dedupe_progress_finish_and_retry(store: Store) -> None:
    """A compile row per id (a second create is refused), progress while it runs, summary and artifact in one
    write, a failure kept with its reason until retried; listing newest first with a cursor."""
    req = {"hardware": {"name": "hw"}, "options": {}, "input_shapes": {}}
    assert store.create_compile("c1", model=b"onnx-1", model_name="m1", hardware="hw", request=req,
                                deadline=time.time() + 60)
    assert not store.create_compile("c1", model=b"other", model_name="x", hardware="hw", request=req,
                                    deadline=time.time() + 60)
    c = store.get_compile("c1")
    assert (c.status, c.model_name, c.request, c.artifact_bytes) == ("queued", "m1", req, None)
    assert store.compile_model_bytes("c1") == b"onnx-1" and store.unfinished_compiles() == [("c1", None)]
    assert store.start_compile("c1") == 1
    store.compile_progress("c1", 2, 5)
    c = store.get_compile("c1")
    assert (c.status, c.ops_done, c.ops_total) == ("running", 2, 5)
    assert store.compile_artifact("c1") is None  # nothing until done
    summary = {"ops": [{"name": "a"}, {"name": "b"}], "total": {"ops": 2}, "notes": ["n"]}
    assert store.finish_compile("c1", summary, b"tar-bytes")
    assert not store.fail_compile("c1", {"loc": [], "msg": "late", "type": "x"})  # finished stays finished
    c = store.get_compile("c1")
    head = {"total": {"ops": 2}, "notes": ["n"]}  # (the per-op list is read where shown: compile_ops, the text)
    assert (c.status, c.summary, c.artifact_bytes, c.ops_done, c.ops_total) == ("done", head, 9, 2, 2)
    assert json.loads(store.compile_summary_text("c1") or "") == summary
    assert store.compile_ops("c1", 1) == ([{"name": "a"}], 2)
    assert c.finished_at is not None and len(c.artifact_sha256) == 64
    assert store.compile_artifact("c1") == b"tar-bytes" and store.start_compile("c1") == 0

    store.create_compile("c2", model=b"onnx-2", model_name="m2", hardware="hw2", request=req,
                         deadline=time.time() - 1)
    assert store.expire_compiles() == ["c2"]
    assert store.get_compile("c2").error["type"] == "time_limit"
    assert store.compile_model_bytes("c2") == b"onnx-2"  # a server's fault: kept for the retry
    assert store.retry_compile("c2", time.time() + 60) and not store.retry_compile("c2", time.time() + 60)
    c = store.get_compile("c2")
    assert c.status == "queued" and c.error is None and c.finished_at is None
    assert [x.id for x in store.list_compiles()] == ["c2", "c1"]
    assert [x.id for x in store.list_compiles(hardware="hw")] == ["c1"]
    assert [x.id for x in store.list_compiles(status="done")] == ["c1"]
    first = store.list_compiles(limit=1)
    assert [x.id for x in store.list_compiles(limit=1, before=first[0].seq)] == ["c1"]
    assert store.fail_compile("c2", {"loc": ["model", "n"], "msg": "bad", "type": "value_error"}, final=True)
    assert store.compile_model_bytes("c2") is None and store.get_compile("c2").status == "failed"


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_compiles_stored_before_the_blob_table_keep_their_model_and_artifact(
        dialect: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Migration 0007 moves a compile's model and artifact out of its row: a database written before it (at 0006)
    answers with the same bytes after the upgrade, a model emptied by a final failure stores nothing, and a
    downgrade puts them back."""
    from alembic import command
    from sqlalchemy import create_engine, text

    from tileplan.store.migrate import alembic_config

    url = normalise_db_url(f"sqlite:///{tmp_path / 'old.db'}" if dialect == "sqlite"
                           else request.getfixturevalue("fresh_pg"))
    engine = create_engine(url)
    cfg = alembic_config(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0006")
    now = "2026-12-01 00:00:00+00:00"
    with engine.begin() as conn:
        for cid, status, model, artifact in (("done", "done", b"onnx" * 100, b"tar" * 50),
                                             ("queued", "queued", b"model", None),
                                             ("dropped", "failed", b"", None)):
            conn.execute(text(
                "INSERT INTO compiles (id, status, model_name, model_sha256, hardware, request, model, ops_done,"
                " ops_total, artifact, attempts, created_at, updated_at, deadline, stored_bytes)"
                " VALUES (:id, :st, 'm', 'x', 'hw', '{}', :model, 0, 0, :art, 0, :now, :now, 2e9, 0)"),
                {"id": cid, "st": status, "model": model, "art": artifact, "now": now})
    engine.dispose()
    store = Store(url)  # (upgrades to the newest schema)
    assert store.compile_model_bytes("done") == b"onnx" * 100 and store.compile_artifact("done") == b"tar" * 50
    assert store.get_compile("done").artifact_bytes == 150
    assert store.compile_model_bytes("queued") == b"model" and store.compile_artifact("queued") is None
    assert store.compile_model_bytes("dropped") is None
    store.delete_compile("done", "anyone", admin=True)
    assert store.compile_model_bytes("done") is None and store.get_compile("done") is None
    store.close()
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0006")
    with engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT id, model FROM compiles")).all())
    engine.dispose()
    assert {k: bytes(v) for k, v in rows.items()} == {"queued": b"model", "dropped": b""}


def test_the_health_check_reads_every_table_the_schema_has() -> None:
    """A table missing from the health check's list is damage /healthz cannot see (claims and compile_blobs were)."""
    from tileplan.store.models import Base

    assert set(Store.HEALTH_TABLES) == set(Base.metadata.tables)
