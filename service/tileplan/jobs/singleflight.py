"""Single flight: concurrent callers asking for the same key share one run of the work."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class SingleFlight(Generic[T]):
    def __init__(self) -> None:
        self._inflight: dict[str, asyncio.Future[T]] = {}

    async def run(self, key: str, work: Callable[[], Awaitable[T]]) -> T:
        """The result of `work()` for `key`; a caller arriving while it runs waits for the same result
        (or exception) instead of starting it again."""
        fut = self._inflight.get(key)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if nobody else waits
        self._inflight[key] = fut
        try:
            result = await work()
        except BaseException as exc:
            fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            raise
        else:
            fut.set_result(result)
            return result
        finally:
            self._inflight.pop(key, None)
