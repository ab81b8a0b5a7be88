"""Single flight: concurrent callers asking for the same key share one run of the work.

The work runs in a task of its own that counts its callers: a caller that is cancelled (its client went away) stops
waiting, and the work is cancelled only when no caller is left, so it never stops for someone who still waits and
never runs on for nobody.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class _Flight(Generic[T]):
    def __init__(self, task: asyncio.Future[T]) -> None:
        self.task = task
        self.callers = 0


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._inflight: dict[str, _Flight[T]] = {}

    async def run(self, key: str, work: Callable[[], Awaitable[T]]) -> T:
        """The result of `work()` for `key`; a caller arriving while it runs waits for the same result
        (or exception) instead of starting it again."""
        flight = self._inflight.get(key)
        if flight is None:
            flight = _Flight(asyncio.ensure_future(work()))
            self._inflight[key] = flight
            flight.task.add_done_callback(functools.partial(self._finished, key, flight))
        flight.callers += 1
        try:
            return await asyncio.shield(flight.task)
        except asyncio.CancelledError:
            if not flight.task.done() and flight.callers == 1:
                flight.task.cancel()  # the last one waiting left: nobody wants the result
            raise
        finally:
            flight.callers -= 1

    def _finished(self, key: str, flight: _Flight[T], task: asyncio.Future[T]) -> None:
        if self._inflight.get(key) is flight:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved, even if every caller left
