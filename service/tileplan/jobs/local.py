"""The embedded job queue of `tileplan serve`: layers run as asyncio tasks over a local process pool.

Jobs are recorded in the database like deployed ones, so a restarted server resumes the unfinished
ones it finds (their cached layers are not solved again). Layers take turns at the solver processes per owner,
round robin (`tileplan.jobs.fair`): one owner's flood does not hold back another's layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from tileplan.errors import unexpected_error
from tileplan.jobs.base import JobQueue
from tileplan.jobs.fair import FairShare
from tileplan.jobs.runner import LayerRunner
from tileplan.jobs.solve import SolverPool
from tileplan.settings import Settings
from tileplan.store import Store

log = logging.getLogger("tileplan.jobs")


class LocalQueue(JobQueue):
    kind = "local"

    def __init__(self, store: Store, settings: Settings, *, on_solve: Callable[[float, str], None] | None = None) -> None:
        super().__init__(store)
        self.settings = settings
        self.pool = SolverPool.of(settings.solver_processes, settings)
        self.runner = LayerRunner(store, self.pool, settings, on_solve=on_solve, on_job_final=self._job_final)
        self._tasks: set[asyncio.Task[None]] = set()
        self._layers: dict[tuple[str, str], asyncio.Task[None]] = {}  # (job, key) -> its task, while it runs
        self.fair = FairShare(settings.solver_processes, settings.owner_max_layers)
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.runner.start()
        self._spawn(self.pool.warm())
        self._sweeper = asyncio.create_task(self._sweep())
        for job_id, owner in await asyncio.to_thread(self.store.unfinished_jobs):
            keys = await asyncio.to_thread(self.store.pending_layers, job_id)
            log.info("event=job_resumed job=%s layers=%d", job_id, len(keys))
            await self.submit(job_id, keys, owner)

    async def stop(self) -> None:
        if self._sweeper:
            self._sweeper.cancel()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        await self.runner.stop()
        self.pool.close()

    async def submit(self, job_id: str, keys: list[str], owner: str | None = None) -> None:
        for key in keys:
            task = self._spawn(self._run(job_id, key, owner))
            self._layers[(job_id, key)] = task
            task.add_done_callback(functools.partial(self._layer_done, (job_id, key)))

    def _layer_done(self, job_key: tuple[str, str], _task: asyncio.Task[None]) -> None:
        self._layers.pop(job_key, None)

    async def cancel(self, job_id: str) -> None:
        """Cancel the job's layer tasks whose key no other job's task wants (cancelling one kills its solver
        process); a key another job also waits for is left to finish for that job."""
        mine = [(k, t) for (j, k), t in list(self._layers.items()) if j == job_id]
        wanted = {k for (j, k) in self._layers if j != job_id}
        for key, task in mine:
            if key not in wanted:
                task.cancel()
                log.info("event=layer_cancelled job=%s key=%s", job_id, key[:12])

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, job_id: str, key: str, owner: str | None) -> None:
        attempts = self.settings.max_attempts
        for attempt in range(1, attempts + 1):
            try:
                async with self.fair.turn(owner):
                    await self.runner.run_layer(job_id, key, give_up=attempt == attempts)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # crashed solver process or lost database: try again
                if attempt == attempts:
                    err = unexpected_error(log, f"solving this layer ({attempts} attempts)", event="layer_gave_up",
                                           job=job_id, key=key[:12])
                    with contextlib.suppress(Exception):
                        status = await asyncio.to_thread(self.store.finish_layer, job_id, key, err)
                        self.runner._final(job_id, status)
                    return
                log.warning("event=layer_retry job=%s key=%s attempt=%d reason=%s", job_id, key[:12], attempt, exc,
                            exc_info=attempt == 1)
                await asyncio.sleep(min(0.5 * attempt, 5.0))

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.settings.job_time_limit_s / 4))
            try:
                for job_id in await asyncio.to_thread(self.store.expire_jobs):
                    self._job_final(job_id, "failed")
            except Exception:
                log.exception("event=sweep_failed")
