"""Durable jobs on PostgreSQL with procrastinate: the API defers one task per layer; any number of
`tileplan worker` processes run them.

A task whose worker dies stays `doing` in procrastinate's table; every worker sweeps for tasks whose
worker stopped sending heartbeats and puts them back in the queue, so a killed worker's layers are
solved by another. Tasks that fail with an exception are retried by procrastinate's retry strategy;
after the last attempt the layer is failed with the reason.

Fair shares of the workers per owner, with what procrastinate offers (its `procrastinate_fetch_job` picks the todo
job of highest priority, then lowest id, whose `lock` no doing job holds and no todo job of higher priority holds):
- priority: an owner's n-th waiting layer gets priority -n (n counted from its layers still todo or doing when it
  is deferred), so each fetch takes the layer that is earliest in its owner's line, across owners: round robin by
  position, and one owner's flood of 1,000 ranks behind another's first layer;
- lock: an owner's layers are spread over `owner_max_layers` locks (`tileplan:<owner>:<lane>`), so at most that
  many of them are doing at once over all workers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import procrastinate
import psycopg
from procrastinate.jobs import Job
from procrastinate.schema import SchemaManager

from tileplan.jobs.base import JobQueue
from tileplan.jobs.fair import ANONYMOUS
from tileplan.settings import Settings, libpq_url
from tileplan.store import Store

log = logging.getLogger("tileplan.jobs")

TASK = "tileplan.solve_layer"
QUEUE = "tileplan"
_SCHEMA_LOCK = 0x7117E_9148


class ResilientConnector(procrastinate.PsycopgConnector):
    """procrastinate's connector, whose LISTEN for new jobs outlives the database going away.

    procrastinate reconnects its listener when the connection drops, but not when reconnecting fails (PostgreSQL
    still restarting): the listener task ends, and the worker falls back to polling for good. Here the listener
    is started again, with a growing pause, until the database answers.
    """

    async def listen_notify(self, on_notification: Any, channels: Any) -> None:
        pause = 0.2
        while True:
            started = time.monotonic()
            try:
                await super().listen_notify(on_notification=on_notification, channels=channels)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure to listen: the database is away; try again
                if time.monotonic() - started > 30:
                    pause = 0.2  # it had been listening for a while: a fresh outage
                log.warning("event=listen_lost error=%s retry_in=%.1f", type(exc).__name__, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
                log.info("event=listen_retry")


def make_app(db_url: str, settings: Settings) -> procrastinate.App:
    """The procrastinate app with the layer task registered (the worker runs it; the API defers it)."""
    app = procrastinate.App(connector=ResilientConnector(conninfo=libpq_url(db_url)))
    max_attempts = settings.max_attempts

    @app.task(name=TASK, queue=QUEUE, pass_context=True,
              retry=procrastinate.RetryStrategy(max_attempts=max_attempts, wait=1))
    async def solve_layer(context: procrastinate.JobContext, job_id: str, key: str, owner: str | None = None) -> None:
        runner = context.additional_context["runner"]
        attempt = (context.job.attempts or 0) + 1
        await runner.run_layer(job_id, key, give_up=attempt >= max_attempts)

    return app


def ensure_schema(db_url: str) -> None:
    """Create procrastinate's tables once (under an advisory lock, as several processes start together)."""
    with psycopg.connect(libpq_url(db_url), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK,))
        try:
            exists = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
            if exists and exists[0] is None:
                sql = SchemaManager.get_schema()
                conn.execute(sql)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_SCHEMA_LOCK,))


class ProcrastinateQueue(JobQueue):
    kind = "procrastinate"

    def __init__(self, store: Store, settings: Settings) -> None:
        super().__init__(store)
        self.settings = settings
        self.app = make_app(store.url, settings)

    async def start(self) -> None:
        await asyncio.to_thread(ensure_schema, self.store.url)
        await self.app.open_async()

    async def stop(self) -> None:
        await self.app.close_async()

    async def submit(self, job_id: str, keys: list[str], owner: str | None = None) -> None:
        who = owner or ANONYMOUS
        rows = await self.app.connector.execute_query_all_async(
            "SELECT count(*) AS n FROM procrastinate_jobs WHERE queue_name = %(q)s AND status IN ('todo', 'doing') "
            "AND args->>'owner' = %(o)s", q=QUEUE, o=who)
        ahead = int(rows[0]["n"]) if rows else 0
        lanes = self.settings.owner_max_layers
        jobs = [Job(id=None, queue=QUEUE, task_name=TASK, priority=-(ahead + i),
                    lock=f"tileplan:{who}:{(ahead + i) % lanes}", queueing_lock=None,
                    task_kwargs={"job_id": job_id, "key": key, "owner": who})
                for i, key in enumerate(keys)]
        await self.app.job_manager.batch_defer_jobs_async(jobs)

    async def depth(self) -> dict[str, Any]:
        rows = await self.app.connector.execute_query_all_async(
            "SELECT status, count(*) AS n FROM procrastinate_jobs WHERE queue_name = %(q)s GROUP BY status", q=QUEUE
        )
        return {r["status"]: r["n"] for r in rows}
