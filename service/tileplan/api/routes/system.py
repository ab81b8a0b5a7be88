"""GET /healthz and GET /metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request, Response

from tileplan import __version__
from tileplan.api.auth import require_read
from tileplan.api.schemas import Health
from tileplan.plan import solver_version

router = APIRouter(tags=["system"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
async def healthz(request: Request, response: Response) -> dict[str, str]:
    """Liveness and database reachability (never needs a token): the outcome of the last storage check, run in
    the background while probes come, waited for when none is recent (`tileplan.api.health`)."""
    state = request.app.state
    db = await state.health.state()
    if db != "ok":
        response.status_code = 503
        if db == "unreachable":
            response.headers["Retry-After"] = "2"
    return {"status": "ok" if db == "ok" else "degraded", "database": db, "queue": state.queue.kind,
            "version": __version__, "solver_version": solver_version()}


@router.get("/metrics", dependencies=[Depends(require_read)], response_class=Response,
            responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
async def metrics(request: Request) -> Response:
    """Prometheus metrics: requests, latencies, cache hits, solves, queue depth."""
    state = request.app.state
    try:
        state.metrics.queue_depth.set(await asyncio.to_thread(state.store.queue_depth))
    except Exception:  # noqa: BLE001 - the gauge keeps its last value
        pass
    return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")
