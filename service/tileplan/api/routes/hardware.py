"""GET /hardware, GET|DELETE /hardware/{name}, POST /hardware (register a descriptor, JSON or YAML)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from tileplan.api.auth import require_read, require_write
from tileplan.api.errors import ApiError
from tileplan.api.schemas import ERRORS, ErrorBody, HardwareList
from tileplan.errors import InputError
from tileplan.hardware import HardwareDescriptor
from tileplan.hardware.catalog import catalog

router = APIRouter(tags=["hardware"], dependencies=[Depends(require_read)])
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")


def _links(name: str) -> dict[str, str]:
    return {"self": f"/hardware/{name}"}


@router.get("/hardware", response_model=HardwareList)
def list_hardware(request: Request) -> dict[str, Any]:
    """The catalog and the registered descriptors."""
    out = [
        {"name": n, "description": hw.description, "source": "catalog", "links": _links(n)}
        for n, hw in sorted(catalog().items())
    ]
    for n, doc in request.app.state.store.list_hardware().items():
        out.append({"name": n, "description": doc.get("description", ""), "source": "registered", "links": _links(n)})
    return {"hardware": out}


@router.get("/hardware/{name}", responses={200: {"description": "The descriptor"}, 404: {"model": ErrorBody}})
def get_hardware(name: str, request: Request) -> dict[str, Any]:
    """One descriptor (Tileplan format, as JSON)."""
    hw = catalog().get(name)
    if hw is not None:
        return {**hw.model_dump(mode="json"), "source": "catalog"}
    doc = request.app.state.store.get_hardware(name)
    if doc is None:
        raise ApiError(404, ["path", "name"], f"no hardware {name!r}", "not_found")
    return {**doc, "source": "registered"}


def hardware_for_plan(request: Request, name: str) -> HardwareDescriptor | None:
    hw = catalog().get(name)
    if hw is not None:
        return hw
    doc = request.app.state.store.get_hardware(name)
    return HardwareDescriptor.model_validate(doc) if doc else None


@router.post(
    "/hardware",
    status_code=201,
    dependencies=[Depends(require_write)],
    responses={409: {"model": ErrorBody, "description": "A catalog descriptor has that name"}, **ERRORS},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": {"type": "object", "description": "A Tileplan descriptor, or "
                                                "{name, format, source} with YAML text"}},
                "application/yaml": {"schema": {"type": "string", "description": "A descriptor in YAML "
                                                "(Tileplan or Timeloop)"}},
            },
        }
    },
)
async def register_hardware(
    request: Request,
    name: str | None = Query(default=None, max_length=200, description="Name to register under (YAML bodies)"),
) -> dict[str, Any]:
    """Register (or replace) a descriptor; it can then be named in requests like a catalog entry."""
    raw = await request.body()
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype in YAML_TYPES:
        ref: Any = {"source": raw.decode("utf-8", "replace"), "name": name}
    else:
        try:
            ref = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError((), f"malformed JSON: {exc}", "json_invalid") from None
        if not isinstance(ref, dict):
            raise InputError((), "a descriptor object or {name, format, source}", "dict_type")
        if name and "source" in ref and not ref.get("name"):
            ref = {**ref, "name": name}
        elif name and "source" not in ref:
            ref = {**ref, "name": name}
    scheduler = request.app.state.scheduler
    hw: HardwareDescriptor = await run_in_threadpool(scheduler.resolve_hardware, ref)
    if hw.name in catalog():
        raise ApiError(409, ["body", "name"], f"{hw.name!r} is a catalog descriptor; choose another name", "conflict")
    doc = hw.model_dump(mode="json")
    await run_in_threadpool(request.app.state.store.put_hardware, hw.name, doc)
    return {"name": hw.name, "source": "registered", "links": _links(hw.name)}


@router.delete("/hardware/{name}", status_code=204, dependencies=[Depends(require_write)],
               responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}, **ERRORS})
async def delete_hardware(name: str, request: Request) -> Response:
    """Remove a registered descriptor (catalog ones cannot be removed)."""
    if name in catalog():
        raise ApiError(409, ["path", "name"], f"{name!r} is a catalog descriptor", "conflict")
    if not await run_in_threadpool(request.app.state.store.delete_hardware, name):
        raise ApiError(404, ["path", "name"], f"no registered hardware {name!r}", "not_found")
    return Response(status_code=204)


__all__ = ["router", "hardware_for_plan"]
