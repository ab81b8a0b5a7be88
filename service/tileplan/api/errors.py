"""Every error leaves as `{"detail": [{"loc": [...], "msg": ..., "type": ...}]}`; never a traceback."""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import psycopg
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from sqlalchemy.exc import DBAPIError, IntegrityError, InterfaceError, OperationalError, ProgrammingError
from starlette.exceptions import HTTPException

from tileplan.api.answers import AnswerFromCache
from tileplan.errors import InputError, MappingInfeasible, error_loc, unexpected_error
from tileplan.jobs.disconnect import ClientGone
from tileplan.store.repository import QuotaExceeded

log = logging.getLogger("tileplan.api")


class ApiError(HTTPException):
    def __init__(self, status: int, loc: list[str | int], msg: str, type_: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status, detail=msg, headers=headers)
        self.loc, self.msg, self.type = loc, msg, type_


class BodyTooLarge(ApiError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, ["body"], f"request body is over the limit of {limit} bytes", "too_large")


class BodyIdle(ApiError):
    def __init__(self, seconds: float) -> None:
        super().__init__(408, ["body"], f"no byte of the request body came for {seconds:g} s (body_idle_s); send "
                         "the body as the request goes", "body_timeout")


_UNION_TAGS = {"conv2d", "matmul", "dense"}  # pydantic's discriminator values, not fields a user wrote


def _body_item(d: dict[str, Any]) -> dict[str, Any]:
    loc = ["body", *(p for p in d["loc"] if p not in _UNION_TAGS)]
    if d.get("type") == "union_tag_invalid" and loc[-1] != "op":
        loc.append("op")  # pydantic reports a bad discriminator at the object; the field is `op`
    return {**d, "loc": loc}


def detail(loc: list[Any], msg: str, type_: str) -> dict[str, Any]:
    return {"detail": [{"loc": loc, "msg": msg, "type": type_}]}


def body_loc(exc: InputError) -> list[Any]:
    return ["body", *exc.loc]


MAX_DETAILS = 20  # error items an answer lists (the last one after them says how many more there were)


def bounded(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first MAX_DETAILS error items and, if there were more, one saying how many: a 500 KB /evaluate body of
    50,000 bad loops was answered with 50,000 items (7.2 MB), an answer many times its request."""
    if len(items) <= MAX_DETAILS:
        return items
    more = len(items) - MAX_DETAILS
    return [*items[:MAX_DETAILS], {"loc": list(items[MAX_DETAILS].get("loc", [])[:2]),
                                   "msg": f"and {more} more error(s) like these, not listed", "type": "too_many_errors"}]


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        items = []
        for err in exc.errors():
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if err.get("type") == "json_invalid":
                msg = f"malformed JSON: {err.get('ctx', {}).get('error', msg)}"
            items.append({"loc": list(error_loc(err)), "msg": msg, "type": err.get("type", "value_error")})
        return JSONResponse({"detail": bounded(items)}, status_code=422)

    @app.exception_handler(AnswerFromCache)
    async def _kept(request: Request, exc: AnswerFromCache) -> Response:
        return exc.response  # not an error: POST /schedule's kept answer (tileplan.api.answers)

    @app.exception_handler(InputError)
    async def _input(request: Request, exc: InputError) -> JSONResponse:
        status = 413 if exc.type == "too_many_layers" else (404 if exc.type == "not_found" else 422)
        items = getattr(exc, "all_details", None) or [exc.to_detail()]
        return JSONResponse({"detail": bounded([_body_item(d) for d in items])}, status_code=status)

    @app.exception_handler(QuotaExceeded)
    async def _quota(request: Request, exc: QuotaExceeded) -> JSONResponse:
        msg = (f"your stored compiles hold {exc.used} bytes; this one would add {exc.need}, over the quota of "
               f"{exc.quota} bytes per owner (DELETE /compiles/{{id}} frees yours)")
        return JSONResponse(detail(["body", "model"], msg, "quota_exceeded"), status_code=409)

    @app.exception_handler(MappingInfeasible)
    async def _infeasible(request: Request, exc: MappingInfeasible) -> JSONResponse:
        return JSONResponse(detail(["body"], str(exc), "infeasible"), status_code=422)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> JSONResponse:
        if isinstance(exc, ApiError):
            body = detail(exc.loc, exc.msg, exc.type)
        elif exc.status_code == 400 and exc.__cause__ is not None:  # FastAPI's "error parsing the body"
            return JSONResponse(detail(["body"], _unreadable(request, exc.__cause__), "json_invalid"), status_code=422)
        else:
            body = detail([], str(exc.detail), _http_type(exc.status_code))
        return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(DBAPIError)
    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(PoolTimeout)
    @app.exception_handler(sqlite3.DatabaseError)
    async def _database_away(request: Request, exc: Exception) -> JSONResponse:
        # the database is restarting or unreachable (say so, and when to retry), or its storage is damaged (a
        # server fault the client cannot fix, but not an internal error of ours): a 503 either way. A bad
        # statement or a broken constraint is a bug and stays a 500.
        if isinstance(exc, (ProgrammingError, IntegrityError)):
            return await _unexpected(request, exc)
        health = getattr(request.app.state, "health", None)
        if health is not None:
            health.invalidate()  # /healthz checks again before it answers
        if transient_storage_error(exc):
            log.warning("event=database_unavailable path=%s error=%s", request.url.path, type(exc).__name__)
            return JSONResponse(detail([], "the database is unavailable; retry shortly", "service_unavailable"),
                                status_code=503, headers={"Retry-After": "2"})
        log.error("event=storage_error path=%s error=%s: %s", request.url.path, type(exc).__name__,
                  str(getattr(exc, "orig", exc))[:200])
        return JSONResponse(detail([], "the server's storage cannot be read; this is the server's fault and has been "
                                   "logged", "service_unavailable"), status_code=503)

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request": nobody reads it; logs and metrics do

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        err = unexpected_error(log, "this request", event="unhandled_error", path=request.url.path)
        return JSONResponse({"detail": [err]}, status_code=500)


def transient_storage_error(exc: BaseException) -> bool:
    """A lost or refused connection, a busy or locked database: worth retrying shortly (unlike damaged storage)."""
    if isinstance(exc, (PoolTimeout, psycopg.OperationalError, TimeoutError, ConnectionError)):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    if isinstance(exc.orig, sqlite3.DatabaseError) and not isinstance(exc.orig, sqlite3.OperationalError):
        return False  # "database disk image is malformed", "file is not a database"
    if isinstance(exc.orig, sqlite3.OperationalError) and "no such" in str(exc.orig):
        return False  # a table or column gone: not coming back by itself
    return bool(exc.connection_invalidated) or isinstance(exc, (OperationalError, InterfaceError)) or isinstance(
        exc.orig, (psycopg.OperationalError, psycopg.InterfaceError))


def _unreadable(request: Request, cause: BaseException) -> str:
    """Why a body's JSON could not be read, when it was not a syntax error (those are pydantic's json_invalid)."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        return f"Content-Encoding {encoding!r} is not accepted: send the JSON uncompressed"
    if isinstance(cause, RecursionError):
        return "malformed JSON: nested too deeply"
    if isinstance(cause, UnicodeDecodeError):
        return f"malformed JSON: not UTF-8 (byte 0x{cause.object[cause.start]:02x} at position {cause.start})"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        return "malformed JSON: a number of over 4300 digits"
    return f"malformed JSON: {type(cause).__name__}"


def _http_type(status: int) -> str:
    return {401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
            409: "conflict", 413: "too_large"}.get(status, "http_error")
