"""Solving one layer in a separate process, so a solve never blocks an event loop and can be killed.

`solve_layer` is what runs in the pool: it rebuilds the inputs from JSON, calls `tileplan.plan.make_plan`
under a time budget, and returns either the Plan as a dict or an error with its field path and type.
`SolverPool` runs it in `ProcessSlots` with a hard time limit per solve (on overrun that solve's process is
killed, and only it) and recovery from a crashed solver process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from tileplan.errors import unexpected_error
from tileplan.frontend.work import of_settings as work_of_settings
from tileplan.jobs.slots import ProcessSlots, SlotCrashed, SlotTimeout

log = logging.getLogger("tileplan.jobs")


class SolveTimeout(Exception):
    """A solve ran past its hard time limit and was killed."""


class SolverCrashed(Exception):
    """The solver process died (killed, out of memory); the layer may be retried. `signal`: the signal that ended it,
    where it is known (SlotCrashed's)."""

    def __init__(self, msg: str, signal: int | None = None) -> None:
        super().__init__(msg)
        self.signal = signal


MEMORY_MARKS = ("bad_alloc", "cannot allocate memory", "out of memory", "unable to allocate")


def out_of_memory(exc: BaseException) -> bool:
    """The call ran into its process's memory cap: Python's MemoryError (numpy's too), or a native library's
    allocation failure surfacing as its own exception (TVM: `InternalError: std::bad_alloc`)."""
    return isinstance(exc, MemoryError) or any(m in str(exc).lower() for m in MEMORY_MARKS)


def memory_error(what: str) -> dict[str, Any]:
    """The error of a call that hit this process's cap: the request's fault (a 422; a compile's final error)."""
    import resource

    cap = resource.getrlimit(resource.RLIMIT_DATA)[0]
    shown = f"{cap >> 20} MiB" if cap != resource.RLIM_INFINITY else "its memory"
    return {"loc": [], "type": "memory_limit", "msg": (
        f"{what} needed more memory than this server allows one worker process ({shown}, worker_memory_mb); "
        "make it smaller (fewer or smaller tensors)")}


def _retire(out: Any) -> bool:
    """A process whose call hit the memory cap is replaced (native state may be half torn down)."""
    error = out.get("error") if isinstance(out, dict) else None
    return isinstance(error, dict) and error.get("type") == "memory_limit"


def _retire_build(out: Any) -> bool:
    return isinstance(out, dict) and bool(out.get("memory_limit"))


class _OverBudget(BaseException):
    """Raised in a solver process by its alarm: the solve's time budget is spent (a BaseException, so no
    `except Exception` inside the mappers swallows it)."""


@contextlib.contextmanager
def _time_budget(seconds: float | None) -> Iterator[None]:
    """Interrupt the code inside after `seconds` of wall time (SIGALRM; slot processes run calls in their main
    thread). Native code (HiGHS) is interrupted when it returns, and HiGHS keeps its own time limit."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def alarm(signum: int, frame: Any) -> None:
        raise _OverBudget

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def solve_layer(hardware: dict[str, Any], layer: dict[str, Any], options: dict[str, Any],
                budget: float | None = None) -> dict[str, Any]:
    """Runs in a pool process. Returns {"ok": True, "plan": {...}} or {"ok": False, "error": {loc, msg, type}}.
    `budget`: seconds the whole solve may take, model building and baselines included."""
    from tileplan.errors import InputError, MappingInfeasible
    from tileplan.hardware import HardwareDescriptor
    from tileplan.plan import ScheduleOptions, make_plan, solver_version
    from tileplan.workload import parse_layer

    try:
        hw = HardwareDescriptor.model_validate(hardware)
        try:
            with _time_budget(budget):
                plan = make_plan(parse_layer(layer), hw, ScheduleOptions.model_validate(options))
        except _OverBudget:
            return {"ok": False, "error": {"loc": ["options", "time_limit_s"], "type": "solve_time_limit", "msg": (
                f"planning this layer took longer than its budget of {budget:g} s (options.time_limit_s per "
                "mapper run, model building included, plus the server's allowance); raise time_limit_s or "
                "make the layer smaller")}}
        doc = plan.model_dump(mode="json")
        doc["solver_version"] = solver_version()
        out: dict[str, Any] = {"ok": True, "plan": doc}
        if options.get("codegen"):  # the module is built where the plan was, while its inputs are at hand
            out["module"] = _module(plan.mapping, layer, hw)
        return out
    except InputError as exc:
        return {"ok": False, "error": {"loc": list(exc.loc), "msg": exc.msg, "type": exc.type}}
    except MappingInfeasible as exc:
        return {"ok": False, "error": {"loc": [], "msg": str(exc), "type": "infeasible"}}
    except Exception as exc:  # noqa: BLE001 - a solver bug: logged by unexpected_error, reported without its text
        if out_of_memory(exc):
            return {"ok": False, "error": memory_error("planning this layer")}
        return {"ok": False, "error": unexpected_error(log, "planning this layer", "solver_error", event="solve_failed")}


def build_layer_module(hardware: dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any]) -> dict[str, Any]:
    """Runs in a pool process: the module of a stored plan (its descriptor, layer and mapping as JSON).
    Returns what `Store.put_module` stores: {"ok": True, name, tvmscript, c_source, tar, notes, model_cycles,
    seconds} or {"ok": False, "error": reason, ...} when the plan cannot become code (CodegenError)."""
    from tileplan.hardware import HardwareDescriptor
    from tileplan.hardware.model import STORED
    from tileplan.mapping import Mapping

    return _module(Mapping.model_validate(mapping), layer, HardwareDescriptor.model_validate(hardware, context=STORED))


def compile_in_process(db_url: str, compile_id: str) -> dict[str, Any]:
    """Runs in a pool process: POST /compile's compile, planned through the service's plan cache (so its plans
    show up in GET /plans), its progress written to the compile's row as ops are planned. Returns
    {"ok": True, "summary", "stored"} (summary and artifact stored from here) or {"ok": False, "error": {loc, msg,
    type}} (an InputError names the node or input at fault; anything else is the compiler's fault and says so
    without a traceback)."""
    import base64

    from tileplan.errors import InputError, TileplanError
    from tileplan.frontend.calibration import read_calibration
    from tileplan.frontend.compile import CompileOptions, compile_model, store_planner
    from tileplan.frontend.work import limits as work_limits
    from tileplan.hardware import HardwareDescriptor

    store = _process_store(db_url)
    found = store.get_compile(compile_id)
    model = store.compile_model_bytes(compile_id)
    if found is None or not model:
        return {"ok": False, "error": {"loc": [], "msg": "the compile was deleted", "type": "compile_error"}}
    req = found.request
    hardware, options, input_shapes = req["hardware"], req["options"], req["input_shapes"] or None
    calibration = base64.b64decode(req["calibration"]) if req.get("calibration") else None
    try:
        result = compile_model(
            model, HardwareDescriptor.model_validate(hardware), CompileOptions.model_validate(options), input_shapes,
            planner=store_planner(store), progress=_Progress(store, compile_id),
            calibration=read_calibration(calibration) if calibration is not None else None,
            plan_budget_s=work_limits()["plan_s"] or None)
        # stored here, not handed to the API process to store: a 64 MB model's artifact through the API grew it by
        # 140 MiB, which it kept (the pipe's copy, the unpickled bytes, SQLite's)
        stored = store.finish_compile(compile_id, result.summary, result.artifact)
        return {"ok": True, "summary": result.summary, "stored": stored}
    except InputError as exc:
        return {"ok": False, "error": {"loc": list(exc.loc), "msg": exc.msg, "type": exc.type}}
    except Exception as exc:  # the compiler's fault: logged here with its traceback, reported without it
        if out_of_memory(exc):
            return {"ok": False, "error": memory_error("compiling this model")}
        from tileplan.codegen.registry import CodegenError
        from tileplan.frontend.runner import ArtifactError

        if not isinstance(exc, (TileplanError, CodegenError)):  # not one of ours: its text may name server paths
            return {"ok": False, "error": unexpected_error(log, "compiling this model", "compile_error",
                                                           event="compile_failed", id=compile_id[:12])}
        log.exception("event=compile_failed id=%s", compile_id[:12])  # (an ArtifactError's compiler output: here)
        said = exc.brief if isinstance(exc, ArtifactError) else str(exc)
        return {"ok": False, "error": {"loc": [], "msg": f"compiler error: {type(exc).__name__}: {said}",
                                       "type": "compile_error"}}


class _Progress:
    """A compile's progress written to its row in at most PROGRESS_STEPS steps (and its end). An UPDATE of the row
    rewrites all of it in SQLite, the model too: a progress write per op of a 64 MB model was 64 MB written and 0.3 s
    of the database's write lock each, so one request with hundreds of ops wrote tens of GB and held up every other
    writer."""

    PROGRESS_STEPS = 20

    def __init__(self, store: Any, compile_id: str) -> None:
        self.store, self.compile_id, self.last = store, compile_id, (-1, -1)

    def __call__(self, done: int, total: int) -> None:
        step = (done * self.PROGRESS_STEPS // total if total > 0 else 0, total)
        if step != self.last or done >= total:
            self.last = step
            self.store.compile_progress(self.compile_id, done, total)


def supported_onnx_ops() -> list[str]:
    """Runs in a pool process: the ONNX operators a compile can import (TVM's importer's, imported there)."""
    from tileplan.frontend.onnx_import import supported_ops

    return sorted(supported_ops())


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
    except Exception as exc:  # noqa: BLE001 - a code generator bug (logged by unexpected_error): the plan stands
        if out_of_memory(exc):
            return {"ok": False, "error": memory_error("generating this plan's code")["msg"], "notes": [],
                    "seconds": time.perf_counter() - start, "memory_limit": True}
        # (and nothing like StopIteration may cross the pool: asyncio cannot put it in a future, the caller hangs)
        return {"ok": False, "error": unexpected_error(log, "generating this plan's code", event="codegen_failed")["msg"],
                "notes": [], "seconds": time.perf_counter() - start}


def _warm(max_tensor_elements: int | None = None, work_limits: dict[str, int] | None = None) -> None:
    """Slot initializer: import the solver stack once per process, not on the first request; the process's bounds
    on a model's tensors (`settings.max_tensor_elements`) and a compile's work (`frontend.work`)."""
    import tileplan.plan  # noqa: F401
    from tileplan.frontend.onnx_bytes import set_max_tensor_elements
    from tileplan.frontend.work import set_limits
    from tileplan.mappers.base import available_mappers

    if max_tensor_elements:
        set_max_tensor_elements(max_tensor_elements)
    if work_limits:
        set_limits(**work_limits)
    available_mappers()


class SolverPool:
    """Solver processes, one layer (or module build) each at a time; a solve that overruns its hard limit kills its
    own process only (`ProcessSlots`), so other jobs' layers solving next to it go on. `nice` lowers the
    processes' priority (module builds yield to solves)."""

    def __init__(self, processes: int, *, name: str = "solver", nice: int = 0, memory_mb: int | None = None,
                 max_tensor_elements: int | None = None, work_limits: dict[str, int] | None = None) -> None:
        """`memory_mb`: each process's data-segment cap (`settings.worker_memory_mb`); a call past it returns a
        `memory_limit` error and its process is replaced."""
        self.processes = processes
        self.slots = ProcessSlots(processes, name=name, nice=nice, warm=functools.partial(_warm, max_tensor_elements, work_limits),
                                  memory_bytes=memory_mb * 1024 * 1024 if memory_mb else None)

    @classmethod
    def of(cls, processes: int, settings: Any, *, name: str = "solver", nice: int = 0) -> SolverPool:
        """A pool under the settings' worker memory cap and tensor bound."""
        return cls(processes, name=name, nice=nice, memory_mb=settings.worker_memory_mb,
                   max_tensor_elements=settings.max_tensor_elements, work_limits=work_of_settings(settings))

    @property
    def solves(self) -> int:
        return self.slots.calls

    async def warm(self) -> None:
        await self.slots.warm()

    async def solve(self, hardware: dict[str, Any], layer: dict[str, Any], options: dict[str, Any], *,
                    timeout: float, budget: float | None = None) -> dict[str, Any]:
        """`budget`: seconds the whole solve may take (model building included) before it stops itself with a
        `solve_time_limit` error; `timeout`: the hard limit at which its process is killed."""
        try:
            return dict(await self.slots.run(solve_layer, hardware, layer, options, budget, timeout=timeout,
                                             retire=_retire))
        except SlotTimeout:
            raise SolveTimeout(f"the solve ran past its hard limit of {timeout:.0f} s and was stopped") from None
        except SlotCrashed:
            raise SolverCrashed("the solver process died") from None

    async def build(self, hardware: dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any], *,
                    timeout: float) -> dict[str, Any]:
        """A stored plan's module (`build_layer_module`) in a solver process, under the same limits as a solve."""
        try:
            return dict(await self.slots.run(build_layer_module, hardware, layer, mapping, timeout=timeout,
                                             retire=_retire_build))
        except SlotTimeout:
            raise SolveTimeout(f"code generation ran past its hard limit of {timeout:.0f} s and was stopped") from None
        except SlotCrashed:
            raise SolverCrashed("the code generation process died") from None

    async def compile(self, db_url: str, compile_id: str, *, timeout: float) -> dict[str, Any]:
        """A whole model's compile (`compile_in_process`: the model and request read from the store there) in a
        solver process, under a hard time limit."""
        try:
            return dict(await self.slots.run(compile_in_process, db_url, compile_id, timeout=timeout,
                                             retire=_retire))
        except SlotTimeout:
            raise SolveTimeout(f"the compile ran past its hard limit of {timeout:.0f} s and was stopped") from None
        except SlotCrashed as exc:
            raise SolverCrashed("the compiling process died", exc.signal) from None

    async def onnx_ops(self, *, timeout: float) -> list[str]:
        """`supported_onnx_ops` from a solver process (the API process does not import TVM)."""
        try:
            return list(await self.slots.run(supported_onnx_ops, timeout=timeout))
        except SlotTimeout:
            raise SolveTimeout(f"listing importable operators ran past {timeout:.0f} s and was stopped") from None
        except SlotCrashed:
            raise SolverCrashed("the process listing importable operators died") from None

    def close(self) -> None:
        """Stop at once: a solve in progress is abandoned (its job is resumed or retried elsewhere)."""
        self.slots.close()
