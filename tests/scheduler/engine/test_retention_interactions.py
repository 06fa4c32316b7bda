"""Retention beside the rest of a task's life, through the engine on a fake clock: a
child its running parent has yet to await is kept, the fold refuses what the sweep
would not write, a hold that lost the race with a purge is no silent OK, and neither
a redaction nor a hold moves the retention clock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler import metrics, retention
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.durable import DurableContext, DurableWorkflow
from apollo11.scheduler.engine import RetentionOptions
from apollo11.scheduler.engine.retention import RetentionSweep
from apollo11.scheduler.errors import NotFoundError
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import State, Store, TaskStatus, replay
from apollo11.scheduler.workflow import Idempotent, Retry, StepContext, StepError, Workflow
from tests.scheduler.durable.test_engine_durable import ManualClock
from tests.scheduler.test_engine import Rig, make_rig

DAY = 86_400

kid = Workflow("kid", version=1)


@kid.step(idempotency=Idempotent())
def work(ctx: StepContext) -> str:
    return "done"


parent = DurableWorkflow("parent", version=1)


@parent.main
async def run_parent(ctx: DurableContext, x: Any) -> Any:
    h = ctx.spawn("kid", {})
    await ctx.wait_for_event("go")  # long work before the join
    return await h


async def _until(rig: Rig, task_id: str, *states: TaskStatus) -> None:
    async with asyncio.timeout(30):
        while True:
            t = rig.store.state.peek(task_id)
            if t is not None and t.status in states and not rig.engine.is_busy(task_id, "main"):
                return
            await asyncio.sleep(0.005)


def _replayed(rig: Rig) -> State:
    return replay(rig.store.log.read())


async def test_a_child_its_running_parent_has_yet_to_await_is_kept(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path / "d", ManualClock(), kid, parent)
    try:
        rig.engine.retention.options = RetentionOptions(rules=retention.parse("kid:*=1d"))
        sub = await rig.engine.submit("parent", {})
        await _until(rig, sub.task_id, TaskStatus.WAITING)
        child = next(t.task_id for t in rig.store.state.tasks.values() if t.workflow == "kid")
        await _until(rig, child, TaskStatus.SUCCEEDED)
        rig.clock.advance(2 * DAY)
        assert retention_due(rig) == []
        assert await rig.engine.retention.sweep() == ""
        assert rig.store.state.peek(child) is not None
        # a log that asks anyway (an older primary's) is refused by every fold alike
        await rig.engine.retention._purge([child])
        assert rig.store.state.peek(child) is not None
        assert "parent" in rig.store.state.anomalies[-1]
        await rig.engine.send_event("go", 1)
        await _until(rig, sub.task_id, TaskStatus.SUCCEEDED)
        main = rig.store.state.tasks[sub.task_id].steps["main"]
        assert main.result == {"work": "done"}
        # its parent finished, the child falls due like any other
        assert retention_due(rig) == [child]
        assert "purged 1 tasks" in await rig.engine.retention.sweep()
        assert rig.store.state.peek(child) is None
        again = _replayed(rig)
        assert again.peek(child) is None and again.peek(sub.task_id) is not None
    finally:
        await rig.engine.stop()
        await rig.store.close()


def retention_due(rig: Rig) -> list[str]:
    from apollo11.scheduler.engine.retention import due_now

    opts = rig.engine.retention.options
    return due_now(rig.store.state, opts, rig.clock.now_ms(), 100)


async def test_a_hold_that_lost_the_race_with_a_purge_is_not_acknowledged(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path / "d", ManualClock(), kid)
    try:
        sub = await rig.engine.submit("kid", {})
        await rig.engine.wait(sub.task_id)
        ret = rig.engine.retention
        purge, hold = await asyncio.gather(
            ret._purge([sub.task_id]),  # the sweep's write, already decided
            ret.hold(sub.task_id, operator="legal", reason="litigation", held=True),
            return_exceptions=True,
        )
        assert not isinstance(purge, BaseException)
        assert isinstance(hold, NotFoundError), hold
        assert "purged by retention" in str(hold)
        assert rig.store.state.peek(sub.task_id) is None
        assert sub.task_id not in rig.store.state.holds
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_purged_task_answers_purged_by_retention_to_every_action(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path / "d", ManualClock(), kid)
    try:
        sub = await rig.engine.submit("kid", {})
        await rig.engine.wait(sub.task_id)
        await rig.engine.retention._purge([sub.task_id])
        e = rig.engine
        # (a redaction is carried out all the same: its records are still in the
        # segments and the bucket; tests/scheduler/engine/test_redact_intake.py)
        for action in (
            e.cancel_task(sub.task_id, operator="op", reason="r"),
            e.retention.hold(sub.task_id, operator="op", reason="r", held=True),
        ):
            with pytest.raises(NotFoundError, match="was purged by retention"):
                await action
    finally:
        await rig.engine.stop()
        await rig.store.close()


class _Host:
    """The sweep's view of an engine, over a real store with no engine deciding."""

    def __init__(self, store: Store, clock: FakeClock) -> None:
        self.store = store
        self.clock = clock
        self.leading = True

    def check_leading(self) -> None:
        pass

    async def wait_commit(self, event_id: int) -> None:
        pass


async def test_a_cancelled_task_not_at_rest_is_not_purged_nor_written(tmp_path: Path) -> None:
    clock = FakeClock()
    store = Store.open(tmp_path / "d", instance_id="n1", clock=clock.now_ms)
    try:
        log = store.log
        steps = {"workflow": "w", "steps": {"a": [], "b": []}}
        # t1: cancelled while its step runs; t2: cancelled owing a compensation; t3: done
        await log.append(EventType.TASK_SUBMITTED, "t1", payload=steps)
        await log.append(EventType.STEP_STARTED, "t1", "a", attempt=1)
        await log.append(EventType.TASK_CANCELLED, "t1", payload={"operator": "op"})
        await log.append(EventType.TASK_SUBMITTED, "t2", payload=steps)
        await log.append(EventType.STEP_STARTED, "t2", "a", attempt=1)
        await log.append(EventType.STEP_SUCCEEDED, "t2", "a", {"result": 1}, attempt=1)
        cancel = {"operator": "op", "compensate": ["a"]}
        await log.append(EventType.TASK_CANCELLED, "t2", payload=cancel)
        await log.append(EventType.TASK_SUBMITTED, "t3", payload=steps)
        await log.append(EventType.TASK_CANCELLED, "t3", payload={"operator": "op"})
        state = store.state
        assert [state.peek(t).status for t in ("t1", "t2", "t3")] == [TaskStatus.CANCELLED] * 3  # type: ignore[union-attr]
        sweep = RetentionSweep(_Host(store, clock), RetentionOptions(rules=retention.parse("*=1d")))
        clock.advance(2 * DAY)
        before = metrics.RETENTION_PURGED._value.get()
        assert await sweep.sweep() == "purged 1 tasks past their retention (*=1d)"
        assert sweep.purged == 1 and metrics.RETENTION_PURGED._value.get() == before + 1
        assert state.peek("t3") is None
        assert state.peek("t1") is not None and state.peek("t2") is not None
        purges = [e for e in log.read() if e.event_type is EventType.TASK_PURGED]
        assert [e.payload["tasks"] for e in purges] == [["t3"]]
        assert not any("refused" in a for a in state.anomalies)
        assert await sweep.sweep() == ""  # nothing more written while they are not at rest
        assert sum(e.event_type is EventType.TASK_PURGED for e in log.read()) == 1
    finally:
        await store.close()


async def test_a_purge_the_fold_refused_is_not_counted(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path / "d", ManualClock(), kid)
    try:
        sub = await rig.engine.submit("kid", {})
        await rig.engine.wait(sub.task_id)
        ret = rig.engine.retention
        await ret.hold(sub.task_id, operator="legal", reason="litigation", held=True)
        before = metrics.RETENTION_PURGED._value.get()
        assert await ret._purge([sub.task_id]) == 0  # decided before the hold landed
        assert ret.purged == 0 and metrics.RETENTION_PURGED._value.get() == before
        assert rig.store.state.peek(sub.task_id) is not None
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_neither_a_redaction_nor_a_hold_moves_the_retention_clock(
    tmp_path: Path,
) -> None:
    rig = await make_rig(tmp_path / "d", FakeClock(), kid)
    try:
        ret = rig.engine.retention
        ret.options = RetentionOptions(rules=retention.parse("SUCCEEDED=7d"))
        sub = await rig.engine.submit("kid", {})
        await rig.engine.wait(sub.task_id)
        finished = rig.store.state.tasks[sub.task_id].updated_ms
        rig.clock.advance(3 * DAY)
        await rig.engine.redact_task(sub.task_id, operator="op", reason="gdpr")
        rig.clock.advance(1 * DAY)
        await ret.hold(sub.task_id, operator="op", reason="audit", held=True)
        rig.clock.advance(1 * DAY)
        await ret.hold(sub.task_id, operator="op", reason="done", held=False)
        assert rig.store.state.tasks[sub.task_id].updated_ms == finished
        assert _replayed(rig).tasks[sub.task_id].updated_ms == finished
        rig.clock.advance(2 * DAY)  # 7 days since its finish, 3 since the release
        assert "purged 1 tasks" in await ret.sweep()
        assert rig.store.state.peek(sub.task_id) is None
    finally:
        await rig.engine.stop()
        await rig.store.close()


loner = DurableWorkflow("loner", version=1, retry=Retry(attempts=1, backoff_s=0))
broken = {"main": True}


@loner.main
async def run_loner(ctx: DurableContext, x: Any) -> Any:
    h = ctx.spawn("kid", {}, close="abandon")
    await ctx.wait_for_event("go")  # records the spawn; the child runs on
    if broken["main"]:
        raise StepError("failed before the join")
    return await h


async def test_a_rerun_parent_whose_child_was_purged_fails_naming_the_purge(
    tmp_path: Path,
) -> None:
    """A FAILED parent is finished, so its finished child may be purged; a retry of
    the parent then replays to the join: it must fail naming the purge, never wait
    for ever on a child that no longer exists."""
    rig = await make_rig(tmp_path / "d", ManualClock(), kid, loner)
    try:
        broken["main"] = True
        sub = await rig.engine.submit("loner", {})
        await _until(rig, sub.task_id, TaskStatus.WAITING)
        child = next(t.task_id for t in rig.store.state.tasks.values() if t.workflow == "kid")
        await _until(rig, child, TaskStatus.SUCCEEDED)
        await rig.engine.send_event("go", 1)
        await _until(rig, sub.task_id, TaskStatus.FAILED)
        assert await rig.engine.retention._purge([child]) == 1
        purged_at = rig.store.state.purged[child]
        broken["main"] = False
        await rig.engine.retry_step(sub.task_id, "main", operator="op", reason="again")
        await _until(rig, sub.task_id, TaskStatus.FAILED)
        error = rig.store.state.tasks[sub.task_id].steps["main"].error or {}
        assert "purged by retention" in str(error) and f"event {purged_at}" in str(error)
        assert child in str(error)
        # a replay folds the same answer (it is recorded, not recomputed)
        assert _replayed(rig).to_dict() == rig.store.state.to_dict()
    finally:
        broken["main"] = True
        await rig.engine.stop()
        await rig.store.close()
