"""FairQueue: the order in which waiting tasks get a slot. Priority first, with aging;
among equals, the fairness values take turns by weight; within a value, first in,
first out.

* An item's effective priority is `priority - floor(waited / aging_ms)`, at best 1: a
  priority-5 task that waited four agings ranks with priority 1, so a steady stream of
  urgent work delays the rest but never starves it.
* Among the items of the best effective priority, each fairness value (a tenant, say)
  gets `w / sum(w)` of the pops over a backlog (weights default 1.0): stride
  scheduling, where a value's *pass* advances by `STRIDE / w` each time it is served
  and the value with the lowest pass goes next. A value that arrives, or comes back
  after its queue ran dry, starts at the pass last served (never below what it
  already used up), so one item behind another value's 10,000 waits one round, not
  10,000 pops.
* Within a value, items go in the order of their `at_ms`, then of their push.

How it is kept: one *level* per effective priority (1 to 5); in each, one *lane* per
fairness value (a heap of its items by (at_ms, push order)) and a heap of the active
lanes by (pass, activation order). Aging moves an item to a better level when its
time comes (a heap of promotion times, each item promoted at most four times), so
that a pop looks at five levels and two heaps: O(log n) per push, pop and discard,
at 100,000 values as at 3. Passes are integers (a stride is `STRIDE / w` rounded),
so the order is exact, the same on every run, and `ahead` can compute it.

Time is passed in and never goes back: a `now_ms` below one already seen counts as
that one (an item promoted stays promoted). Nothing here reads a clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=Hashable)

AGING_MS = 60_000
# The pass a value of weight 1.0 advances by per pop: large enough that rounding
# STRIDE / w to an integer changes a share by a millionth at most, for w up to MAX_WEIGHT.
STRIDE = 1 << 20
MAX_WEIGHT = 1_000.0
MIN_WEIGHT = 0.001
PRIORITIES = range(1, 6)
DEFAULT_PRIORITY = 3


class _Entry:
    __slots__ = ("alive", "at_ms", "fair", "item", "level", "priority", "seq")

    def __init__(self, item: Any, priority: int, fair: str, at_ms: int, seq: int) -> None:
        self.item = item
        self.priority = priority
        self.fair = fair
        self.at_ms = at_ms
        self.seq = seq
        self.level = priority
        self.alive = True


class _Lane:
    """One fairness value's items at one level, and its place in the level's turns."""

    __slots__ = ("heap", "live", "order", "start")

    def __init__(self, start: int, order: int) -> None:
        # (at_ms, seq, entry); an entry discarded or promoted away stays until it is
        # the head (or the heap is compacted)
        self.heap: list[tuple[int, int, _Entry]] = []
        self.live = 0
        self.start = start  # the pass at which its head is served
        self.order = order  # ties between equal passes: the earlier activation first


class _Level:
    __slots__ = ("finish", "finish_cap", "heap", "lanes", "live", "number", "vtime")

    def __init__(self, number: int) -> None:
        self.number = number  # the effective priority its items have
        self.lanes: dict[str, _Lane] = {}
        # (start, order, fair) of the active lanes; an entry whose lane has since been
        # served, emptied or renewed is stale and skipped
        self.heap: list[tuple[int, int, str]] = []
        self.live = 0
        self.vtime = 0  # the pass served last
        # the passes of values whose lane ran dry, where they would start again (only
        # those above vtime matter: the rest start at vtime anyway)
        self.finish: dict[str, int] = {}
        # swept of the passes vtime has caught up with when it grows past this, which
        # then doubles: a sweep that frees nothing must not run again on the next pop
        self.finish_cap = 1024


def effective_priority(priority: int, at_ms: int, now_ms: int, aging_ms: int = AGING_MS) -> int:
    """`priority - floor(waited / aging_ms)`, at best 1."""
    return max(1, priority - max(0, now_ms - at_ms) // aging_ms)


class FairQueue(Generic[T]):
    """Waiting items, popped by effective priority, then weighted turns among fairness
    values, then first in, first out. Deterministic: the same pushes, pops and times
    give the same order on every node."""

    def __init__(self, *, aging_ms: int = AGING_MS) -> None:
        if aging_ms < 1:
            raise ValueError(f"aging_ms must be at least 1, got {aging_ms}")
        self._aging_ms = aging_ms
        self._levels = {p: _Level(p) for p in PRIORITIES}
        self._where: dict[T, _Entry] = {}
        self._promotions: list[tuple[int, int, int, _Entry]] = []  # (due, seq, level, entry)
        self._weights: dict[str, float] = {}
        self._strides: dict[str, int] = {}
        self._now = -(2**63)
        self._seq = 0
        self._order = 0

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, item: object) -> bool:
        return item in self._where

    def push(
        self, item: T, *, priority: int = DEFAULT_PRIORITY, fair: str = "", at_ms: int
    ) -> None:
        """Queue `item`, waiting since `at_ms` (aging counts from there: an item queued
        again keeps its first time). Raises ValueError if it is queued already."""
        if isinstance(priority, bool) or priority not in PRIORITIES:
            raise ValueError(f"priority must be 1 to 5 (1 first), got {priority!r}")
        if item in self._where:
            raise ValueError(f"{item!r} is queued already")
        self._seq += 1
        entry = _Entry(item, priority, fair, at_ms, self._seq)
        self._where[item] = entry
        self._place(entry, effective_priority(priority, at_ms, self._now, self._aging_ms))

    def pop(self, now_ms: int) -> T | None:
        """The next item at `now_ms`, taken out; None when empty."""
        self._advance(now_ms)
        for level in self._levels.values():
            if level.live:
                entry = self._serve(level)
                del self._where[entry.item]
                item: T = entry.item
                return item
        return None

    def discard(self, item: T) -> bool:
        """Take `item` out wherever it is; False when it was not queued."""
        entry = self._where.pop(item, None)
        if entry is None:
            return False
        entry.alive = False
        self._leave(entry)
        return True

    def ahead(self, item: T, now_ms: int) -> int:
        """How many items would be popped before `item` by pops at `now_ms` with nothing
        pushed in between (the "14 ahead" an operator sees). O(values at its level +
        items of its value). Raises KeyError when `item` is not queued."""
        self._advance(now_ms)
        entry = self._where[item]
        count = sum(self._levels[p].live for p in PRIORITIES if p < entry.level)
        level = self._levels[entry.level]
        mine = level.lanes[entry.fair]
        before = sum(
            1
            for at_ms, seq, other in mine.heap
            if other.alive
            and other.level == entry.level
            and (at_ms, seq) < (entry.at_ms, entry.seq)
        )
        # the item is served at this pass; every other lane's j-th item at start + j*stride
        served_at = mine.start + before * self._stride(entry.fair)
        count += before
        for fair, lane in level.lanes.items():
            if lane is mine or lane.start > served_at:
                continue
            stride = self._stride(fair)
            gap = served_at - lane.start
            sooner = -(-gap // stride)  # passes strictly below served_at
            if gap % stride == 0 and lane.order < mine.order:
                sooner += 1  # one on the same pass, activated earlier: served first
            count += min(lane.live, sooner)
        return count

    def oldest_ms(self) -> int | None:
        """The earliest `at_ms` among the items queued (since when the longest-waiting
        one has waited, for operators); None when empty. Reads only: O(values queued),
        as a lane's head is its oldest unless promoted or discarded away."""
        oldest: int | None = None
        for level in self._levels.values():
            if not level.live:
                continue
            for lane in level.lanes.values():
                at_ms, _, head = lane.heap[0]
                if not (head.alive and head.level == level.number):
                    at_ms = min(a for a, _, e in lane.heap if e.alive and e.level == level.number)
                if oldest is None or at_ms < oldest:
                    oldest = at_ms
        return oldest

    def set_weights(self, weights: Mapping[str, float]) -> None:
        """The fairness values' weights (absent: 1.0), replacing the ones set before. They
        shape the turns from the next pop on; passes already earned stay."""
        for fair, weight in weights.items():
            if not (isinstance(weight, int | float) and math.isfinite(weight)) or not (
                MIN_WEIGHT <= weight <= MAX_WEIGHT
            ):
                raise ValueError(
                    f"weight of {fair!r} must be from {MIN_WEIGHT} to {MAX_WEIGHT:g}, "
                    f"got {weight!r}"
                )
        self._weights = {fair: float(w) for fair, w in weights.items() if w != 1.0}
        self._strides = {fair: max(1, round(STRIDE / w)) for fair, w in self._weights.items()}

    def _stride(self, fair: str) -> int:
        return self._strides.get(fair, STRIDE)

    def _advance(self, now_ms: int) -> None:
        """Promote the items whose effective priority improved by `now_ms`."""
        if now_ms <= self._now:
            return
        self._now = now_ms
        promotions = self._promotions
        while promotions and promotions[0][0] <= now_ms:
            _, _, level, entry = heapq.heappop(promotions)
            if entry.alive and entry.level == level:
                self._leave(entry)
                self._place(
                    entry, effective_priority(entry.priority, entry.at_ms, now_ms, self._aging_ms)
                )

    def _place(self, entry: _Entry, at_level: int) -> None:
        entry.level = at_level
        level = self._levels[at_level]
        lane = level.lanes.get(entry.fair)
        if lane is None:
            # a value (re)joining the turns starts at the pass served last, or later
            # if it ran dry with turns in hand: never ahead of those already waiting
            start = max(level.finish.pop(entry.fair, level.vtime), level.vtime)
            self._order += 1
            lane = level.lanes[entry.fair] = _Lane(start, self._order)
            heapq.heappush(level.heap, (start, lane.order, entry.fair))
        heapq.heappush(lane.heap, (entry.at_ms, entry.seq, entry))
        lane.live += 1
        level.live += 1
        if at_level > 1:
            due = entry.at_ms + (entry.priority - at_level + 1) * self._aging_ms
            heapq.heappush(self._promotions, (due, entry.seq, at_level, entry))
            if len(self._promotions) > 2 * len(self._where) + 64:
                self._promotions = [
                    p for p in self._promotions if p[3].alive and p[3].level == p[2]
                ]
                heapq.heapify(self._promotions)

    def _leave(self, entry: _Entry) -> None:
        """`entry` no longer counts at its level (discarded, or about to move)."""
        level = self._levels[entry.level]
        lane = level.lanes[entry.fair]
        lane.live -= 1
        level.live -= 1
        if not lane.live:
            self._retire(level, entry.fair, lane)
        elif len(lane.heap) > 2 * lane.live + 16:
            lane.heap = [h for h in lane.heap if h[2].alive and h[2].level == entry.level]
            heapq.heapify(lane.heap)

    def _retire(self, level: _Level, fair: str, lane: _Lane) -> None:
        del level.lanes[fair]
        if not level.lanes:
            # nobody left to be fair to: the passes of the past no longer matter
            level.finish.clear()
            level.heap.clear()
            return
        if lane.start > level.vtime:
            level.finish[fair] = lane.start
            if len(level.finish) > level.finish_cap:
                level.finish = {f: s for f, s in level.finish.items() if s > level.vtime}
                level.finish_cap = max(1024, 2 * len(level.finish))
        if len(level.heap) > 2 * len(level.lanes) + 64:
            level.heap = [(ln.start, ln.order, f) for f, ln in level.lanes.items()]
            heapq.heapify(level.heap)

    def _serve(self, level: _Level) -> _Entry:
        """Take the head of the lane whose turn it is at `level` (which has items)."""
        while True:
            start, order, fair = level.heap[0]
            lane = level.lanes.get(fair)
            if lane is not None and lane.order == order and lane.start == start:
                break
            heapq.heappop(level.heap)
        while True:
            _, _, entry = lane.heap[0]
            heapq.heappop(lane.heap)
            if entry.alive and entry.level == level.number:
                break
        entry.alive = False
        level.vtime = lane.start
        lane.start += self._stride(fair)
        lane.live -= 1
        level.live -= 1
        if lane.live:
            heapq.heapreplace(level.heap, (lane.start, lane.order, fair))
        else:
            heapq.heappop(level.heap)
            self._retire(level, fair, lane)
        return entry
