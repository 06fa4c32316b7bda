"""The running attempts' timeouts: one heap of deadlines, one loop timer for the earliest.

Every running attempt has a timeout (600 s unless its step says otherwise), nearly
always cancelled long before it is due. As a `loop.call_later` each, they were
thousands of entries in the event loop's own heap, whose entries compare in Python
(`TimerHandle.__lt__`): every other timer pushed or popped there (a retry's wake-up,
a sleep) sifted through them, and a cancelled one left the heap by a pop or a purge
that sifted again. With 10 % of steps failing once that was ~35 comparisons a failure,
the largest single cost a failure added beyond its attempt (profiled:
docs/bench-history/retries.md, "Dec 7: the attempts' timeouts off the event loop's
heap").

Here a deadline is a tuple in a heap of our own (compared in C) and a dict entry;
cancelling one drops the dict entry, and the heap entry is dropped when it surfaces
(or in a sweep once most of the heap is dead). The loop holds one timer, armed for
the earliest deadline when none is armed or a deadline comes before it; it is left
armed when every deadline is cancelled (a step that returns without awaiting ends
its attempt before the next begins: its timeout alone, armed and cancelled, would
otherwise be a loop timer an attempt). When it fires it calls what is due and
arms itself for the next deadline, if any. A deadline fires when its `call_later`
would have: in the loop's pass that finds its time come (the loop's clock and its
resolution).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any

SWEEP_MIN = 128  # dead heap entries tolerated before a sweep may run (as asyncio's 100)


class Deadlines:
    """Callbacks due after a delay on the running loop, each cancellable by its id."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []  # (when, id), the loop's clock
        self._live: dict[int, tuple[Callable[..., None], tuple[Any, ...]]] = {}
        self._ids = itertools.count()
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the one _handle is on
        self._armed_at = 0.0  # when _handle fires (meaningless while it is None)

    def __len__(self) -> int:
        return len(self._live)

    def add(self, delay_s: float, fn: Callable[..., None], *args: Any) -> int:
        """Call `fn(*args)` once `delay_s` seconds have passed on the running loop,
        unless `cancel`led first: its id."""
        loop = asyncio.get_running_loop()
        when = loop.time() + delay_s
        n = next(self._ids)
        self._live[n] = (fn, args)
        heapq.heappush(self._heap, (when, n))
        if self._handle is None or when < self._armed_at or loop is not self._loop:
            self._arm(loop, when)
        return n

    def cancel(self, n: int) -> None:
        """Never call deadline `n`'s callback (a no-op once it was called)."""
        live = self._live
        if live.pop(n, None) is None:
            return
        heap = self._heap
        if not live:
            # The loop's timer stays (it fires once, finds nothing, and is not armed
            # again): a step that returns without awaiting (a no-op, a cached answer)
            # ends its attempt before anything else runs, and would otherwise arm and
            # cancel a loop timer every time, which is what this class saves.
            heap.clear()
            return
        # attempts mostly end in the order they began: the dead surface at the top
        while heap and heap[0][1] not in live:
            heapq.heappop(heap)
        if len(heap) > SWEEP_MIN and len(heap) > 2 * len(live):
            heap[:] = [e for e in heap if e[1] in live]
            heapq.heapify(heap)

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_at, self._loop = when, loop
        self._handle = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._handle = None
        loop = asyncio.get_running_loop()
        # what the loop itself counts as due in this pass (BaseEventLoop._run_once)
        horizon = loop.time() + getattr(loop, "_clock_resolution", 0.0)
        heap, live = self._heap, self._live
        while heap:
            when, n = heap[0]
            if n not in live:
                heapq.heappop(heap)
                continue
            if when > horizon:
                self._arm(loop, when)
                return
            heapq.heappop(heap)
            fn, args = live.pop(n)
            try:
                fn(*args)
            except Exception as e:  # as the loop treats a timer's callback that raised
                loop.call_exception_handler(
                    {"message": f"deadline callback {fn!r} failed", "exception": e}
                )
