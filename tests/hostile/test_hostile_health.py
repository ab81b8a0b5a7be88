"""/healthz under load (issue 23, "/healthz p99 <= 200 ms while the hostile mix runs"): a probe answers from the last
storage check instead of running one itself, so it never waits for a free thread or for a check stuck behind a
writer; it still says what storage is (a check that does not answer is "unreachable", a storage error met by any
request makes the next probe check again)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.api.health import StorageHealth
from tileplan.settings import Settings


def test_healthz_answers_while_its_storage_check_is_stuck(tmp_path: Path) -> None:
    """Before: every probe ran the check in a thread and waited for it, so a check stuck behind a writer (here: held
    until the probes are done) made each probe wait 5 s and answer 503 "unreachable"."""
    release = threading.Event()
    settings = Settings(data_dir=tmp_path, solver_processes=1)
    with TestClient(create_app(settings)) as c:
        assert c.get("/healthz").status_code == 200
        store = c.app.state.store  # type: ignore[attr-defined]
        real = store.ping

        def stuck() -> None:
            release.wait(60)
            real()

        store.ping = stuck
        try:
            time.sleep(1.2)  # the last check is older than HEALTH_FRESH_S: the next probe starts another
            for _ in range(3):
                r = c.get("/healthz")
                assert r.status_code == 200 and r.json()["database"] == "ok", r.text
            assert not release.is_set()  # (answered while the check was still held)
        finally:
            release.set()


def _health(check: object, **kw: float) -> StorageHealth:
    return StorageHealth(check, lambda exc: "damaged", **kw)  # type: ignore[arg-type]


def test_a_check_that_does_not_answer_is_unreachable() -> None:
    release = threading.Event()

    async def main() -> list[str]:
        h = _health(lambda: release.wait(30), timeout_s=0.3)
        first = await h.state()  # nothing known: waits for the check, up to the timeout
        again = await h.state()  # the check still has not answered: no second one is started
        assert h.checks == 1
        release.set()
        await asyncio.sleep(0.5)
        return [first, again]

    try:
        assert asyncio.run(main()) == ["unreachable", "unreachable"]
    finally:
        release.set()


def test_probes_share_checks_and_a_storage_error_makes_the_next_probe_check_again() -> None:
    broken = False

    def check() -> None:
        if broken:
            raise RuntimeError("database disk image is malformed")

    async def main() -> None:
        nonlocal broken
        h = _health(check, fresh_s=60)
        assert [await h.state() for _ in range(100)] == ["ok"] * 100
        assert h.checks == 1  # one check for a hundred probes
        broken = True
        assert await h.state() == "ok"  # (the last check's outcome, still fresh)
        h.invalidate()  # a request met a storage error
        assert await h.state() == "damaged"
        assert h.checks == 2

    asyncio.run(main())


def _lag_over(text: str, seconds: float) -> float:
    """Samples of tileplan_event_loop_lag_seconds later than `seconds` (a bucket bound), from /metrics' text."""
    buckets = {}
    for line in text.splitlines():
        if line.startswith("tileplan_event_loop_lag_seconds_bucket{"):
            buckets[float(line.split('le="', 1)[1].split('"', 1)[0])] = float(line.rsplit(" ", 1)[1])
    return buckets[float("inf")] - buckets[seconds]


def test_metrics_count_the_event_loop_held_by_synchronous_work(tmp_path: Path) -> None:
    """The API samples its event loop's lag (what bench/hostile.py reports per phase): a callback that holds the loop
    for 0.5 s shows as a sample later than 0.2 s."""
    with TestClient(create_app(Settings(data_dir=tmp_path, solver_processes=1))) as c:
        before = _lag_over(c.get("/metrics").text, 0.2)
        c.portal.call(time.sleep, 0.5)  # (run in the app's event loop thread, holding it)
        assert _lag_over(c.get("/metrics").text, 0.2) >= before + 1


def test_healthz_answers_while_a_compile_body_is_hashed_and_written(tmp_path: Path, monkeypatch: Any) -> None:
    """POST /compile's body is hashed and written to its file off the event loop: a hash that does not finish until
    /healthz has answered (here: held until then, 20 s at most) does not hold the API. Before, the body's hashing and
    writing ran on the loop, so the probe waited for the held hash (and it timed out)."""
    import hashlib
    import types

    from tileplan.api.routes import compiles as route

    entered, release = threading.Event(), threading.Event()
    waited_out: list[bool] = []

    class HeldHash:
        def __init__(self, data: bytes) -> None:
            self._h = hashlib.sha256(data)

        def update(self, data: bytes) -> None:
            if not entered.is_set():
                entered.set()
                waited_out.append(not release.wait(20))
            self._h.update(data)

        def hexdigest(self) -> str:
            return self._h.hexdigest()

    monkeypatch.setattr(route, "hashlib", types.SimpleNamespace(sha256=HeldHash))
    body = b'{"hardware": "gemmini-16x16", "model": "' + b"A" * (2 << 20) + b'"}'
    with TestClient(create_app(Settings(data_dir=tmp_path, solver_processes=1))) as c:
        assert c.get("/healthz").status_code == 200
        answers: list[int] = []
        post = threading.Thread(target=lambda: answers.append(
            c.post("/compile", content=body, headers={"content-type": "application/json"}).status_code))
        post.start()
        try:
            assert entered.wait(60)
            assert c.get("/healthz").status_code == 200
        finally:
            release.set()
            post.join(120)
    assert waited_out == [False]  # /healthz answered while the hash was held
    assert answers and answers[0] == 422  # (not a model: the request is still read and refused as before)
