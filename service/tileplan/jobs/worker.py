"""`tileplan worker`: run durable layer tasks from PostgreSQL (procrastinate) in a local solver pool."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import procrastinate

from tileplan.jobs.queue import QUEUE, ensure_schema, make_app
from tileplan.jobs.runner import LayerRunner, worker_name
from tileplan.jobs.solve import SolverPool
from tileplan.settings import Settings, get_settings, is_postgres, normalise_db_url
from tileplan.store import Store

log = logging.getLogger("tileplan.worker")


def run_worker(db_url: str | None = None, concurrency: int | None = None, *, settings: Settings | None = None) -> None:
    """Run until SIGINT/SIGTERM. `db_url` (default TILEPLAN_DATABASE_URL) must be PostgreSQL;
    `concurrency` layers are solved at once, each in its own process (default 1)."""
    settings = settings or get_settings()
    url = normalise_db_url(db_url) if db_url else settings.db_url()
    if not is_postgres(url):
        raise SystemExit("tileplan worker needs a PostgreSQL database (--db or TILEPLAN_DATABASE_URL)")
    _setup_logging(settings.log_level)
    asyncio.run(_main(url, concurrency or 1, settings))


async def _main(url: str, concurrency: int, settings: Settings) -> None:
    store = await asyncio.to_thread(Store, url)
    await asyncio.to_thread(ensure_schema, url)
    pool = SolverPool.of(concurrency, settings)
    runner = LayerRunner(store, pool, settings)
    app = make_app(url, settings)
    async with app.open_async():
        await runner.start()
        await pool.warm()
        reaper = asyncio.create_task(_reap(app, store, settings))
        log.info("event=worker_started name=%s concurrency=%d", worker_name(), concurrency)
        try:
            await app.run_worker_async(
                queues=[QUEUE],
                concurrency=concurrency,
                name=worker_name(),
                additional_context={"runner": runner},
                update_heartbeat_interval=settings.heartbeat_s,
                fetch_job_polling_interval=settings.worker_poll_s,
                stalled_worker_timeout=settings.stalled_after_s,
                install_signal_handlers=True,
            )
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await runner.stop()
            pool.close()
            store.close()
    log.info("event=worker_stopped name=%s", worker_name())


async def _reap(app: procrastinate.App, store: Store, settings: Settings) -> None:
    """Requeue tasks of workers that stopped sending heartbeats; fail jobs past their time limit."""
    while True:
        await asyncio.sleep(settings.heartbeat_s)
        try:
            stalled = await app.job_manager.get_stalled_jobs(
                queue=QUEUE, seconds_since_heartbeat=settings.stalled_after_s
            )
            for job in stalled:
                with contextlib.suppress(Exception):  # another worker may have requeued it first
                    await app.job_manager.retry_job(job)
                    log.warning("event=task_requeued task=%s args=%s", job.id, job.task_kwargs)
            await app.job_manager.prune_stalled_workers(seconds_since_heartbeat=settings.stalled_after_s)
            await asyncio.to_thread(store.expire_jobs)
        except asyncio.CancelledError:
            raise
        except Exception:  # the database may be briefly away; try again next round
            log.exception("event=reap_failed")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s",
    )
