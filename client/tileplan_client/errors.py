"""What the client raises. Every error is a `TileplanError`; `detail` holds the service's {loc, msg, type} items."""

from __future__ import annotations

from typing import Any

from tileplan_client.models import Compile, Job, ScheduleResult

INPUT_ERROR_TYPES = {"infeasible", "value_error", "missing", "extra_forbidden"}


def format_detail(d: dict[str, Any]) -> str:
    if not isinstance(d, dict):  # (a server's answer that is not the API's)
        return str(d)[:500]
    parts = d.get("loc")
    loc = ".".join(str(p) for p in parts if p != "body")[:200] if isinstance(parts, list) else ""
    msg = str(d.get("msg", ""))
    msg = msg if len(msg) <= 2000 else msg[:2000] + "..."
    return f"{loc}: {msg}" if loc else msg


def format_details(detail: list[dict[str, Any]], limit: int = 20) -> str:
    """The first `limit` items, `; `-joined, and how many more there were."""
    text = "; ".join(format_detail(d) for d in detail[:limit])
    return text + (f"; and {len(detail) - limit} more" if len(detail) > limit else "")


class TileplanError(Exception):
    """Base of every error the client raises."""


class BadInput(TileplanError):
    """The service rejected the request (4xx): `detail` lists {loc, msg, type} per offending field.

    `result`: the plans, when the service solved them all the same (POST /schedule with `codegen` on hardware
    without a code generator is a 422 that carries its plans)."""

    def __init__(self, status: int, detail: list[dict[str, Any]], body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.body = body or {}
        self.result = ScheduleResult.from_dict(self.body) if isinstance(self.body.get("plans"), list) else None
        super().__init__(format_details(detail) or f"HTTP {status}")

    @property
    def type(self) -> str:
        """The first item's `type` (e.g. value_error, not_found, codegen_unsupported)."""
        return str(self.detail[0].get("type", "")) if self.detail else ""


class NotFound(BadInput):
    """404: no such plan, job or hardware."""


class AuthError(BadInput):
    """401 (a token is needed) or 403 (the token is refused)."""


class ServiceError(TileplanError):
    """The service failed, was unreachable, or did not answer in time."""

    def __init__(self, msg: str, status: int | None = None, detail: list[dict[str, Any]] | None = None) -> None:
        self.status = status
        self.detail = detail or []
        super().__init__(msg)


class WaitTimeout(ServiceError):
    """A job was not done within the time `wait` was given; `job` is how far it got."""

    def __init__(self, msg: str, job: Job | None = None) -> None:
        self.job = job
        super().__init__(msg)


class JobFailed(TileplanError):
    """A job finished as failed; `errors` name the layers and reasons."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.errors = job.errors
        super().__init__(format_details(job.errors) or f"job {job.id} failed")

    @property
    def input_fault(self) -> bool:
        """True when the layers are at fault (e.g. infeasible on this hardware), not the service."""
        return bool(self.errors) and all(e.get("type") in INPUT_ERROR_TYPES for e in self.errors)


class CompileFailed(TileplanError):
    """A compile finished as failed; `error` ({loc, msg, type}) names the node or input at fault, or the reason."""

    SERVER_FAULTS = frozenset({"compile_error", "time_limit", "compile_timeout", "compile_crashed", "internal_error"})

    def __init__(self, compile: Compile) -> None:
        self.compile = compile
        self.error = compile.error or {"loc": [], "msg": "the compile failed", "type": "compile_error"}
        super().__init__(format_detail(self.error))

    @property
    def input_fault(self) -> bool:
        """True when the model (or the request) is at fault, not the service (asking again gives the same)."""
        return self.error.get("type") not in self.SERVER_FAULTS


def error_from(status: int, reason: str, doc: Any) -> TileplanError:
    """The error of an HTTP answer with status >= 400 (`doc`: its JSON, or None)."""
    body = doc if isinstance(doc, dict) else {}
    detail = body.get("detail")
    if not isinstance(detail, list):
        detail = [{"loc": [], "msg": str(detail or reason)[:500], "type": "http_error"}]
    # items as the API makes them ({loc: [...], msg, type}), whatever a server that is not the API answered
    detail = [d if isinstance(d, dict) and isinstance(d.get("loc", []), list) else
              {"loc": [], "msg": str(d.get("msg", d) if isinstance(d, dict) else d)[:500], "type": "http_error"}
              for d in detail]
    if 400 <= status < 500 and status != 429:
        cls = NotFound if status == 404 else AuthError if status in (401, 403) else BadInput
        return cls(status, detail, body)
    msg = format_details(detail) or reason
    return ServiceError(f"HTTP {status}: {msg}", status, detail)
