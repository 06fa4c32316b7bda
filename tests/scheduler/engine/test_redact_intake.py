"""What an operator's redaction may and may not do beside the rest of the task's
life (review of issue 34): a purged task can still be redacted (its records stay in
the segments and the bucket), a redaction racing a purge is never acknowledged
without effect, a redacted task is not run again, a held one not redacted."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.errors import FailedPreconditionError, NotFoundError
from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.state import TaskState, TaskStatus, replay
from apollo11.scheduler.workflow import (
    Idempotent,
    NotIdempotent,
    Retry,
    StepContext,
    StepError,
    Workflow,
)
from tests.scheduler.test_engine import Rig, make_rig

SECRET = "123-45-6789"


def _workflow() -> Workflow:
    wf = Workflow("w")

    @wf.step(idempotency=Idempotent())
    def a(ctx: StepContext) -> str:
        return "out-" + str(ctx.input)

    return wf


async def _until(rig: Rig, task_id: str, status: TaskStatus) -> None:
    """The task reached `status` and the engine holds nothing of it any more (a
    redaction asks both: a step's result is folded before its attempt is let go)."""

    def at_rest(t: TaskState | None) -> bool:
        if t is None or t.status is not status:
            return False
        return not any(rig.engine.is_busy(task_id, name) for name in t.steps)

    async with asyncio.timeout(30):
        while not at_rest(rig.store.state.peek(task_id)):
            await asyncio.sleep(0.01)


def _leaks(rig: Rig, task_id: str) -> list[Any]:
    """The task's data in what is shown of the log, and in the records on disk."""
    store = rig.store
    store.redactor.drain()
    raw: list[Event] = list(store.log.read(1, store.log.durable_id))
    shown = store.shown(raw)
    return [e.payload for e in [*raw, *shown] if e.task_id == task_id and SECRET in str(e.payload)]


async def _finished(tmp_path: Path) -> tuple[Rig, str]:
    rig = await make_rig(tmp_path / "d", FakeClock(), _workflow())
    sub = await rig.engine.submit("w", {"ssn": SECRET})
    await _until(rig, sub.task_id, TaskStatus.SUCCEEDED)
    return rig, sub.task_id


async def _close(rig: Rig) -> None:
    await rig.engine.stop()
    await rig.store.close()


async def test_a_purged_task_can_still_be_redacted(tmp_path: Path) -> None:
    rig, task_id = await _finished(tmp_path)
    try:
        await rig.engine.retention._purge([task_id])
        assert rig.store.state.peek(task_id) is None
        assert _leaks(rig, task_id)
        red = await rig.engine.redact_task(task_id, operator="op", reason="erasure")
        assert rig.store.state.redacted[task_id] == red.event_id
        assert _leaks(rig, task_id) == []
        with pytest.raises(FailedPreconditionError, match="already redacted"):
            await rig.engine.redact_task(task_id, operator="op", reason="again")
        with pytest.raises(NotFoundError):
            await rig.engine.redact_task("no-such-task", operator="op", reason="r")
    finally:
        await _close(rig)


async def test_a_redaction_racing_a_purge_takes_effect(tmp_path: Path) -> None:
    rig, task_id = await _finished(tmp_path)
    try:
        purged, red = await asyncio.gather(
            rig.engine.retention._purge([task_id]),  # the sweep's write, already decided
            rig.engine.redact_task(task_id, operator="op", reason="erasure"),
        )
        assert purged == 1
        assert rig.store.state.purged[task_id] < red.event_id  # the purge came first
        assert rig.store.state.redacted[task_id] == red.event_id
        assert _leaks(rig, task_id) == []
    finally:
        await _close(rig)


async def test_a_redacted_task_is_not_retried_nor_skipped(tmp_path: Path) -> None:
    seen: list[Any] = []
    broken = True
    wf = Workflow("w")

    @wf.step(idempotency=Idempotent(), retry=Retry(attempts=1, backoff_s=0))
    def a(ctx: StepContext) -> str:
        seen.append(ctx.input)
        if broken:
            raise StepError("down")
        return "out-" + str(ctx.input)

    rig = await make_rig(tmp_path / "d", FakeClock(), wf)
    try:
        sub = await rig.engine.submit("w", {"ssn": SECRET})
        await _until(rig, sub.task_id, TaskStatus.FAILED)
        red = await rig.engine.redact_task(sub.task_id, operator="op", reason="erasure")
        broken = False
        says = f"redacted \\(event {red.event_id}\\)"
        with pytest.raises(FailedPreconditionError, match=says):
            await rig.engine.retry_step(sub.task_id, "a", operator="op", reason="again")
        with pytest.raises(FailedPreconditionError, match=says):
            await rig.engine.skip_step(sub.task_id, "a", operator="op", reason="past it")
        task = rig.store.state.peek(sub.task_id)
        assert task is not None and task.status is TaskStatus.FAILED
        assert seen == [{"ssn": SECRET}]  # the step never ran on the marker
    finally:
        await _close(rig)


async def test_a_held_task_is_not_redacted(tmp_path: Path) -> None:
    rig, task_id = await _finished(tmp_path)
    try:
        await rig.engine.retention.hold(task_id, operator="legal", reason="case 7", held=True)
        with pytest.raises(FailedPreconditionError, match=r"held by legal \(case 7\): release"):
            await rig.engine.redact_task(task_id, operator="op", reason="erasure")
        assert task_id not in rig.store.state.redacted
        await rig.engine.retention.hold(task_id, operator="legal", reason="", held=False)
        await rig.engine.redact_task(task_id, operator="op", reason="erasure")
        assert _leaks(rig, task_id) == []
    finally:
        await _close(rig)


async def test_a_hold_racing_a_redaction_wins_and_the_redaction_says_so(tmp_path: Path) -> None:
    rig, task_id = await _finished(tmp_path)
    try:
        held, red = await asyncio.gather(
            rig.engine.retention.hold(task_id, operator="legal", reason="case 7", held=True),
            rig.engine.redact_task(task_id, operator="op", reason="erasure"),
            return_exceptions=True,
        )
        assert isinstance(held, Event)
        assert isinstance(red, FailedPreconditionError)  # at the intake, or after the commit
        assert "held by legal" in str(red)
        assert task_id not in rig.store.state.redacted
        assert _leaks(rig, task_id)  # kept, as the hold says
    finally:
        await _close(rig)


def _charge_then_fail(undone: list[Any], *, compensate_on_cancel: bool) -> Workflow:
    """`charge` succeeds (compensable), `ship` fails for good: a FAILED task whose
    cancel owes `charge`'s compensation unless `compensate_on_cancel` is off."""
    wf = Workflow("w", compensate_on_cancel=compensate_on_cancel)
    wf.step(
        name="charge", idempotency=NotIdempotent(compensate=lambda ctx: undone.append(ctx.input))
    )(lambda ctx: "paid")

    @wf.step(after=["charge"], idempotency=Idempotent(), retry=Retry(attempts=1, backoff_s=0))
    def ship(ctx: StepContext) -> None:
        raise StepError("no courier")

    return wf


async def test_a_redacted_task_owing_compensation_is_not_cancelled(tmp_path: Path) -> None:
    """A cancel of a FAILED task owes the compensation of its succeeded steps, which
    would run on the redaction's marker, not the data they undo: refused as retry and
    skip are, naming the redaction; a redacted task that owes nothing is cancelled."""
    undone: list[Any] = []
    rig = await make_rig(
        tmp_path / "d", FakeClock(), _charge_then_fail(undone, compensate_on_cancel=True)
    )
    try:
        sub = await rig.engine.submit("w", {"ssn": SECRET})
        await _until(rig, sub.task_id, TaskStatus.FAILED)
        red = await rig.engine.redact_task(sub.task_id, operator="op", reason="erasure")
        with pytest.raises(FailedPreconditionError, match=f"redacted \\(event {red.event_id}\\)"):
            await rig.engine.cancel_task(sub.task_id, operator="op", reason="stop")
        task = rig.store.state.peek(sub.task_id)
        assert task is not None and task.status is TaskStatus.FAILED
        assert task.cancelled is None and task.owed == 0
        assert undone == []  # no compensation ran on the marker
    finally:
        await _close(rig)


async def test_a_redacted_task_owing_nothing_is_cancelled(tmp_path: Path) -> None:
    undone: list[Any] = []
    rig = await make_rig(
        tmp_path / "d", FakeClock(), _charge_then_fail(undone, compensate_on_cancel=False)
    )
    try:
        sub = await rig.engine.submit("w", {"ssn": SECRET})
        await _until(rig, sub.task_id, TaskStatus.FAILED)
        await rig.engine.redact_task(sub.task_id, operator="op", reason="erasure")
        await rig.engine.cancel_task(sub.task_id, operator="op", reason="stop")
        await _until(rig, sub.task_id, TaskStatus.CANCELLED)
        assert undone == []
    finally:
        await _close(rig)


async def test_a_purged_redacted_task_leaves_the_state_once_rewritten(tmp_path: Path) -> None:
    """`state.redacted` and `redacted_records` are bounded: a purged task's entries leave
    the state once its records are rewritten here and in the bucket (the sweep writes
    that in a TASK_PURGED, so every fold forgets alike), never before."""
    rig, task_id = await _finished(tmp_path)
    try:
        bucket_done = False
        rig.store.bucket_redacted = lambda t, rid: bucket_done
        sweep = rig.engine.retention
        await rig.engine.redact_task(task_id, operator="op", reason="erasure")
        assert await sweep._purge([task_id]) == 1
        await rig.store.redactions_written()
        await sweep.sweep()
        assert task_id in rig.store.state.redacted  # the bucket still holds the data
        bucket_done = True
        await sweep.sweep()
        state = rig.store.state
        assert task_id not in state.redacted and task_id not in state.redacted_records
        assert _leaks(rig, task_id) == []  # the bytes carry the markers themselves
        # a replay (and a standby) folds the same state, snapshots' parts included
        replayed = replay(rig.store.log.read())
        assert replayed.to_dict() == state.to_dict()
        assert replayed.redacted_dict() == state.redacted_dict()
        forgot = next(iter(rig.store.log.read(rig.store.log.durable_id)))
        assert forgot.event_type is EventType.TASK_PURGED
        assert forgot.payload["forget"] == [task_id]
        await sweep.sweep()  # nothing more to forget: nothing more written
        assert rig.store.log.durable_id == forgot.event_id
    finally:
        await _close(rig)


async def test_a_redacted_task_not_purged_stays_in_the_state(tmp_path: Path) -> None:
    rig, task_id = await _finished(tmp_path)
    try:
        red = await rig.engine.redact_task(task_id, operator="op", reason="erasure")
        rig.store.redactor.drain()
        await rig.engine.retention.sweep()
        assert rig.store.state.redacted == {task_id: red.event_id}
        assert rig.store.log.durable_id == red.event_id  # no TASK_PURGED was written
    finally:
        await _close(rig)
