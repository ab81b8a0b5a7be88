"""POST /compile, GET /compiles, GET|DELETE /compiles/{id}, GET /compiles/{id}/artifact: whole models compiled."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from tileplan.api.auth import caller_of, require_read, require_write
from tileplan.api.errors import ApiError
from tileplan.api.schemas import ERRORS, CompileBody, CompilePage, CompileView, ErrorBody
from tileplan.errors import InputError, from_validation_error, shown
from tileplan.jobs.compiles import discard, input_fault
from tileplan.jobs.disconnect import unless_gone
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
    node and why; nothing is stored for it. The body is streamed to a temporary file and read, like the model,
    outside the API process; a body identical to one answered before is answered from its compile at once."""
    state = request.app.state
    compiler = state.compiler
    owner = caller_of(request).owner
    ctype = request.headers.get("content-type", "")
    fd, path = await asyncio.to_thread(tempfile.mkstemp, prefix="tileplan-compile-")  # (a file system call)
    try:
        digest = await _spool(request, fd, ctype)
        refused = compiler.refused.get(digest)
        if refused is not None:  # the same bytes were refused before: refused again, unread
            exc = InputError(tuple(refused[0]["loc"]), refused[0]["msg"], refused[0]["type"])
            exc.all_details = refused  # type: ignore[attr-defined]
            raise exc
        known = compiler.bodies.get(digest)
        found = await compiler.hold(known[0], owner) if known is not None else None
        if known is not None and found is not None:
            wait = known[1]
        else:
            # (a client that leaves stops its read and check: it no longer holds an intake process or its place
            # in the queue for one)
            try:
                found, wait, fixed = await unless_gone(request.is_disconnected,
                                                       compiler.admit(ctype, path, owner, _validate))
            except InputError as exc:
                # what the bytes alone are refused for (not the server's load, not a registered name's meaning)
                if exc.type not in UNSTABLE_REFUSALS and getattr(exc, "rememberable", True):
                    details = list(getattr(exc, "all_details", None) or [exc.to_detail()])
                    compiler.refused.put(digest, details, len(json.dumps(details)) + BODY_ENTRY_BYTES)
                raise
            if fixed:
                compiler.bodies.put(digest, (found.id, wait), BODY_ENTRY_BYTES)
    finally:
        discard(path)
    if wait and not found.finished and state.settings.wait_limit_s > 0:
        found = await compiler.wait(found.id, state.settings.wait_limit_s) or found
    return await _answer(state.store, found)


BODY_ENTRY_BYTES = 200  # a remembered body: its digest, the compile's id, `wait`
# refusals that depend on more than the body (the server's load, the compile being deleted as it was asked for):
# not remembered
UNSTABLE_REFUSALS = {"too_costly", "conflict"}


SPOOL_BATCH_BYTES = 1 << 20  # body bytes gathered before they are hashed and written, in a thread


async def _spool(request: Request, fd: int, content_type: str) -> str:
    """Write the body to `fd` as it arrives (the middleware's 413 past the limit applies), never holding more than
    a batch of it; returns the digest of the content type and the body (an identical request has the same).
    Hashing and writing run in a thread, a megabyte at a time (both release the interpreter's lock): on the event
    loop, a 90 MB body's were most of the loop's stalls while it arrived (bench/hostile.py)."""
    h = hashlib.sha256(content_type.encode("latin-1", "replace") + b"\n")
    with os.fdopen(fd, "wb") as f:
        def put(parts: list[bytes]) -> None:
            for part in parts:
                h.update(part)
                f.write(part)

        batch: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            batch.append(chunk)
            size += len(chunk)
            if size >= SPOOL_BATCH_BYTES:
                await asyncio.to_thread(put, batch)
                batch, size = [], 0
        if size >= SPOOL_BATCH_BYTES // 8:
            await asyncio.to_thread(put, batch)
        else:
            put(batch)  # (a small body's last bytes: cheaper here than a thread's round trip)
    return h.hexdigest()


async def _with_summary(store: Any, c: Compile, status: int = 200) -> Response:
    """compile_view(c) with the summary as stored: its JSON text put in as it is, never parsed and encoded again in
    this process (a model of 40,000 nodes: a 12 MB summary, 1.2 s of the interpreter's lock per answer, the API's
    other requests stalled behind it). `c.summary` is the store's head of it (no per-op list)."""
    doc = compile_view(c)
    text = await asyncio.to_thread(store.compile_summary_text, c.id) if "summary" in doc else None
    if text is None:
        return _json(doc, status)
    token = f"summary-{uuid.uuid4().hex}"
    doc["summary"] = token
    body = json.dumps(doc).replace(f'"{token}"', text, 1)
    return Response(body, status_code=status, media_type="application/json")


async def _answer(store: Any, c: Compile) -> Response:
    doc = compile_view(c)
    if c.status == "done":
        return await _with_summary(store, c)
    if c.status == "failed":
        err = c.error or {"loc": [], "msg": "the compile failed", "type": "compile_error"}
        loc = ["body", *err.get("loc", [])] if input_fault(c) else []
        doc["detail"] = [{**err, "loc": loc}]
        return _json(doc, 422 if input_fault(c) else 500)
    return _json(doc, 202)


def _validate(doc: Any) -> CompileBody:
    if not isinstance(doc, dict):
        raise InputError((), "expected a JSON object", "model_attributes_type")
    try:
        return CompileBody.model_validate(doc)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


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
        raise ApiError(404, ["path", "compile_id"], f"no compile {shown(compile_id)}", "not_found")
    return found


@router.get("/compiles/{compile_id}", response_model=None,
            responses={200: {"model": CompileView}, 404: {"model": ErrorBody}, **ERRORS})
async def get_compile(request: Request, compile_id: str) -> Response:
    """A compile's status and progress (ops planned and generated / total); its network summary once done
    (per op: where it runs and why, plan key, emulated and modelled cycles, speed-up over the hand-written
    library's tiling; totals; notes), its error if it failed."""
    return await _with_summary(request.app.state.store, await _compile(request, compile_id))


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
    cache = Path(request.app.state.settings.data_dir) / "artifact-cache"
    state = request.app.state
    if getattr(state, "artifact_spool", None) is None:
        state.artifact_spool = asyncio.Lock()
    async with state.artifact_spool:  # one artifact read out of the store at a time: one in the API's memory at most
        f = await asyncio.to_thread(_spooled, state.store, compile_id, found.artifact_sha256, cache)
    if f is not None:
        # (retention: recently used; at most once a minute, as each write rewrites the row's model and artifact)
        await asyncio.to_thread(state.store.touch_compile, compile_id, state.store.TOUCH_EVERY_S)
    if f is None:
        raise ApiError(404, ["path", "compile_id"], f"no artifact for compile {shown(compile_id)}", "not_found")
    headers = {"Content-Disposition": f'attachment; filename="{_filename(found.model_name)}.tar"',
               "ETag": f'"{found.artifact_sha256}"'}
    size = os.fstat(f.fileno()).st_size
    return StreamingResponse(_chunks(f), media_type="application/x-tar",
                             headers={**headers, "Content-Length": str(size)})


ARTIFACT_CACHE_BYTES = 1 << 30  # artifact files kept for downloads (the least recently written go first)
# A spool file is written in well under a second; one older than this was left by a process killed while writing it.
STALE_SPOOL_S = 600.0


def _spooled(store: Any, compile_id: str, sha256: str | None, cache: Path) -> Any:
    """The artifact of a done compile as a file opened for reading (written once from the store, shared by every
    download of it; opened before another download's prune could remove it: it is read on, as opened), or None if
    it has none. An artifact used to be sent from memory: each download held the whole tar in the API
    process until its client had read it all, so eight slow downloads of one 64 MB program took the API from 280
    to 1,060 MiB."""
    name = sha256 if sha256 and all(c in "0123456789abcdef" for c in sha256) else hashlib.sha256(
        compile_id.encode()).hexdigest()
    path = cache / f"{name}.tar"
    if path.exists():
        with contextlib.suppress(OSError):
            os.utime(path)
            return open(path, "rb")
    data = store.compile_artifact(compile_id)
    if data is None:
        return None
    cache.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    del data
    f = open(path, "rb")
    _prune(cache, keep=path)
    return f


def _prune(cache: Path, keep: Path) -> None:
    """Artifact files past ARTIFACT_CACHE_BYTES, least recently used first (an open download reads on), and spool
    files a killed process left half written (they count against no bound and nothing else removes them)."""
    stale_before = time.time() - STALE_SPOOL_S
    for p in cache.glob("*.tmp"):
        with contextlib.suppress(OSError):
            if p.stat().st_mtime < stale_before:
                p.unlink()
    files = []
    for p in cache.glob("*.tar"):
        with contextlib.suppress(OSError):
            st = p.stat()
            files.append((st.st_mtime, st.st_size, p))
    total = sum(size for _, size, _ in files)
    for _, size, p in sorted(files, key=lambda x: x[0]):
        if total <= ARTIFACT_CACHE_BYTES:
            break
        if p != keep:
            with contextlib.suppress(OSError):
                p.unlink()
            total -= size


async def _chunks(f: Any, size: int = 1 << 20) -> Any:
    try:
        while True:
            chunk = await asyncio.to_thread(f.read, size)
            if not chunk:
                return
            yield chunk
    finally:
        f.close()


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
        raise ApiError(404, ["path", "compile_id"], f"no compile {shown(compile_id)}", "not_found")
    if outcome == "forbidden":
        raise ApiError(403, ["path", "compile_id"], f"compile {compile_id} was asked for by other owners only; "
                       "only they (or an admin token) may delete it", "forbidden")
    return Response(status_code=204)


def _filename(name: str) -> str:
    """The graph's name as a download's file name: ASCII letters, digits, `-_.` (a header holds Latin-1 only, and
    a client's file system its own bound), at most 96 characters."""
    from tileplan.frontend.program import short_ident

    safe = "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "-_." else "_" for ch in name).strip("._")
    return short_ident(safe) if len(safe) > 96 else safe or "model"
