"""GetTasks (`Client.tasks_with_events`), what `apollo11 export` reads: tasks with their
events in one call, against a real node process; the export's lines from it are the
ones a task at a time gives; events that do not fit are read on with GetEvents."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from apollo11.scheduler.cli import _export
from apollo11.scheduler.client import (
    ApiError,
    Client,
    EventsPage,
    InvalidArgumentError,
    TaskRead,
)
from tests.nodes import NodeProc, start_node

WORKFLOWS = "tests.api.exportflows"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    proc = start_node(tmp_path_factory.mktemp("get-tasks") / "n1", "--workflows", WORKFLOWS)
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def finished(node: NodeProc) -> list[str]:
    async def go() -> list[str]:
        async with Client(node.address) as c:
            ids = [(await c.submit("echo", {"text": f"hello {i}"})).task_id for i in range(5)]
            for task_id in ids:
                await c.wait(task_id, timeout=120)
            return ids

    return asyncio.run(go())


def test_tasks_come_in_the_order_asked_with_their_events(
    node: NodeProc, finished: list[str]
) -> None:
    async def go() -> None:
        async with Client(node.address) as c:
            asked = [finished[2], "01UNKNOWNTASK", finished[0]]
            got = await c.tasks_with_events(asked)
            assert [r.task_id for r in got] == asked
            assert got[1].task is None and got[1].page.events == []
            for read in (got[0], got[2]):
                assert read.task is not None
                assert read.task == await c.task(read.task_id)
                alone = await c.events_page(task_id=read.task_id, limit=1000)
                assert read.page.events == alone.events
                assert [e.event_type for e in read.page.events] == [
                    "TASK_SUBMITTED", "STEP_STARTED", "STEP_SUCCEEDED",
                ]  # fmt: skip
                assert read.page.next_id == 0

    asyncio.run(go())


def test_an_export_reads_the_same_lines_either_way(node: NodeProc, finished: list[str]) -> None:
    async def go() -> None:
        async with Client(node.address) as c:
            batched = await _export._lines(c, finished, 1000)
            one_by_one = [await _export._line(c, t, 1000) for t in finished]
            assert batched == one_by_one
            assert all(line is not None for line in batched)

    asyncio.run(go())


def test_too_many_or_empty_ids_are_refused_naming_the_field(node: NodeProc) -> None:
    async def go() -> None:
        async with Client(node.address) as c:
            with pytest.raises(InvalidArgumentError, match="task_ids has 257 ids, over the "
                               "limit of 256"):  # fmt: skip
                await c.tasks_with_events([f"t{i}" for i in range(257)])
            with pytest.raises(InvalidArgumentError, match=r"task_ids\[1\]"):
                await c.tasks_with_events(["t0", ""])

    asyncio.run(go())


class _Spilled:
    """A node whose GetTasks answer held the first of a task's events only."""

    def __init__(self, whole: TaskRead) -> None:
        self.whole = whole
        self.pages: list[int] = []

    async def tasks_with_events(self, task_ids: list[str]) -> list[TaskRead]:
        events = self.whole.page.events
        return [TaskRead(self.whole.task_id, self.whole.task, EventsPage(events[:1],
                         events[1].event_id))]  # fmt: skip

    async def events_page(self, *, task_id: str, from_id: int, to_id: int, limit: int) -> Any:
        self.pages.append(from_id)
        return EventsPage([e for e in self.whole.page.events if e.event_id >= from_id], 0)


def test_events_that_did_not_fit_are_read_on(
    node: NodeProc, finished: list[str], tmp_path: Path
) -> None:
    async def go() -> None:
        async with Client(node.address) as c:
            (whole,) = await c.tasks_with_events(finished[:1])
            spilled = _Spilled(whole)
            assert await _export._lines(spilled, finished[:1], 1000) == await _export._lines(
                c, finished[:1], 1000
            )
            assert spilled.pages == [whole.page.events[1].event_id]

    asyncio.run(go())


class _OlderNode(Client):
    """A node of a release before GetTasks: UNIMPLEMENTED."""

    async def tasks_with_events(self, task_ids: Any) -> list[TaskRead]:
        raise ApiError(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


def test_an_export_from_an_older_node_reads_a_task_at_a_time(
    node: NodeProc, finished: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def export(to: Path) -> bytes:
        with to.open("wb") as out:
            sink = _export._Sink(out, tmp_path / "refs", 1000)
            asyncio.run(_export._export(node.address, "echo", None, None, None, None, sink, 0))
        return to.read_bytes()

    batched = export(tmp_path / "one.jsonl")
    monkeypatch.setattr(_export, "client", _OlderNode)
    assert export(tmp_path / "two.jsonl") == batched
    assert batched.count(b"\n") == len(finished)
