"""`tileplan serve`: the API under uvicorn."""

from __future__ import annotations

import logging

import uvicorn

from tileplan.settings import Settings, get_settings

log = logging.getLogger("tileplan.api")


def serve(
    host: str = "127.0.0.1",
    port: int = 8000,
    db_url: str | None = None,
    workers: int | None = None,
    *,
    queue: str | None = None,
    settings: Settings | None = None,
) -> None:
    """Run the service until interrupted.

    `db_url` overrides TILEPLAN_DATABASE_URL (default: SQLite under the data directory); `workers` is
    the number of local solver processes (default: TILEPLAN_SOLVER_PROCESSES, else the core count);
    `queue` "local" or "procrastinate" overrides TILEPLAN_QUEUE.
    """
    from tileplan.api.app import create_app

    base = settings or get_settings()
    overrides: dict[str, object] = {}
    if db_url:
        overrides["database_url"] = db_url
    if workers:
        overrides["solver_processes"] = workers
    if queue:
        overrides["queue"] = queue
    s = base.model_copy(update=overrides) if overrides else base
    logging.basicConfig(
        level=s.log_level.upper(), format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s"
    )
    app = create_app(s)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=s.log_level,
        access_log=False,
        loop="auto",
        http="auto",
        timeout_graceful_shutdown=10,
        proxy_headers=False,  # a client's address is its TCP peer's: without tokens it is the owner (api.auth)
    )
