"""Solving one layer in a separate process, so a solve never blocks an event loop and can be killed.

`solve_layer` is what runs in the pool: it rebuilds the inputs from JSON, calls `tileplan.plan.make_plan`,
and returns either the Plan as a dict or an error with its field path and type. `SolverPool` wraps a
process pool with a hard time limit per solve (on overrun the pool's processes are killed and it starts
afresh) and recovery from a crashed solver process.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

log = logging.getLogger("tileplan.jobs")


class SolveTimeout(Exception):
    """A solve ran past its hard time limit and was killed."""


class SolverCrashed(Exception):
    """The solver process died (killed, out of memory); the layer may be retried."""


def solve_layer(hardware: dict[str, Any], layer: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Runs in a pool process. Returns {"ok": True, "plan": {...}} or {"ok": False, "error": {loc, msg, type}}."""
    from tileplan.errors import InputError, MappingInfeasible
    from tileplan.hardware import HardwareDescriptor
    from tileplan.plan import SOLVER_VERSION, ScheduleOptions, make_plan
    from tileplan.workload import parse_layer

    try:
        hw = HardwareDescriptor.model_validate(hardware)
        plan = make_plan(parse_layer(layer), hw, ScheduleOptions.model_validate(options))
        doc = plan.model_dump(mode="json")
        doc["solver_version"] = SOLVER_VERSION
        out: dict[str, Any] = {"ok": True, "plan": doc}
        if options.get("codegen"):  # the module is built where the plan was, while its inputs are at hand
            out["module"] = _module(plan.mapping, layer, hw)
        return out
    except InputError as exc:
        return {"ok": False, "error": {"loc": list(exc.loc), "msg": exc.msg, "type": exc.type}}
    except MappingInfeasible as exc:
        return {"ok": False, "error": {"loc": [], "msg": str(exc), "type": "infeasible"}}
    except Exception as exc:  # a solver bug: logged here with its traceback, reported without it
        log.exception("solve failed")
        return {"ok": False, "error": {"loc": [], "msg": f"solver error: {type(exc).__name__}: {exc}", "type": "solver_error"}}


def build_layer_module(hardware: dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any]) -> dict[str, Any]:
    """Runs in a pool process: the module of a stored plan (its descriptor, layer and mapping as JSON).
    Returns what `Store.put_module` stores: {"ok": True, name, tvmscript, c_source, tar, notes, model_cycles,
    seconds} or {"ok": False, "error": reason, ...} when the plan cannot become code (CodegenError)."""
    from tileplan.hardware import HardwareDescriptor
    from tileplan.mapping import Mapping

    return _module(Mapping.model_validate(mapping), layer, HardwareDescriptor.model_validate(hardware))


def compile_in_process(db_url: str, compile_id: str, hardware: dict[str, Any], model: bytes,
                       options: dict[str, Any], input_shapes: dict[str, list[int]] | None) -> dict[str, Any]:
    """Runs in a pool process: POST /compile's compile, planned through the service's plan cache (so its plans
    show up in GET /plans), its progress written to the compile's row as ops are planned. Returns
    {"ok": True, "summary", "artifact"} or {"ok": False, "error": {loc, msg, type}} (an InputError names the
    node or input at fault; anything else is the compiler's fault and says so without a traceback)."""
    from tileplan.errors import InputError
    from tileplan.frontend.compile import CompileOptions, compile_model, store_planner
    from tileplan.hardware import HardwareDescriptor

    store = _process_store(db_url)
    try:
        result = compile_model(
            model, HardwareDescriptor.model_validate(hardware), CompileOptions.model_validate(options), input_shapes,
            planner=store_planner(store), progress=lambda done, total: store.compile_progress(compile_id, done, total))
        return {"ok": True, "summary": result.summary, "artifact": result.artifact}
    except InputError as exc:
        return {"ok": False, "error": {"loc": list(exc.loc), "msg": exc.msg, "type": exc.type}}
    except Exception as exc:  # a compiler bug: logged here with its traceback, reported without it
        log.exception("compile failed")
        return {"ok": False, "error": {"loc": [], "msg": f"compiler error: {type(exc).__name__}: {exc}",
                                       "type": "compile_error"}}


_STORES: dict[str, Any] = {}


def _process_store(url: str) -> Any:
    """This pool process's connection to the service's store (opened once, schema already migrated)."""
    from tileplan.store import Store

    if url not in _STORES:
        _STORES[url] = Store(url, migrate=False, pool_size=2)
    return _STORES[url]


def _module(mapping: Any, layer: dict[str, Any], hw: Any) -> dict[str, Any]:
    from tileplan.codegen.pipeline import build_module
    from tileplan.codegen.registry import CodegenError
    from tileplan.workload import parse_layer

    start = time.perf_counter()
    try:
        art = build_module(mapping, parse_layer(layer), hw, formats=("tvmscript", "c", "tar"))
        return {
            "ok": True, "name": art.name, "tvmscript": art.tvmscript, "c_source": art.c_source,
            "tar": art.tar_bytes(), "notes": list(art.notes), "model_cycles": art.model_cycles,
            "seconds": time.perf_counter() - start,
        }
    except CodegenError as exc:
        return {"ok": False, "error": str(exc), "notes": [], "seconds": time.perf_counter() - start}
    except Exception as exc:  # a code generator bug: the plan stands, the module says why
        # (and nothing like StopIteration may cross the pool: asyncio cannot put it in a future, the caller hangs)
        log.exception("codegen failed")
        return {"ok": False, "error": f"code generation failed: {type(exc).__name__}: {exc}", "notes": [],
                "seconds": time.perf_counter() - start}


def _exit_with_parent(parent: int) -> None:
    """A solver process whose server or worker died (SIGKILL, OOM) exits instead of lingering."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _warm(parent: int) -> None:
    """Pool initializer: import the solver stack once per process, not on the first request."""
    _exit_with_parent(parent)
    logging.basicConfig(level=logging.WARNING)
    try:
        import tileplan.plan  # noqa: F401
        from tileplan.mappers.base import available_mappers

        available_mappers()
    except Exception:  # noqa: BLE001 - a broken import shows up as a solve error with its reason
        pass


def _noop() -> int:
    return os.getpid()


class SolverPool:
    """A pool of solver processes with per-solve hard limits."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._ctx = multiprocessing.get_context("spawn")
        self._pool = self._new_pool()
        self._slots = asyncio.Semaphore(processes)
        self.solves = 0

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.processes, mp_context=self._ctx, initializer=_warm, initargs=(os.getpid(),)
        )

    async def warm(self) -> None:
        """Start every process now (each imports the solver), so the first solve is not slower."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._pool, _noop) for _ in range(self.processes)))

    async def solve(self, hardware: dict[str, Any], layer: dict[str, Any], options: dict[str, Any], *,
                    timeout: float) -> dict[str, Any]:
        async with self._slots:
            pool = self._pool
            loop = asyncio.get_running_loop()
            start = time.perf_counter()
            self.solves += 1
            fut = loop.run_in_executor(pool, solve_layer, hardware, layer, options)
            try:
                return await asyncio.wait_for(fut, timeout)
            except TimeoutError:
                log.warning("event=solve_timeout seconds=%.1f", time.perf_counter() - start)
                self._restart(pool)
                raise SolveTimeout(f"the solve ran past its hard limit of {timeout:.0f} s and was stopped") from None
            except BrokenProcessPool:
                self._restart(pool)
                raise SolverCrashed("the solver process died") from None

    async def build(self, hardware: dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any], *,
                    timeout: float) -> dict[str, Any]:
        """A stored plan's module (`build_layer_module`) in a solver process, under the same limits as a solve."""
        async with self._slots:
            pool = self._pool
            fut = asyncio.get_running_loop().run_in_executor(pool, build_layer_module, hardware, layer, mapping)
            try:
                return await asyncio.wait_for(fut, timeout)
            except TimeoutError:
                self._restart(pool)
                raise SolveTimeout(f"code generation ran past its hard limit of {timeout:.0f} s and was stopped") from None
            except BrokenProcessPool:
                self._restart(pool)
                raise SolverCrashed("the code generation process died") from None

    async def compile(self, db_url: str, compile_id: str, hardware: dict[str, Any], model: bytes,
                      options: dict[str, Any], input_shapes: dict[str, list[int]] | None, *,
                      timeout: float) -> dict[str, Any]:
        """A whole model's compile (`compile_in_process`) in a solver process, under a hard time limit."""
        async with self._slots:
            pool = self._pool
            fut = asyncio.get_running_loop().run_in_executor(
                pool, compile_in_process, db_url, compile_id, hardware, model, options, input_shapes)
            try:
                return await asyncio.wait_for(fut, timeout)
            except TimeoutError:
                self._restart(pool)
                raise SolveTimeout(f"the compile ran past its hard limit of {timeout:.0f} s and was stopped") from None
            except BrokenProcessPool:
                self._restart(pool)
                raise SolverCrashed("the compiling process died") from None

    def _restart(self, broken: ProcessPoolExecutor) -> None:
        """Kill the pool's processes (they may be stuck in a solve) and start a fresh pool."""
        if broken is not self._pool:
            return  # someone already restarted it
        procs = list(getattr(broken, "_processes", {}).values())  # no public API to kill a stuck worker
        for p in procs:
            try:
                p.kill()
            except Exception:  # noqa: BLE001
                pass
        broken.shutdown(wait=False, cancel_futures=True)
        self._pool = self._new_pool()

    def close(self) -> None:
        """Stop at once: a solve in progress is abandoned (its job is resumed or retried elsewhere)."""
        for p in list(getattr(self._pool, "_processes", {}).values()):
            try:
                p.kill()
            except Exception:  # noqa: BLE001
                pass
        self._pool.shutdown(wait=True, cancel_futures=True)
