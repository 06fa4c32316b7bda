"""The engine's wake-ups: one heap keyed by due time, one sleeper for all of them.

A task that waits (a retry's backoff, a durable sleep, an event wait's
deadline) is decided again at a time; those times are not state of their own
(the log holds them: a new primary re-arms them from `decide`'s `WakeAt`).
An asyncio task per wake-up costs about a kilobyte and a loop entry each, so a
million sleeping tasks would cost a gigabyte of timers; here a wake-up is a
heap entry and a dict entry, and one coroutine sleeps until the earliest.
Every wake-up that has come due is fired in one batch (10,000 timers due in
the same second wake in one pass of the engine, not 10,000 turns of the loop).

A key (task, step) has one wake-up: arming it again keeps the earlier time
(a later one would be the same decision, come too late). Entries replaced or
fired are left in the heap and skipped when they surface.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable

from apollo11.scheduler.clock import Clock


class Timers:
    """Wake-ups on `clock`; `fire(keys)` is called with every key that came due."""

    def __init__(self, clock: Clock, fire: Callable[[list[Hashable]], None]) -> None:
        self._clock = clock
        self._fire = fire
        self._due: dict[Hashable, float] = {}  # key -> its time (what the heap must match)
        self._heap: list[tuple[float, int, Hashable]] = []
        self._order = itertools.count()  # ties, without comparing keys
        self._sleeper: asyncio.Task[None] | None = None
        self._sleeping_until: float | None = None

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def __len__(self) -> int:
        return len(self._due)

    def due(self, key: Hashable) -> float | None:
        return self._due.get(key)

    def arm(self, key: Hashable, at: float) -> None:
        """Fire `key` at `at` (the clock's seconds), or earlier if it is armed earlier."""
        known = self._due.get(key)
        if known is not None and known <= at:
            return
        self._due[key] = at
        heapq.heappush(self._heap, (at, next(self._order), key))
        if self._sleeper is None:
            self._start()
        elif self._sleeping_until is not None and at < self._sleeping_until:
            self._sleeper.cancel()  # it sleeps past the new earliest: start over
            self._start()

    def arm_many(self, items: Iterable[tuple[Hashable, float]]) -> None:
        for key, at in items:
            self.arm(key, at)

    async def stop(self) -> None:
        """Forget every wake-up (leadership lost: the next leader re-arms them)."""
        sleeper, self._sleeper = self._sleeper, None
        self._due.clear()
        self._heap.clear()
        self._sleeping_until = None
        if sleeper is not None:
            sleeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sleeper

    def _start(self) -> None:
        self._sleeping_until = None
        self._sleeper = asyncio.ensure_future(self._run())
        self._sleeper.set_name("apollo11-timers")

    async def _run(self) -> None:
        me = asyncio.current_task()
        try:
            while self._heap:
                at, _, key = self._heap[0]
                if self._due.get(key) != at:
                    heapq.heappop(self._heap)  # replaced or fired: skip it
                    continue
                delay = at - self._clock.now()
                if delay > 0:
                    self._sleeping_until = at
                    await self._clock.sleep(delay)
                    self._sleeping_until = None
                    continue
                self._fire(self._pop_due(self._clock.now()))
        finally:
            if self._sleeper is me:
                self._sleeper = None
                self._sleeping_until = None

    def _pop_due(self, now: float) -> list[Hashable]:
        fired = []
        heap, due = self._heap, self._due
        while heap and heap[0][0] <= now:
            at, _, key = heapq.heappop(heap)
            if due.get(key) == at:
                del due[key]
                fired.append(key)
        return fired
