"""What GET /healthz says of the database: the last storage check, run off the request path.

A storage check reads a row of every table and index (`Store.ping`): a few dozen statements in a thread. Run for each
probe, every /healthz waited for a free thread of the default pool and for its turn at the interpreter lock behind
the event loop's own work, so under load a probe took as long as the slowest of those (bench/hostile.py: the
probe's wait for its check's thread and for its answer after it, not the check itself, made the slow probes). Here a
probe answers from the last check's outcome and starts the next check when that one is older than `fresh_s`; one
check runs at a time. A probe waits for a check only when nothing recent is known (none within `max_age_s`: the first
probe, one after a quiet spell, or after a request met a storage error: `invalidate`), and a check that has not
answered within `timeout_s` is reported as the database being unreachable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

HEALTH_FRESH_S = 1.0  # a check older than this is run again (in the background) by the next probe
HEALTH_TIMEOUT_S = 5.0  # a check that has not answered by then: the database is unreachable
HEALTH_MAX_AGE_S = 5.0  # an outcome older than this is not answered: the probe waits for the next check


class StorageHealth:
    def __init__(self, check: Callable[[], None], classify: Callable[[BaseException], str], *,
                 fresh_s: float = HEALTH_FRESH_S, timeout_s: float = HEALTH_TIMEOUT_S,
                 max_age_s: float = HEALTH_MAX_AGE_S) -> None:
        """`check()` raises if storage cannot be read (it runs in a thread); `classify(exc)` names the state it
        means ("unreachable" or "damaged")."""
        self._check = check
        self._classify = classify
        self.fresh_s = fresh_s
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self._known: tuple[float, str] | None = None  # (when the check that found it started, monotonic; state)
        self._checking: asyncio.Future[None] | None = None
        self._started = 0.0  # when the running check started
        self._generation = 0  # bumped by invalidate: a check that started before reports nothing
        self.checks = 0  # checks started (tests, metrics)

    def invalidate(self) -> None:
        """A request met a storage error: the next probe waits for a check that starts after it."""
        self._generation += 1
        self._known = None

    async def state(self) -> str:
        """"ok", "unreachable" or "damaged"."""
        end = time.monotonic() + self.timeout_s
        while True:
            now = time.monotonic()
            if self._checking is None and (self._known is None or now - self._known[0] >= self.fresh_s):
                self._started = now
                self.checks += 1
                self._checking = asyncio.ensure_future(self._run(self._generation))
            if self._checking is not None and now - self._started > self.timeout_s:
                return "unreachable"  # the running check has not answered in time
            if self._known is not None and now - self._known[0] < self.max_age_s:
                return self._known[1]
            if now >= end:
                return "unreachable"
            assert self._checking is not None
            try:  # nothing recent known: this probe waits for the check
                await asyncio.wait_for(asyncio.shield(self._checking), end - now)
            except TimeoutError:
                return "unreachable"

    async def _run(self, generation: int) -> None:
        started = self._started
        try:
            await asyncio.to_thread(self._check)
            state = "ok"
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            state = self._classify(exc)
        finally:
            self._checking = None
        if generation == self._generation:
            self._known = (started, state)
