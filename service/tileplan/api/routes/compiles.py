"""POST /compile, GET /compiles, GET|DELETE /compiles/{id}, GET /compiles/{id}/artifact: whole models compiled."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import ValidationError

from tileplan.api.auth import caller_of, require_read, require_write
from tileplan.api.errors import ApiError, BodyTooLarge
from tileplan.api.schemas import ERRORS, CompileBody, CompilePage, CompileView, ErrorBody
from tileplan.errors import InputError, from_validation_error
from tileplan.jobs.compiles import input_fault
from tileplan.store.repository import Compile, iso_utc

router = APIRouter(tags=["compile"], dependencies=[Depends(require_read)])

_MULTIPART_DOC = {
    "type": "object",
    "required": ["model"],
    "properties": {
        "model": {"type": "string", "format": "binary", "description": "The ONNX file."},
        "request": {"type": "string", "description": "CompileBody as JSON text, without `model` and `calibration`."},
        "calibration": {"type": "string", "format": "binary",
                        "description": "With options.quantize: an .npz of calibration inputs."},
    },
}
_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": CompileBody.model_json_schema()},
    "multipart/form-data": {"schema": _MULTIPART_DOC},
}}}


def _json(doc: Any, status: int = 200) -> Response:
    return Response(json.dumps(doc), status_code=status, media_type="application/json")


def compile_view(c: Compile, *, summary: bool = True) -> dict[str, Any]:
    """A compile as GET /compiles/{id} shows it (`summary=False`: the listing's short form, `total` only)."""
    doc: dict[str, Any] = {
        "id": c.id, "status": c.status, "model": c.model_name, "hardware": c.hardware,
        "progress": {"ops_done": c.ops_done, "ops_total": c.ops_total},
        "created_at": iso_utc(c.created_at), "updated_at": iso_utc(c.updated_at),
        "finished_at": iso_utc(c.finished_at) if c.finished_at else None,
    }
    if c.summary is not None:
        if summary:
            doc["summary"] = c.summary
        else:
            doc["total"] = c.summary.get("total", {})
        doc["notes"] = list(c.summary.get("notes", []))
    if c.status == "done":
        doc["artifact"] = {"bytes": c.artifact_bytes, "sha256": c.artifact_sha256}
    if c.error is not None:
        doc["error"] = c.error
    doc["links"] = {"self": f"/compiles/{c.id}", "artifact": f"/compiles/{c.id}/artifact", "page": f"/ui/compiles/{c.id}"}
    return doc


@router.post(
    "/compile",
    response_model=None,
    dependencies=[Depends(require_write)],
    openapi_extra=_BODY,
    responses={
        200: {"model": CompileView, "description": "Compiled (now, within the wait limit, or before: the same request "
                                                   "is the same compile)"},
        202: {"model": CompileView, "description": "Compiling: poll `links.self`"},
        409: {"model": ErrorBody, "description": "A new compile would take its owner's stored compiles past "
                                                 "`TILEPLAN_COMPILE_QUOTA_BYTES` (`type` quota_exceeded)"},
        500: {"model": ErrorBody, "description": "The compiler failed (not the model's fault); asking again retries"},
        **ERRORS,
        422: {"model": ErrorBody, "description": (
            "Invalid request or a model that cannot be compiled: `loc` names the field, the model's node "
            "(`[\"body\", \"model\", <node>]`) or input (`[\"body\", \"input_shapes\", <input>]`)")},
    },
)
async def compile_model(request: Request) -> Response:
    """Compile a quantized ONNX model into one program for the accelerator and its host: a job like
    POST /schedule's, identified by the model, hardware, options, input shapes and solver version (the same
    request twice is the same compile: no second job). JSON with the model as base64, or multipart/form-data
    with a `model` file part and a `request` JSON part. A model that cannot be compiled is a 422 naming the
    node and why; nothing is stored for it."""
    body, model, calibration = await _read_request(request)
    state = request.app.state
    compiler = state.compiler
    ops = await compiler.supported_ops()
    req = await asyncio.to_thread(compiler.check, model, body.hardware, body.options, body.input_shapes, calibration,
                                  ops)
    found = await compiler.submit(req, caller_of(request).owner)
    if body.wait and not found.finished and state.settings.wait_limit_s > 0:
        found = await compiler.wait(req.id, state.settings.wait_limit_s) or found
    return _answer(found)


def _answer(c: Compile) -> Response:
    doc = compile_view(c)
    if c.status == "done":
        return _json(doc)
    if c.status == "failed":
        err = c.error or {"loc": [], "msg": "the compile failed", "type": "compile_error"}
        loc = ["body", *err.get("loc", [])] if input_fault(c) else []
        doc["detail"] = [{**err, "loc": loc}]
        return _json(doc, 422 if input_fault(c) else 500)
    return _json(doc, 202)


async def _read_request(request: Request) -> tuple[CompileBody, bytes, bytes | None]:
    """The request, the model's bytes and the calibration data's (if given)."""
    ctype = request.headers.get("content-type", "")
    if ctype.startswith("multipart/form-data"):
        return await _multipart(request)
    raw = await request.body()
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ApiError(422, ["body"], f"malformed JSON: {exc}", "json_invalid") from None
    body = _validate(doc)
    if body.model is None:
        raise InputError(("model",), "field required: the ONNX model as base64 (or upload it as multipart/form-data)",
                         "missing")
    return body, _base64(body.model, "model"), _base64(body.calibration, "calibration") if body.calibration else None


def _base64(text: str, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError((field,), "not valid base64", "value_error") from None


def _validate(doc: Any) -> CompileBody:
    if not isinstance(doc, dict):
        raise InputError((), "expected a JSON object", "model_attributes_type")
    try:
        return CompileBody.model_validate(doc)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


async def _multipart(request: Request) -> tuple[CompileBody, bytes, bytes | None]:
    limit = request.app.state.settings.max_compile_bytes
    try:
        form = await request.form(max_files=3, max_fields=8, max_part_size=limit)
    except BodyTooLarge:
        raise
    except Exception as exc:  # noqa: BLE001 - python-multipart's parse errors, Starlette's limits
        raise ApiError(422, ["body"], f"malformed multipart body: {exc}", "value_error") from None
    try:
        part = form.get("model")
        if part is None or isinstance(part, str):
            raise InputError(("model",), "field required: a file part named `model` with the ONNX model", "missing")
        model = await part.read()
        part_or_text = form.get("request")
        # a text field, or a file part (`curl -F request=@request.json`)
        text = part_or_text if part_or_text is None or isinstance(part_or_text, str) else (
            (await part_or_text.read()).decode("utf-8", "replace"))
        try:
            doc = json.loads(text) if text else {}
        except ValueError as exc:
            raise InputError(("request",), f"malformed JSON: {exc}", "json_invalid") from None
        for name in ("model", "calibration"):
            if isinstance(doc, dict) and name in doc:
                raise InputError(("request", name), f"the {name} is the `{name}` file part here, not a field",
                                 "extra_forbidden")
        if isinstance(doc, dict) and isinstance(form.get("hardware"), str) and "hardware" not in doc:
            doc["hardware"] = form["hardware"]  # the one field a form would most likely give on its own
        calib = form.get("calibration")
        if calib is not None and isinstance(calib, str):
            raise InputError(("calibration",), "a file part with the .npz of calibration inputs", "value_error")
        return _validate(doc), model, (await calib.read()) if calib is not None else None
    finally:
        await form.close()


@router.get("/compiles", response_model=None, responses={200: {"model": CompilePage}, **ERRORS})
async def list_compiles(
    request: Request,
    hardware: str | None = Query(default=None, max_length=200, description="Hardware name"),
    status: str | None = Query(default=None, pattern="^(queued|running|done|failed)$",
                               description="queued | running | done | failed"),
    limit: int = Query(default=50, ge=1, le=500),
    cursor: str | None = Query(default=None, pattern="^[0-9]{1,18}$", description="`next_cursor` of the last page"),
) -> Response:
    """Compiles, newest first (each with its totals; its summary at `links.self`)."""
    rows = await asyncio.to_thread(request.app.state.store.list_compiles, hardware=hardware, status=status,
                                   limit=limit, before=int(cursor) if cursor else None)
    nxt = str(rows[-1].seq) if len(rows) == limit else None
    return _json({"compiles": [compile_view(c, summary=False) for c in rows], "next_cursor": nxt})


async def _compile(request: Request, compile_id: str) -> Compile:
    found = await request.app.state.compiler.get(compile_id) if len(compile_id) <= 64 else None
    if found is None:
        raise ApiError(404, ["path", "compile_id"], f"no compile {compile_id!r}", "not_found")
    return found


@router.get("/compiles/{compile_id}", response_model=None,
            responses={200: {"model": CompileView}, 404: {"model": ErrorBody}, **ERRORS})
async def get_compile(request: Request, compile_id: str) -> Response:
    """A compile's status and progress (ops planned and generated / total); its network summary once done
    (per op: where it runs and why, plan key, emulated and modelled cycles, speed-up over the hand-written
    library's tiling; totals; notes), its error if it failed."""
    return _json(compile_view(await _compile(request, compile_id)))


@router.get(
    "/compiles/{compile_id}/artifact",
    response_class=Response,
    responses={200: {"content": {"application/x-tar": {}}, "description": (
        "The program as one tar: kernels/*.c (one per distinct accelerator op, against gemmini.h), host/*.c, "
        "model.c (the glue), main.c (the program: input file -> tileplan_run -> output file, per-step cycles), "
        "tileplan_model.h (`tileplan_run`), weights.bin/.S, Makefile (`host`, `host-main`, `riscv`), "
        "the emulator, tileplan.json and README.md. Run it with `tileplan run <tar> --input in.npy`.")},
        404: {"model": ErrorBody}, 409: {"model": ErrorBody, "description": "Not done (yet), or failed"}, **ERRORS},
)
async def get_compile_artifact(request: Request, compile_id: str) -> Response:
    """The compiled program (tar) of a done compile."""
    found = await _compile(request, compile_id)
    if found.status != "done":
        why = ("it failed: " + (found.error or {}).get("msg", "")) if found.status == "failed" else (
            f"it is {found.status}; poll /compiles/{compile_id}")
        raise ApiError(409, ["path", "compile_id"], f"compile {compile_id} has no artifact: {why}", "not_ready")
    data = await asyncio.to_thread(request.app.state.store.compile_artifact, compile_id)
    if data is not None:
        await asyncio.to_thread(request.app.state.store.touch_compile, compile_id)  # (retention: recently used)
    if data is None:
        raise ApiError(404, ["path", "compile_id"], f"no artifact for compile {compile_id!r}", "not_found")
    headers = {"Content-Disposition": f'attachment; filename="{_filename(found.model_name)}.tar"',
               "ETag": f'"{found.artifact_sha256}"'}
    return Response(data, media_type="application/x-tar", headers=headers)


@router.delete("/compiles/{compile_id}", status_code=204, dependencies=[Depends(require_write)],
               responses={403: {"model": ErrorBody, "description": "Held by other owners only"},
                          404: {"model": ErrorBody}, **ERRORS})
async def delete_compile(request: Request, compile_id: str) -> Response:
    """Let go of a compile you asked for: its model, summary and artifact are deleted (a running one is stopped),
    unless other owners asked for the same compile too, who keep it (your quota no longer counts it either way).
    An admin token deletes any compile outright."""
    who = caller_of(request)
    outcome = await request.app.state.compiler.delete(compile_id, who.owner, admin=who.admin) \
        if len(compile_id) <= 64 else "missing"
    if outcome == "missing":
        raise ApiError(404, ["path", "compile_id"], f"no compile {compile_id!r}", "not_found")
    if outcome == "forbidden":
        raise ApiError(403, ["path", "compile_id"], f"compile {compile_id} was asked for by other owners only; "
                       "only they (or an admin token) may delete it", "forbidden")
    return Response(status_code=204)


def _filename(name: str) -> str:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).strip("._")
    return safe or "model"
