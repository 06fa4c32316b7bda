"""Time, injectable: the engine asks a Clock, so unit tests never sleep for real."""

from __future__ import annotations

import asyncio
import time


class Clock:
    """Wall-clock seconds and sleeping, on the real clock."""

    def now(self) -> float:
        return time.time()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        # asyncio's sleep comes late by a share of its length here (8 ms of 2 s, 0.4 %:
        # the poller's timeout, docs/benchmarks.md): wake a little early, then sleep
        # what is left, so a timer due at T fires at T, not T + 0.4 % of its wait.
        if seconds <= 0.05:
            await asyncio.sleep(seconds)
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        await asyncio.sleep(seconds * 0.99 - 0.002)
        await asyncio.sleep(max(0.0, end - loop.time()))


class FakeClock(Clock):
    """A clock that only moves when told to, or when something sleeps on it.

    `sleep(s)` records the request, advances time by `s` and yields once, so
    a retry loop with exponential backoff completes instantly and the test
    can assert on `sleeps`.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.t = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def now_ms(self) -> int:
        return int(self.t * 1000)

    def advance(self, seconds: float) -> None:
        self.t += seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += max(0.0, seconds)
        await asyncio.sleep(0)
