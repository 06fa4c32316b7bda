"""An export's reads (GetTasks, ListTasks) give way to the primary's dispatch: no task
is read, no page listed, while a submission is on its way to its STARTED (the
dispatch delay an export added, docs/benchmarks.md "Export"); and a primary that
dispatches all the time still answers them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from apollo11.scheduler.api.limits import Admission, WatchSlots
from apollo11.scheduler.api.server import ROWS_A_TURN, SchedulerService, Watchers
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.errors import NotLeaderError
from apollo11.scheduler.state import TaskState
from apollo11.scheduler.workflow import Idempotent, StepContext, Workflow
from apollo11.v1 import scheduler_pb2 as pb
from tests.scheduler.test_engine import Rig, make_rig


class Dispatch:
    """The primary's engine as the API reads it: a dispatch under way for the first
    `polls` looks, over at the next."""

    def __init__(self, polls: int) -> None:
        self.polls = polls
        self.under_way = True
        self.leading = True
        self.problems: dict[str, str] = {}
        self.clock = FakeClock()
        self.flow = SimpleNamespace(why=lambda task_id, now: "")

    def dispatching(self) -> bool:
        self.under_way = self.polls > 0  # what the last look found
        self.polls -= 1
        return self.under_way


def echo() -> Workflow:
    wf = Workflow("echo")

    async def say(ctx: StepContext) -> dict[str, Any]:
        return {"said": ctx.input}

    wf.step(name="say", idempotency=Idempotent())(say)
    return wf


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[tuple[Rig, list[str]]]:
    r = await make_rig(tmp_path, FakeClock(), echo())
    ids = [await r.run("echo", {"n": i}) for i in range(3)]
    yield r, ids
    await r.engine.stop()
    await r.store.close()


def service(r: Rig, engine: Any) -> SchedulerService:
    node = SimpleNamespace(
        store=r.store,
        engine=engine,
        settings=SimpleNamespace(node_id="n1", json_max_depth=64),
        not_leader=lambda: NotLeaderError("standby"),
    )
    admission = Admission(10, 10, lambda: 0)
    return SchedulerService(node, Watchers(), WatchSlots(10), admission, FakeClock())  # type: ignore[arg-type]


async def test_no_task_is_read_while_the_primary_dispatches(rig: tuple[Rig, list[str]]) -> None:
    r, ids = rig
    # over at the second look, whatever the time: before a read has waited its share
    engine = Dispatch(polls=1)
    s = service(r, engine)
    seen: list[bool] = []
    lookup = r.store.lookup

    async def watched(task_id: str) -> TaskState | None:
        seen.append(engine.under_way)
        return await lookup(task_id)

    r.store.lookup = watched  # type: ignore[method-assign]
    got = await s.GetTasks(pb.GetTasksRequest(task_ids=ids), SimpleNamespace())  # type: ignore[arg-type]
    assert [t.task_id for t in got.tasks] == ids and all(t.found for t in got.tasks)
    assert seen == [False, False, False]  # each read found the dispatch over


async def test_no_page_is_listed_while_the_primary_dispatches(
    rig: tuple[Rig, list[str]],
) -> None:
    r, ids = rig
    engine = Dispatch(polls=1)
    s = service(r, engine)
    seen: list[bool] = []
    names = s._names

    def watched(*a: Any) -> Any:  # the page's names, read once it is listed
        seen.append(engine.under_way)
        return names.of(*a)

    s._names = SimpleNamespace(of=watched)  # type: ignore[assignment]
    got = await s.ListTasks(pb.ListTasksRequest(page_size=10), SimpleNamespace())  # type: ignore[arg-type]
    assert sorted(t.task_id for t in got.tasks) == sorted(ids)
    assert seen == [False]


async def test_a_primary_always_dispatching_still_answers(rig: tuple[Rig, list[str]]) -> None:
    r, ids = rig
    s = service(r, Dispatch(polls=10**9))
    async with asyncio.timeout(30):
        got = await s.GetTasks(pb.GetTasksRequest(task_ids=ids), SimpleNamespace())  # type: ignore[arg-type]
    assert [t.task_id for t in got.tasks] == ids and all(t.events for t in got.tasks)
    assert s._task_reads.waits == len(ids)  # each gave way, then read: its share


@pytest.fixture
async def pages(tmp_path: Path) -> AsyncIterator[tuple[Rig, list[str]]]:
    """Tasks enough for a page of three turns of rows."""
    r = await make_rig(tmp_path, FakeClock(), echo())
    ids = [await r.run("echo", {"n": i}) for i in range(2 * ROWS_A_TURN + 50)]
    yield r, ids
    await r.engine.stop()
    await r.store.close()


async def test_a_long_page_leaves_the_loop_turns_between_its_rows(
    pages: tuple[Rig, list[str]],
) -> None:
    """A page of 1,000 rows made into messages at once held the node's loop ~4 ms: what
    an export's listing added to a submission's p99. ROWS_A_TURN rows, then a turn."""
    r, ids = pages
    s = service(r, Dispatch(polls=0))
    ticks = 0
    listing = True

    async def ticker() -> None:  # other work on the loop: a submission's, say
        nonlocal ticks
        while listing:
            ticks += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    got = await s.ListTasks(pb.ListTasksRequest(page_size=len(ids)), SimpleNamespace())  # type: ignore[arg-type]
    turns = ticks - before
    listing = False
    await other
    assert [t.task_id for t in got.tasks] == sorted(ids, reverse=True)
    assert all(t.workflow == "echo" and t.name == "echo" for t in got.tasks)
    assert got.next_page_token == ""
    assert turns >= 2, f"{len(ids)} rows in {turns + 1} turns"


async def test_a_page_already_listed_is_answered_through_a_store_reopening(
    pages: tuple[Rig, list[str]],
) -> None:
    """Between two turns of a page's rows the node may reopen its store (a divergent
    tail cut): the rows listed are answered, named from the state they were listed in."""
    r, ids = pages
    s = service(r, Dispatch(polls=0))
    node: Any = s.node

    async def reopen() -> None:  # storekeeper.reopen: no store while files change
        await asyncio.sleep(0)
        node.store = None
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        node.store = r.store

    other = asyncio.create_task(reopen())
    await asyncio.sleep(0)
    got = await s.ListTasks(pb.ListTasksRequest(page_size=len(ids)), SimpleNamespace())  # type: ignore[arg-type]
    await other
    assert [t.task_id for t in got.tasks] == sorted(ids, reverse=True)


async def test_the_listing_is_paced_by_its_own_length_not_its_rows(
    pages: tuple[Rig, list[str]],
) -> None:
    """A pacer's next wait is its last slice's length times nine (giveway.py): the
    listing (it may scan 20,000 tasks) must not be timed by a cheap chunk of rows."""
    r, ids = pages
    s = service(r, Dispatch(polls=0))
    now = [0.0]
    s._pages_listed._now = lambda: now[0]  # type: ignore[method-assign]
    s._rows_made._now = lambda: now[0]  # type: ignore[method-assign]
    list_rows, add_rows = s._list_rows, s._add_rows

    def slow_list(*a: Any) -> Any:
        now[0] += 0.040
        return list_rows(*a)

    def quick_add(*a: Any) -> Any:
        now[0] += 0.0005
        return add_rows(*a)

    s._list_rows, s._add_rows = slow_list, quick_add  # type: ignore[method-assign]
    await s.ListTasks(pb.ListTasksRequest(page_size=len(ids)), SimpleNamespace())  # type: ignore[arg-type]
    assert s._pages_listed.slice_s == pytest.approx(0.040)
    assert s._rows_made.slice_s == pytest.approx(0.0005)
