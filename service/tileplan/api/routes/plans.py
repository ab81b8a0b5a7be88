"""GET /plans, GET|DELETE /plans/{key}, GET /plans/{key}/timeloop, POST /evaluate."""

from __future__ import annotations

import importlib
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from tileplan.api.auth import require_read, require_write
from tileplan.api.errors import ApiError
from tileplan.api.schemas import ERRORS, ErrorBody, EvaluateRequest, PlanPage
from tileplan.mapping import parse_mapping
from tileplan.plan import Evaluation, Plan, evaluate
from tileplan.workload import parse_layer

router = APIRouter(tags=["plans"], dependencies=[Depends(require_read)])
KEY_PATTERN = "^[0-9a-f]{64}$"


def _json(body: str, status: int = 200) -> Response:
    return Response(body, status_code=status, media_type="application/json")


@router.get("/plans", response_model=None, responses={200: {"model": PlanPage}, **ERRORS})
async def list_plans(
    request: Request,
    hardware: str | None = Query(default=None, max_length=200, description="Hardware name"),
    op: str | None = Query(default=None, max_length=16, description="conv2d | matmul"),
    limit: int = Query(default=50, ge=1, le=500),
    cursor: str | None = Query(default=None, pattern="^[0-9]{1,18}$", description="`next_cursor` of the last page"),
) -> Response:
    """Cached plans, newest first."""
    store = request.app.state.store
    rows = await run_in_threadpool(
        store.list_plans, hardware=hardware, op=op, limit=limit, before=int(cursor) if cursor else None
    )
    plans = ",".join(r.to_json(cached=True) for r in rows)
    nxt = f'"{rows[-1].seq}"' if len(rows) == limit else "null"
    return _json(f'{{"plans":[{plans}],"next_cursor":{nxt}}}')


async def _plan_row(request: Request, key: str) -> Any:
    row = await run_in_threadpool(request.app.state.store.get_plan, key)
    if row is None:
        raise ApiError(404, ["path", "key"], f"no plan {key}", "not_found")
    return row


@router.get("/plans/{key}", response_model=None, responses={200: {"model": Plan}, 404: {"model": ErrorBody}})
async def get_plan(request: Request, key: str) -> Response:
    """One cached plan by key."""
    return _json((await _plan_row(request, key)).to_json(cached=True))


@router.delete("/plans/{key}", status_code=204, dependencies=[Depends(require_write)],
               responses={404: {"model": ErrorBody}, **ERRORS})
async def delete_plan(request: Request, key: str) -> Response:
    """Drop a plan from the cache (it is solved again when next asked for)."""
    if not await run_in_threadpool(request.app.state.store.delete_plan, key):
        raise ApiError(404, ["path", "key"], f"no plan {key}", "not_found")
    return Response(status_code=204)


@router.get(
    "/plans/{key}/timeloop",
    response_class=Response,
    responses={200: {"content": {"application/yaml": {}}, "description": "Timeloop mapping YAML"},
               404: {"model": ErrorBody}},
)
async def get_plan_timeloop(request: Request, key: str) -> Response:
    """The plan's mapping as a Timeloop mapping file."""
    import json

    from tileplan.api.routes.hardware import hardware_for_plan

    row = await _plan_row(request, key)
    exporter = _timeloop_exporter()
    if exporter is None:
        raise ApiError(404, ["path", "key"], "Timeloop export is not available on this server", "not_available")
    doc = json.loads(row.to_json(cached=True))
    hw = await run_in_threadpool(hardware_for_plan, request, row.hardware)
    text = await run_in_threadpool(exporter, doc, hw)
    return Response(text, media_type="application/yaml")


def _timeloop_exporter() -> Any:
    """`tileplan.interop.timeloop_map` when this build has it: (plan dict, descriptor or None) -> YAML."""
    try:
        mod = importlib.import_module("tileplan.interop.timeloop_map")
    except ModuleNotFoundError:
        return None
    from tileplan.mapping import Mapping

    for name in ("plan_to_timeloop_yaml", "export_plan", "to_timeloop_yaml", "mapping_to_timeloop_yaml"):
        fn = getattr(mod, name, None)
        if fn is not None:
            def export(doc: dict[str, Any], hw: Any, fn: Any = fn, name: str = name) -> str:
                if name.startswith("mapping"):
                    return fn(Mapping.model_validate(doc["mapping"]), hw)
                return fn(doc, hw)
            return export
    return None


@router.post("/evaluate", response_model=Evaluation, responses=ERRORS)
def evaluate_mapping(body: EvaluateRequest, request: Request) -> Evaluation:
    """Any mapping on any descriptor: its metrics when legal, its violations when not."""
    hw = request.app.state.scheduler.resolve_hardware(body.hardware)
    layer = parse_layer(body.layer, ("layer",))
    mapping = parse_mapping(body.mapping, ("mapping",))
    return evaluate(layer, hw, mapping)
