"""What the gRPC API and the web pages read, once: a task (now or as of an event),
and a page of events (of the whole log, or of one task).

The two callers phrase their answers differently (a status code, an HTML page
with its own wording for a time beyond the log), so the checks raise errors
that carry their figures: `BeyondTheLog` has `at` and `durable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from apollo11.scheduler.errors import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from apollo11.scheduler.log import Event
    from apollo11.scheduler.nodeview.ports import NodeView
    from apollo11.scheduler.state import Store, TaskState


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
