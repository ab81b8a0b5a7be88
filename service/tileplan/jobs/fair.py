"""Fair shares of a few processes among owners: turns handed out round robin, a bound on each owner's.

An owner is whoever a request acts for (`tileplan.api.auth`: a token's fingerprint, or a client's address). A
flood of one owner's work waits in that owner's line; each time a place frees, the next owner in the rotation that
has work waiting and fewer than `per_owner` turns running, and the fewest of them, gets it. So another owner's one
layer waits for one turn to end, not for the flood (`bench/hostile.py`, the flood probe).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
from collections.abc import AsyncIterator

ANONYMOUS = "anonymous"  # work recorded before owners (resumed jobs and compiles)
# whom the request being served acts for (set for every API request, `tileplan.api.params.note_owner`): the owner
# of work that reaches a shared process far from its route (the sandbox, through descriptors and evaluations)
current_owner: contextvars.ContextVar[str | None] = contextvars.ContextVar("tileplan_owner", default=None)


class FairShare:
    def __init__(self, capacity: int, per_owner: int) -> None:
        """`capacity`: turns running at once in all; `per_owner`: at most this many of them one owner's."""
        self.capacity = capacity
        self.per_owner = per_owner
        self._lines: dict[str, collections.deque[asyncio.Future[None]]] = {}  # insertion order: the rotation
        self._running: collections.Counter[str] = collections.Counter()

    @property
    def running(self) -> int:
        return sum(self._running.values())

    @property
    def waiting(self) -> int:
        return sum(len(line) for line in self._lines.values())

    def running_for(self, owner: str) -> int:
        return self._running[owner]

    @contextlib.asynccontextmanager
    async def turn(self, owner: str | None) -> AsyncIterator[None]:
        """Wait for `owner`'s turn, hold it for the `with` block. A caller cancelled while waiting leaves its line."""
        who = owner or ANONYMOUS
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lines.setdefault(who, collections.deque()).append(fut)
        self._hand_out()
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted just as it was cancelled: give the turn back
                self._release(who)
            else:
                line = self._lines.get(who)
                if line is not None and fut in line:
                    line.remove(fut)
                    if not line:
                        del self._lines[who]
            raise
        try:
            yield
        finally:
            self._release(who)

    def _release(self, who: str) -> None:
        self._running[who] -= 1
        if self._running[who] <= 0:
            del self._running[who]
        self._hand_out()

    def _hand_out(self) -> None:
        while self.running < self.capacity:
            # the owner with the fewest turns running (a newcomer before a flood that holds every process), the
            # earliest in the rotation among equals
            eligible = [w for w in self._lines if self._running[w] < self.per_owner]
            if not eligible:
                return  # every owner waiting is at its bound
            who = min(eligible, key=lambda w: self._running[w])
            line = self._lines.pop(who)
            fut = line.popleft()
            if line:
                self._lines[who] = line  # to the end of the rotation
            if fut.done():
                continue  # its waiter was cancelled and has not run yet to leave the line: not a turn
            self._running[who] += 1
            fut.set_result(None)
