"""Storage that cannot grow without bound: the retention settings, applied every `retention_interval_s` and after
each compile the server stores (`Store.apply_retention`: compiles unused for `compile_max_age_s`, then the least
recently used while all of them hold over `compile_store_max_bytes`; /schedule jobs finished `job_max_age_s` ago).
Plans are never deleted by it: they are small, and the cache is the service. SQLite gives the space back to the
file system afterwards (incremental vacuum, WAL truncated)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from tileplan.settings import Settings
from tileplan.store import Store

log = logging.getLogger("tileplan.jobs")


class Retention:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self._loop: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.runs = 0

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    def soon(self) -> None:
        """Apply the settings now (something was stored); runs that pile up are one run."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self.apply()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.retention_interval_s)
            self._wake.clear()

    async def apply(self) -> dict[str, int]:
        s = self.settings
        try:
            # compiles past their deadline end failed even when nobody asks for them again (a row whose runner was
            # lost, e.g. its check's process died as it recorded it)
            expired = await asyncio.to_thread(self.store.expire_compiles)
            if expired:
                log.info("event=compiles_expired count=%d", len(expired))
            gone = await asyncio.to_thread(self.store.apply_retention, compile_max_age_s=s.compile_max_age_s,
                                           compile_max_bytes=s.compile_store_max_bytes, job_max_age_s=s.job_max_age_s)
        except Exception:  # the database may be briefly away: the next run tries again
            log.warning("event=retention_failed", exc_info=True)
            return {}
        self.runs += 1
        if any(gone.values()):
            log.info("event=retention compiles=%d jobs=%d", gone["compiles"], gone["jobs"])
        return gone
