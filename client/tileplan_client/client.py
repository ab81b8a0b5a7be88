"""`TileplanClient` and its async twin `AsyncTileplanClient`: the service's API with retries, polling of 202
jobs, timeouts, typed results and typed errors.

    with TileplanClient("http://127.0.0.1:8000") as client:
        result = client.schedule("gemmini-16x16", [{"op": "matmul", "M": 128, "K": 768, "N": 768}])
        plan = result.plans[0]
        print(plan.metrics.cycles, plan.speedup, plan.baseline.mapper)
        c_source = client.module(plan).text
        compiled = client.compile("gemmini-16x16", "model-int8.onnx")   # a whole model: one program
        client.save_artifact(compiled, "model.tar")

Both clients share what a request is and what its answer means (`_Api`); they differ only in how they wait.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

import httpx

from tileplan_client.archive import PROGRAM_FILES, write_checked
from tileplan_client.errors import (  # noqa: F401 - re-exported
    AuthError,
    BadInput,
    CompileFailed,
    JobFailed,
    NotFound,
    ServiceError,
    TileplanError,
    WaitTimeout,
    error_from,
)
from tileplan_client.models import Compile, Evaluation, Hardware, Job, Module, Plan, ScheduleResult

RETRY_STATUS = {429, 502, 503, 504}
MAX_ANSWER_BYTES = 1 << 30  # an answer's bytes (after httpx inflates gzip) a client reads before it gives up
MODULE_FORMATS = ("c", "tvmscript", "tar")
ProgressFn = Callable[[Job], None]
CompileProgressFn = Callable[[Compile], None]
Polled = TypeVar("Polled", Job, Compile)
Done = TypeVar("Done")


def _timed_out(current: Job | Compile, timeout: float | None) -> WaitTimeout:
    kind = "job" if isinstance(current, Job) else "compile"
    return WaitTimeout(f"{kind} {current.id} not done after {timeout:g} s", current if isinstance(current, Job) else None)


class _Backoff:
    """What both clients' waiting loops share: report progress, stop at an answer or past the deadline, and pause
    (0.1 s growing by 1.5x up to `max_interval`) between fetches."""

    def __init__(self, timeout: float | None, on_progress: Callable[[Any], None] | None, max_interval: float) -> None:
        self.timeout, self.on_progress, self.max_interval = timeout, on_progress, max_interval
        self.end = None if timeout is None else time.monotonic() + timeout
        self.interval = min(0.1, max_interval)

    def answer(self, current: Polled, done: Callable[[Polled], Done | None]) -> Done | None:
        if self.on_progress:
            self.on_progress(current)
        result = done(current)
        if result is None and self.end is not None and time.monotonic() > self.end:
            raise _timed_out(current, self.timeout)
        return result

    def pause(self) -> float:
        interval, self.interval = self.interval, min(self.interval * 1.5, self.max_interval)
        return interval


def _poll(current: Polled, fetch: Callable[[str], Polled], done: Callable[[Polled], Done | None], *,
          timeout: float | None, on_progress: Callable[[Polled], None] | None, max_interval: float) -> Done:
    """Fetch `current` again until `done` gives an answer (`_Backoff`)."""
    wait = _Backoff(timeout, on_progress, max_interval)
    while (result := wait.answer(current, done)) is None:
        time.sleep(wait.pause())
        current = fetch(current.id)
    return result


async def _apoll(current: Polled, fetch: Callable[[str], Awaitable[Polled]], done: Callable[[Polled], Done | None], *,
                 timeout: float | None, on_progress: Callable[[Polled], None] | None, max_interval: float) -> Done:
    """`_poll` for the async client."""
    wait = _Backoff(timeout, on_progress, max_interval)
    while (result := wait.answer(current, done)) is None:
        await asyncio.sleep(wait.pause())
        current = await fetch(current.id)
    return result


PlanRef = Plan | str  # a Plan, or a plan key
CompileRef = Compile | str  # a Compile, or a compile id
ModelRef = bytes | str | os.PathLike[str]  # the ONNX bytes, or a path to the file


def _read(ref: ModelRef, default_name: str) -> tuple[str, bytes]:
    """(file name, bytes) of bytes given as they are or as a path."""
    if isinstance(ref, bytes):
        return default_name, ref
    with open(ref, "rb") as f:
        return os.path.basename(os.fspath(ref)), f.read()


class _Api:
    """Requests and answers, shared by the sync and async clients."""

    def __init__(self, url: str, token: str | None, retries: int, poll_interval: float) -> None:
        self.url = url.rstrip("/")
        self.headers = {"user-agent": "tileplan-client/0.2"}
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self.retries = retries
        self.poll_interval = poll_interval
        self.answers = 0  # HTTP answers received (`_checked`: an error after one is about what the service sent)

    @staticmethod
    def schedule_body(hardware: str | dict[str, Any], layers: Sequence[dict[str, Any]] | None, model: bytes | None,
                      mapper: str | None, options: dict[str, Any] | None, wait: bool) -> dict[str, Any]:
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
        return body

    @staticmethod
    def compile_upload(hardware: str | dict[str, Any], model: ModelRef, input_shapes: Mapping[str, Sequence[int]] | None,
                       mapper: str | None, quantize: bool | None, options: dict[str, Any] | None,
                       wait: bool, calibration: ModelRef | None = None) -> dict[str, Any]:
        """POST /compile's multipart form (the model, and calibration data, as file parts: no base64 on the wire)."""
        filename, data = _read(model, "model.onnx")
        opts = dict(options or {})
        if mapper:
            opts["mapper"] = mapper
        if quantize is not None:
            opts["quantize"] = quantize
        request: dict[str, Any] = {"hardware": hardware, "options": opts, "wait": wait}
        if input_shapes:
            request["input_shapes"] = {k: [int(d) for d in v] for k, v in input_shapes.items()}
        files = {"model": (filename, data, "application/octet-stream")}
        if calibration is not None:
            files["calibration"] = (*_read(calibration, "calibration.npz"), "application/octet-stream")
        return {"files": files, "data": {"request": json.dumps(request)}}

    @staticmethod
    def compile_id(ref: CompileRef) -> str:
        return ref.id if isinstance(ref, Compile) else ref

    @staticmethod
    def compile_done_or_raise(c: Compile) -> Compile | None:
        if c.status == "failed":
            raise CompileFailed(c)
        return c if c.status == "done" else None

    @staticmethod
    def plan_path(plan: PlanRef, what: str = "") -> tuple[str, dict[str, str]]:
        """The path of a plan (or its module / timeloop) and the query its links carry (the asker's layer name),
        for a Plan; for a key, the plain path."""
        if isinstance(plan, Plan):
            link = plan.links.get(what or "self") or f"/plans/{plan.key}" + (f"/{what}" if what else "")
            parts = urlsplit(link)
            return parts.path, dict(parse_qsl(parts.query, keep_blank_values=True))
        return f"/plans/{plan}" + (f"/{what}" if what else ""), {}

    @staticmethod
    def module_of(key: str, fmt: str, resp: httpx.Response) -> Module:
        disposition = resp.headers.get("content-disposition", "")
        filename = disposition.split("filename=", 1)[1].strip('"') if "filename=" in disposition else None
        cycles = resp.headers.get("x-model-cycles")
        notes = resp.headers.get("x-codegen-notes")
        return Module(key=key, format=fmt, data=resp.content, filename=filename,
                      model_cycles=float(cycles) if cycles else None, notes=json.loads(notes) if notes else [])

    @staticmethod
    def error(resp: httpx.Response) -> TileplanError:
        try:
            doc = resp.json()
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python reads
            doc = None
        return error_from(resp.status_code, resp.reason_phrase, doc)

    max_answer_bytes = MAX_ANSWER_BYTES

    def over_bound(self, method: str, path: str, resp: httpx.Response, size: int) -> None:
        """ServiceError once an answer's body is past `max_answer_bytes` (an endless body, or a gzip bomb: httpx
        inflates it as it arrives), before the client holds more of it."""
        if size > self.max_answer_bytes:
            raise ServiceError(f"{method} {path}: the answer is over this client's bound of {self.max_answer_bytes} "
                               "bytes (max_answer_bytes)", resp.status_code)

    @staticmethod
    def document(method: str, path: str, resp: httpx.Response) -> tuple[int, dict[str, Any]]:
        """The JSON object of a 2xx answer (every endpoint's answer is one); ServiceError for anything else (an
        HTML page of a proxy, a list, JSON nested deeper than Python reads)."""
        try:
            doc = resp.json()
        except (ValueError, RecursionError):
            raise ServiceError(f"{method} {path}: the answer is not JSON", resp.status_code) from None
        if not isinstance(doc, dict):
            raise ServiceError(f"{method} {path}: the answer is JSON {type(doc).__name__}, not the object Tileplan's "
                               "API answers with (is the URL a Tileplan service?)", resp.status_code)
        return resp.status_code, doc

    @staticmethod
    def done_or_raise(job: Job) -> ScheduleResult | None:
        if job.status == "failed":
            raise JobFailed(job)
        return job.result

    def backoff(self, attempt: int) -> float:
        return min(0.2 * 2**attempt, 5.0) * (1 + random.random())


class TileplanClient(_Api):
    """A client of one Tileplan service.

    `timeout` bounds each HTTP request; `retries` is how often a connection error or a 429/502/503/504 is
    retried (with jittered exponential backoff); `wait(..., timeout=)` bounds the whole wait for a job.
    Errors: `BadInput` (4xx; `NotFound`, `AuthError`), `ServiceError` (5xx, unreachable; `WaitTimeout`),
    `JobFailed`; all are `TileplanError`.
    """

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, *, timeout: float = 60.0,
                 retries: int = 3, poll_interval: float = 0.5, transport: httpx.BaseTransport | None = None,
                 max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        super().__init__(url, token, retries, poll_interval)
        self.max_answer_bytes = max_answer_bytes
        self._http = httpx.Client(base_url=self.url, headers=self.headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> TileplanClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport --------------------------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            try:
                resp = self._http.send(self._http.build_request(method, path, **kwargs), stream=True)
                try:
                    body = bytearray()
                    for chunk in resp.iter_bytes():
                        body += chunk
                        self.over_bound(method, path, resp, len(body))
                    resp._content = bytes(body)  # (what httpx's read() keeps: .content, .text and .json() read it)
                finally:
                    resp.close()
            except httpx.TimeoutException as exc:
                err: Exception = ServiceError(f"{method} {path}: no answer in time ({type(exc).__name__})")
            except httpx.TransportError as exc:
                err = ServiceError(f"{method} {path}: cannot reach the service ({exc})")
            else:
                self.answers += 1
                if resp.status_code not in RETRY_STATUS:
                    if resp.status_code >= 400:
                        raise self.error(resp)
                    return resp
                err = self.error(resp)
            if attempt == self.retries:
                raise err
            time.sleep(self.backoff(attempt))
        raise AssertionError("unreachable")

    def _json(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        return self.document(method, path, self._request(method, path, **kwargs))

    # -- scheduling -------------------------------------------------------------------------------------------

    def submit(self, hardware: str | dict[str, Any], layers: Sequence[dict[str, Any]] | None = None, *,
               model: bytes | None = None, mapper: str | None = None, options: dict[str, Any] | None = None,
               wait: bool = False) -> Job:
        """Send a schedule request; the job (already done, with its plans in `job.result`, when the service had
        them all). `wait=True` lets the service wait up to its limit before answering."""
        body = self.schedule_body(hardware, layers, model, mapper, options, wait)
        return Job.from_dict(self._json("POST", "/schedule", json=body)[1])

    def wait(self, job: Job | str, *, timeout: float | None = 600.0, on_progress: ProgressFn | None = None
             ) -> ScheduleResult:
        """Poll a job until it is done: its plans. Raises `JobFailed`, or `WaitTimeout` after `timeout` s."""
        current = job if isinstance(job, Job) else self.job(job)
        return _poll(current, self.job, self.done_or_raise, timeout=timeout, on_progress=on_progress,
                     max_interval=self.poll_interval)

    def schedule(self, hardware: str | dict[str, Any], layers: Sequence[dict[str, Any]] | None = None, *,
                 model: bytes | None = None, mapper: str | None = None, options: dict[str, Any] | None = None,
                 wait: bool = True, timeout: float | None = 600.0, on_progress: ProgressFn | None = None
                 ) -> ScheduleResult:
        """Plans for `layers` on `hardware` (a name, a descriptor dict, or {name, format, source}), or for every
        convolution and matrix product of `model` (the bytes of an ONNX file) instead of `layers`: `submit`
        then `wait`. `wait=False` asks the service to answer at once (a job to poll, unless cached)."""
        return self.wait(self.submit(hardware, layers, model=model, mapper=mapper, options=options, wait=wait),
                         timeout=timeout, on_progress=on_progress)

    def job(self, job_id: str) -> Job:
        return Job.from_dict(self._json("GET", f"/jobs/{job_id}")[1])

    # -- plans ------------------------------------------------------------------------------------------------

    def plan(self, plan: PlanRef) -> Plan:
        """A cached plan by key (or a Plan again, as its own link names it)."""
        path, params = self.plan_path(plan)
        return Plan.from_dict(self._json("GET", path, params=params)[1])

    def plans(self, *, hardware: str | None = None, op: str | None = None, limit: int = 50,
              cursor: str | None = None) -> tuple[list[Plan], str | None]:
        """One page of cached plans, newest first, and the cursor of the next page (None: the last)."""
        params = {k: v for k, v in dict(hardware=hardware, op=op, limit=limit, cursor=cursor).items() if v is not None}
        doc = self._json("GET", "/plans", params=params)[1]
        return [Plan.from_dict(p) for p in doc["plans"]], doc.get("next_cursor")

    def module(self, plan: PlanRef, format: str = "c", *, name: str | None = None) -> Module:
        """The plan's generated code: C against gemmini.h, TVMScript, or a tar of both with the host library.
        A Plan from a schedule answer gets its module under the layer name the request gave it; `name`
        overrides. Raises `BadInput` (422) with the reason when the plan cannot become code."""
        if format not in MODULE_FORMATS:
            raise ValueError(f"format must be one of {MODULE_FORMATS}")
        path, params = self.plan_path(plan, "module")
        params = {**params, "format": format, **({"name": name} if name is not None else {})}
        resp = self._request("GET", path, params=params)
        return self.module_of(plan.key if isinstance(plan, Plan) else plan, format, resp)

    def timeloop(self, plan: PlanRef, *, bundle: bool = False, fold_groups: bool = False) -> str:
        """The plan's mapping as Timeloop mapping YAML; `bundle`: with the architecture and problem."""
        path, params = self.plan_path(plan, "timeloop")
        params = {**params, "bundle": str(bundle).lower(), "fold_groups": str(fold_groups).lower()}
        return self._request("GET", path, params=params).text

    def evaluate(self, hardware: str | dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any],
                 executor: str | None = None, model: str | None = None) -> Evaluation:
        """Metrics of a mapping, or its violations. `executor`: on Gemmini-like hardware, cost it as Tileplan's
        code runs it ("tileplan") or as Gemmini's own library does ("library", how baselines are costed); by
        default the mapping's own `executor` (plans carry theirs), else the library. `model`: the cost model
        ("timeloop", "gemmini", "first-order"; default the hardware's)."""
        body: dict[str, Any] = {"hardware": hardware, "layer": layer, "mapping": mapping}
        if executor:
            body["executor"] = executor
        if model:
            body["model"] = model
        return Evaluation.from_dict(self._json("POST", "/evaluate", json=body)[1])

    # -- whole models -----------------------------------------------------------------------------------------

    def submit_compile(self, hardware: str | dict[str, Any], model: ModelRef, *,
                       input_shapes: Mapping[str, Sequence[int]] | None = None, mapper: str | None = None,
                       quantize: bool | None = None, options: dict[str, Any] | None = None,
                       wait: bool = False, calibration: ModelRef | None = None) -> Compile:
        """Send a model to compile (uploaded as multipart); the compile as the service has it (done at once when
        the same request was compiled before). `wait=True` lets the service wait up to its limit."""
        form = self.compile_upload(hardware, model, input_shapes, mapper, quantize, options, wait, calibration)
        return Compile.from_dict(self._json("POST", "/compile", **form)[1])

    def get_compile(self, compile: CompileRef) -> Compile:
        """A compile's status and progress; its summary once done."""
        return Compile.from_dict(self._json("GET", f"/compiles/{self.compile_id(compile)}")[1])

    def wait_compile(self, compile: CompileRef, *, timeout: float | None = 900.0,
                     on_progress: CompileProgressFn | None = None) -> Compile:
        """Poll a compile until it is done. Raises `CompileFailed` (its `error` names the node at fault), or
        `WaitTimeout` after `timeout` s."""
        current = compile if isinstance(compile, Compile) else self.get_compile(compile)
        return _poll(current, self.get_compile, self.compile_done_or_raise, timeout=timeout,
                     on_progress=on_progress, max_interval=self.poll_interval)

    def compile(self, hardware: str | dict[str, Any], model: ModelRef, *,
                input_shapes: Mapping[str, Sequence[int]] | None = None, mapper: str | None = None,
                quantize: bool | None = None, options: dict[str, Any] | None = None, wait: bool = True,
                timeout: float | None = 900.0, on_progress: CompileProgressFn | None = None,
                calibration: ModelRef | None = None) -> Compile:
        """Compile a quantized ONNX model (bytes or a path) for `hardware` into one program: `submit_compile`,
        then `wait_compile`. `input_shapes` fixes symbolic input dimensions; `quantize=True` has a float model
        quantized (onnxruntime's static quantizer, on `calibration`: an .npz of inputs, path or bytes, one array
        per model input with the samples along the first axis; else random inputs) instead of refused; `options` as
        POST /compile's (mapper, time_limit_s, baseline, offload, emulate, ...). Returns the done `Compile`
        (per-op summary, totals, notes); `artifact(...)` / `save_artifact(...)` fetch the program's tar.
        Raises `BadInput` (a model that cannot be compiled: `.detail` names the node) or `CompileFailed`."""
        c = self.submit_compile(hardware, model, input_shapes=input_shapes, mapper=mapper, quantize=quantize,
                                options=options, wait=wait, calibration=calibration)
        return self.wait_compile(c, timeout=timeout, on_progress=on_progress)

    def compiles(self, *, hardware: str | None = None, status: str | None = None, limit: int = 50,
                 cursor: str | None = None) -> tuple[list[Compile], str | None]:
        """One page of compiles, newest first (totals, no per-op summary), and the next page's cursor."""
        params = {k: v for k, v in dict(hardware=hardware, status=status, limit=limit, cursor=cursor).items()
                  if v is not None}
        doc = self._json("GET", "/compiles", params=params)[1]
        return [Compile.from_dict(c) for c in doc["compiles"]], doc.get("next_cursor")

    def artifact(self, compile: CompileRef) -> bytes:
        """The compiled program: one tar (kernels, host code, glue, weights, header, Makefile, README)."""
        return self._request("GET", f"/compiles/{self.compile_id(compile)}/artifact").content

    def save_artifact(self, compile: CompileRef, path: str | os.PathLike[str]) -> str:
        """Write the compiled program's tar to `path`; returns the path. ServiceError (nothing written) when the
        answer is not a program's tar (`tileplan_client.archive.check_tar`)."""
        return write_checked(self.artifact(compile), path, "artifact", PROGRAM_FILES)

    def delete_compile(self, compile: CompileRef) -> None:
        """Let go of a compile you asked for: its model, summary and artifact are deleted, unless other owners asked
        for the same compile (they keep it); it no longer counts against your quota. An admin token deletes any."""
        self._request("DELETE", f"/compiles/{self.compile_id(compile)}")

    # -- hardware and health ----------------------------------------------------------------------------------

    def hardware(self) -> list[Hardware]:
        """The descriptors the service knows (catalog and registered)."""
        return [Hardware.from_dict(h) for h in self._json("GET", "/hardware")[1]["hardware"]]

    def descriptor(self, name: str) -> dict[str, Any]:
        """One descriptor, as the service holds it."""
        return dict(self._json("GET", f"/hardware/{name}")[1])

    def register_hardware(self, descriptor: dict[str, Any] | str, *, name: str | None = None) -> dict[str, Any]:
        """Register a descriptor dict, or YAML text (Tileplan or Timeloop)."""
        params = {"name": name} if name else None
        if isinstance(descriptor, str):
            return dict(self._json("POST", "/hardware", content=descriptor.encode(), params=params,
                                   headers={"content-type": "application/yaml"})[1])
        return dict(self._json("POST", "/hardware", json=descriptor, params=params)[1])

    def health(self) -> dict[str, Any]:
        return dict(self._json("GET", "/healthz")[1])


class AsyncTileplanClient(_Api):
    """`TileplanClient` for asyncio (httpx.AsyncClient): the same methods, awaited.

        async with AsyncTileplanClient(url) as client:
            result = await client.schedule("gemmini-16x16", layers)
    """

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, *, timeout: float = 60.0,
                 retries: int = 3, poll_interval: float = 0.5,
                 transport: httpx.AsyncBaseTransport | None = None, max_answer_bytes: int = MAX_ANSWER_BYTES) -> None:
        super().__init__(url, token, retries, poll_interval)
        self.max_answer_bytes = max_answer_bytes
        self._http = httpx.AsyncClient(base_url=self.url, headers=self.headers, timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncTileplanClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            try:
                resp = await self._http.send(self._http.build_request(method, path, **kwargs), stream=True)
                try:
                    body = bytearray()
                    async for chunk in resp.aiter_bytes():
                        body += chunk
                        self.over_bound(method, path, resp, len(body))
                    resp._content = bytes(body)  # (as the sync client's)
                finally:
                    await resp.aclose()
            except httpx.TimeoutException as exc:
                err: Exception = ServiceError(f"{method} {path}: no answer in time ({type(exc).__name__})")
            except httpx.TransportError as exc:
                err = ServiceError(f"{method} {path}: cannot reach the service ({exc})")
            else:
                self.answers += 1
                if resp.status_code not in RETRY_STATUS:
                    if resp.status_code >= 400:
                        raise self.error(resp)
                    return resp
                err = self.error(resp)
            if attempt == self.retries:
                raise err
            await asyncio.sleep(self.backoff(attempt))
        raise AssertionError("unreachable")

    async def _json(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        return self.document(method, path, await self._request(method, path, **kwargs))

    async def submit(self, hardware: str | dict[str, Any], layers: Sequence[dict[str, Any]] | None = None, *,
                     model: bytes | None = None, mapper: str | None = None, options: dict[str, Any] | None = None,
                     wait: bool = False) -> Job:
        body = self.schedule_body(hardware, layers, model, mapper, options, wait)
        return Job.from_dict((await self._json("POST", "/schedule", json=body))[1])

    async def wait(self, job: Job | str, *, timeout: float | None = 600.0, on_progress: ProgressFn | None = None
                   ) -> ScheduleResult:
        current = job if isinstance(job, Job) else await self.job(job)
        return await _apoll(current, self.job, self.done_or_raise, timeout=timeout, on_progress=on_progress,
                            max_interval=self.poll_interval)

    async def schedule(self, hardware: str | dict[str, Any], layers: Sequence[dict[str, Any]] | None = None, *,
                       model: bytes | None = None, mapper: str | None = None, options: dict[str, Any] | None = None,
                       wait: bool = True, timeout: float | None = 600.0, on_progress: ProgressFn | None = None
                       ) -> ScheduleResult:
        job = await self.submit(hardware, layers, model=model, mapper=mapper, options=options, wait=wait)
        return await self.wait(job, timeout=timeout, on_progress=on_progress)

    async def job(self, job_id: str) -> Job:
        return Job.from_dict((await self._json("GET", f"/jobs/{job_id}"))[1])

    async def plan(self, plan: PlanRef) -> Plan:
        path, params = self.plan_path(plan)
        return Plan.from_dict((await self._json("GET", path, params=params))[1])

    async def plans(self, *, hardware: str | None = None, op: str | None = None, limit: int = 50,
                    cursor: str | None = None) -> tuple[list[Plan], str | None]:
        params = {k: v for k, v in dict(hardware=hardware, op=op, limit=limit, cursor=cursor).items() if v is not None}
        doc = (await self._json("GET", "/plans", params=params))[1]
        return [Plan.from_dict(p) for p in doc["plans"]], doc.get("next_cursor")

    async def module(self, plan: PlanRef, format: str = "c", *, name: str | None = None) -> Module:
        if format not in MODULE_FORMATS:
            raise ValueError(f"format must be one of {MODULE_FORMATS}")
        path, params = self.plan_path(plan, "module")
        params = {**params, "format": format, **({"name": name} if name is not None else {})}
        resp = await self._request("GET", path, params=params)
        return self.module_of(plan.key if isinstance(plan, Plan) else plan, format, resp)

    async def timeloop(self, plan: PlanRef, *, bundle: bool = False, fold_groups: bool = False) -> str:
        path, params = self.plan_path(plan, "timeloop")
        params = {**params, "bundle": str(bundle).lower(), "fold_groups": str(fold_groups).lower()}
        return (await self._request("GET", path, params=params)).text

    async def evaluate(self, hardware: str | dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any],
                       executor: str | None = None, model: str | None = None) -> Evaluation:
        body: dict[str, Any] = {"hardware": hardware, "layer": layer, "mapping": mapping}
        if executor:
            body["executor"] = executor
        if model:
            body["model"] = model
        return Evaluation.from_dict((await self._json("POST", "/evaluate", json=body))[1])

    async def submit_compile(self, hardware: str | dict[str, Any], model: ModelRef, *,
                             input_shapes: Mapping[str, Sequence[int]] | None = None, mapper: str | None = None,
                             quantize: bool | None = None, options: dict[str, Any] | None = None,
                             wait: bool = False, calibration: ModelRef | None = None) -> Compile:
        form = self.compile_upload(hardware, model, input_shapes, mapper, quantize, options, wait, calibration)
        return Compile.from_dict((await self._json("POST", "/compile", **form))[1])

    async def get_compile(self, compile: CompileRef) -> Compile:
        return Compile.from_dict((await self._json("GET", f"/compiles/{self.compile_id(compile)}"))[1])

    async def wait_compile(self, compile: CompileRef, *, timeout: float | None = 900.0,
                           on_progress: CompileProgressFn | None = None) -> Compile:
        current = compile if isinstance(compile, Compile) else await self.get_compile(compile)
        return await _apoll(current, self.get_compile, self.compile_done_or_raise, timeout=timeout,
                            on_progress=on_progress, max_interval=self.poll_interval)

    async def compile(self, hardware: str | dict[str, Any], model: ModelRef, *,
                      input_shapes: Mapping[str, Sequence[int]] | None = None, mapper: str | None = None,
                      quantize: bool | None = None, options: dict[str, Any] | None = None, wait: bool = True,
                      timeout: float | None = 900.0, on_progress: CompileProgressFn | None = None,
                      calibration: ModelRef | None = None) -> Compile:
        c = await self.submit_compile(hardware, model, input_shapes=input_shapes, mapper=mapper, quantize=quantize,
                                      options=options, wait=wait, calibration=calibration)
        return await self.wait_compile(c, timeout=timeout, on_progress=on_progress)

    async def compiles(self, *, hardware: str | None = None, status: str | None = None, limit: int = 50,
                       cursor: str | None = None) -> tuple[list[Compile], str | None]:
        params = {k: v for k, v in dict(hardware=hardware, status=status, limit=limit, cursor=cursor).items()
                  if v is not None}
        doc = (await self._json("GET", "/compiles", params=params))[1]
        return [Compile.from_dict(c) for c in doc["compiles"]], doc.get("next_cursor")

    async def artifact(self, compile: CompileRef) -> bytes:
        return (await self._request("GET", f"/compiles/{self.compile_id(compile)}/artifact")).content

    async def save_artifact(self, compile: CompileRef, path: str | os.PathLike[str]) -> str:
        return write_checked(await self.artifact(compile), path, "artifact", PROGRAM_FILES)

    async def delete_compile(self, compile: CompileRef) -> None:
        await self._request("DELETE", f"/compiles/{self.compile_id(compile)}")

    async def hardware(self) -> list[Hardware]:
        return [Hardware.from_dict(h) for h in (await self._json("GET", "/hardware"))[1]["hardware"]]

    async def descriptor(self, name: str) -> dict[str, Any]:
        return dict((await self._json("GET", f"/hardware/{name}"))[1])

    async def register_hardware(self, descriptor: dict[str, Any] | str, *, name: str | None = None) -> dict[str, Any]:
        params = {"name": name} if name else None
        if isinstance(descriptor, str):
            return dict((await self._json("POST", "/hardware", content=descriptor.encode(), params=params,
                                          headers={"content-type": "application/yaml"}))[1])
        return dict((await self._json("POST", "/hardware", json=descriptor, params=params))[1])

    async def health(self) -> dict[str, Any]:
        return dict((await self._json("GET", "/healthz"))[1])


# What reading an answer that is not the API's raises (a missing key, a field of another type, a value float() or
# int() cannot read): after an answer came, the service's fault, a ServiceError, not the SDK's exception
ANSWER_ERRORS = (KeyError, TypeError, AttributeError, IndexError, ValueError, RecursionError)


def not_the_api(name: str, exc: BaseException) -> ServiceError:
    return ServiceError(f"{name}: the service's answer is not what Tileplan's API answers ({type(exc).__name__}: "
                        f"{str(exc)[:200]}); is the URL a Tileplan service of this version?")


def _checked(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, a client method, raising ServiceError instead of ANSWER_ERRORS raised after an answer arrived (before
    one, they are the caller's: a bad argument)."""
    import functools
    import inspect

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def acall(self: _Api, *args: Any, **kwargs: Any) -> Any:
            before = self.answers
            try:
                return await fn(self, *args, **kwargs)
            except ANSWER_ERRORS as exc:
                if self.answers == before:
                    raise
                raise not_the_api(fn.__name__, exc) from None
        return acall

    @functools.wraps(fn)
    def call(self: _Api, *args: Any, **kwargs: Any) -> Any:
        before = self.answers
        try:
            return fn(self, *args, **kwargs)
        except ANSWER_ERRORS as exc:
            if self.answers == before:
                raise
            raise not_the_api(fn.__name__, exc) from None
    return call


for _cls in (TileplanClient, AsyncTileplanClient):
    for _name, _fn in list(vars(_cls).items()):
        if not _name.startswith("_") and callable(_fn) and _name not in ("close", "aclose"):
            setattr(_cls, _name, _checked(_fn))
