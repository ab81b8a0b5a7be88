"""The FastAPI application: wiring of settings, store, job queue, metrics, errors and routes.

`create_app(settings)` is the one constructor (tests and `tileplan serve` both use it). At start it
migrates the database, starts the queue (local process pool, or procrastinate on PostgreSQL) and
resumes unfinished local jobs; at stop it shuts them down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from tileplan import __version__
from tileplan.api import errors
from tileplan.api.answers import KeptAnswers, watch_deletions
from tileplan.api.health import StorageHealth
from tileplan.api.metrics import Metrics, MetricsAndLimits
from tileplan.api.params import known_query_params, note_owner, storable_params
from tileplan.api.routes import compiles, hardware, plans, schedule, system
from tileplan.jobs.base import JobQueue
from tileplan.jobs.compiles import Compiler
from tileplan.jobs.modules import ModuleBuilder
from tileplan.jobs.retention import Retention
from tileplan.jobs.sandbox import Sandbox
from tileplan.jobs.scheduler import Scheduler
from tileplan.settings import Settings, get_settings, is_postgres
from tileplan.store import Store
from tileplan.store.repository import AsyncPlanReader
from tileplan.web import compile_views, docs, views

log = logging.getLogger("tileplan.api")

DESCRIPTION = """Tiling plans for DNN layers on GEMM accelerators, solved once and served from a cache.

`POST /schedule` with a hardware name or descriptor and a list of layers returns one Plan per layer
(200), or a job to poll (202) while solving takes longer than the server's wait limit. `POST /compile` with a
quantized ONNX model compiles the whole model into one program (`GET /compiles/{id}`, `.../artifact`). Errors are
`{"detail": [{"loc": [...], "msg": ..., "type": ...}]}` with `loc` naming the field."""


def make_queue(store: Store, settings: Settings, metrics: Metrics) -> JobQueue:
    if settings.queue == "procrastinate":
        if not is_postgres(store.url):
            raise SystemExit("TILEPLAN_QUEUE=procrastinate needs a PostgreSQL database")
        from tileplan.jobs.queue import ProcrastinateQueue

        return ProcrastinateQueue(store, settings)
    from tileplan.jobs.local import LocalQueue

    return LocalQueue(store, settings, on_solve=metrics.on_solve)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = await asyncio.to_thread(Store, settings.db_url())
        queue = make_queue(store, settings, metrics)
        app.state.store = store
        app.state.health = StorageHealth(
            lambda: store.ping(), lambda exc: "unreachable" if errors.transient_storage_error(exc) else "damaged")
        app.state.queue = queue
        reader = AsyncPlanReader(store.url) if store.dialect == "postgresql" else None
        watch = None
        if reader is not None:
            await reader.open()
            watch = asyncio.create_task(watch_deletions(store.url, app.state.kept_answers))
        modules = ModuleBuilder(store, settings)
        app.state.modules = modules
        sandbox = Sandbox(settings)
        app.state.scheduler = Scheduler(store, queue, settings, sandbox, reader, modules)
        warming = asyncio.ensure_future(sandbox.warm())  # (not awaited: the API answers while it starts)
        # compiles run in the module builders' processes (apart from the solvers', at a lower priority); unfinished
        # ones are resumed where one server owns the work
        retention = Retention(store, settings)  # (compiles past their age or the total, old jobs; never plans)
        app.state.retention = retention
        compiler = Compiler(store, settings, lambda: modules.pool, app.state.scheduler.resolve_hardware,
                            resume=queue.kind == "local", on_finish=metrics.on_compile, on_storage=retention.soon,
                            fair=modules.fair)  # (one lane: builds and compiles take turns round robin by owner)
        app.state.compiler = compiler
        await queue.start()
        await compiler.start()
        await retention.start()
        lag = asyncio.create_task(metrics.watch_loop())  # (GET /metrics: tileplan_event_loop_lag_seconds)
        log.info("event=api_started db=%s queue=%s", store.dialect, queue.kind)
        try:
            yield
        finally:
            lag.cancel()
            await retention.stop()
            await compiler.stop()
            warming.cancel()
            sandbox.close()
            await modules.stop()
            await queue.stop()
            if watch is not None:
                watch.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watch
            if reader is not None:
                await reader.close()
            store.close()

    app = FastAPI(
        title="Tileplan",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # served offline by tileplan.web.docs (assets from a package, not a CDN)
        redoc_url=None,
        openapi_url=None,  # served by tileplan.web.docs, under the read token rule
        dependencies=[Depends(storable_params), Depends(known_query_params), Depends(note_owner)],
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.kept_answers = KeptAnswers()  # POST /schedule's answers from the cache, as bytes
    errors.install(app)
    for module in (schedule, compiles, plans, hardware, system, views, compile_views):
        app.include_router(module.router)
    docs.install(app)
    app.add_middleware(MetricsAndLimits, metrics=metrics, max_body=settings.max_request_bytes,
                       limits={"/compile": settings.max_compile_bytes}, body_idle_s=settings.body_idle_s)
    return app
