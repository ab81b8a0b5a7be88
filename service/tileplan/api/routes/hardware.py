"""GET /hardware, GET|DELETE /hardware/{name}, POST /hardware (register a descriptor, JSON or YAML)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from tileplan.api.auth import caller_of, require_read, require_write
from tileplan.api.errors import ApiError
from tileplan.api.schemas import ERRORS, ErrorBody, HardwareList
from tileplan.errors import InputError, shown
from tileplan.hardware import HardwareDescriptor
from tileplan.hardware.catalog import catalog
from tileplan.store.repository import HardwareQuota, RegisteredHardware, iso_utc
from tileplan.validation import check_name, check_storable

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


def _registered(entry: RegisteredHardware) -> dict[str, Any]:
    return {"source": "registered", "owner": entry.owner, "version": entry.version,
            "registered_at": iso_utc(entry.created_at), "updated_at": iso_utc(entry.updated_at)}


@router.get("/hardware/{name}", responses={200: {"description": "The descriptor"}, 404: {"model": ErrorBody}})
def get_hardware(name: str, request: Request) -> dict[str, Any]:
    """One descriptor (Tileplan format, as JSON); a registered one with its owner (a fingerprint of the token that
    registered it, or without tokens the client's address) and version."""
    hw = catalog().get(name)
    if hw is not None:
        return {**hw.model_dump(mode="json"), "source": "catalog"}
    entry = request.app.state.store.hardware_entry(name)
    if entry is None:
        raise ApiError(404, ["path", "name"], f"no hardware {shown(name)}", "not_found")
    return {**entry.descriptor, **_registered(entry)}


BODY_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"type": "object", "description": "A Tileplan descriptor, or "
                                            "{name, format, source} with YAML text"}},
            "application/yaml": {"schema": {"type": "string", "description": "A descriptor in YAML "
                                            "(Tileplan or Timeloop)"}},
        },
    }
}
NAME_QUERY = Query(default=None, max_length=200, description="Name to register under (YAML bodies)")


@router.post(
    "/hardware",
    status_code=201,
    dependencies=[Depends(require_write)],
    responses={409: {"model": ErrorBody, "description": "A catalog descriptor, or a registered one (replace it with "
                     "PUT /hardware/{name}), has that name"}, **ERRORS},
    openapi_extra=BODY_DOC,
)
async def register_hardware(request: Request, name: str | None = NAME_QUERY) -> dict[str, Any]:
    """Register a descriptor under a new name; it can then be named in requests like a catalog entry. The name
    must be free: replacing a registered descriptor is `PUT /hardware/{name}`."""
    hw = await _descriptor_of(request, name)
    request.app.state.compiler.forget_bodies()  # (a compile request naming it may now mean other hardware)
    entry = await _put(request, hw.name, hw.model_dump(mode="json"))
    if entry is None:
        raise ApiError(409, ["body", "name"], f"{hw.name!r} is already registered; PUT /hardware/{hw.name} replaces it",
                       "conflict")
    return {"name": hw.name, "links": _links(hw.name), **_registered(entry)}


@router.put(
    "/hardware/{name}",
    dependencies=[Depends(require_write)],
    responses={403: {"model": ErrorBody, "description": "Registered by another owner"},
               409: {"model": ErrorBody, "description": "A catalog descriptor has that name"}, **ERRORS},
    openapi_extra=BODY_DOC,
)
async def replace_hardware(name: str, request: Request) -> dict[str, Any]:
    """Register or replace the descriptor `name` (its version goes up by one). Only its owner (the token, or
    without tokens the address, that registered it) or an admin token may replace it. Plans solved for the old descriptor stay cached under their own keys."""
    check_name(name, ("path", "name"))
    hw = await _descriptor_of(request, name, path_name=True)
    store = request.app.state.store
    old = await run_in_threadpool(store.hardware_entry, name)
    if old is not None:
        _check_owner(request, old, "replace")
    request.app.state.compiler.forget_bodies()  # (a compile request naming it may now mean other hardware)
    entry = await _put(request, name, hw.model_dump(mode="json"), replace=True)
    return {"name": name, "links": _links(name), **_registered(entry)}


async def _put(request: Request, name: str, descriptor: dict[str, Any], replace: bool = False) -> Any:
    """Store.put_hardware under the caller's bound of registered descriptors (a 409 past it)."""
    bound = request.app.state.settings.owner_max_hardware
    try:
        return await run_in_threadpool(request.app.state.store.put_hardware, name, descriptor,
                                       owner=owner_of(request), replace=replace, max_per_owner=bound)
    except HardwareQuota as exc:
        raise ApiError(409, ["body", "name"], f"you have {exc.held} descriptors registered, this server's bound "
                       f"(owner_max_hardware); delete one (DELETE /hardware/{{name}}) or replace one (PUT)",
                       "quota_exceeded") from None


async def _descriptor_of(request: Request, name: str | None, path_name: bool = False) -> HardwareDescriptor:
    """The descriptor in the body (JSON, or YAML text), its name checked: a safe path segment, not a catalog one."""
    raw = await request.body()
    ctype = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if ctype in YAML_TYPES:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError((), f"not UTF-8 text: {exc.reason} at byte {exc.start}", "value_error") from None
        ref: Any = {"source": text, "name": name}
    else:
        try:
            ref = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError((), f"malformed JSON: {exc}", "json_invalid") from None
        except RecursionError:  # (said as every other body says it)
            raise InputError((), "malformed JSON: nested too deeply", "json_invalid") from None
        if not isinstance(ref, dict):
            raise InputError((), "a descriptor object or {name, format, source}", "dict_type")
        if name and "source" in ref and not ref.get("name"):
            ref = {**ref, "name": name}
        elif name and "source" not in ref:
            ref = {**ref, "name": name}
    if path_name:  # PUT: the path names it
        ref = {**ref, "name": name}
    check_storable(ref, ("body",))
    hw: HardwareDescriptor = await request.app.state.scheduler.hardware(ref)
    check_name(hw.name, ("body", "name"))
    if hw.name in catalog():
        raise ApiError(409, ["body", "name"], f"{hw.name!r} is a catalog descriptor; choose another name", "conflict")
    return hw


def owner_of(request: Request) -> str:
    """Who is writing: a fingerprint of the bearer token (the token itself is never stored), or without tokens the
    client's address (`tileplan.api.auth`)."""
    return caller_of(request).owner


def _check_owner(request: Request, entry: RegisteredHardware, what: str) -> None:
    if not caller_of(request).may_act_on(entry.owner):
        raise ApiError(403, ["path", "name"], f"{entry.name!r} was registered by another owner; only it (or an admin "
                       f"token) may {what} it", "forbidden")


@router.delete("/hardware/{name}", status_code=204, dependencies=[Depends(require_write)],
               responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody}, **ERRORS})
async def delete_hardware(name: str, request: Request) -> Response:
    """Remove a registered descriptor (catalog ones cannot be removed; a registered one only by its owner or an
    admin token)."""
    if name in catalog():
        raise ApiError(409, ["path", "name"], f"{shown(name)} is a catalog descriptor", "conflict")
    store = request.app.state.store
    entry = await run_in_threadpool(store.hardware_entry, name)
    if entry is not None:
        _check_owner(request, entry, "delete")
    request.app.state.compiler.forget_bodies()  # (a compile request naming it may now mean other hardware)
    if entry is None or not await run_in_threadpool(store.delete_hardware, name):
        raise ApiError(404, ["path", "name"], f"no registered hardware {shown(name)}", "not_found")
    return Response(status_code=204)


__all__ = ["router"]
