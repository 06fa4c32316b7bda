"""Flow control on a real store and engine with a fake clock (docs/flow-control.md):
limits hold exactly, waiting tasks go in priority and fairness order, rates pace
starts, debounce folds submissions, and a new engine on the same log agrees."""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable
from pathlib import Path

import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.errors import (
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import TaskState, TaskStatus
from apollo11.scheduler.workflow import (
    Concurrency,
    Debounce,
    Idempotent,
    Rate,
    StepContext,
    Workflow,
)
from tests.scheduler.test_engine import Rig, make_rig

T0 = 1_700_000_000.0

# What runs now, per key value, and the most that ever ran at once: each test's own.
RUNNING: collections.Counter[str] = collections.Counter()
MOST: collections.Counter[str] = collections.Counter()
ORDER: list[str] = []
GATE: list[asyncio.Event] = []


async def _work(ctx: StepContext) -> None:
    key = f"{ctx.workflow}:{(ctx.input or {}).get('host', '')}:{ctx.step}"
    RUNNING[key] += 1
    MOST[key] = max(MOST[key], RUNNING[key])
    ORDER.append((ctx.input or {}).get("n", ""))
    try:
        await GATE[-1].wait()
    finally:
        RUNNING[key] -= 1


hosts = Workflow("hosts", version=1, concurrency=Concurrency(key="host", max=2))
hosts.step(idempotency=Idempotent())(_work)

both = Workflow("both", version=1, concurrency=[Concurrency(key="host", max=1, name="h1")])
both.step(idempotency=Idempotent(), name="first")(_work)
both.step(idempotency=Idempotent(), name="second", after=["first"])(_work)

wh1 = Workflow("wh1", version=1)
wh1.step(
    idempotency=Idempotent(), concurrency=Concurrency(key="host", max=1, scope="global", name="wh")
)(_work)
wh2 = Workflow("wh2", version=1)
wh2.step(
    idempotency=Idempotent(), concurrency=Concurrency(key="host", max=1, scope="global", name="wh")
)(_work)

anyone = Workflow("anyone", version=1, fairness="tenant")
anyone.step(idempotency=Idempotent())(_work)

paced = Workflow("paced", version=1, rate=Rate(key="tenant", limit=2, per="1s"))


@paced.step(idempotency=Idempotent())
def quick(ctx: StepContext) -> None:
    return None


folded = Workflow("folded", version=1, debounce=Debounce(key="doc", quiet="2s", max_wait="10s"))
folded.step(idempotency=Idempotent())(quick)

strict = Workflow(
    "strict", version=1, concurrency=Concurrency(key="host", max=1, on_full="reject_new")
)
strict.step(idempotency=Idempotent())(_work)

newest = Workflow(
    "newest", version=1, concurrency=Concurrency(key="host", max=1, on_full="cancel_running")
)
newest.step(idempotency=Idempotent())(_work)

ALL = (hosts, both, wh1, wh2, anyone, paced, folded, strict, newest)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RUNNING.clear()
    MOST.clear()
    ORDER.clear()
    GATE.append(asyncio.Event())


async def _until(check: Callable[[], bool], what: str, timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def _rig(tmp_path: Path, concurrency: int = 8) -> Rig:
    return await make_rig(tmp_path / "d", FakeClock(start=T0), *ALL, concurrency=concurrency)


def _task(rig: Rig, task_id: str) -> TaskState:
    found = rig.store.state.peek(task_id)  # a finished task may be archived already
    assert found is not None
    return found


async def test_at_most_max_tasks_run_per_key_value_and_the_rest_queue_in_order(
    tmp_path: Path,
) -> None:
    rig = await _rig(tmp_path)
    try:
        ids = [
            (await rig.engine.submit("hosts", {"host": "db1", "n": i})).task_id for i in range(5)
        ]
        other = (await rig.engine.submit("hosts", {"host": "db2", "n": 9})).task_id
        await _until(
            lambda: RUNNING["hosts:db1:_work"] == 2 and RUNNING["hosts:db2:_work"] == 1, "3 run"
        )
        await asyncio.sleep(0.1)
        assert RUNNING["hosts:db1:_work"] == 2, "a third task of db1 started"
        why = rig.engine.flow.why(ids[4], rig.clock.now())
        assert why == "queued: host=db1 is full (2/2), 2 ahead", why
        assert rig.engine.flow.why(other, rig.clock.now()) == ""
        GATE[-1].set()
        for t in [*ids, other]:
            async with asyncio.timeout(20):
                await rig.engine.wait(t)
        assert MOST["hosts:db1:_work"] == 2 and MOST["hosts:db2:_work"] == 1
        db1 = [n for n in ORDER if n != 9]
        assert db1 == [0, 1, 2, 3, 4], "first come, first served within a key"
        assert rig.store.state.occupancy.holders.get("hosts/host", {}) == {}
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_task_keeps_its_slot_between_its_steps(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        a = (await rig.engine.submit("both", {"host": "x", "n": "a"})).task_id
        b = (await rig.engine.submit("both", {"host": "x", "n": "b"})).task_id
        GATE[-1].set()
        async with asyncio.timeout(20):
            await rig.engine.wait(a)
            await rig.engine.wait(b)
        assert ORDER == ["a", "a", "b", "b"], "b slipped in between a's two steps"
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_global_step_limit_is_shared_across_workflows(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        t1 = (await rig.engine.submit("wh1", {"host": "dw"})).task_id
        t2 = (await rig.engine.submit("wh2", {"host": "dw"})).task_id
        await _until(lambda: len(ORDER) == 1, "one runs")
        await asyncio.sleep(0.1)
        assert len(ORDER) == 1
        assert rig.engine.flow.why(t2, rig.clock.now()).startswith("queued: wh=dw is full (1/1)")
        GATE[-1].set()
        async with asyncio.timeout(20):
            await rig.engine.wait(t1)
            await rig.engine.wait(t2)
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_waiting_for_a_slot_goes_by_priority_then_by_turns(tmp_path: Path) -> None:
    rig = await _rig(tmp_path, concurrency=1)
    try:
        block = (await rig.engine.submit("anyone", {"tenant": "z", "n": "block"})).task_id
        await _until(lambda: ORDER == ["block"], "the blocker runs")
        later = []
        for n, tenant, prio in [
            ("a1", "a", 3),
            ("a2", "a", 3),
            ("a3", "a", 3),
            ("b1", "b", 3),
            ("low", "c", 5),
            ("top", "c", 1),
        ]:
            later.append(
                (
                    await rig.engine.submit("anyone", {"tenant": tenant, "n": n}, priority=prio)
                ).task_id
            )
        GATE[-1].set()
        for t in [block, *later]:
            async with asyncio.timeout(20):
                await rig.engine.wait(t)
        assert ORDER[:2] == ["block", "top"]
        assert ORDER[-1] == "low"
        # tenants a and b take turns: b's one task is not behind all of a's
        assert ORDER.index("b1") < ORDER.index("a3"), ORDER
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_bad_priority_or_a_missing_key_is_refused_naming_it(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        with pytest.raises(InvalidArgumentError, match="priority must be 1 to 5"):
            await rig.engine.submit("anyone", {}, priority=7)
        with pytest.raises(InvalidArgumentError, match='"host"'):
            await rig.engine.submit("hosts", {"n": 1})
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_rate_paces_starts_on_the_logs_clock(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        ids = [(await rig.engine.submit("paced", {"tenant": "t"})).task_id for _ in range(4)]
        other = (await rig.engine.submit("paced", {"tenant": "u"})).task_id
        async with asyncio.timeout(20):
            for t in [*ids, other]:
                await rig.engine.wait(t)  # the engine's timers move the fake clock
        starts = {
            e.task_id: e.timestamp
            for e in rig.store.log.read()
            if e.event_type is EventType.STEP_STARTED
        }
        t_starts = [starts[t] for t in ids]
        # 2 a second: 500 ms apart. FakeClock jumps whenever anything sleeps on it, so
        # a start may be stamped late (seen: [500, 1000, 0] on a loaded machine); one
        # started late leaves the next its time (engine/flow.py _on_time): between the
        # i-th and j-th starts, at least j - i - 1 intervals, never fewer
        for (i, a), (j, b) in itertools.combinations(enumerate(t_starts), 2):
            assert b - a >= (j - i - 1) * 500, t_starts
        assert t_starts[-1] - t_starts[0] >= 3 * 500, t_starts
        tats = rig.store.state.occupancy.tats["paced/tenant"]
        # u's first start was admitted where it stood: t's starts do not pace it
        assert tats == {"t": t_starts[-1] + 500, "u": starts[other] + 500}
    finally:
        await rig.engine.stop()
        await rig.store.close()


class _HeldClock(FakeClock):
    """Moves only when the test says: a sleeper waits for it."""

    async def sleep(self, seconds: float) -> None:
        end = self.t + seconds
        while self.t < end:
            await asyncio.sleep(0.001)


async def test_a_rates_backlog_waits_behind_one_timer_in_order(tmp_path: Path) -> None:
    clock = _HeldClock(start=T0)
    rig = await make_rig(tmp_path / "d", clock, *ALL)
    try:
        ids = [
            (await rig.engine.submit("paced", {"tenant": "t", "n": n})).task_id for n in range(5)
        ]
        why = rig.engine.flow.why
        # the first started at once; the second waits for the rate, the rest behind it
        await _until(lambda: why(ids[4], clock.now()).startswith("queued"), "queued")
        assert why(ids[1], clock.now()).startswith(
            "waiting: tenant=t is rate limited (2 per 1s) until"
        )
        assert why(ids[4], clock.now()) == "queued: tenant=t is rate limited (2 per 1s), 3 ahead"
        assert rig.engine.flow.queued(("paced/tenant", "t")) == 4
        decided = rig.engine.decisions
        await rig.engine.cancel_task(ids[1], operator="op", reason="not this one")
        await _until(lambda: why(ids[2], clock.now()).startswith("waiting"), "the next in front")
        for _ in range(6):
            clock.advance(0.5)
            await asyncio.sleep(0.05)
        async with asyncio.timeout(20):
            for t in ids:
                await rig.engine.wait(t)
        started = [
            e.task_id for e in rig.store.log.read() if e.event_type is EventType.STEP_STARTED
        ]
        assert started == [ids[0], ids[2], ids[3], ids[4]], "first come, first served"
        # each start decides its task and the next in front, not every task that waits
        assert rig.engine.decisions - decided <= 6 * 4, rig.engine.decisions - decided
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_front_the_engine_decides_late_keeps_the_rates_schedule(tmp_path: Path) -> None:
    clock = _HeldClock(start=T0)
    rig = await make_rig(tmp_path / "d", clock, *ALL)
    try:
        ids = [
            (await rig.engine.submit("paced", {"tenant": "t", "n": n})).task_id for n in range(3)
        ]
        await _until(lambda: rig.engine.flow.why(ids[2], clock.now()) != "", "queued")

        def started() -> list[int]:
            return [
                e.timestamp for e in rig.store.log.read() if e.event_type is EventType.STEP_STARTED
            ]

        clock.advance(0.7)  # the second's time was at 0.5 s: the engine comes 200 ms late
        await _until(lambda: len(started()) == 2, "the second started")
        clock.advance(0.3)
        # the third keeps the rate's time (1 s), not 500 ms after the late one
        await _until(lambda: len(started()) == 3, "the third started at 1 s", timeout=5)
        starts = started()
        assert [b - a for a, b in itertools.pairwise(starts)] == [700, 300]
        assert rig.store.state.occupancy.tats["paced/tenant"] == {"t": starts[-1] + 500}
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_debounced_submissions_become_one_task_with_the_last_input(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        first = await rig.engine.submit("folded", {"doc": "d1", "v": 1})
        rig.clock.advance(1)
        second = await rig.engine.submit("folded", {"doc": "d1", "v": 2})
        other = await rig.engine.submit("folded", {"doc": "d2", "v": 9})
        assert (second.task_id, second.created) == (first.task_id, False)
        assert other.task_id != first.task_id
        async with asyncio.timeout(20):
            await rig.engine.wait(first.task_id)  # the engine's timer moves the fake clock
        t = _task(rig, first.task_id)
        assert t.input == {"doc": "d1", "v": 2}
        # quiet 2 s after the last submission (1 s after the first)
        assert t.steps["quick"].started_ms is not None
        assert t.steps["quick"].started_ms >= int(T0 * 1000) + 3000
        kinds = [e.event_type for e in rig.store.log.read() if e.task_id == first.task_id]
        assert kinds.count(EventType.DEBOUNCED) == 1
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_reject_new_and_cancel_running(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        await rig.engine.submit("strict", {"host": "h"})
        with pytest.raises(ResourceExhaustedError, match="strict/host is full for 'h': 1 of 1"):
            await rig.engine.submit("strict", {"host": "h"})
        old = (await rig.engine.submit("newest", {"host": "h"})).task_id
        await _until(lambda: "newest:h:_work" in RUNNING, "the old one runs")
        new = (await rig.engine.submit("newest", {"host": "h"})).task_id
        async with asyncio.timeout(20):
            await rig.engine.wait(old)
        t = _task(rig, old)
        assert t.status is TaskStatus.CANCELLED and t.cancelled is not None
        assert new in t.cancelled["reason"]
        GATE[-1].set()
        async with asyncio.timeout(20):
            await rig.engine.wait(new)
        assert _task(rig, new).status is TaskStatus.SUCCEEDED
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_an_operator_raises_a_limit_at_runtime_and_it_is_recorded(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        for i in range(4):
            await rig.engine.submit("hosts", {"host": "db1", "n": i})
        await _until(lambda: RUNNING["hosts:db1:_work"] == 2, "two run")
        with pytest.raises(NotFoundError, match="no limit 'nope'"):
            await rig.engine.limits.set("nope", max=3, operator="ana")
        with pytest.raises(InvalidArgumentError, match="max must be at least 1"):
            await rig.engine.limits.set("hosts/host", max=0, operator="ana")
        await rig.engine.limits.set("hosts/host", max=4, operator="ana", reason="more db")
        await _until(lambda: RUNNING["hosts:db1:_work"] == 4, "four run")
        view = {v.limit_id: v for v in rig.engine.limits.view().limits}
        assert view["hosts/host"].effective == "max 4" and view["hosts/host"].declared == "max 2"
        assert [(k.value, k.running, k.queued) for k in view["hosts/host"].keys] == [("db1", 4, 0)]
        limit = [e for e in rig.store.log.read() if e.event_type is EventType.LIMIT]
        assert limit[-1].payload == {"id": "hosts/host", "max": 4, "by": "ana", "reason": "more db"}
        GATE[-1].set()
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_new_engine_on_the_same_log_keeps_the_limit(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    ids = [(await rig.engine.submit("hosts", {"host": "db1", "n": i})).task_id for i in range(4)]
    await _until(lambda: RUNNING["hosts:db1:_work"] == 2, "two run")
    held = dict(rig.store.state.occupancy.holders)
    assert {h for h in held["hosts/host"]["db1"]} == {(ids[0], ""), (ids[1], "")}
    # the node dies: its two attempts are lost; a new engine retries them, two at a time
    rig = await rig.reopen(*ALL)
    try:
        await _until(lambda: RUNNING["hosts:db1:_work"] >= 2, "two run again")
        await asyncio.sleep(0.1)
        assert rig.store.state.occupancy.count("hosts/host", "db1") == 2
        GATE[-1].set()
        for t in ids:
            async with asyncio.timeout(20):
                await rig.engine.wait(t)
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_the_examples_runbook_runs_two_per_host(tmp_path: Path) -> None:
    from apollo11.scheduler.examples import runbook

    rig = await make_rig(tmp_path / "d", FakeClock(start=T0), runbook, concurrency=8)
    try:
        with pytest.raises(InvalidArgumentError, match='input has no "host"'):
            await rig.engine.submit("runbook", {"team": "db"})
        ids = [
            (await rig.engine.submit("runbook", {"host": "db1", "step_seconds": 0.05})).task_id
            for _ in range(5)
        ]
        ids.append((await rig.engine.submit("runbook", {"host": "db2"})).task_id)
        seen = 0
        async with asyncio.timeout(30):
            while not all(_task(rig, t).quiescent for t in ids):
                seen = max(seen, rig.engine.flow.count(("runbook/host", "db1")))
                await asyncio.sleep(0.005)
        assert seen == 2
        assert {_task(rig, t).status for t in ids} == {TaskStatus.SUCCEEDED}
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_debounced_input_may_be_as_large_as_a_submission(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    try:
        first = await rig.engine.submit("folded", {"doc": "d1", "v": 1})
        big = {"doc": "d1", "v": "x" * 20_000}  # over the 4 KiB of an ordinary event
        again = await rig.engine.submit("folded", big)
        assert again.task_id == first.task_id
        async with asyncio.timeout(20):
            await rig.engine.wait(first.task_id)
        assert _task(rig, first.task_id).input == big
    finally:
        await rig.engine.stop()
        await rig.store.close()
