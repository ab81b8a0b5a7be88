"""Work a request alone asked for stops when its client goes away (a disconnect cancels it; a sandbox or solver
process running it is killed), instead of running on for nobody."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
POLL_S = 0.25
Gone = Callable[[], Awaitable[bool]]  # e.g. starlette's Request.is_disconnected


async def unless_gone(gone: Gone, work: Coroutine[Any, Any, T]) -> T:
    """`work`'s result; `work` is cancelled and ClientGone raised if `gone()` says the client left first (the API
    answers it with an empty 499 nobody reads)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_S)
            if done:
                return task.result()
            if await gone():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()


class ClientGone(Exception):
    """The client disconnected; nobody reads the answer."""
