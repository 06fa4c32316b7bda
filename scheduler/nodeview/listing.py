"""What the gRPC API and the web pages read, once: a task (now or as of an event),
and a page of events (of the whole log, or of one task).

The two callers phrase their answers differently (a status code, an HTML page
with its own wording for a time beyond the log), so the checks raise errors
that carry their figures: `BeyondTheLog` has `at` and `durable`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from apollo11.scheduler.errors import BucketError, InvalidArgumentError, NotFoundError
from apollo11.scheduler.historynote import history_note

if TYPE_CHECKING:
    from apollo11.scheduler.log import Event
    from apollo11.scheduler.nodeview.ports import NodeView
    from apollo11.scheduler.state import Store, TaskState


RANGE_READS = 3  # bucket reads of one page, at most, while retention moves the disk's start


class BeyondTheLog(InvalidArgumentError):
    """Time travel to an event the log does not (durably) hold yet."""

    def __init__(self, at: int, durable: int) -> None:
        super().__init__(f"as_of_event_id {at} is beyond the last durable event {durable}")
        self.at = at
        self.durable = durable


async def task_now(store: Store, task_id: str) -> TaskState:
    """The task as it is (memory, then archive; a damaged archive chunk is rebuilt
    from the log first), or NotFoundError."""
    task: TaskState | None = await store.lookup(task_id)
    if task is None:
        raise NotFoundError(store.state.not_found(task_id))
    return task


def blocked(node: NodeView, task_id: str) -> str:
    """Why the primary's engine cannot move the task on now; "" when nothing stands in
    its way, or this node is not the primary (a standby's engine decides nothing)."""
    engine = node.engine
    if engine is None or not engine.leading:
        return ""
    return engine.problems.get(task_id, "")


def waiting(node: NodeView, task_id: str) -> str:
    """Why the primary holds the task back under flow control
    (`queued: host=db1 is full (2/2), 14 ahead`); "" when it does not, or this node is
    not the primary."""
    engine = node.engine
    if engine is None or not engine.leading:
        return ""
    return engine.flow.why(task_id, engine.clock.now())


async def task_as_of(node: NodeView, task_id: str, at: int) -> TaskState:
    """The task as it was once event `at` was applied: BeyondTheLog past the last
    durable event, NotFoundError if it did not exist yet."""
    durable = node.durable_id()
    if at > durable:
        raise BeyondTheLog(at, durable)
    task = await node.task_at(task_id, at)
    if task is None:
        raise NotFoundError(node.not_found(task_id, at))
    return task


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[Event]
    next_id: int  # where the next page starts; 0: none after this one
    durable: int  # the last durable event when the page was read
    bucket_before: int = 0  # events of the page below this id were read from the bucket
    gone_before: int = 0  # events below this id are not in the page: neither disk nor bucket

    @property
    def note(self) -> str:
        """What the page says of where its history came from ("": this node's disk)."""
        return history_note(self.bucket_before, self.gone_before)


def events_page(store: Store, task: TaskState | None, start: int, to: int, limit: int) -> EventPage:
    """Up to `limit` durable events with ids in [start, to] (to 0: up to the last
    durable one), of `task`'s history or, without one, of the whole log."""
    log = store.log
    durable = log.durable_id
    end_at = to or durable
    if task is not None:
        events, nxt = store.task_events(task, start, end_at, limit)
        return EventPage(events, nxt, durable)
    start = max(start, log.first_id, 1)
    end = min(end_at, start + limit - 1)
    events = store.shown(list(log.read(start, end))) if start <= end else []
    return EventPage(events, end + 1 if end < end_at else 0, durable)


async def read_events(
    store: Store, task: TaskState | None, start: int, to: int, limit: int
) -> EventPage:
    """`events_page`, and the part of it this node's disk no longer holds (log
    retention) read from the bucket, off the loop (scheduler/bucket/history.py): the
    page says so. Without an archive the page holds what the disk has, and says what
    is gone. A corrupt object raises CorruptObjectError (naming its key), an
    unreachable bucket BucketError: never a page with a hole in it."""
    log = store.log
    durable = log.durable_id
    first = log.first_id
    end_at = to or durable
    older = store.older
    if task is not None:
        page = store.task_page(task, start, end_at, limit)
        if page.complete:
            return EventPage(page.events, page.next_id, durable)
        if older is None:
            return EventPage(page.events, page.next_id, durable, gone_before=first)
        if page.gone:
            got, missing = await asyncio.to_thread(older.read_ids, page.gone)
        else:
            assert page.gone_span is not None
            a, b = page.gone_span
            span = await asyncio.to_thread(older.read_range, a, b)
            got, missing = [e for e in span if e.task_id == task.task_id], ()
        events = store.shown(got) + page.events
        nxt = page.next_id
        if limit and len(events) > limit:  # a task without an index: its span was scanned
            events, nxt = events[:limit], events[limit].event_id
        gone = max(missing) + 1 if missing else 0
        return EventPage(events, nxt, durable, bucket_before=first, gone_before=gone)
    begin = max(start, 1)
    if begin >= first:
        return events_page(store, None, start, to, limit)
    if older is None:
        hot = events_page(store, None, start, to, limit)
        return EventPage(hot.events, hot.next_id, hot.durable, gone_before=first)
    for _ in range(RANGE_READS):
        # up to the disk's start, not `limit` ids on: retention may have cut the
        # bucket's front past `begin` (the read stops at `limit` events it holds)
        end = min(end_at, first - 1)
        cold = store.shown(await asyncio.to_thread(older.read_range, begin, end, limit))
        moved = store.log.first_id
        if moved == first:
            break
        # retention dropped a segment from the disk during the bucket read: the disk
        # part would start after the bucket part ended. Read again up to where it starts
        # now; a few tries, since retention may run again meanwhile (never unbounded).
        first = moved
    else:
        raise BucketError(
            f"retention moved this node's first event on disk during each of {RANGE_READS} "
            f"reads of the bucket: try again"
        )
    gone = 0
    if not cold or cold[0].event_id != begin:  # the bucket starts later than asked
        gone = cold[0].event_id if cold else first
    if len(cold) < limit:
        rest = events_page(store, None, first, to, limit - len(cold))
        return EventPage(cold + rest.events, rest.next_id, durable, first, gone)
    after = cold[-1].event_id + 1
    return EventPage(cold, after if after <= end_at else 0, durable, first, gone)
