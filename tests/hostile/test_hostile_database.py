"""Case 5 of issue 16: PostgreSQL going away and coming back, against `tileplan serve` and a `tileplan worker`.

The shared server is not restarted (other work uses it): this test's own database is closed to connections
(`ALLOW_CONNECTIONS false`) and every backend on it is ended with pg_terminate_backend, which is what a restart
looks like to the processes; then it is opened again. The worker polls only every 600 s here, so a layer solved
after the outage proves the worker is listening for job notifications again.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psycopg
from service_procs import FC, PG_ADMIN, start_api, start_worker

FAST = {"time_limit_s": 2}


def _admin(sql: str) -> None:
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(sql)


def take_away(db: str) -> None:
    _admin(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
    _admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}' "
           "AND pid <> pg_backend_pid()")


def bring_back(db: str) -> None:
    _admin(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')


def test_api_answers_503_while_the_database_is_away_and_workers_listen_again(
        fresh_pg: str, tmp_path: Path, port: int) -> None:
    db = fresh_pg.rsplit("/", 1)[1]
    api = start_api(tmp_path, db=fresh_pg, port=port, queue="procrastinate", wait_limit_s="60")
    worker = start_worker(tmp_path, fresh_pg, worker_poll_s="600")
    try:
        with httpx.Client(base_url=api.url, timeout=90) as c:
            first = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [FC], "options": FAST})
            assert first.status_code == 200, first.text
            key = first.json()["plans"][0]["key"]
            take_away(db)
            try:
                for path in ("/plans", f"/plans/{key}", "/jobs/" + "0" * 32):
                    r = c.get(path)
                    assert r.status_code == 503, (path, r.status_code, r.text)
                    assert r.json()["detail"][0]["type"] == "service_unavailable" and r.headers["retry-after"]
                r = c.post("/schedule", json={"hardware": "gemmini-16x16", "options": FAST,
                                              "layers": [{**FC, "N": 24, "name": "during"}]})
                assert r.status_code == 503, r.text
                assert c.get("/healthz").status_code == 503
                time.sleep(3)  # long enough for the worker's listener to fail reconnecting
            finally:
                bring_back(db)
            for _ in range(100):
                if c.get("/healthz").status_code == 200:
                    break
                time.sleep(0.3)
            assert c.get(f"/plans/{key}").status_code == 200  # nothing cached was lost
            after = c.post("/schedule", json={"hardware": "gemmini-16x16", "options": FAST,
                                              "layers": [{**FC, "N": 40, "name": "after"}]})
            # solved within the wait limit (60 s), far below the worker's 600 s poll: it was notified
            assert after.status_code == 200 and after.json()["summary"]["solved"] == 1, after.text
        assert "event=listen_lost" in worker.output()
    finally:
        worker.stop()
        api.stop()
