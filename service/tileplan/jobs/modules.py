"""Generated modules of cached plans: read from the store, or built once in a solver process and stored.

`ModuleBuilder.ensure(key)` is what GET /plans/{key}/module and POST /schedule with `codegen` use. A module
solved together with its plan (`codegen: true` on a miss) is already stored by the runner; otherwise the
stored plan's descriptor, layer and mapping are sent to a build process of its own (`SolverPool.build`, a pool
separate from the solvers', at a lower priority), never run on the event loop. Concurrent requests for one key share one build. A CodegenError is stored as the module's
error, so a plan that cannot become code is not rebuilt on every request.

Those processes are also where compiles run, and a build under an asker's own layer name (`?name=`) is a build per
distinct name, asked for by a read: each build takes a turn of its asker's in the fair share compiles take theirs
from (`fair`, round robin by owner), so one client's many builds wait in its own line, not in front of another
client's build or compile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from tileplan.codegen.support import codegen_unsupported
from tileplan.hardware import HardwareDescriptor
from tileplan.hardware.model import STORED
from tileplan.jobs.bytecache import ByteLRU
from tileplan.jobs.fair import FairShare
from tileplan.jobs.singleflight import SingleFlight
from tileplan.jobs.solve import SolverPool
from tileplan.settings import Settings
from tileplan.store import Store
from tileplan.store.repository import CachedPlan, StoredModule
from tileplan.workload import layer_fields

log = logging.getLogger("tileplan.jobs")
MODULE_NICE = 10  # builds run below solves' CPU priority
RENAMED_BYTES = 32 * 1024 * 1024  # modules built under an asker's own layer name, kept in memory (most recent)


class ModuleBuilder:
    def __init__(self, store: Store, settings: Settings) -> None:
        """Builds run in processes of their own (`settings.module_processes`, at a lower CPU priority), started on
        the first build: reads of modules never take the solvers' processes, so they cannot starve solves. Each
        build takes a turn of `fair` (the compiler's too: `Compiler(fair=...)`), at most `owner_max_compiles` of
        one owner's at once."""
        self.store = store
        self.settings = settings
        self.fair = FairShare(settings.module_processes, settings.owner_max_compiles)
        self._own_pool: SolverPool | None = None
        self._flight: SingleFlight[StoredModule | None] = SingleFlight()
        self._renamed: ByteLRU[tuple[str, str], StoredModule] = ByteLRU(RENAMED_BYTES)  # (key, name) -> module
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pool(self) -> SolverPool:
        if self._own_pool is None:
            self._own_pool = SolverPool.of(self.settings.module_processes, self.settings, name="modules",
                                          nice=MODULE_NICE)
        return self._own_pool

    async def stop(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        if self._own_pool is not None:
            self._own_pool.close()

    async def ensure(self, key: str, name: str | None = None, owner: str | None = None) -> StoredModule | None:
        """The module of plan `key` (built and stored if missing); None if there is no such plan.

        `name`: the layer name the asker gave the plan (a cached plan is shared by every request for the same
        layer, whatever they call it). The stored module is named after the layer the plan was first solved for;
        for another name the module is built again under that name (kept in memory, not stored), so its files,
        entry point and tar directory carry the asker's name. `owner`: whose turn a build takes (`fair`)."""
        found = await asyncio.to_thread(self.store.get_module, key)
        if found is None:
            found = await self._flight.run(key, lambda: self._build(key, owner=owner))
        if found is None or name is None or not found.ok:
            return found
        row = await asyncio.to_thread(self.store.get_plan, key)
        if row is None or json.loads(row.layer).get("name", "") == name:
            return found
        renamed = self._renamed.get((key, name))
        if renamed is None:
            renamed = await self._flight.run(f"{key}\n{name}", lambda: self._build(key, name, owner))
            if renamed is not None:
                size = len(renamed.tar or b"") + len(renamed.c_source or "") + len(renamed.tvmscript or "") + len(name)
                self._renamed.put((key, name), renamed, size + 1000)
        return renamed

    async def ensure_many(self, keys: list[str], owner: str | None = None) -> None:
        """Modules for every key that has none yet (POST /schedule with `codegen`), built concurrently. A build
        that could not run (killed, timed out) is logged, not raised: the plans stand without it, and
        GET /plans/{key}/module tries again."""
        have = await asyncio.to_thread(self.store.module_keys, keys)
        missing = [k for k in dict.fromkeys(keys) if k not in have]
        if not missing:
            return
        results = await asyncio.gather(*(self.ensure(k, owner=owner) for k in missing), return_exceptions=True)
        for key, res in zip(missing, results):
            if isinstance(res, BaseException):
                log.warning("event=module_build_failed key=%s reason=%s", key[:12], res)

    def in_background(self, keys: list[str], owner: str | None = None) -> None:
        """`ensure_many` without waiting (a POST /schedule answered 202 before its job finished)."""
        task = asyncio.ensure_future(self.ensure_many(keys, owner))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _build(self, key: str, name: str | None = None, owner: str | None = None) -> StoredModule | None:
        """Build plan `key`'s module and store it; with `name`, build it under that layer name and return it
        without storing it."""
        row = await asyncio.to_thread(self.store.get_plan, key)
        if row is None:
            return None
        hardware = await asyncio.to_thread(self._descriptor, row)
        layer = layer_fields(json.loads(row.layer))
        mapping = json.loads(row.doc)["mapping"]
        reason = codegen_unsupported(HardwareDescriptor.model_validate(hardware, context=STORED))
        if reason:  # known without a build: answered at once, and stored like any codegen error
            module: dict[str, Any] = {"ok": False, "error": reason, "notes": [], "seconds": 0.0}
        else:
            if name is not None:
                layer["name"] = name
            try:
                async with self.fair.turn(owner):  # (the compiles' lane: round robin by owner with them)
                    module = await self.pool.build(hardware, layer, mapping,
                                                   timeout=self.settings.codegen_time_limit_s)
            except asyncio.CancelledError:  # everyone who asked for it left
                log.info("event=module_build_cancelled key=%s name=%s", key[:12], name)
                raise
        log.info("event=module_built key=%s ok=%s seconds=%.3f", key[:12], module["ok"], module.get("seconds", 0.0))
        if name is not None:
            return stored_module(key, module)
        await asyncio.to_thread(self.store.put_module, key, module)
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


def stored_module(key: str, module: dict[str, Any]) -> StoredModule:
    """A module as `build_layer_module` returns it, in the form the store hands out."""
    ok = bool(module.get("ok"))
    cycles = module.get("model_cycles")
    return StoredModule(
        key=key, status="ok" if ok else "error", name=str(module.get("name", "")),
        tvmscript=module.get("tvmscript") if ok else None, c_source=module.get("c_source") if ok else None,
        tar=module.get("tar") if ok else None, notes=list(module.get("notes", [])),
        model_cycles=float(cycles) if ok and cycles is not None and cycles == cycles else None,  # NaN: none
        error=None if ok else str(module.get("error", "code generation failed")),
    )
