"""The testing kit's clock: time that moves only when the test says so.

A `FakeClock` (scheduler/clock.py) jumps ahead whenever anything sleeps on it, so
a retry's backoff ends at once; but every armed timer then fires at once too (a
three-day wait times out while the test still means to send its event). Here a
sleep lasts until the clock has moved past its end, and the clock moves by
`advance` or `skip_to` alone. The environment skips it to `next_due()` when
every task waits (scheduler/testing/environment.py).

What sleeps on the engine's clock: its wake-ups (engine/timers.py: one sleeper
per `Timers`, in an asyncio task named "apollo11-timers"), and the work in
flight (a durable main's retry backoff between `ctx.step` tries, a
compensation's delay). `sleepers_at_work()` counts the latter, so that the
environment can tell "every step in flight sleeps on the clock" from "a step is
working".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from apollo11.scheduler.clock import Clock

TIMERS_TASK = "apollo11-timers"  # engine/timers.py names its sleeper so
START = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC, as FakeClock starts


@dataclass(eq=False, slots=True)  # a sleep is itself: hashed by identity
class _Sleeper:
    until: float
    wakes: asyncio.Future[None]
    timers: bool  # the engine's wake-ups' sleeper, not a step's


class VirtualClock(Clock):
    """Seconds since the epoch that move by `advance` and `skip_to` only."""

    def __init__(self, start: float = START) -> None:
        self._t = float(start)
        self._sleepers: set[_Sleeper] = set()

    def now(self) -> float:
        return self._t

    def now_ms(self) -> int:
        return int(self._t * 1000)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        me = _Sleeper(
            self._t + seconds,
            loop.create_future(),
            task is not None and task.get_name() == TIMERS_TASK,
        )
        self._sleepers.add(me)
        try:
            await me.wakes
        finally:
            self._sleepers.discard(me)

    def next_due(self) -> float | None:
        """When the earliest sleep ends (None: nothing sleeps on this clock)."""
        pending = [s.until for s in self._sleepers if not s.wakes.done()]
        return min(pending) if pending else None

    def sleepers_at_work(self) -> int:
        """How many sleeps are not the engine's wake-ups: steps in flight that wait."""
        return sum(1 for s in self._sleepers if not s.timers and not s.wakes.done())

    def advance(self, seconds: float) -> None:
        """Move on by `seconds` (not backwards), waking every sleep that ends by then."""
        if seconds < 0:
            raise ValueError(f"time only moves forward: advance({seconds}) would go back")
        self.skip_to(self._t + seconds)

    def skip_to(self, t: float) -> None:
        """Move to `t` if it is later, waking every sleep that ends by then."""
        self._t = max(self._t, t)
        for s in self._sleepers:
            # float steps may leave `until` a hair past `t`: a sleeper that wakes early
            # sleeps the rest again (engine/timers.py recomputes its delay)
            if s.until <= self._t and not s.wakes.done():
                s.wakes.set_result(None)
