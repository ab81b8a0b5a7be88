"""Generated modules of cached plans: read from the store, or built once in a solver process and stored.

`ModuleBuilder.ensure(key)` is what GET /plans/{key}/module and POST /schedule with `codegen` use. A module
solved together with its plan (`codegen: true` on a miss) is already stored by the runner; otherwise the
stored plan's descriptor, layer and mapping are sent to a solver process (`SolverPool.build`), never run on
the event loop. Concurrent requests for one key share one build. A CodegenError is stored as the module's
error, so a plan that cannot become code is not rebuilt on every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from tileplan.jobs.singleflight import SingleFlight
from tileplan.jobs.solve import SolverPool
from tileplan.settings import Settings
from tileplan.store import Store
from tileplan.store.repository import CachedPlan, StoredModule

log = logging.getLogger("tileplan.jobs")


class ModuleBuilder:
    def __init__(self, store: Store, settings: Settings, pool: SolverPool | None = None) -> None:
        """`pool`: the local queue's solver pool; without one (procrastinate: solves run in workers) a pool of
        one process is started on the first build."""
        self.store = store
        self.settings = settings
        self._pool = pool
        self._own_pool: SolverPool | None = None
        self._flight: SingleFlight[StoredModule | None] = SingleFlight()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pool(self) -> SolverPool:
        if self._pool is None:
            self._own_pool = self._pool = SolverPool(1)
        return self._pool

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        if self._own_pool is not None:
            self._own_pool.close()

    async def ensure(self, key: str) -> StoredModule | None:
        """The module of plan `key` (built and stored if missing); None if there is no such plan."""
        found = await asyncio.to_thread(self.store.get_module, key)
        if found is not None:
            return found
        return await self._flight.run(key, lambda: self._build(key))

    async def ensure_many(self, keys: list[str]) -> None:
        """Modules for every key that has none yet (POST /schedule with `codegen`), built concurrently. A build
        that could not run (killed, timed out) is logged, not raised: the plans stand without it, and
        GET /plans/{key}/module tries again."""
        have = await asyncio.to_thread(self.store.module_keys, keys)
        missing = [k for k in dict.fromkeys(keys) if k not in have]
        if not missing:
            return
        results = await asyncio.gather(*(self.ensure(k) for k in missing), return_exceptions=True)
        for key, res in zip(missing, results):
            if isinstance(res, BaseException):
                log.warning("event=module_build_failed key=%s reason=%s", key[:12], res)

    def in_background(self, keys: list[str]) -> None:
        """`ensure_many` without waiting (a POST /schedule answered 202 before its job finished)."""
        task = asyncio.ensure_future(self.ensure_many(keys))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _build(self, key: str) -> StoredModule | None:
        row = await asyncio.to_thread(self.store.get_plan, key)
        if row is None:
            return None
        hardware = await asyncio.to_thread(self._descriptor, row)
        layer = layer_fields(json.loads(row.layer))
        mapping = json.loads(row.doc)["mapping"]
        module = await self.pool.build(hardware, layer, mapping, timeout=self.settings.codegen_time_limit_s)
        await asyncio.to_thread(self.store.put_module, key, module)
        log.info("event=module_built key=%s ok=%s seconds=%.3f", key[:12], module["ok"], module.get("seconds", 0.0))
        return await asyncio.to_thread(self.store.get_module, key)

    def _descriptor(self, row: CachedPlan) -> dict[str, Any]:
        from tileplan.hardware.catalog import catalog

        descriptor = self.store.plan_descriptor(row.key)
        if descriptor is not None:
            return descriptor
        if row.hardware in catalog():  # plans cached before descriptors were stored with them
            return catalog()[row.hardware].model_dump(mode="json")
        raise UnknownDescriptor(f"the descriptor plan {row.key} was solved for is not known")


class UnknownDescriptor(LookupError):
    pass


def layer_fields(echo: dict[str, Any]) -> dict[str, Any]:
    """A Plan's layer echo back to the layer's own fields (drop the derived dims, stride/dilation of matmuls)."""
    out = {k: v for k, v in echo.items() if k != "dims"}
    if out.get("op") in ("matmul", "dense"):
        out.pop("stride", None)
        out.pop("dilation", None)
    return out
