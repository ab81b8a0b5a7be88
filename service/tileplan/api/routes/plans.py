"""GET /plans, GET|DELETE /plans/{key}, GET /plans/{key}/module, GET /plans/{key}/timeloop, POST /evaluate."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from tileplan.api.auth import caller_of, require_read, require_write
from tileplan.api.errors import ApiError
from tileplan.api.schemas import ERRORS, ErrorBody, EvaluateRequest, PlanPage
from tileplan.jobs.disconnect import unless_gone
from tileplan.jobs.modules import UnknownDescriptor
from tileplan.jobs.solve import SolverCrashed, SolveTimeout
from tileplan.plan import Evaluation, Plan, links_for
from tileplan.workload import check_extents, layer_fields, parse_layer

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


NAME_DOC = ("The layer name you gave the plan (a cached plan is shared by every request for the same layer, whatever "
            "it is called): the answer carries it. The links in POST /schedule's answers add it where it differs "
            "from the name the plan was cached under.")


@router.get("/plans/{key}", response_model=None, responses={200: {"model": Plan}, 404: {"model": ErrorBody}})
async def get_plan(
    request: Request, key: str, name: str | None = Query(default=None, max_length=200, description=NAME_DOC)
) -> Response:
    """One cached plan by key (with its layer named as it was first asked for, or as `name` says)."""
    row = await _plan_row(request, key)
    if name is None:
        return _json(row.to_json(cached=True))
    layer = json.dumps({**json.loads(row.layer), "name": name}, separators=(",", ":"))
    stored = '"links":' + json.dumps(links_for(row.key), separators=(",", ":"))
    named = '"links":' + json.dumps(links_for(row.key, name), separators=(",", ":"))
    return _json(replace(row, doc=row.doc.replace(stored, named, 1)).to_json(cached=True, layer=layer))


@router.delete("/plans/{key}", status_code=204, dependencies=[Depends(require_write)],
               responses={404: {"model": ErrorBody}, **ERRORS})
async def delete_plan(request: Request, key: str) -> Response:
    """Drop a plan from the cache (it is solved again when next asked for)."""
    if not await run_in_threadpool(request.app.state.store.delete_plan, key):
        raise ApiError(404, ["path", "key"], f"no plan {key}", "not_found")
    request.app.state.kept_answers.forget(key)  # at once here; other API processes hear it from the database
    return Response(status_code=204)


MODULE_MEDIA = {"tvmscript": "text/plain; charset=utf-8", "c": "text/plain; charset=utf-8", "tar": "application/x-tar"}


@router.get(
    "/plans/{key}/module",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}, "application/x-tar": {}},
                     "description": "The plan's module: TVMScript, C (against gemmini.h), or a tar of both with "
                                    "gemmini.h, the host library (TVM's llvm build of the module, linked against "
                                    "Tileplan's Gemmini emulator, with libgemmini_emu.so and gemmini_emu.h) and "
                                    "BUILD.md (how to load and run it)"},
               404: {"model": ErrorBody}, 422: {"model": ErrorBody}},
)
async def get_plan_module(
    request: Request,
    key: str,
    format: Literal["tvmscript", "c", "tar"] = Query(default="c", description="tvmscript | c | tar"),
    name: str | None = Query(default=None, max_length=200, description=NAME_DOC + " The module's files, entry "
                             "point and tar directory are named after it."),
) -> Response:
    """The code generated for the plan (built now, in a solver process, if the plan was scheduled without
    `codegen`, or was cached under another layer name than `name`). A plan that cannot become code for its
    hardware (no code generator there) is a 422 with the reason, at once."""
    try:  # (a client that leaves stops a build only it was waiting for)
        # (a build takes its asker's turn: one client's builds under many names wait in that client's line)
        module = await unless_gone(request.is_disconnected,
                                   request.app.state.modules.ensure(key, name, caller_of(request).owner))
    except UnknownDescriptor as exc:
        raise ApiError(404, ["path", "key"], str(exc), "not_found") from None
    except (SolveTimeout, SolverCrashed) as exc:  # not stored: the next request tries again
        raise ApiError(503, [], str(exc), "codegen_unavailable") from None
    if module is None:
        raise ApiError(404, ["path", "key"], f"no plan {key}", "not_found")
    if not module.ok:
        raise ApiError(422, ["path", "key"], f"no module for this plan: {module.error}", "codegen_error")
    headers = {"X-Model-Cycles": f"{module.model_cycles:g}"} if module.model_cycles is not None else {}
    if module.notes:
        headers["X-Codegen-Notes"] = json.dumps(module.notes, ensure_ascii=True)
    if format == "tar":
        headers["Content-Disposition"] = f'attachment; filename="{module.name}.tar"'
        return Response(module.tar, media_type=MODULE_MEDIA["tar"], headers=headers)
    text = module.tvmscript if format == "tvmscript" else module.c_source
    return Response(text, media_type=MODULE_MEDIA[format], headers=headers)


@router.get(
    "/plans/{key}/timeloop",
    response_class=Response,
    responses={200: {"content": {"application/yaml": {}}, "description": "Timeloop mapping YAML"},
               404: {"model": ErrorBody}, 422: {"model": ErrorBody}},
)
async def get_plan_timeloop(
    request: Request,
    key: str,
    bundle: bool = Query(default=False, description="Architecture, problem and mapping in one document"),
    fold_groups: bool = Query(default=False, description="Fold grouped convs' G into N (Timeloop has no G)"),
    name: str | None = Query(default=None, max_length=200, description=NAME_DOC),
) -> Response:
    """The plan's mapping as a Timeloop mapping file (timeloop-model's / CoSA's layout); with `bundle`, the
    architecture and problem too. Notes on what Timeloop cannot express lead the file as comments."""
    store = request.app.state.store
    row = await _plan_row(request, key)
    descriptor = await run_in_threadpool(store.plan_descriptor, key)
    text = await run_in_threadpool(_timeloop_text, row, descriptor, bundle, fold_groups, name)
    return Response(text, media_type="application/yaml")


def _timeloop_text(row: Any, descriptor: dict[str, Any] | None, bundle: bool, fold_groups: bool,
                   name: str | None = None) -> str:
    from tileplan.hardware import HardwareDescriptor
    from tileplan.hardware.catalog import catalog
    from tileplan.hardware.model import STORED
    from tileplan.interop.timeloop_map import dump_mapping_yaml, to_timeloop_bundle, to_timeloop_mapping
    from tileplan.mapping import Mapping
    from tileplan.problem import Problem

    if descriptor is not None:
        hw = HardwareDescriptor.model_validate(descriptor, context=STORED)
    elif row.hardware in catalog():  # plans cached before descriptors were stored with them
        hw = catalog()[row.hardware]
    else:
        raise ApiError(404, ["path", "key"], "the descriptor this plan was solved for is not known", "not_found")
    doc = json.loads(row.doc)
    mapping = Mapping.model_validate(doc["mapping"])
    notes: list[str] = []
    if bundle:
        problem = Problem.from_layer(parse_layer(layer_fields(json.loads(row.layer))))
        text = to_timeloop_bundle(problem, hw, mapping, fold_groups=fold_groups, notes=notes)
    else:
        text = dump_mapping_yaml(to_timeloop_mapping(mapping, hw, fold_groups=fold_groups, notes=notes))
    layer_name = json.loads(row.layer).get("name", "") if name is None else name
    title = f"# Tileplan plan {row.key} on {hw.name}" + (f", layer {layer_name}" if layer_name else "")
    head = " ".join(title.splitlines()) + "\n" + "".join(f"# note: {n}\n" for n in notes)
    return head + text


@router.post("/evaluate", response_model=Evaluation, responses=ERRORS)
async def evaluate_mapping(body: EvaluateRequest, request: Request) -> Response:
    """Any mapping on any descriptor: its metrics when legal, its violations when not. The evaluation runs in a
    sandbox process under the server's time and memory budget (a 422 says which ran out); a client that goes away
    stops it."""
    scheduler = request.app.state.scheduler
    # a Plan's layer (with its derived `dims`) is accepted as it is, so a plan can be evaluated as it came back
    layer = parse_layer(layer_fields(body.layer) if "dims" in body.layer else body.layer, ("layer",))
    check_extents(layer, request.app.state.settings.max_layer_extent, ("layer",))
    work = _evaluate(scheduler, body, layer.model_dump(mode="json"))
    result = await unless_gone(request.is_disconnected, work)
    return _json(json.dumps(result))


async def _evaluate(scheduler: Any, body: EvaluateRequest, layer: dict[str, Any]) -> dict[str, Any]:
    hw = await scheduler.hardware(body.hardware)
    out: dict[str, Any] = await scheduler.sandbox.evaluate(hw, layer, body.mapping, body.executor, body.model)
    return out
