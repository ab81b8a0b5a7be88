"""Work a request alone asked for stops when its client goes away (a disconnect cancels it; a sandbox or solver
process running it is killed), instead of running on for nobody."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import Request

T = TypeVar("T")
POLL_S = 0.25


async def until_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """`work`'s result; cancelled (and a 499-style empty answer nobody reads) if the client disconnects first."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_S)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
                raise ClientGone
    finally:
        if not task.done():
            task.cancel()


class ClientGone(Exception):
    """The client disconnected; nobody reads the answer."""
