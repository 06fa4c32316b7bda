"""scheduler/nodeview/listing.py: the reads GetTask/GetEvents and the web pages share."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, NamedTuple

import pytest

from apollo11.scheduler.errors import BucketError, InvalidArgumentError, NotFoundError
from apollo11.scheduler.nodeview import listing
from apollo11.scheduler.state import State


class FakeLog:
    def __init__(self, first_id: int, durable_id: int) -> None:
        self.first_id = first_id
        self.durable_id = durable_id
        self.reads: list[tuple[int, int]] = []

    def read(self, start: int, end: int) -> Any:
        self.reads.append((start, end))
        return iter(range(start, end + 1))


def _store(first: int = 1, durable: int = 10, tasks: dict[str, Any] | None = None) -> Any:
    tasks = tasks or {}

    async def lookup(task_id: str) -> Any:
        return tasks.get(task_id)

    def task_events(task: Any, start: int, to: int, limit: int) -> Any:
        return [("of", task, start, to, limit)], 0

    def shown(events: list[Any]) -> list[Any]:  # nothing redacted here
        return events

    return SimpleNamespace(
        log=FakeLog(first, durable),
        lookup=lookup,
        task_events=task_events,
        shown=shown,
        state=State(),
    )


@pytest.mark.parametrize(
    ("start", "to", "limit", "events", "next_id"),
    [
        (0, 0, 4, [1, 2, 3, 4], 5),  # from the start of the log
        (8, 0, 4, [8, 9, 10], 0),  # the last page: nothing after it
        (3, 5, 10, [3, 4, 5], 0),  # up to `to`
        (3, 6, 2, [3, 4], 5),
        (11, 0, 4, [], 0),  # past the end: empty, not an error
    ],
)
def test_a_page_of_the_log(
    start: int, to: int, limit: int, events: list[int], next_id: int
) -> None:
    page = listing.events_page(_store(), None, start, to, limit)
    assert (page.events, page.next_id, page.durable) == (events, next_id, 10)


def test_a_page_starts_no_earlier_than_the_log_keeps() -> None:
    store = _store(first=6)
    page = listing.events_page(store, None, 2, 0, 3)
    assert page.events == [6, 7, 8] and page.next_id == 9


def test_a_page_of_one_task_is_the_stores_up_to_the_durable_end() -> None:
    page = listing.events_page(_store(), "T", 2, 0, 5)
    assert page.events == [("of", "T", 2, 10, 5)] and page.next_id == 0


async def test_task_now_or_not_found() -> None:
    store = _store(tasks={"t1": "T1"})
    assert await listing.task_now(store, "t1") == "T1"
    with pytest.raises(NotFoundError, match="no task 'zz'"):
        await listing.task_now(store, "zz")
    store.state.purged["t0"] = 7  # retention purged it (docs/retention.md)
    with pytest.raises(NotFoundError, match="'t0' was purged by retention \\(event 7\\)"):
        await listing.task_now(store, "t0")


async def test_as_of_beyond_the_log_carries_its_figures() -> None:
    async def task_at(task_id: str, at: int) -> Any:
        return f"T@{at}" if task_id == "t1" else None

    def not_found(task_id: str, as_of: int = 0) -> str:
        state = State()
        state.purged["t0"] = 9
        return state.not_found(task_id, as_of)

    node: Any = SimpleNamespace(durable_id=lambda: 10, task_at=task_at, not_found=not_found)
    assert await listing.task_as_of(node, "t1", 10) == "T@10"
    with pytest.raises(listing.BeyondTheLog) as e:
        await listing.task_as_of(node, "t1", 11)
    assert isinstance(e.value, InvalidArgumentError)
    assert (e.value.at, e.value.durable) == (11, 10)
    assert str(e.value) == "as_of_event_id 11 is beyond the last durable event 10"
    with pytest.raises(NotFoundError, match="no task 'zz' as of event 3"):
        await listing.task_as_of(node, "zz", 3)
    # purged since: its history went with it, and the answer says so
    with pytest.raises(NotFoundError, match="'t0' was purged by retention \\(event 9\\)"):
        await listing.task_as_of(node, "t0", 3)


class _Ev(NamedTuple):
    event_id: int


class _MovingLog(FakeLog):
    def read(self, start: int, end: int) -> Any:
        self.reads.append((start, end))
        return iter(_Ev(i) for i in range(max(start, self.first_id), end + 1))


class _Older:
    """The bucket, holding events 1..: each range read lets retention move the disk's
    first event by `step` (0: never), as a sweep running beside the read would."""

    def __init__(self, log: _MovingLog, step: int, held: int = 1) -> None:
        self.log = log
        self.step = step
        self.held = held  # the bucket's first event: retention dropped those before it
        self.reads: list[tuple[int, int]] = []

    def read_range(self, first: int, last: int, limit: int = 0) -> list[_Ev]:
        self.reads.append((first, last))
        assert len(self.reads) < 50, "unbounded: read again for every move"
        self.log.first_id += self.step
        return [_Ev(i) for i in range(max(first, self.held), last + 1)][: limit or None]


def _moving(first: int, durable: int, step: int) -> tuple[Any, _Older]:
    store = _store(first, durable)
    store.log = _MovingLog(first, durable)
    store.older = _Older(store.log, step)
    return store, store.older


async def test_a_range_read_while_retention_moves_the_disk_has_no_hole() -> None:
    store, older = _moving(first=6, durable=30, step=0)
    older.step = 3  # the first read's: the disk starts at 9 once it is back

    def once(first: int, last: int, limit: int = 0) -> list[_Ev]:
        got = _Older.read_range(older, first, last, limit)
        older.step = 0
        return got

    older.read_range = once  # type: ignore[method-assign]
    page = await listing.read_events(store, None, 1, 0, 20)
    assert [e.event_id for e in page.events] == list(range(1, 21))
    assert older.reads == [(1, 5), (1, 8)]
    assert page.bucket_before == 9


async def test_a_page_from_before_the_bucket_starts_where_the_bucket_does() -> None:
    # failed first: the bucket was read for ids 1..5 only, held none of them, and the
    # page jumped to the disk's 20, saying 10..19 were gone (the bucket holds them)
    store, older = _moving(first=20, durable=30, step=0)
    older.held = 10  # retention cut the bucket's front less far than the disk's
    page = await listing.read_events(store, None, 1, 0, 5)
    assert [e.event_id for e in page.events] == [10, 11, 12, 13, 14]
    assert (page.gone_before, page.bucket_before, page.next_id) == (10, 20, 15)
    # and past the bucket's end, the disk carries on
    page = await listing.read_events(store, None, 1, 0, 14)
    assert [e.event_id for e in page.events] == list(range(10, 24))


async def test_a_range_read_gives_up_after_a_few_moves_of_the_disk() -> None:
    # failed first: read_events called itself for every move, without end
    store, older = _moving(first=6, durable=10_000, step=2)
    with pytest.raises(BucketError, match="retention moved this node's first event"):
        await listing.read_events(store, None, 1, 0, 20)
    assert len(older.reads) == listing.RANGE_READS
