"""What the API needs from a job queue: submit a job's layers, wait for the job, report depth."""

from __future__ import annotations

import asyncio
import time

from tileplan.store import Store
from tileplan.store.repository import FINAL


class JobQueue:
    kind = "abstract"

    def __init__(self, store: Store) -> None:
        self.store = store
        self._events: dict[str, asyncio.Event] = {}

    async def start(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    async def stop(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    async def submit(self, job_id: str, keys: list[str], owner: str | None = None) -> None:  # pragma: no cover
        """Queue the layers `keys` of job `job_id` in `owner`'s share of the solvers (`tileplan.jobs.fair`)."""
        raise NotImplementedError

    async def cancel(self, job_id: str) -> None:
        """Stop the work of a job that was failed as abandoned, where no other job needs it. By default nothing:
        a worker that picks up a layer of a finished job skips it."""

    def _job_final(self, job_id: str, status: str) -> None:
        ev = self._events.get(job_id)
        if ev is not None:
            ev.set()

    async def wait(self, job_id: str, timeout: float) -> tuple[str, int, int] | None:
        """Wait up to `timeout` s for the job to finish; returns its (status, done, total)."""
        end = time.monotonic() + timeout
        ev = self._events.setdefault(job_id, asyncio.Event())
        poll = 0.02
        try:
            while True:
                st = await asyncio.to_thread(self.store.job_status, job_id)
                remaining = end - time.monotonic()
                if st is None or st[0] in FINAL or remaining <= 0:
                    return st
                # woken by this process finishing the job, or polling for other processes' progress
                with _suppress_timeout():
                    await asyncio.wait_for(ev.wait(), min(remaining, poll))
                poll = min(poll * 1.5, 0.25)
        finally:
            self._events.pop(job_id, None)


class _suppress_timeout:
    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: object, tb: object) -> bool:
        return exc_type is TimeoutError
