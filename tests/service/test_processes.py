"""The service as real processes: `tileplan serve` on SQLite and PostgreSQL, `tileplan worker` x2."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import psycopg
import pytest
import yaml
from service_procs import FC, LAYER, metric, start_api, start_worker

RESNET = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "resnet50_unique.yaml"


def schedule(url: str, layers: list[dict], timeout: float = 120, **body: object) -> httpx.Response:
    return httpx.post(url + "/schedule", json={"hardware": "gemmini-16x16", "layers": layers, **body}, timeout=timeout)


def wait_job(url: str, job_id: str, timeout: float = 120) -> dict:
    end = time.monotonic() + timeout
    while True:
        job = httpx.get(f"{url}/jobs/{job_id}", timeout=10).json()
        if job["status"] in ("done", "failed") or time.monotonic() > end:
            return job
        time.sleep(0.1)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_cache_survives_a_restart(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    db = None if backend == "sqlite" else request.getfixturevalue("fresh_pg")
    api = start_api(tmp_path, db=db)
    try:
        first = schedule(api.url, [LAYER, FC])
        assert first.status_code == 200, first.text
        assert [p["cached"] for p in first.json()["plans"]] == [False, False]
        assert metric(api.url, "tileplan_solves_total", 'outcome="ok"') == 2
    finally:
        api.stop()
    assert api.popen.returncode in (0, -15), api.output()[-2000:]  # uvicorn re-raises SIGTERM after a clean stop
    assert "Application shutdown complete" in api.output()
    if backend == "sqlite":
        assert (tmp_path / "data" / "tileplan.db").exists()

    api = start_api(tmp_path, db=db)
    try:
        again = schedule(api.url, [FC, LAYER])
        assert again.status_code == 200
        plans = again.json()["plans"]
        assert [p["cached"] for p in plans] == [True, True]
        assert {p["key"] for p in plans} == {p["key"] for p in first.json()["plans"]}
        assert metric(api.url, "tileplan_solves_total") == 0
        assert metric(api.url, "tileplan_cache_hits_total") == 2
    finally:
        api.stop()


def test_twenty_concurrent_identical_cold_requests_solve_once(tmp_path: Path) -> None:
    api = start_api(tmp_path, solvers=2)
    layer = {**LAYER, "in_channels": 128, "out_channels": 128, "in_h": 28, "in_w": 28}

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as c:
            return await asyncio.gather(*(
                c.post(api.url + "/schedule", json={"hardware": "gemmini-16x16", "layers": [layer]}) for _ in range(20)
            ))

    try:
        answers = asyncio.run(burst())
        assert [r.status_code for r in answers] == [200] * 20, [r.text[:200] for r in answers if r.status_code != 200]
        keys = {r.json()["plans"][0]["key"] for r in answers}
        assert len(keys) == 1
        assert metric(api.url, "tileplan_solves_total") == 1
        assert metric(api.url, "tileplan_cache_misses_total") == 20  # none was in the cache when asked
    finally:
        api.stop()


def test_two_servers_on_one_database_solve_once(tmp_path: Path, fresh_pg: str) -> None:
    """The DB claim: two API processes asked for the same cold layer at once; one solves, one waits."""
    a = start_api(tmp_path, db=fresh_pg)
    b = start_api(tmp_path, db=fresh_pg)
    layer = {**LAYER, "in_channels": 256, "out_channels": 64, "in_h": 14, "in_w": 14}

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=120) as c:
            return await asyncio.gather(*(
                c.post(u + "/schedule", json={"hardware": "gemmini-16x16", "layers": [layer]})
                for u in (a.url, b.url, a.url, b.url)
            ))

    try:
        answers = asyncio.run(both())
        assert all(r.status_code == 200 for r in answers)
        assert len({r.json()["plans"][0]["key"] for r in answers}) == 1
        assert metric(a.url, "tileplan_solves_total") + metric(b.url, "tileplan_solves_total") == 1
    finally:
        a.stop()
        b.stop()


def test_api_and_two_workers_on_postgresql_survive_a_killed_worker(tmp_path: Path, fresh_pg: str) -> None:
    """API (procrastinate queue) + 2 `tileplan worker` processes + PostgreSQL; one worker is killed (SIGKILL)
    while it solves a layer, and the job still completes: the other worker takes the layer over."""
    fast = {"heartbeat_s": "0.5", "stalled_after_s": "2"}
    api = start_api(tmp_path, db=fresh_pg, queue="procrastinate", wait_limit_s="0.5", **fast)
    workers = [start_worker(tmp_path, fresh_pg, **fast) for _ in range(2)]
    layers = yaml.safe_load(RESNET.read_text())["layers"][:10]
    quick = {"baseline": False, "time_limit_s": 1}  # durability is under test here, not plan quality
    try:
        r = schedule(api.url, layers, options=quick)
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]

        # find a worker in the middle of a solve and kill it
        victim = None
        end = time.monotonic() + 60
        with psycopg.connect(fresh_pg) as conn:
            while victim is None and time.monotonic() < end:
                rows = conn.execute(
                    "SELECT worker FROM job_layers WHERE job_id = %s AND status = 'running'", (job_id,)
                ).fetchall()
                conn.commit()
                pids = {int(w.rsplit(":", 1)[1]) for (w,) in rows if w}
                victim = next((w for w in workers if w.popen.pid in pids), None)
                time.sleep(0.02)
        assert victim is not None, "no worker was seen solving"
        victim.kill()

        job = wait_job(api.url, job_id, timeout=120)
        assert job["status"] == "done", job
        assert job["progress"] == {"done": 10, "failed": 0, "total": 10}
        assert len(job["plans"]) == 10 and all(p["mapper"] == "cosa" for p in job["plans"])
        with psycopg.connect(fresh_pg) as conn:
            retried = conn.execute(
                "SELECT count(*) FROM job_layers WHERE job_id = %s AND attempts > 1", (job_id,)
            ).fetchone()[0]
            assert retried >= 1  # the killed worker's layer ran again elsewhere
            assert conn.execute("SELECT count(*) FROM plans").fetchone()[0] == 10
        survivor = next(w for w in workers if w is not victim)
        assert survivor.popen.poll() is None
        assert "task_requeued" in survivor.output() or "task_requeued" in victim.output()

        # and a second request for the same layers is answered from the cache at once
        again = schedule(api.url, layers, options=quick)
        assert again.status_code == 200 and all(p["cached"] for p in again.json()["plans"])
    finally:
        for w in workers:
            w.stop()
        api.stop()


def test_killed_api_resumes_its_jobs_and_keeps_its_cache(tmp_path: Path) -> None:
    """Embedded mode: the API (with its solver pool) is SIGKILLed mid-job; after a restart on the same data
    directory the job finishes, and the plans solved before the kill are not solved again."""
    layers = yaml.safe_load(RESNET.read_text())["layers"][:6]
    api = start_api(tmp_path, solvers=1)
    try:
        r = schedule(api.url, layers, wait=False, options={"baseline": False, "time_limit_s": 1})
        assert r.status_code == 202
        job_id = r.json()["id"]
        end = time.monotonic() + 60
        done = 0
        while done < 2 and time.monotonic() < end:
            done = httpx.get(f"{api.url}/jobs/{job_id}", timeout=10).json()["progress"]["done"]
            time.sleep(0.05)
        assert 2 <= done < 6, done
    finally:
        api.kill()
    api = start_api(tmp_path, solvers=1)
    try:
        job = wait_job(api.url, job_id)
        assert job["status"] == "done", job
        assert [p["layer"]["name"] for p in job["plans"]] == [x["name"] for x in layers]
        resolved = metric(api.url, "tileplan_solves_total")
        assert 1 <= resolved <= 6 - done  # only what was not cached before the kill
        assert "job_resumed" in api.output()
    finally:
        api.stop()
