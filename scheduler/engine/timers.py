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

A wake-up armed with a window (a retry's backoff: engine.py) is coalesced: the
sleeper wakes for it at the end of the window of the clock holding its time
(`window_end`), never before its time, so the retries due in one window wake
together, one wake-up for them all; and whenever the sleeper wakes or the engine
takes what is due (`take_due`, at each of its passes), every wake-up whose time
has come goes along, so a retry due between the clean tasks' passes starts in
the next one instead of a pass of its own. Only the wake-up moves: what is due
when is the log's (retry.py), so a standby and a replay decide the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Iterable

from apollo11.scheduler.clock import Clock


def window_end(at: float, window_s: float) -> float:
    """When a wake-up due at `at` fires with a window of `window_s` (0: at `at`): the
    end of the window of the clock holding `at`, so that every wake-up due in it
    fires at the same instant; never before `at`, at most `window_s` after."""
    if window_s <= 0:
        return at
    return max(at, math.ceil(at / window_s) * window_s)


class Timers:
    """Wake-ups on `clock`; `fire(keys)` is called with every key that came due."""

    def __init__(self, clock: Clock, fire: Callable[[list[Hashable]], None]) -> None:
        self._clock = clock
        self._fire = fire
        self._due: dict[Hashable, float] = {}  # key -> its time (what the heap must match)
        # (when it fires, its time, order, key): by when it fires, and within a window
        # by its time, which is the order of their times too (window_end is monotonic)
        self._heap: list[tuple[float, float, int, Hashable]] = []
        # the widest window armed: a wake-up due by now fires by now + this at the latest
        self._slack = 0.0
        self._order = itertools.count()  # ties, without comparing keys
        self._sleeper: asyncio.Task[None] | None = None
        self._sleeping_until: float | None = None
        self.wakes = 0  # times the sleeper fired (the bench reads it)

    def __contains__(self, key: object) -> bool:
        return key in self._due

    def __len__(self) -> int:
        return len(self._due)

    def due(self, key: Hashable) -> float | None:
        return self._due.get(key)

    def arm(self, key: Hashable, at: float, *, window_s: float = 0.0) -> None:
        """Fire `key` at `at` (the clock's seconds), or earlier if it is armed earlier;
        with `window_s`, at the end of its window or with any wake-up or `take_due`
        after `at` (see the module's note)."""
        known = self._due.get(key)
        if known is not None and known <= at:
            return
        self._due[key] = at
        wake = window_end(at, window_s)
        if window_s > self._slack:
            self._slack = window_s
        heapq.heappush(self._heap, (wake, at, next(self._order), key))
        if self._sleeper is None:
            self._start()
        elif self._sleeping_until is not None and wake < self._sleeping_until:
            self._sleeper.cancel()  # it sleeps past the new earliest: start over
            self._start()

    def arm_many(self, items: Iterable[tuple[Hashable, float]]) -> None:
        for key, at in items:
            self.arm(key, at)

    def take_due(self, now: float) -> list[Hashable]:
        """Every key whose time has come by `now`, taken (not fired): a pass about to
        run decides them with what it decides anyway (engine.py)."""
        heap = self._heap
        if not heap or heap[0][0] > now + self._slack:
            return []
        return self._pop_due(now)

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
                wake, at, _, key = self._heap[0]
                if self._due.get(key) != at:
                    heapq.heappop(self._heap)  # replaced or fired: skip it
                    continue
                delay = wake - self._clock.now()
                if delay > 0:
                    self._sleeping_until = wake
                    await self._clock.sleep(delay)
                    self._sleeping_until = None
                    continue
                self.wakes += 1
                self._fire(self._pop_due(self._clock.now()))
        finally:
            if self._sleeper is me:
                self._sleeper = None
                self._sleeping_until = None

    def _pop_due(self, now: float) -> list[Hashable]:
        """The keys due by `now`: those that fire by now, and those of a window not
        over yet whose time has come (the rest of that window is put back)."""
        fired = []
        later = []
        heap, due = self._heap, self._due
        horizon = now + self._slack
        while heap and heap[0][0] <= horizon:
            entry = heapq.heappop(heap)
            key = entry[3]
            if due.get(key) != entry[1]:
                continue  # replaced or fired
            if entry[1] <= now:
                del due[key]
                fired.append(key)
            else:
                later.append(entry)
        for entry in later:
            heapq.heappush(heap, entry)
        return fired
