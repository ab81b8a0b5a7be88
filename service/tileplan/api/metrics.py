"""Prometheus metrics of one API process: requests, latencies, cache hits, solves, queue depth."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SOLVE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)
LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.5, 1, 2, 5)
LAG_PERIOD_S = 0.1  # how often the event loop's lag is sampled


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("tileplan_http_requests", "HTTP requests", ["method", "route", "status"], registry=r)
        self.latency = Histogram(
            "tileplan_http_request_seconds", "HTTP request latency", ["method", "route"], buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.cache_hits = Counter("tileplan_cache_hits", "Layers answered from the plan cache", registry=r)
        self.cache_misses = Counter("tileplan_cache_misses", "Layers that needed a solve", registry=r)
        self.solves = Counter("tileplan_solves", "Solves run by this process, by outcome", ["outcome"], registry=r)
        self.solve_seconds = Histogram(
            "tileplan_solve_seconds", "Wall time of one layer's solve", buckets=SOLVE_BUCKETS, registry=r
        )
        self.queue_depth = Gauge("tileplan_queue_depth", "Jobs not finished (queued or running)", registry=r)
        self.compiles = Counter("tileplan_compiles", "Model compiles run by this process, by outcome", ["outcome"],
                                registry=r)
        self.compile_seconds = Histogram(
            "tileplan_compile_seconds", "Wall time of one model compile", buckets=SOLVE_BUCKETS + (600, 1800),
            registry=r)

        self.loop_lag = Histogram(
            "tileplan_event_loop_lag_seconds", f"How late the API's event loop ran a timer due every {LAG_PERIOD_S:g} s "
            "(time it spent on other work without yielding)", buckets=LAG_BUCKETS, registry=r)

    async def watch_loop(self, period: float = LAG_PERIOD_S) -> None:
        """Sample the event loop's lag until cancelled: a callback that holds the loop (synchronous work in a
        handler) shows as a timer run late by as long."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + period
            await asyncio.sleep(period)
            self.loop_lag.observe(max(0.0, loop.time() - due))

    def on_solve(self, seconds: float, outcome: str) -> None:
        self.solves.labels(outcome).inc()
        self.solve_seconds.observe(seconds)

    def on_compile(self, seconds: float, outcome: str) -> None:
        self.compiles.labels(outcome).inc()
        self.compile_seconds.observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsAndLimits:
    """Pure ASGI middleware: times and counts every request by route template, and refuses bodies over
    `max_body` bytes (`limits`: other limits by exact path, e.g. POST /compile's models) with a 413 (by
    Content-Length up front, or while streaming), and bodies that stop arriving (no byte for `body_idle_s`) with a
    408: the body's bytes are awaited with that bound, until its last part (what is received after it, a
    disconnect, is awaited as long as the request lasts)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, max_body: int, limits: dict[str, int] | None = None,
                 body_idle_s: float = 30.0) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body = max_body
        self.limits = dict(limits or {})
        self.body_idle_s = body_idle_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        method = scope["method"]
        max_body = self.limits.get(scope.get("path", ""), self.max_body)

        started = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
            await send(message)

        try:
            length = _content_length(scope)
            if length is not None and length > max_body:
                await _too_large(send, length, max_body)
                status = 413
                return
            seen = 0
            # the body's last part has come (a request that declares no body has none to wait for: its receive
            # calls, disconnect checks, are left as they are)
            whole = not length and not any(name == b"transfer-encoding" for name, _ in scope.get("headers", ()))

            async def limited_receive() -> Message:
                nonlocal seen, whole
                if whole:
                    return await receive()
                try:
                    message = await asyncio.wait_for(receive(), self.body_idle_s)
                except TimeoutError:
                    from tileplan.api.errors import BodyIdle

                    raise BodyIdle(self.body_idle_s) from None
                if message["type"] == "http.request":
                    whole = not message.get("more_body", False)
                    seen += len(message.get("body", b""))
                    if seen > max_body:
                        from tileplan.api.errors import BodyTooLarge

                        raise BodyTooLarge(max_body)
                return message

            try:
                await self.app(scope, limited_receive, send_wrapper)
            except Exception as exc:
                from tileplan.api.errors import BodyIdle

                if not isinstance(exc, BodyIdle) or started:
                    raise
                await _refuse(send, 408, {"detail": [{"loc": exc.loc, "msg": exc.msg, "type": exc.type}]})
                status = 408
        finally:
            route = scope.get("route")
            label = getattr(route, "path", None) or "unmatched"
            m = self.metrics
            m.requests.labels(method, label, str(status)).inc()
            m.latency.labels(method, label).observe(time.perf_counter() - start)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, status: int, doc: Any) -> None:
    import json

    body = json.dumps(doc).encode()
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                          (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _too_large(send: Send, length: int, limit: int) -> None:
    await _refuse(send, 413, {"detail": [{"loc": ["body"], "msg": f"request body of {length} bytes is over the limit "
                                          f"of {limit} bytes", "type": "too_large"}]})
