"""Bulk reads give way to the primary's dispatch.

An export reads tasks with their events (GetTasks) and lists them (ListTasks) on the
node's event loop, the loop that also takes a submission to its STARTED: a few turns,
with the log's fsync between two of them. A turn of the loop cannot be cut, and it has
no priorities: each turn of a dispatch that finds a bulk read's slice (a task read, a
page listed) ready waits for it, and an export always has one ready. So a bulk read
starts a slice only while no dispatch is under way (nothing appended and not yet
durable, nothing for the engine to decide or to start): a slice that begins while
the loop is quiet for dispatch delays a submission only before the node stamps it,
never between its TASK_SUBMITTED and its STARTED.

A primary that always has dispatch under way (a backlog) must not starve the read, so
a slice also goes once it has waited `slice · (1/SHARE − 1)` for dispatch (its last
slice's length), and at least MIN_WAIT_S: the bulk reads' share of a busy loop, PostgreSQL's
vacuum_cost_delay applied to time. The minimum covers a dispatch's own length (a
couple of milliseconds, its fsync included), or the wait would end in the middle of
the dispatch it waits for. Where dispatch is quiet, the reads go at full speed.

A standby serving an export gives way in the same way to its share of the primary's
commits: the records it was sent and has not yet made durable and acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from apollo11.scheduler.nodeview.ports import NodeView

SHARE = 0.1  # of a loop that dispatch keeps busy, what bulk reads may still take
MIN_WAIT_S = 0.005
POLL_S = 0.001  # how soon a waiting read looks again whether dispatch is over
FIRST_SLICE_S = 0.001  # the slice assumed before one is measured


def wait_s(dispatching: bool, waited_s: float, slice_s: float) -> float:
    """How much longer a bulk read waits before its next slice (0: go now), having
    waited `waited_s` for dispatch already; its last slice took `slice_s`."""
    if not dispatching:
        return 0.0
    owed = max(slice_s * (1 / SHARE - 1), MIN_WAIT_S)
    return max(0.0, owed - waited_s)


def dispatching(node: NodeView) -> bool:
    """Is this node the primary, with a submission or a step on its way to being
    started? Or a standby holding records it was sent and has not yet made durable:
    its primary waits for that acknowledgement (with two nodes, every commit does),
    and the acknowledgement waits for the loop once the fsync is done."""
    engine = node.engine
    if engine is not None and engine.leading:
        return engine.dispatching()
    store = node.store
    return store is not None and store.log.writing


class GiveWay:
    """Paces the slices of bulk reads: `async with pace.slice():` around each one.

    One per kind of read on a node (a task read, a page listed): its slices are alike,
    and the last one's length says what the next one will cost."""

    def __init__(
        self,
        busy: Callable[[], bool],
        *,
        now: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        # The loop's own time, not the node's Clock: a test's clock that moves only
        # when told to would hold every read of its node still.
        self._busy = busy
        self._now = now
        self._sleep = sleep
        self.slice_s = FIRST_SLICE_S
        self.waits = 0  # slices that waited for dispatch (tests, and a curious reader)

    @contextlib.asynccontextmanager
    async def slice(self) -> AsyncIterator[None]:
        start = now = self._now()
        waited = False
        while left := wait_s(self._busy(), now - start, self.slice_s):
            await self._sleep(min(left, POLL_S))
            now = self._now()
            waited = True
        self.waits += waited
        try:
            yield
        finally:
            self.slice_s = self._now() - now
