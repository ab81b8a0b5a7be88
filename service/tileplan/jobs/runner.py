"""Running one layer of a job: the same code in `tileplan serve` (local pool) and `tileplan worker`.

A layer is identified by its plan key. Before solving, the runner makes sure nobody else is solving
that key: within a process, callers share one in-flight future; across processes, a row in `claims`
(renewed while the solve runs, free once it expires) decides who solves, and the others wait for
the plan to appear. The plan is written to the cache before the job's progress moves, so a crash
at any point loses at most the solve in progress, never a cached plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from tileplan.errors import unexpected_error
from tileplan.jobs.singleflight import SingleFlight
from tileplan.jobs.solve import SolverCrashed, SolverPool, SolveTimeout
from tileplan.settings import Settings
from tileplan.store import Store
from tileplan.store.repository import FINAL

log = logging.getLogger("tileplan.jobs")

Outcome = dict[str, Any] | None  # None: the plan is in the cache; else an error {loc, msg, type}


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class LayerRunner:
    def __init__(
        self,
        store: Store,
        pool: SolverPool,
        settings: Settings,
        *,
        on_solve: Callable[[float, str], None] | None = None,
        on_job_final: Callable[[str, str], None] | None = None,
    ) -> None:
        self.store = store
        self.pool = pool
        self.settings = settings
        self.name = worker_name()
        self.on_solve = on_solve
        self.on_job_final = on_job_final
        self._flight: SingleFlight[Outcome] = SingleFlight()
        self._held: dict[str, str] = {}  # key -> owner of claims this process holds
        self._renewer: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._renewer = asyncio.create_task(self._renew_claims())

    async def stop(self) -> None:
        if self._renewer:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer

    async def _renew_claims(self) -> None:
        ttl = self.settings.claim_ttl_s
        while True:
            await asyncio.sleep(ttl / 3)
            by_owner: dict[str, list[str]] = {}
            for key, owner in list(self._held.items()):
                by_owner.setdefault(owner, []).append(key)
            for owner, keys in by_owner.items():
                try:
                    await asyncio.to_thread(self.store.renew_claims, keys, owner, ttl)
                except Exception:  # the database may be briefly away; the next round retries
                    log.exception("event=claim_renew_failed")

    # -- one layer of one job -------------------------------------------------------------------

    async def run_layer(self, job_id: str, key: str, *, give_up: bool = True) -> str:
        """Solve (or find in the cache) layer `key` of job `job_id` and record the outcome.

        Exceptions (a crashed solver process, a lost database) propagate when `give_up` is false so the
        caller can retry; with `give_up` the layer is failed with the reason. Returns the job's status.
        """
        store = self.store
        job = await asyncio.to_thread(store.get_job, job_id)
        if job is None or job.finished:
            return job.status if job else "missing"
        if time.time() > job.deadline:
            await asyncio.to_thread(store.fail_job, job_id, _time_limit_error())
            return self._final(job_id, "failed")
        req = job.request
        idx = req["keys"].index(key)
        await asyncio.to_thread(store.start_layer, job_id, key, self.name)
        try:
            outcome = await self.solve_key(
                key, req["hardware"], req["layers"][idx], req["options"], owner=job_id, deadline=job.deadline
            )
        except (SolverCrashed, SolveTimeout, OSError, RuntimeError) as exc:
            if not give_up and not isinstance(exc, SolveTimeout):
                raise
            kind = "time_limit" if isinstance(exc, SolveTimeout) else "solver_crashed"
            if isinstance(exc, (SolverCrashed, SolveTimeout)):  # (their messages are ours; an OSError's may name paths)
                outcome = {"loc": [], "msg": str(exc), "type": kind}
            else:
                outcome = unexpected_error(log, "solving this layer", kind, event="layer_failed", job=job_id, key=key)
        except Exception:
            if not give_up:
                raise
            outcome = unexpected_error(log, "solving this layer", event="layer_failed", job=job_id, key=key)
        if outcome is not None:
            outcome = {**outcome, "loc": ["layers", idx, *outcome.get("loc", [])]}
        status = await asyncio.to_thread(store.finish_layer, job_id, key, outcome)
        return self._final(job_id, status)

    def _final(self, job_id: str, status: str) -> str:
        if status in FINAL and self.on_job_final:
            self.on_job_final(job_id, status)
        return status

    # -- one key, solved once -------------------------------------------------------------------

    async def solve_key(
        self, key: str, hardware: dict[str, Any], layer: dict[str, Any], options: dict[str, Any], *,
        owner: str, deadline: float,
    ) -> Outcome:
        return await self._flight.run(
            key, lambda: self._solve_claimed(key, hardware, layer, options, owner=owner, deadline=deadline)
        )

    async def _solve_claimed(
        self, key: str, hardware: dict[str, Any], layer: dict[str, Any], options: dict[str, Any], *,
        owner: str, deadline: float,
    ) -> Outcome:
        store, ttl = self.store, self.settings.claim_ttl_s
        poll = 0.05
        while True:
            if await asyncio.to_thread(store.has_plan, key):
                return None
            if time.time() > deadline:
                return _time_limit_error()
            if await asyncio.to_thread(store.claim, key, owner, ttl):
                break
            await asyncio.sleep(poll)  # another process is solving this key: wait for its plan or its claim to lapse
            poll = min(poll * 1.5, 1.0)
        self._held[key] = owner
        try:
            if await asyncio.to_thread(store.has_plan, key):  # finished between our look and our claim
                return None
            runs = 2 if options.get("baseline", True) else 1
            budget = float(options.get("time_limit_s", 10.0)) * runs + self.settings.solve_overhead_s
            budget = max(1.0, min(budget, deadline - time.time()))
            hard = budget + self.settings.solve_grace_s  # the process is killed only if it cannot stop itself
            if options.get("codegen"):
                hard += self.settings.codegen_time_limit_s
            hard = max(1.0, min(hard, deadline - time.time()))
            start = time.perf_counter()
            try:
                result = await self.pool.solve(hardware, layer, options, timeout=hard, budget=budget)
            except SolveTimeout:
                self._count(start, "timeout")
                raise
            except SolverCrashed:
                self._count(start, "crashed")
                raise
            if not result["ok"]:
                self._count(start, result["error"]["type"])
                return result["error"]
            plan = result["plan"]
            if plan["key"] != key:  # the service and the solver must agree on what a layer is
                log.error("event=key_mismatch expected=%s got=%s", key, plan["key"])
                plan = {**plan, "key": key}
            await asyncio.to_thread(store.put_plan, plan, hardware)
            if "module" in result:  # options.codegen: built in the solver process with the plan
                await asyncio.to_thread(store.put_module, key, result["module"])
            self._count(start, "ok")
            log.info("event=solved key=%s seconds=%.3f", key[:12], time.perf_counter() - start)
            return None
        finally:
            self._held.pop(key, None)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(store.release, key, owner)

    def _count(self, start: float, outcome: str) -> None:
        if self.on_solve:
            self.on_solve(time.perf_counter() - start, outcome)


def _time_limit_error() -> dict[str, Any]:
    return {"loc": [], "msg": "the job exceeded its time limit", "type": "time_limit"}
