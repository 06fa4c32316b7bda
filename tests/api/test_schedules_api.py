"""Schedules over gRPC, on a node in process with a clock the test moves: the client's
verbs end to end (an every-second schedule fires, with a task per time; paused, its
times are skipped; a trigger fires once; deleted, it is gone), what a describe pages,
and every refusal with its status and a message naming the field."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from apollo11.scheduler.client import (
    AlreadyExistsError,
    Client,
    InvalidArgumentError,
    NotFoundError,
)
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.node import Node
from apollo11.scheduler.workflow import Idempotent, Registry, StepContext, Workflow

T0 = 1_774_746_000.0  # 2026-03-29T01:00:00Z, on the clock the node runs on


class Batch(BaseModel):
    size: int


tick = Workflow("tick", input=Batch)


@tick.step(idempotency=Idempotent())
async def count(ctx: StepContext) -> int:
    batch: Batch = ctx.input  # the workflow's input model: given as one
    return batch.size


class ManualClock(FakeClock):
    """Time moves only when the test says: a sleep lasts until it has moved far enough
    (a FakeClock's sleep jumps ahead, and a schedule's timer would fire every time at
    once)."""

    async def sleep(self, seconds: float) -> None:
        deadline = self.t + max(0.0, seconds)
        while self.t < deadline:
            await asyncio.sleep(0.002)


@dataclass
class Rig:
    node: Node
    clock: ManualClock
    client: Client


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    registry = Registry()
    registry.register(tick)
    clock = ManualClock(T0)
    settings = NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0")
    node = Node(settings, registry=registry, clock=clock)
    await node.start()
    try:
        async with Client(f"127.0.0.1:{node.port}", retries=0) as c:
            yield Rig(node, clock, c)
    finally:
        await node.stop()


async def _until(check: Callable[[], Any], what: str) -> None:
    async with asyncio.timeout(20):
        while not await check():
            await asyncio.sleep(0.01)


async def test_an_every_second_schedule_fires_pauses_triggers_and_is_deleted(rig: Rig) -> None:
    c = rig.client
    made = await c.create_schedule("tick-1s", "tick", {"size": 2}, every="1s", note="demo")
    assert (made.schedule_id, made.workflow, made.spec.every, made.paused) == (
        "tick-1s",
        "tick",
        "1s",
        False,
    )
    assert made.next[:2] == ("2026-03-29T01:00:01Z", "2026-03-29T01:00:02Z"), "after now"
    assert (made.by, made.source, made.note, made.input) == (
        "anonymous",
        "api",
        "demo",
        {"size": 2},
    )

    for second in (1, 2, 3):
        # a second at a time, each task finished before the next time: under the default
        # overlap (skip) a time that comes while the previous task runs is skipped
        rig.clock.advance(1)

        async def decided(n: int = second) -> bool:
            return (await c.describe_schedule("tick-1s")).schedule.occurrences >= n

        await _until(decided, f"time {second} decided")
        last = (await c.describe_schedule("tick-1s")).schedule.last
        assert last is not None and last.outcome == "fired" and last.task_id is not None
        await c.wait(last.task_id, timeout=20)
    d = await c.describe_schedule("tick-1s")
    fired = [o for o in d.occurrences if o.outcome == "fired"]
    assert [o.nominal_time for o in fired[:3]] == [
        "2026-03-29T01:00:01Z",
        "2026-03-29T01:00:02Z",
        "2026-03-29T01:00:03Z",
    ]
    for o in fired:
        assert o.task_id is not None
        task = await c.task(o.task_id)
        assert task.workflow == "tick" and task.input == {"size": 2}
    assert len({o.task_id for o in fired}) == len(fired), "a task per time"

    paused = await c.pause_schedule("tick-1s", note="maintenance")
    assert paused.paused and paused.note == "maintenance"
    rig.clock.advance(2)

    async def skipped() -> bool:
        # a paused schedule decides its times when it is unpaused: nothing fires meanwhile
        await c.unpause_schedule("tick-1s")
        d = await c.describe_schedule("tick-1s", newest_first=True, page_size=2)
        return all(o.outcome == "skipped" for o in d.occurrences)

    await _until(skipped, "the paused times recorded skipped")
    latest = (await c.describe_schedule("tick-1s", newest_first=True, page_size=1)).occurrences
    assert "paused" in latest[0].reason, latest

    task_id = await c.trigger_schedule("tick-1s")
    assert (await c.task(task_id)).workflow == "tick"

    listed = await c.list_schedules()
    assert [s.schedule_id for s in listed.schedules] == ["tick-1s"]
    assert listed.schedules[0].last is not None and len(listed.schedules[0].next) == 1

    await c.delete_schedule("tick-1s")
    with pytest.raises(NotFoundError, match="no schedule 'tick-1s'"):
        await c.describe_schedule("tick-1s")
    assert (await c.list_schedules()).schedules == ()
    assert (await c.task(fired[0].task_id or "")).task_id, "its tasks stay"


async def test_describe_pages_its_occurrences_both_ways(rig: Rig) -> None:
    c = rig.client
    await c.create_schedule("p", "tick", {"size": 1}, every="1s")
    rig.clock.advance(5)  # one fires, four are skipped: five occurrences either way

    async def five() -> bool:
        return (await c.describe_schedule("p")).schedule.occurrences >= 5

    await _until(five, "five occurrences")
    await c.pause_schedule("p")  # nothing more is decided while the pages are read
    every = (await c.describe_schedule("p", page_size=1000)).occurrences
    pages: list[str] = []
    token = ""
    while True:
        page = await c.describe_schedule("p", page_size=2, page_token=token)
        pages += [o.nominal_time for o in page.occurrences]
        token = page.next_page_token
        if not token:
            break
    assert pages == [o.nominal_time for o in every] and pages == sorted(pages)
    newest = await c.describe_schedule("p", page_size=2, newest_first=True)
    assert [o.nominal_time for o in newest.occurrences] == pages[::-1][:2]
    older = await c.describe_schedule(
        "p", page_size=2, newest_first=True, page_token=newest.next_page_token
    )
    assert [o.nominal_time for o in older.occurrences] == pages[::-1][2:4]
    assert len((await c.describe_schedule("p", next_count=7)).schedule.next) == 7


async def test_an_update_changes_what_it_gives(rig: Rig) -> None:
    c = rig.client
    await c.create_schedule(
        "u", "tick", {"size": 1}, cron="0 3 * * *", tz="Europe/Berlin", end="2027-01-01T00:00Z"
    )
    s = await c.update_schedule("u", jitter="5m", end="")
    assert (s.spec.cron, s.spec.tz, s.spec.jitter, s.spec.end) == (
        "0 3 * * *",
        "Europe/Berlin",
        "5m",
        None,
    )
    assert s.input == {"size": 1}, "no input given: kept"
    assert s.next[0] == "2026-03-30T01:00:00Z", "03:00 in Berlin, summer time"
    s = await c.update_schedule("u", every="1h", input={"size": 3})
    assert (s.spec.cron, s.spec.every, s.input) == (None, "1h", {"size": 3})
    with pytest.raises(InvalidArgumentError, match=r"^nothing to update"):
        await c.update_schedule("u")
    with pytest.raises(NotFoundError, match="no schedule 'nope'"):
        await c.update_schedule("nope", note="x")


async def test_refusals_name_the_field_and_why(rig: Rig) -> None:
    c = rig.client
    await c.create_schedule("dup", "tick", {"size": 1}, every="1h")
    bounds = {"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}
    cases: list[tuple[str, dict[str, Any]]] = [
        (r'^cron "61 \* \* \* \*": minute 61 is outside 0-59', {"cron": "61 * * * *"}),
        (r'^tz "Mars/Olympus": unknown time zone', {"cron": "@daily", "tz": "Mars/Olympus"}),
        (r"^exactly one of cron, every or at is needed \(got none\)", {}),
        (r'^every "0s": must be at least 1s', {"every": "0s"}),
        (r"^end before start", {"every": "1h", **bounds}),
        (r"^spec\.cron is 300 characters, over the limit of 256", {"cron": "*" * 300}),
    ]
    for message, spec in cases:
        with pytest.raises(InvalidArgumentError, match=message):
            await c.create_schedule("s", "tick", {"size": 1}, **spec)
    with pytest.raises(AlreadyExistsError, match="schedule 'dup' already exists"):
        await c.create_schedule("dup", "tick", {"size": 1}, every="1h")
    with pytest.raises(InvalidArgumentError, match="1 to 128 of"):
        await c.create_schedule("a b", "tick", {"size": 1}, every="1h")
    with pytest.raises(InvalidArgumentError, match=r"^schedule_id is required"):
        await c.create_schedule("", "tick", {"size": 1}, every="1h")
    with pytest.raises(NotFoundError, match="unknown workflow 'nope'"):
        await c.create_schedule("s", "nope", every="1h")
    with pytest.raises(InvalidArgumentError, match="size"):
        await c.create_schedule("s", "tick", {"size": "many"}, every="1h")  # refused at create
    with pytest.raises(InvalidArgumentError, match=r"^workflow 'shell' cannot be scheduled"):
        await c.create_schedule("s", "shell", every="1h")
    with pytest.raises(
        InvalidArgumentError, match=r"^note is 2000 characters, over the limit of 1024"
    ):
        await c.create_schedule("s", "tick", {"size": 1}, every="1h", note="n" * 2000)
    with pytest.raises(InvalidArgumentError, match=r"^page_size is 5000, over the limit of 1000"):
        await c.list_schedules(page_size=5000)
    with pytest.raises(InvalidArgumentError, match=r"^page_token is not one this server issued"):
        await c.describe_schedule("dup", page_token="at:99")
    with pytest.raises(InvalidArgumentError, match=r"^next_count is 500, over the limit of 100"):
        await c.describe_schedule("dup", next_count=500)
    for verb in (c.pause_schedule, c.unpause_schedule, c.trigger_schedule, c.delete_schedule):
        with pytest.raises(NotFoundError, match="no schedule 'nope'"):
            await verb("nope")
    assert [s.schedule_id for s in (await c.list_schedules()).schedules] == ["dup"]


async def test_a_backfill_fires_past_times_once_and_tasks_list_by_schedule(rig: Rig) -> None:
    c = rig.client
    # an hourly schedule whose own times are over: only the backfill fires
    await c.create_schedule(
        "hourly", "tick", {"size": 1}, cron="0 * * * *", end="2026-03-29T00:00Z"
    )
    started = await c.backfill_schedule("hourly", "2026-03-28T19:30:00Z", "2026-03-29T00:30+00:00")
    assert started.times == 5, started  # 20:00 to 00:00

    async def fired(n: int) -> bool:
        return len((await c.tasks(schedule="hourly")).tasks) >= n

    await _until(lambda: fired(5), "the backfill's five tasks")
    page = await c.tasks(schedule="hourly", page_size=2)
    assert len(page.tasks) == 2 and page.next_page_token, "pages of two"
    rest = await c.tasks(schedule="hourly", page_token=page.next_page_token)
    ids = [t.task_id for t in (*page.tasks, *rest.tasks)]
    assert len(set(ids)) == 5 and ids == sorted(ids, reverse=True), "newest first, each once"
    nominal = sorted(
        [(await c.task(i)).schedule or {} for i in ids], key=lambda s: s["nominal_time"]
    )
    assert [s["nominal_time"] for s in nominal] == [
        "2026-03-28T20:00:00Z",
        "2026-03-28T21:00:00Z",
        "2026-03-28T22:00:00Z",
        "2026-03-28T23:00:00Z",
        "2026-03-29T00:00:00Z",
    ]
    assert {(s["id"], s["triggered"]) for s in nominal} == {("hourly", False)}

    async def ended() -> bool:
        return not (await c.describe_schedule("hourly")).schedule.backfills

    await _until(ended, "the backfill ended")
    again = await c.backfill_schedule("hourly", "2026-03-28T19:30:00Z", "2026-03-29T00:30Z")
    assert again.backfill_id != started.backfill_id
    await _until(ended, "the second backfill ended")
    assert len((await c.tasks(schedule="hourly")).tasks) == 5, "the same range twice: none new"
    assert len((await c.tasks(schedule="hourly", workflow="other")).tasks) == 0
    other = await c.submit("tick", {"size": 9})
    assert other.task_id not in {t.task_id for t in (await c.tasks(schedule="hourly")).tasks}
    assert (await c.task(other.task_id)).schedule is None

    refusals: list[tuple[type[Exception], str, tuple[str, str, str], str]] = [
        (
            InvalidArgumentError,
            r'^from_time "yesterday": not an ISO-8601',
            ("hourly", "yesterday", "2026-03-29T00:00Z"),
            "allow-all",
        ),
        (
            InvalidArgumentError,
            r'^to_time "2026-03-29T00:00": needs a UTC offset',
            ("hourly", "2026-03-28T00:00Z", "2026-03-29T00:00"),
            "allow-all",
        ),
        (
            InvalidArgumentError,
            r"^backfill: end .* is before start",
            ("hourly", "2026-03-29T00:00Z", "2026-03-28T00:00Z"),
            "allow-all",
        ),
        (
            InvalidArgumentError,
            r"^backfill: end .* is in the future",
            ("hourly", "2026-03-28T00:00Z", "2026-03-30T00:00Z"),
            "allow-all",
        ),
        (
            InvalidArgumentError,
            r"^backfill: overlap 'skip': one of allow-all, buffer-all",
            ("hourly", "2026-03-28T00:00Z", "2026-03-28T10:00Z"),
            "skip",
        ),
        (
            NotFoundError,
            r"no schedule 'nope'",
            ("nope", "2026-03-28T00:00Z", "2026-03-28T10:00Z"),
            "allow-all",
        ),
    ]
    for kind, message, (sid, start, end), overlap in refusals:
        with pytest.raises(kind, match=message):
            await c.backfill_schedule(sid, start, end, overlap=overlap)
    with pytest.raises(NotFoundError, match=r"no schedule 'nope' \(apollo11 schedule list\)"):
        await c.tasks(schedule="nope")
