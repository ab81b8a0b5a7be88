"""Whole-model compiles of the service (POST /compile): checked, recorded, run in a solver process, awaited.

`Compiler.submit` is what POST /compile calls. A compile is identified by the digest of the model's bytes, the
hardware, the options, the input shapes and the solver version (`frontend.compile.model_digest`): the same
request twice is the same compile, answered from the store or joined while it runs, never run twice. Before
anything is stored the model is read as far as ONNX alone can (decode, checker, input shapes, float refusal,
shape inference) and its operators checked against those a solver process reports it can import, so a model
that cannot be compiled is a 4xx that leaves no row behind. The compile itself runs in a solver
process (`SolverPool.compile`, the pool /schedule's solves and module builds use), plans through the plan cache,
and writes its progress to the compile's row; the summary and the tar are stored in one write when it is done.
A failure the model is at fault for that only the compile finds (a node TVM's importer fails on) is kept with
its reason; a failure of the server's (a crash, the time limit) is tried again by the next identical request.
Each compile is held by the owners that asked for it (quota: `Store.create_compile`; `delete`) and runs in the
turn of the owner that asked first, round robin with other owners' compiles (`tileplan.jobs.fair`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tileplan.errors import InputError, from_validation_error
from tileplan.jobs.fair import FairShare
from tileplan.jobs.solve import SolverCrashed, SolverPool, SolveTimeout
from tileplan.mappers.base import get_mapper
from tileplan.settings import Settings
from tileplan.store import Store
from tileplan.store.repository import FINAL, Compile

log = logging.getLogger("tileplan.jobs")

OPS_TIMEOUT_S = 120.0  # asking a solver process for the importable operators (it imports TVM first)
OPS_WAIT_S = 30.0  # how long a POST /compile waits for that answer before leaving the check to the compile
# Failures that are the server's, not the model's: the next identical request tries again.
CRASHES_BEFORE_BLAME = 2  # attempts whose process died before a compile is failed for good
SERVER_FAULTS = {"compile_error", "time_limit", "compile_timeout", "compile_crashed", "internal_error"}


@dataclass
class CompileRequest:
    """A checked POST /compile: what the compile runs on and the id it has."""

    id: str
    model: bytes
    model_name: str
    hardware: Any  # HardwareDescriptor
    options: Any  # CompileOptions
    input_shapes: dict[str, list[int]]
    calibration: bytes | None = None  # .npz of calibration inputs (options.quantize)


class Compiler:
    def __init__(self, store: Store, settings: Settings, pool_of: Callable[[], SolverPool],
                 resolve_hardware: Callable[[Any], Any], *, resume: bool = True,
                 on_finish: Callable[[float, str], None] | None = None,
                 on_storage: Callable[[], None] | None = None) -> None:
        """`pool_of`: the solver pool to compile in (the local queue's, or a pool of one process);
        `resolve_hardware`: the scheduler's (catalog, registered and inline descriptors, as /schedule takes);
        `resume`: run the unfinished compiles found at start (one server owns them: the local queue);
        `on_finish(seconds, outcome)`: told of every compile run here (the metrics); `on_storage`: told when a
        compile's artifact was stored or a compile deleted (retention: gives the space back)."""
        self._on_finish = on_finish
        self._on_storage = on_storage
        self.fair = FairShare(settings.module_processes, settings.owner_max_compiles)
        self.store = store
        self.settings = settings
        self._pool_of = pool_of
        self._resolve_hardware = resolve_hardware
        self._resume = resume
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._finished: dict[str, asyncio.Event] = {}
        self._ops: asyncio.Task[set[str] | None] | None = None

    async def start(self) -> None:
        self._ops = asyncio.ensure_future(self._supported_ops())
        await asyncio.to_thread(self.store.expire_compiles)
        if self._resume:
            for compile_id, owner in await asyncio.to_thread(self.store.unfinished_compiles):
                log.info("event=compile_resumed id=%s", compile_id[:12])
                self._spawn(compile_id, owner)

    async def _supported_ops(self) -> set[str] | None:
        """The operators a compile can import, asked once of a solver process (TVM stays out of the API
        process), so an operator nothing can run is refused before anything is stored; None if that failed
        (then the compile finds it, and says so as the compile's error)."""
        try:
            return set(await self._pool_of().onnx_ops(timeout=OPS_TIMEOUT_S))
        except Exception as exc:  # noqa: BLE001 - a missing TVM, a dead process: the compile reports it later
            log.warning("event=onnx_ops_unknown reason=%s", exc)
            return None

    async def supported_ops(self, wait: float = OPS_WAIT_S) -> set[str] | None:
        """The importable operators, waiting up to `wait` s for the answer (asked at start; the solver processes
        may be busy with resumed work): None if not known by then."""
        if self._ops is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(self._ops), wait)
        except TimeoutError:
            return None

    async def stop(self) -> None:
        if self._ops is not None:
            self._ops.cancel()
        for t in list(self._tasks.values()):
            t.cancel()
        for t in list(self._tasks.values()):
            with contextlib.suppress(BaseException):
                await t

    # -- the request ----------------------------------------------------------------------------

    def check(self, model: bytes, hardware: Any, options: dict[str, Any] | None,
              input_shapes: dict[str, Any] | None, calibration: bytes | None = None,
              ops: set[str] | None = None) -> CompileRequest:
        """Validate a request and read the model as far as ONNX can without compiling it (runs in a thread).
        Raises InputError located in the request body (`model`, `model.<node>`, `hardware`, `options.*`,
        `input_shapes.<input>`, `calibration`). `ops`: the operators a compile can import (`supported_ops`)."""
        import hashlib

        from tileplan.frontend.calibration import calibration_index
        from tileplan.frontend.compile import CompileOptions, model_digest
        from tileplan.frontend.onnx_bytes import set_max_tensor_elements

        set_max_tensor_elements(self.settings.max_tensor_elements)

        try:
            opts = CompileOptions.model_validate(options or {})
        except ValidationError as exc:
            raise from_validation_error(exc, ("options",)) from None
        if opts.time_limit_s > self.settings.max_time_limit_s:
            raise InputError(("options", "time_limit_s"), f"at most {self.settings.max_time_limit_s:g} s on this "
                             "server", "less_than_equal")
        get_mapper(opts.mapper)  # unknown or not installed -> InputError at options.mapper
        shapes = _input_shapes(input_shapes, self.settings.max_layer_extent, self.settings.max_tensor_elements)
        calibration_names = None
        if calibration is not None:
            if not opts.quantize:
                raise InputError(("calibration",), "calibration data is what options.quantize quantizes a float "
                                 "model on: give it with options.quantize=true (or leave it out)")
            # the zip's directory and the arrays' headers only: the compile process loads the data
            calibration_names = set(calibration_index(calibration))
        hw = self._resolve_hardware(hardware)
        name = _read_model(model, shapes, opts.quantize, calibration_names, ops)
        digest = model_digest(model, hw, opts, shapes or None)
        if calibration is not None:  # other calibration data is another compile
            digest = hashlib.sha256(f"{digest}:{hashlib.sha256(calibration).hexdigest()}".encode()).hexdigest()
        return CompileRequest(digest, model, name, hw, opts, shapes, calibration)

    async def submit(self, req: CompileRequest, owner: str | None = None) -> Compile:
        """The compile of `req`: the stored one if there is one (a failure of the server's is tried again),
        else a new one, queued. `owner` comes to hold it; `QuotaExceeded` (store) if that would take it past
        `compile_quota_bytes`."""
        deadline = time.time() + self.settings.job_time_limit_s
        doc = {"hardware": req.hardware.model_dump(mode="json"), "options": req.options.model_dump(mode="json"),
               "input_shapes": req.input_shapes,
               "calibration": base64.b64encode(req.calibration).decode() if req.calibration is not None else None}
        created = await asyncio.to_thread(
            self.store.create_compile, req.id, model=req.model, model_name=req.model_name,
            hardware=req.hardware.name, request=doc, deadline=deadline, owner=owner,
            quota=self.settings.compile_quota_bytes)
        found = await self.get(req.id)
        if found is None:  # deleted (by its other owner, an admin or retention) as it was asked for again
            return await self.submit(req, owner)
        if created:
            log.info("event=compile_queued id=%s model=%s hardware=%s", req.id[:12], req.model_name,
                     req.hardware.name)
            self._spawn(req.id, owner)
        elif (found.status == "failed" and (found.error or {}).get("type") in SERVER_FAULTS
              and await asyncio.to_thread(self.store.retry_compile, req.id, deadline)):
            log.info("event=compile_retried id=%s", req.id[:12])
            self._spawn(req.id, owner)
            found = await self.get(req.id) or found
        elif not found.finished and req.id not in self._tasks and self._resume:
            self._spawn(req.id, found.owner)  # recorded, but nobody here runs it (its server stopped before it began)
        return found

    async def delete(self, compile_id: str, owner: str, *, admin: bool = False) -> str:
        """`owner` lets go of the compile (`Store.delete_compile`'s outcome); when it is gone, its run here stops."""
        outcome: str = await asyncio.to_thread(self.store.delete_compile, compile_id, owner, admin=admin)
        task = self._tasks.get(compile_id)
        if outcome == "deleted" and task is not None:
            task.cancel()  # (a compile running in another API process finds its row gone and stores nothing)
        if outcome == "deleted" and self._on_storage is not None:
            self._on_storage()
        return outcome

    async def get(self, compile_id: str) -> Compile | None:
        found = await asyncio.to_thread(self.store.get_compile, compile_id)
        if found is not None and not found.finished and found.deadline < time.time():
            await asyncio.to_thread(self.store.expire_compiles)
            found = await asyncio.to_thread(self.store.get_compile, compile_id)
        return found

    async def wait(self, compile_id: str, timeout: float) -> Compile | None:
        """Wait up to `timeout` s for the compile to finish; returns it as it is then."""
        end = time.monotonic() + timeout
        ev = self._finished.setdefault(compile_id, asyncio.Event())
        poll = 0.05
        try:
            while True:
                found = await self.get(compile_id)
                remaining = end - time.monotonic()
                if found is None or found.finished or remaining <= 0:
                    return found
                with contextlib.suppress(TimeoutError):  # woken by the compile finishing here, or polling
                    await asyncio.wait_for(ev.wait(), min(remaining, poll))
                poll = min(poll * 1.5, 0.5)
        finally:
            self._finished.pop(compile_id, None)

    # -- running --------------------------------------------------------------------------------

    def _spawn(self, compile_id: str, owner: str | None) -> None:
        if compile_id in self._tasks:
            return
        task = asyncio.ensure_future(self._run(compile_id, owner))
        self._tasks[compile_id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(compile_id, None))

    async def _run(self, compile_id: str, owner: str | None) -> None:
        async with self.fair.turn(owner):  # (queued until then: its owner's other compiles, or others', run)
            await self._compile(compile_id)

    async def _compile(self, compile_id: str) -> None:
        try:
            attempt = await asyncio.to_thread(self.store.start_compile, compile_id)
            if not attempt:
                return
            found = await asyncio.to_thread(self.store.get_compile, compile_id)
            model = await asyncio.to_thread(self.store.compile_model_bytes, compile_id)
            if found is None or model is None:
                return  # deleted as it started
            req = found.request
            start = time.perf_counter()
            try:
                calibration = base64.b64decode(req["calibration"]) if req.get("calibration") else None
                out = await self._pool_of().compile(
                    self.store.url, compile_id, req["hardware"], model, req["options"], req["input_shapes"] or None,
                    calibration, timeout=self.settings.compile_time_limit_s)
            except SolveTimeout as exc:
                out = {"ok": False, "error": {"loc": [], "msg": str(exc), "type": "compile_timeout"}}
            except SolverCrashed as exc:
                # once may be the server's (a worker killed from outside); a process that dies on every attempt
                # at this model is the model's doing (native code aborting at the memory cap): final, not retried
                # by every identical request forever
                if attempt >= CRASHES_BEFORE_BLAME:
                    out = {"ok": False, "error": {"loc": [], "type": "memory_limit", "msg": (
                        f"the compiling process died on each of {attempt} attempts at this model (over this "
                        f"server's memory cap of {self.settings.worker_memory_mb} MiB per worker process, "
                        "worker_memory_mb?)")}}
                else:
                    out = {"ok": False, "error": {"loc": [], "msg": str(exc), "type": "compile_crashed"}}
            if out["ok"]:
                await asyncio.to_thread(self.store.finish_compile, compile_id, out["summary"], out["artifact"])
                if self._on_storage is not None:
                    self._on_storage()
            else:  # the model's fault: kept with its reason (asked again, answered again), without the model
                await asyncio.to_thread(self.store.fail_compile, compile_id, out["error"],
                                        final=out["error"].get("type") not in SERVER_FAULTS)
            seconds = time.perf_counter() - start
            log.info("event=compile_finished id=%s ok=%s seconds=%.1f", compile_id[:12], out["ok"], seconds)
            if self._on_finish is not None:
                self._on_finish(seconds, "done" if out["ok"] else str(out["error"].get("type", "failed")))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the store went away: recorded if it can be, never left hanging in silence
            log.exception("event=compile_failed id=%s", compile_id[:12])
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.fail_compile, compile_id, {
                    "loc": [], "msg": f"internal error: {type(exc).__name__}", "type": "internal_error"})
        finally:
            ev = self._finished.pop(compile_id, None)
            if ev is not None:
                ev.set()


def input_fault(c: Compile) -> bool:
    """A failed compile whose failure the model (or request) is at fault for."""
    return c.status == "failed" and (c.error or {}).get("type") not in SERVER_FAULTS


def _input_shapes(value: Any, max_extent: int, max_elements: int) -> dict[str, list[int]]:
    """`input_shapes` as JSON gave it: positive integers only (a bool, a string or a float is not a dimension, even
    when it would coerce to one), each at most `max_extent`, at most `max_elements` per input. Refused here, before
    the model is read, as the request's fault."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(("input_shapes",), 'an object {"<input name>": [1, 3, 224, 224]}')
    out: dict[str, list[int]] = {}
    for name, dims in value.items():
        if not isinstance(dims, list) or not dims or not all(type(d) is int for d in dims):
            raise InputError(("input_shapes", name), f"a list of positive integers, got {str(dims)[:100]}", "int_type")
        if any(d <= 0 for d in dims):
            raise InputError(("input_shapes", name), f"dimensions must be positive, got {dims}", "greater_than")
        if any(d > max_extent for d in dims):
            raise InputError(("input_shapes", name), f"a dimension is over this server's bound of {max_extent} "
                             "(max_layer_extent)", "less_than_equal")
        elements = math.prod(dims)
        if elements > max_elements:
            raise InputError(("input_shapes", name), f"{elements} elements ({dims}) is over this server's bound of "
                             f"{max_elements} elements per tensor (max_tensor_elements)", "too_large")
        out[str(name)] = list(dims)
    return out


def _read_model(model: bytes, input_shapes: dict[str, list[int]], quantize: bool,
                calibration: set[str] | None = None, ops: set[str] | None = None) -> str:
    """Read the model with ONNX alone (no TVM, no compile): the errors `compile_model` would raise first, before
    anything is stored (with `ops`, an operator no compile can import too). Returns the model's name."""
    from tileplan.frontend import onnx_import
    from tileplan.frontend.qoperator import to_qdq

    if quantize:  # the quantizer runs in the compile; here everything before it
        decoded = onnx_import.decode(model)
        onnx_import.apply_input_shapes(decoded, input_shapes)
        if calibration is not None:
            inputs = {i.name: i for i in onnx_import.graph_inputs(decoded)}
            if calibration != set(inputs):
                raise InputError(("calibration",), f"arrays {sorted(calibration)}; the model's inputs are "
                                 f"{sorted(inputs)}")
        if onnx_import.is_float_model(decoded):
            onnx_import.infer_shapes(decoded)
            if ops is not None:  # the quantizer adds QuantizeLinear / DequantizeLinear only
                to_qdq(decoded)
                onnx_import.check_ops(decoded, ops | {"QuantizeLinear", "DequantizeLinear"})
            return str(decoded.graph.name or "model")
    loaded = onnx_import.load_model(model, input_shapes).model
    if ops is not None:
        onnx_import.check_ops(loaded, ops)
    return str(loaded.graph.name or "model")


__all__ = ["FINAL", "Compiler", "CompileRequest", "input_fault"]
