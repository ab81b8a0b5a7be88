"""`TileplanClient`: POST /schedule with retries, polling of 202 jobs, timeouts and typed results."""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from tileplan_client.models import Evaluation, Job, Plan, ScheduleResult

RETRY_STATUS = {429, 502, 503, 504}
INPUT_ERROR_TYPES = {"infeasible", "value_error", "missing", "extra_forbidden"}


class TileplanError(Exception):
    """Base of every error the client raises."""


class BadInput(TileplanError):
    """The service rejected the request (4xx): `detail` lists {loc, msg, type} per offending field."""

    def __init__(self, status: int, detail: list[dict[str, Any]]) -> None:
        self.status = status
        self.detail = detail
        super().__init__("; ".join(_format_detail(d) for d in detail) or f"HTTP {status}")


class ServiceError(TileplanError):
    """The service failed, was unreachable, or did not answer in time."""

    def __init__(self, msg: str, status: int | None = None, detail: list[dict[str, Any]] | None = None) -> None:
        self.status = status
        self.detail = detail or []
        super().__init__(msg)


class JobFailed(TileplanError):
    """A job finished as failed; `errors` name the layers and reasons."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.errors = job.errors
        super().__init__("; ".join(_format_detail(e) for e in job.errors) or f"job {job.id} failed")

    @property
    def input_fault(self) -> bool:
        return bool(self.errors) and all(e.get("type") in INPUT_ERROR_TYPES for e in self.errors)


def _format_detail(d: dict[str, Any]) -> str:
    loc = ".".join(str(p) for p in d.get("loc", []) if p != "body")
    return f"{loc}: {d.get('msg', '')}" if loc else str(d.get("msg", ""))


ProgressFn = Callable[[Job], None]


class TileplanClient:
    """A client of one Tileplan service.

    `timeout` bounds each HTTP request; `retries` is how often a connection error or a 429/502/503/504 is
    retried (with jittered exponential backoff); `schedule(..., timeout=)` bounds the whole wait for a job.
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        token: str | None = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        poll_interval: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"user-agent": "tileplan-client/0.1"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self.retries = retries
        self.poll_interval = poll_interval
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TileplanClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ------------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        delay = 0.2
        for attempt in range(self.retries + 1):
            try:
                resp = self._http.request(method, path, **kwargs)
            except httpx.TimeoutException as exc:
                err: Exception = ServiceError(f"{method} {path}: no answer in time ({type(exc).__name__})")
            except httpx.TransportError as exc:
                err = ServiceError(f"{method} {path}: cannot reach the service ({exc})")
            else:
                if resp.status_code not in RETRY_STATUS:
                    return resp
                err = _error_from(resp)
            if attempt == self.retries:
                raise err
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def _json(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        resp = self._request(method, path, **kwargs)
        if resp.status_code >= 400:
            raise _error_from(resp)
        try:
            return resp.status_code, resp.json()
        except ValueError:
            raise ServiceError(f"{method} {path}: the answer is not JSON", resp.status_code) from None

    # -- API ------------------------------------------------------------------------------------

    def schedule(
        self,
        hardware: str | dict[str, Any],
        layers: Sequence[dict[str, Any]] | None = None,
        *,
        model: bytes | None = None,
        mapper: str | None = None,
        options: dict[str, Any] | None = None,
        wait: bool = True,
        timeout: float | None = 600.0,
        on_progress: ProgressFn | None = None,
    ) -> ScheduleResult:
        """Plans for `layers` on `hardware` (a name, a descriptor dict, or {name, format, source}), or for
        every convolution and matrix product of `model` (the bytes of an ONNX file) instead of `layers`.

        Polls a 202 job until it is done, calling `on_progress(job)` on each poll; raises `BadInput`,
        `JobFailed` or `ServiceError`. `wait=False` asks the server to answer at once (a 202 unless cached)."""
        opts = dict(options or {})
        if mapper:
            opts["mapper"] = mapper
        if (layers is None) == (model is None):
            raise ValueError("give layers or model (ONNX bytes), not both")
        body: dict[str, Any] = {"hardware": hardware, "options": opts, "wait": wait}
        if model is not None:
            body["model"] = base64.b64encode(model).decode("ascii")
        else:
            body["layers"] = list(layers or [])
        status, doc = self._json("POST", "/schedule", json=body)
        if status == 200 and doc.get("status") == "done":
            return ScheduleResult.from_dict(doc)
        return self.wait_job(doc["id"], timeout=timeout, on_progress=on_progress, first=Job.from_dict(doc))

    def job(self, job_id: str) -> Job:
        return Job.from_dict(self._json("GET", f"/jobs/{job_id}")[1])

    def wait_job(
        self, job_id: str, *, timeout: float | None = 600.0, on_progress: ProgressFn | None = None,
        first: Job | None = None,
    ) -> ScheduleResult:
        end = None if timeout is None else time.monotonic() + timeout
        job = first
        interval = min(0.1, self.poll_interval)
        while True:
            if job is not None:
                if on_progress:
                    on_progress(job)
                if job.status == "done":
                    return ScheduleResult.from_dict(job.raw)
                if job.status == "failed":
                    raise JobFailed(job)
            if end is not None and time.monotonic() > end:
                raise ServiceError(f"job {job_id} not done after {timeout:g} s")
            if job is not None:
                time.sleep(interval)
                interval = min(interval * 1.5, self.poll_interval)
            job = self.job(job_id)

    def plan(self, key: str) -> Plan:
        return Plan.from_dict(self._json("GET", f"/plans/{key}")[1])

    def plans(self, *, hardware: str | None = None, op: str | None = None, limit: int = 50,
              cursor: str | None = None) -> tuple[list[Plan], str | None]:
        params = {k: v for k, v in dict(hardware=hardware, op=op, limit=limit, cursor=cursor).items() if v is not None}
        doc = self._json("GET", "/plans", params=params)[1]
        return [Plan.from_dict(p) for p in doc["plans"]], doc.get("next_cursor")

    def evaluate(self, hardware: str | dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any],
                 executor: str | None = None) -> Evaluation:
        """Metrics of a mapping, or its violations. `executor`: on Gemmini-like hardware, cost it as Tileplan's
        code runs it ("tileplan") or as Gemmini's own library does ("library", how baselines are costed); by
        default the mapping's own `executor` (plans carry theirs), else the library."""
        body: dict[str, Any] = {"hardware": hardware, "layer": layer, "mapping": mapping}
        if executor:
            body["executor"] = executor
        return Evaluation.from_dict(self._json("POST", "/evaluate", json=body)[1])

    def hardware(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/hardware")[1]["hardware"])

    def register_hardware(self, descriptor: dict[str, Any] | str, *, name: str | None = None) -> dict[str, Any]:
        """Register a descriptor dict, or YAML text (Tileplan or Timeloop)."""
        params = {"name": name} if name else None
        if isinstance(descriptor, str):
            return dict(self._json("POST", "/hardware", content=descriptor.encode(), params=params,
                                   headers={"content-type": "application/yaml"})[1])
        return dict(self._json("POST", "/hardware", json=descriptor, params=params)[1])

    def health(self) -> dict[str, Any]:
        return dict(self._json("GET", "/healthz")[1])


def _error_from(resp: httpx.Response) -> TileplanError:
    try:
        doc = resp.json()
    except ValueError:
        doc = {}
    detail = doc.get("detail") if isinstance(doc, dict) else None
    if not isinstance(detail, list):
        detail = [{"loc": [], "msg": str(detail or resp.reason_phrase), "type": "http_error"}]
    if 400 <= resp.status_code < 500 and resp.status_code != 429:
        return BadInput(resp.status_code, detail)
    msg = "; ".join(_format_detail(d) for d in detail) or resp.reason_phrase
    return ServiceError(f"HTTP {resp.status_code}: {msg}", resp.status_code, detail)
