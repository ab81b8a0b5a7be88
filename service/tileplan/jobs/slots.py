"""Processes that run untrusted work one call at a time, each killable on its own.

A `ProcessSlots` is N single-process executors ("slots"). A call takes a free slot, runs there under a hard time
limit and, optionally, a memory limit of the process's data segment; a call that overruns, or whose caller is
cancelled (a client that went away), has its slot's process killed and replaced, and nothing else: the calls in
the other slots go on. (A shared ProcessPoolExecutor cannot kill one stuck worker; killing all of them would end
every other caller's work too.) Slot processes exit when their parent dies and may run at a lower priority, so
background work (module builds) yields the CPU to solves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

log = logging.getLogger("tileplan.jobs")
START_LIMIT_S = 120.0  # a slot's process starting (imports) under a heavily loaded machine


class SlotTimeout(Exception):
    """The call ran past its hard limit; its process was killed."""


class SlotCrashed(Exception):
    """The slot's process died (killed, out of memory); `signal`: the signal that ended it, where it is known."""

    def __init__(self, msg: str, signal: int | None = None) -> None:
        super().__init__(msg)
        self.signal = signal


def _death_signal(executor: Any, wait_s: float = 5.0) -> int | None:
    """The signal that ended an executor's (dead) process, if one did: SIGSEGV or SIGABRT from native code, SIGKILL
    from the memory cap's OOM killer or from outside. The pool fails its futures before its own thread reaps the
    dead process, and a process that faulted may still be dumping core, so its exit status is waited for (up to
    `wait_s`; polled, as that thread may be the one that reaps it) rather than read once."""
    deadline = time.monotonic() + wait_s
    for p in list(getattr(executor, "_processes", {}).values()):
        with contextlib.suppress(Exception):
            code = p.exitcode
            while code is None and time.monotonic() < deadline:
                p.join(0.05)
                code = p.exitcode
            if code is not None and code < 0:
                return -int(code)
    return None


def _exit_with_parent(parent: int) -> None:
    """A slot process whose server or worker died (SIGKILL, OOM) exits instead of lingering."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _init_slot(parent: int, memory_bytes: int | None, nice: int, warm: Callable[[], None] | None) -> None:
    _exit_with_parent(parent)
    logging.basicConfig(level=logging.WARNING)
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)
    if memory_bytes:
        import resource

        # the data segment (heap and anonymous mappings), not the address space: shared libraries map far more
        # address space than they use. An allocation past it is a MemoryError in the call, reported as such.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_DATA, (memory_bytes, memory_bytes))
    if warm is not None:
        try:
            warm()
        except Exception:  # noqa: BLE001 - a broken import shows up as the call's error, with its reason
            pass


def _pid() -> int:
    return os.getpid()


class _Slot:
    def __init__(self, owner: ProcessSlots) -> None:
        self.owner = owner
        self.executor = owner._new_executor()
        self.ready = False  # its process has started and run `warm` (a call's time limit starts after that)

    async def started(self) -> None:
        if not self.ready:
            await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(self.executor, _pid), START_LIMIT_S)
            self.ready = True

    def kill(self) -> None:
        """Kill this slot's process (it may be stuck in a call) and start a fresh one."""
        for p in list(getattr(self.executor, "_processes", {}).values()):  # no public API to kill a worker
            with contextlib.suppress(Exception):
                p.kill()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.executor = self.owner._new_executor()
        self.ready = False


class ProcessSlots:
    def __init__(self, processes: int, *, name: str, memory_bytes: int | None = None, nice: int = 0,
                 warm: Callable[[], None] | None = None) -> None:
        self.processes = processes
        self.name = name
        self._init = (os.getpid(), memory_bytes, nice, warm)
        self._ctx = multiprocessing.get_context("spawn")
        self._slots = [_Slot(self) for _ in range(processes)]
        self._free: asyncio.Queue[_Slot] | None = None
        self.calls = 0
        self.killed = 0

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(max_workers=1, mp_context=self._ctx, initializer=_init_slot, initargs=self._init)

    def _queue(self) -> asyncio.Queue[_Slot]:
        if self._free is None:  # made in the running loop
            self._free = asyncio.Queue()
            for s in self._slots:
                self._free.put_nowait(s)
        return self._free

    @property
    def busy(self) -> int:
        return self.processes - self._queue().qsize()

    async def warm(self) -> None:
        """Start every process now (each runs `warm`), so the first call is not slower."""
        await asyncio.gather(*(s.started() for s in self._slots), return_exceptions=True)

    async def run(self, fn: Callable[..., Any], *args: Any, timeout: float,
                  retire: Callable[[Any], bool] | None = None, kill_on_cancel: bool = True,
                  late: Callable[[Any], None] | None = None) -> Any:
        """`fn(*args)` in a free slot's process; SlotTimeout past `timeout` s, SlotCrashed if the process dies.
        Cancelling the caller kills the call's process (the work was the caller's alone). `retire(result)`: true
        if the process should not serve another call (it ran out of memory: native libraries may be left in a
        broken state), so it is replaced. `kill_on_cancel=False`: a cancelled call that is already running is left
        to finish (still killed at `timeout`) and its slot freed then; for short calls whose process costs more to
        start again than to let finish; `late(result)` is then told what such a call returned (its caller is gone,
        and what it did may need to be seen through)."""
        free = self._queue()
        waited = time.perf_counter()
        try:
            slot = await free.get()
        except asyncio.CancelledError:  # the caller left while every slot was busy: the call never runs
            log.info("event=slot_cancelled pool=%s seconds=%.1f stage=queued", self.name,
                     time.perf_counter() - waited)
            raise
        self.calls += 1
        handed_back = False
        try:
            try:
                await slot.started()  # (a process starting under load must not eat the call's time limit)
            except (BrokenProcessPool, TimeoutError):
                slot.kill()
                raise SlotCrashed("its process did not start") from None
            except asyncio.CancelledError:  # the caller left while its process was starting: it never runs
                log.info("event=slot_cancelled pool=%s seconds=%.1f stage=starting", self.name,
                         time.perf_counter() - waited)
                raise
            start = time.perf_counter()
            loop = asyncio.get_running_loop()
            fut = loop.run_in_executor(slot.executor, fn, *args)
            try:
                result = await asyncio.wait_for(fut if kill_on_cancel else asyncio.shield(fut), timeout)
                if retire is not None and retire(result):
                    log.warning("event=slot_retired pool=%s reason=memory", self.name)
                    self.killed += 1
                    slot.kill()
                return result
            except TimeoutError:
                log.warning("event=slot_timeout pool=%s seconds=%.1f", self.name, time.perf_counter() - start)
                self.killed += 1
                slot.kill()
                raise SlotTimeout(f"ran past its hard limit of {timeout:g} s and was stopped") from None
            except asyncio.CancelledError:
                log.info("event=slot_cancelled pool=%s seconds=%.1f", self.name, time.perf_counter() - start)
                if not kill_on_cancel and not fut.done():
                    handed_back = True  # the slot is freed when the call ends (or is killed at its time limit)

                    def overdue(slot: _Slot = slot, fut: asyncio.Future[Any] = fut) -> None:
                        if not fut.done():
                            self.killed += 1
                            slot.kill()
                            fut.cancel()

                    timer = loop.call_later(max(0.0, timeout - (time.perf_counter() - start)), overdue)

                    def ended(_f: asyncio.Future[Any], slot: _Slot = slot, timer: asyncio.TimerHandle = timer) -> None:
                        timer.cancel()
                        free.put_nowait(slot)
                        if late is not None and not _f.cancelled() and _f.exception() is None:
                            late(_f.result())

                    fut.add_done_callback(ended)
                    raise
                self.killed += 1
                slot.kill()
                raise
            except BrokenProcessPool:
                sig = await asyncio.to_thread(_death_signal, slot.executor)  # (waits: not on the event loop)
                slot.kill()
                raise SlotCrashed("its process died", sig) from None
        finally:
            if not handed_back:
                free.put_nowait(slot)

    def close(self) -> None:
        """Stop at once: calls in progress are abandoned."""
        for s in self._slots:
            for p in list(getattr(s.executor, "_processes", {}).values()):
                with contextlib.suppress(Exception):
                    p.kill()
            s.executor.shutdown(wait=True, cancel_futures=True)
