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
        await asyncio.sleep(seconds)


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
