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
import contextlib
import functools
import logging
import math
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from tileplan.errors import InputError, unexpected_error
from tileplan.frontend.work import of_settings as work_limits
from tileplan.hardware.catalog import catalog
from tileplan.jobs.bytecache import ByteLRU
from tileplan.jobs.fair import FairShare
from tileplan.jobs.intake import warm as intake_warm
from tileplan.jobs.slots import ProcessSlots, SlotCrashed, SlotTimeout
from tileplan.jobs.solve import SolverCrashed, SolverPool, SolveTimeout
from tileplan.settings import Settings
from tileplan.store import Store
from tileplan.store.repository import FINAL, Compile, QuotaExceeded

log = logging.getLogger("tileplan.jobs")

OPS_TIMEOUT_S = 120.0  # asking a solver process for the importable operators (it imports TVM first)
SMALL_BODY_BYTES = 8 << 20  # request bodies read in the small lane (a ResNet-50 in int8 as base64: ~35 MB)
BODIES_BYTES = 4 << 20  # remembered request bodies (~20,000)
INTAKE_NICE = 5  # reading bodies and checking models yields the CPU to the API
OPS_WAIT_S = 30.0  # how long a POST /compile waits for that answer before leaving the check to the compile
# Failures that are the server's, not the model's: the next identical request tries again.
CRASHES_BEFORE_BLAME = 2  # attempts whose process died before a compile is failed for good
# signals a native crash ends a process with (not SIGKILL, the OOM killer's or an operator's, nor SIGABRT, which is
# also how a C++ allocation past the memory cap ends: those keep the attempts above): a compile whose process one
# ended is failed for good at once, as the model's (a 422), not retried as the server's by every identical request
NATIVE_CRASHES = {int(signal.SIGSEGV), int(signal.SIGBUS), int(signal.SIGFPE), int(signal.SIGILL)}
SERVER_FAULTS = {"compile_error", "time_limit", "compile_timeout", "compile_crashed", "internal_error"}


def discard(*paths: str | None) -> None:
    """Unlink files in a thread, not waited for: unlinking a large file frees its blocks, which takes milliseconds to
    a second on a busy disk, and the event loop must not wait for that (bench/hostile.py: the 90 MB bodies' files)."""
    def unlink() -> None:
        for path in paths:
            if path:
                with contextlib.suppress(OSError):
                    os.unlink(path)

    asyncio.get_running_loop().run_in_executor(None, unlink)


class Compiler:
    def __init__(self, store: Store, settings: Settings, pool_of: Callable[[], SolverPool],
                 resolve_hardware: Callable[[Any], Any], *, resume: bool = True,
                 on_finish: Callable[[float, str], None] | None = None,
                 on_storage: Callable[[], None] | None = None, fair: FairShare | None = None) -> None:
        """`pool_of`: the solver pool to compile in (the local queue's, or a pool of one process);
        `resolve_hardware`: the scheduler's (catalog, registered and inline descriptors, as /schedule takes);
        `resume`: run the unfinished compiles found at start (one server owns them: the local queue);
        `on_finish(seconds, outcome)`: told of every compile run here (the metrics); `on_storage`: told when a
        compile's artifact was stored or a compile deleted (retention: gives the space back); `fair`: the turns of
        the pool's processes (shared with the module builds that run there), by default the compiler's own."""
        self._on_finish = on_finish
        self._on_storage = on_storage
        self.fair = fair or FairShare(settings.module_processes, settings.owner_max_compiles)
        self.store = store
        self.settings = settings
        self._pool_of = pool_of
        self._resolve_hardware = resolve_hardware
        self._resume = resume
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._finished: dict[str, asyncio.Event] = {}
        self._ops: asyncio.Task[set[str] | None] | None = None
        # digest of a request body -> (compile id, wait): an identical body again is not read again
        self.bodies: ByteLRU[str, tuple[str, bool]] = ByteLRU(BODIES_BYTES)
        # digest of a request body the checks refused -> the 4xx details: refused again without being read
        self.refused: ByteLRU[str, list[dict[str, Any]]] = ByteLRU(BODIES_BYTES)
        # request bodies are read and models checked here, under the worker memory cap (tileplan.jobs.intake)
        # in two lanes: bodies up to SMALL_BODY_BYTES (most models; read and checked in a second or so) never wait
        # behind a large model's minute in the other lane
        lane = dict(nice=INTAKE_NICE, memory_bytes=settings.worker_memory_mb * 1024 * 1024,
                    warm=functools.partial(intake_warm, settings.max_tensor_elements))
        self.intake = ProcessSlots(settings.intake_processes, name="intake", **lane)  # type: ignore[arg-type]
        self.intake_small = ProcessSlots(1, name="intake-small", **lane)  # type: ignore[arg-type]

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
        self.intake.close()
        self.intake_small.close()
        for t in list(self._tasks.values()):
            t.cancel()
        for t in list(self._tasks.values()):
            with contextlib.suppress(BaseException):
                await t

    @property
    def intake_calls(self) -> int:
        """Request bodies read and models checked so far (both lanes)."""
        return self.intake.calls + self.intake_small.calls

    # -- the request ----------------------------------------------------------------------------

    async def admit(self, content_type: str, path: str, owner: str | None,
                    validate: Callable[[dict[str, Any]], Any]) -> tuple[Compile, bool, bool]:
        """The compile of the request body at `path` (`tileplan.jobs.intake`: read and checked in an intake
        process, recorded there for `owner`): the stored one if there is one (a failure of the server's is tried
        again), else a new one, queued. `validate(doc)`: the request's small fields -> CompileBody (the API's
        schema; its hardware is resolved here). Returns the compile, the body's `wait` and whether the answer may be
        remembered by the body's digest (its hardware is a catalog name or inline: no API process can change what it
        means). InputError for a bad request (`rememberable` False where that does not hold), `QuotaExceeded` past
        `compile_quota_bytes`."""
        from tileplan.jobs import intake

        s = self.settings
        lane = self.intake_small if os.path.getsize(path) <= SMALL_BODY_BYTES else self.intake
        read = await self._intake(lane, intake.read_body, path, content_type, loc=("body",),
                                  what="reading the request")
        fixed = True  # (a refusal of the body's own fields is the bytes')
        try:
            body = validate(read["doc"])
            # a registered name can be registered, replaced or deleted by any API process, which another process's
            # remembered bodies would not know: only requests naming catalog or inline hardware are remembered
            fixed = isinstance(body.hardware, dict) or body.hardware in catalog()
            hw = await asyncio.to_thread(self._resolve_hardware, body.hardware)
            ops = await self.supported_ops()
            limits = {"max_time_limit_s": s.max_time_limit_s, "max_layer_extent": s.max_layer_extent,
                      "max_tensor_elements": s.max_tensor_elements, "quota": s.compile_quota_bytes,
                      "work": work_limits(s)}
            out = await self._intake(lane, intake.admit, self.store.url, read["model"], read["calibration"],
                                     hw.model_dump(mode="json"), body.options, body.input_shapes,
                                     sorted(ops) if ops is not None else None, limits, owner,
                                     time.time() + s.job_time_limit_s, loc=("body", "model"),
                                     what="checking the model", late=functools.partial(self._admitted_late, owner))
        except InputError as exc:
            if not fixed:
                exc.rememberable = False  # type: ignore[attr-defined]
            raise
        finally:
            discard(read.get("model"), read.get("calibration"))
        found = await self._after_admit(out["id"], out["created"], owner, out["model_name"], hw.name)
        return found, bool(body.wait), fixed

    def forget_bodies(self) -> None:
        """Hardware was registered, replaced or deleted: a body naming it may mean another compile now (bodies naming
        registered hardware are not remembered; this is for the catalog names a registration could shadow)."""
        self.bodies.clear()
        self.refused.clear()

    def _admitted_late(self, owner: str | None, out: dict[str, Any]) -> None:
        """The check of a request whose client left finished anyway and recorded its compile: run it as if the client
        had stayed, so its row does not stay queued with nobody to run it (an identical request later finds it)."""
        if out.get("ok") and out.get("created"):
            log.info("event=compile_queued client=gone id=%s", out["id"][:12])
            self._spawn(out["id"], owner)

    async def _intake(self, lane: ProcessSlots, fn: Any, *args: Any, loc: tuple[str, ...],
                      what: str, late: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        s = self.settings
        try:
            # (a client that leaves while its body is read lets that finish: restarting the process costs more;
            # `late` sees what it did)
            out: dict[str, Any] = await lane.run(fn, *args, timeout=s.compile_check_time_limit_s,
                                                 kill_on_cancel=False, late=late)
        except SlotTimeout:
            raise InputError(loc[1:], f"{what} took longer than this server's limit of "
                             f"{s.compile_check_time_limit_s:g} s (compile_check_time_limit_s)", "too_costly") from None
        except SlotCrashed:
            raise InputError(loc[1:], f"{what} ended its process (over this server's memory cap of "
                             f"{s.worker_memory_mb} MiB, worker_memory_mb?)", "too_costly") from None
        if out.get("memory"):
            raise InputError(loc[1:], f"{what} needed more than this server's memory cap of {s.worker_memory_mb} "
                             "MiB (worker_memory_mb)", "too_costly")
        if out.get("quota"):
            raise QuotaExceeded(*out["quota"])
        if not out["ok"]:
            errors = out["errors"]
            first = errors[0]
            exc = InputError(tuple(first["loc"][1:]), first["msg"], first["type"])
            exc.all_details = [{**e, "loc": list(e["loc"][1:])} for e in errors]  # type: ignore[attr-defined]
            raise exc
        return out

    async def hold(self, compile_id: str, owner: str | None) -> Compile | None:
        """An identical request body again (`owner` asking): the compile it made, now held by `owner` too (quota:
        `QuotaExceeded`), a failure of the server's queued again; None if it is gone (then the body is read
        afresh)."""
        found = await self.get(compile_id)
        if found is None:
            return None
        if owner is not None:
            held = await asyncio.to_thread(self.store.hold_compile, compile_id, owner, self.settings.compile_quota_bytes)
            if not held:
                return None
        return await self._after_admit(compile_id, False, owner, found.model_name, found.hardware)

    async def _after_admit(self, compile_id: str, created: bool, owner: str | None, model_name: str,
                           hardware: str) -> Compile:
        found = await self.get(compile_id)
        if found is None:  # deleted (by its other owner, an admin or retention) as it was asked for again
            raise InputError((), "the compile was deleted as it was asked for; ask again", "conflict")
        if created:
            log.info("event=compile_queued id=%s model=%s hardware=%s", compile_id[:12], model_name, hardware)
            self._spawn(compile_id, owner)
        elif (found.status == "failed" and (found.error or {}).get("type") in SERVER_FAULTS
              and await asyncio.to_thread(self.store.retry_compile, compile_id,
                                          time.time() + self.settings.job_time_limit_s)):
            log.info("event=compile_retried id=%s", compile_id[:12])
            self._spawn(compile_id, owner)
            found = await self.get(compile_id) or found
        elif not found.finished and compile_id not in self._tasks and self._resume:
            self._spawn(compile_id, found.owner)  # recorded, but nobody here runs it (its server stopped first)
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
            if found is None:
                return  # deleted as it started
            start = time.perf_counter()
            try:  # (the compile process reads the model and its request from the store: not through the API)
                out = await self._pool_of().compile(self.store.url, compile_id,
                                                    timeout=self.settings.compile_time_limit_s)
            except SolveTimeout as exc:
                out = {"ok": False, "error": {"loc": [], "msg": str(exc), "type": "compile_timeout"}}
            except SolverCrashed as exc:
                # once may be the server's (a worker killed from outside); a process that dies on every attempt
                # at this model is the model's doing (native code aborting at the memory cap): final, not retried
                # by every identical request forever
                if exc.signal in NATIVE_CRASHES:
                    # native code (TVM, onnxruntime, numpy) crashed on this model: it would again, every time
                    out = {"ok": False, "error": {"loc": ["model"], "type": "compiler_crashed", "msg": (
                        f"the compiling process crashed on this model ({signal.Signals(exc.signal).name} in native "
                        "code: TVM's importer or lowering, onnxruntime); it is not run again")}}
                elif attempt >= CRASHES_BEFORE_BLAME:
                    out = {"ok": False, "error": {"loc": [], "type": "memory_limit", "msg": (
                        f"the compiling process died on each of {attempt} attempts at this model (over this "
                        f"server's memory cap of {self.settings.worker_memory_mb} MiB per worker process, "
                        "worker_memory_mb?)")}}
                else:
                    out = {"ok": False, "error": {"loc": [], "msg": str(exc), "type": "compile_crashed"}}
            if out["ok"]:  # (its summary and artifact were stored by the compile's process: `compile_in_process`)
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
        except Exception:  # noqa: BLE001 - logged by unexpected_error; the store went away: recorded if it can be
            err = unexpected_error(log, "this compile", event="compile_failed", id=compile_id[:12])
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.fail_compile, compile_id, err)
        finally:
            ev = self._finished.pop(compile_id, None)
            if ev is not None:
                ev.set()


def input_fault(c: Compile) -> bool:
    """A failed compile whose failure the model (or request) is at fault for."""
    return c.status == "failed" and (c.error or {}).get("type") not in SERVER_FAULTS


def input_shapes_of(value: Any, max_extent: int, max_elements: int) -> dict[str, list[int]]:
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


def _check_calibration_arrays(arrays: dict[str, Any], inputs: dict[str, Any]) -> None:
    """Each calibration array (`frontend.calibration.CalibrationArray`, from its .npy header) is samples of its input:
    the input's shape after the first axis and the input's element type. onnxruntime's calibration refused any other
    in the compile, as the server's error (a 500, run again by every identical request)."""
    from tileplan.frontend.onnx_import import _np_dtype

    for name, inp in inputs.items():
        a = arrays[name]
        t = inp.type.tensor_type
        want = [int(d.dim_value) for d in t.shape.dim]
        try:
            dtype = _np_dtype(t.elem_type)
        except (KeyError, TypeError, ValueError):
            dtype = "?"
        if list(a.shape[1:]) != want or a.dtype != dtype:
            raise InputError(("calibration", name), f"array {name!r} is {list(a.shape)} of {a.dtype}: expected "
                             f"samples of input {name!r} along the first axis, [n, {', '.join(map(str, want))}] "
                             f"of {dtype}", "value_error")


def read_model(model: bytes, input_shapes: dict[str, list[int]], quantize: bool,
                calibration: set[str] | dict[str, Any] | None = None, ops: set[str] | None = None, emulate: bool = True) -> str:
    """Read the model with ONNX alone (no TVM, no compile): the errors `compile_model` would raise first, before
    anything is stored (with `ops`, an operator no compile can import too; a model whose compile, with the emulated
    run if `emulate`, is more work than this process's bounds, `frontend.work`). Returns the model's name."""
    from tileplan.frontend import onnx_import, unroll, work
    from tileplan.frontend.qoperator import to_qdq

    if quantize:  # the quantizer runs in the compile; here everything before it
        decoded = onnx_import.decode(model)
        onnx_import.apply_input_shapes(decoded, input_shapes)
        unroll.unroll_control_flow(decoded, strict=False)  # as load_model does: a Loop's float body is seen
        if calibration is not None:
            inputs = {i.name: i for i in onnx_import.graph_inputs(decoded)}
            if set(calibration) != set(inputs):
                raise InputError(("calibration",), f"arrays {sorted(calibration)}; the model's inputs are "
                                 f"{sorted(inputs)}")
            if isinstance(calibration, dict):
                _check_calibration_arrays(calibration, inputs)
        if onnx_import.is_float_model(decoded):
            work.check(onnx_import.infer_shapes(decoded), emulate)
            if ops is not None:  # the quantizer adds QuantizeLinear / DequantizeLinear only
                to_qdq(decoded)
                onnx_import.inline_constant_ifs(decoded)  # as load_model does
                onnx_import.check_ops(decoded, ops | {"QuantizeLinear", "DequantizeLinear"})
            return str(decoded.graph.name or "model")
    loaded = onnx_import.load_model(model, input_shapes).model
    if ops is not None:
        onnx_import.check_ops(loaded, ops)
    work.check(loaded, emulate)
    return str(loaded.graph.name or "model")


__all__ = ["FINAL", "Compiler", "input_fault"]
