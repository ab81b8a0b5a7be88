"""Case 4 of issue 16 at its root: a call that overruns its hard limit kills its own process only; the calls in the
other processes finish with their results, and the killed slot serves the next call."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from tileplan.jobs.slots import ProcessSlots, SlotTimeout


def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_a_runaway_kills_only_its_own_process() -> None:
    async def main() -> None:
        slots = ProcessSlots(2, name="test")
        try:
            await slots.warm()
            runaway = asyncio.ensure_future(slots.run(nap, 60.0, timeout=1.0))
            neighbour = asyncio.ensure_future(slots.run(nap, 2.0, timeout=30.0))
            with pytest.raises(SlotTimeout):
                await runaway
            pid = await neighbour  # the other slot's call was not killed with it
            assert isinstance(pid, int) and slots.killed == 1
            again = await asyncio.gather(slots.run(nap, 0.0, timeout=30.0), slots.run(nap, 0.0, timeout=30.0))
            assert pid in again  # the neighbour's process lived on; the killed slot has a fresh one
        finally:
            slots.close()

    asyncio.run(main())


def test_cancelling_the_caller_kills_its_call() -> None:
    async def main() -> None:
        slots = ProcessSlots(1, name="test")
        try:
            first = await slots.run(nap, 0.0, timeout=30.0)
            call = asyncio.ensure_future(slots.run(nap, 60.0, timeout=120.0))
            await asyncio.sleep(1.0)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert slots.killed == 1
            assert await slots.run(nap, 0.0, timeout=30.0) != first  # a new process took the killed one's place
        finally:
            slots.close()

    asyncio.run(main())


def test_a_call_cancelled_while_queued_never_runs_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """A client that leaves while every slot is busy: its call is dropped from the queue (never run, no process
    killed) and the log says so, as it does for a running call (the API's disconnect test reads that line)."""
    async def main() -> None:
        slots = ProcessSlots(1, name="test")
        try:
            await slots.warm()
            busy = asyncio.ensure_future(slots.run(nap, 1.5, timeout=30.0))
            await asyncio.sleep(0.2)
            queued = asyncio.ensure_future(slots.run(nap, 60.0, timeout=120.0))
            await asyncio.sleep(0.3)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            await busy
            assert slots.calls == 1 and slots.killed == 0  # the queued call never ran
        finally:
            slots.close()

    with caplog.at_level("INFO", logger="tileplan.jobs"):
        asyncio.run(main())
    assert "event=slot_cancelled pool=test" in caplog.text and "stage=queued" in caplog.text


def test_single_flight_work_stops_only_when_nobody_waits() -> None:
    from tileplan.jobs.singleflight import SingleFlight

    async def main() -> None:
        flight: SingleFlight[str] = SingleFlight()
        ran: list[str] = []

        async def work() -> str:
            try:
                await asyncio.sleep(1.0)
                ran.append("done")
                return "result"
            except asyncio.CancelledError:
                ran.append("cancelled")
                raise

        # two callers; the first leaves: the second still gets the result
        first = asyncio.ensure_future(flight.run("k", work))
        second = asyncio.ensure_future(flight.run("k", work))
        await asyncio.sleep(0.1)
        first.cancel()
        assert await second == "result" and ran == ["done"]
        # one caller, who leaves: the work stops
        alone = asyncio.ensure_future(flight.run("k2", work))
        await asyncio.sleep(0.1)
        alone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await alone
        await asyncio.sleep(0.05)
        assert ran == ["done", "cancelled"]

    asyncio.run(main())
