"""The compile's forked pools (planning, host-function emission) end a worker on a fatal signal at once: the worker
does not keep the C++ backtrace handler TVM's library installed in the compiling process, which in a forked child
can spin instead of ending, leaving the pool (and the compile) waiting for ever."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest

from tileplan.frontend.compile import _fault_ends_worker


def _c_handler(sig: int) -> int:
    """The address of the handler the C library runs for `sig` (0: the default action)."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)  # a struct sigaction: its first member is the handler
    assert libc.sigaction(sig, None, buf) == 0
    return ctypes.c_void_p.from_buffer(buf).value or 0


def _segfault() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def _pool() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"),
                               initializer=_fault_ends_worker)


def test_a_forked_worker_runs_no_handler_it_inherited_from_tvm() -> None:
    import tvm  # noqa: F401 - loads libtvm, which installs its backtrace handler for SIGSEGV

    inherited = _c_handler(signal.SIGSEGV)
    assert inherited != 0  # (what the compile's process has once TVM is imported)
    with _pool() as pool:
        in_worker = pool.submit(_c_handler, signal.SIGSEGV).result(timeout=60)
    assert in_worker != inherited


def test_a_fault_in_a_forked_worker_breaks_the_pool() -> None:
    import tvm  # noqa: F401

    with _pool() as pool, pytest.raises(BrokenProcessPool):
        pool.submit(_segfault).result(timeout=60)
