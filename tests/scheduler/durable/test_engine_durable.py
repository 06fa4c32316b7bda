"""Durable tasks through the engine, on a real store, with a fake clock: the approval
flow of issue 18 (charge, wait for an event with a timeout, refund on timeout)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.durable import DedupeKey, DurableContext, DurableWorkflow
from apollo11.scheduler.errors import AlreadyExistsError
from apollo11.scheduler.examples import approval
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import StepStatus, TaskStatus
from tests.scheduler.test_engine import Rig, make_rig

DAY = 24 * 3600


class ManualClock(FakeClock):
    """Time moves only by `advance`; a sleep lasts until it has moved far enough (a
    FakeClock's sleep jumps ahead, which would fire every wait's timer at once)."""

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        deadline = self.t + max(0.0, seconds)
        while self.t < deadline:
            await asyncio.sleep(0.002)


async def _until(rig: Rig, task_id: str, *states: TaskStatus) -> None:
    async with asyncio.timeout(10):
        while True:
            task = rig.store.state.peek(task_id)
            if (
                task is not None
                and task.status in states
                and not rig.engine.is_busy(task_id, "main")
            ):
                return
            await asyncio.sleep(0.005)


def _ledger(path: Path) -> list[str]:
    return [" ".join(line.split()[1:2]) for line in path.read_text().splitlines()]


def _types(rig: Rig, task_id: str) -> list[str]:
    return [e.event_type.name for e in rig.store.log.read() if e.task_id == task_id]


async def _rig(tmp_path: Path, name: str = "d") -> Rig:
    return await make_rig(tmp_path / name, ManualClock(), approval)


async def test_approval_times_out_and_refunds(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    ledger = tmp_path / "ledger"
    try:
        sub = await rig.engine.submit(
            "approval", {"id": "o1", "amount": 5, "timeout_s": DAY, "ledger": str(ledger)}
        )
        await _until(rig, sub.task_id, TaskStatus.WAITING)
        task = rig.store.state.peek(sub.task_id)
        assert task is not None and task.durable is not None
        assert task.steps["main"].status is StepStatus.WAITING
        assert task.durable.wait is not None and task.durable.wait["key"] == "approval:o1"
        assert not rig.engine.is_busy(sub.task_id, "main")  # evicted: nothing runs for it
        assert (sub.task_id, "main") in rig.engine._timers  # its deadline is armed
        rig.clock.advance(DAY + 1)
        async with asyncio.timeout(10):
            done = await rig.engine.wait(sub.task_id)
        assert done.status is TaskStatus.SUCCEEDED
        assert done.steps["main"].result == {"state": "refunded", "refunded": "ch-o1"}
        assert _ledger(ledger) == ["charge", "refund"]
        assert _types(rig, sub.task_id) == [
            "TASK_SUBMITTED",
            "STEP_STARTED",
            "CHECKPOINT",  # charge
            "WAIT",
            "STEP_STARTED",
            "CHECKPOINT",  # the wait, timed out
            "CHECKPOINT",  # refund
            "STEP_SUCCEEDED",
        ]
        # the wake did not use up the main's single attempt
        assert done.steps["main"].waits == 1 and done.steps["main"].attempt == 2
    finally:
        await rig.engine.stop()
        await rig.store.close()


gate = DurableWorkflow("gated", version=1)
GATES: dict[str, asyncio.Event] = {}
CALLS: list[str] = []


async def _held(order_id: str) -> str:
    CALLS.append(f"charge:{order_id}")
    await GATES[order_id].wait()
    return f"ch-{order_id}"


@gate.main
async def gated(ctx: DurableContext, order_id: str) -> Any:
    charge = await ctx.step("charge", _held, order_id, idempotency=DedupeKey())
    first = await ctx.wait_for_event(f"ok:{order_id}", timeout=60)
    second = await ctx.wait_for_event(f"ok:{order_id}", timeout=60)
    return [charge, first, second]


async def test_an_event_sent_before_the_wait_registers_is_matched_once(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path / "d", ManualClock(), gate)
    GATES["o2"] = asyncio.Event()
    try:
        sub = await rig.engine.submit("gated", "o2")
        async with asyncio.timeout(10):
            while "charge:o2" not in CALLS:
                await asyncio.sleep(0.005)
        # the main runs its charge: no wait is registered yet when the events are sent
        first = await rig.engine.send_event("ok:o2", {"n": 1}, idempotency_key="k1")
        dup = await rig.engine.send_event("ok:o2", {"n": 1}, idempotency_key="k1")
        assert first.created and not dup.created and dup.event_id == first.event_id
        assert len(rig.store.state.events["ok:o2"]) == 1  # the duplicate counted once
        GATES["o2"].set()
        # the first wait takes the event sent before it; the second waits for the next
        await _until(rig, sub.task_id, TaskStatus.WAITING)
        task = rig.store.state.peek(sub.task_id)
        assert task is not None and task.durable is not None and task.durable.wait is not None
        assert task.durable.wait["seq"] == 2 and task.durable.wait["since"] == first.event_id + 1
        second = await rig.engine.send_event("ok:o2", {"n": 2})
        async with asyncio.timeout(10):
            done = await rig.engine.wait(sub.task_id)
        assert done.status is TaskStatus.SUCCEEDED
        assert done.steps["main"].result == ["ch-o2", {"n": 1}, {"n": 2}]
        assert CALLS.count("charge:o2") == 1
        cps = done.durable.checkpoints if done.durable else []
        assert [c.get("event_id") for c in cps[1:]] == [first.event_id, second.event_id]
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_an_event_key_reused_for_another_event_is_refused(tmp_path: Path) -> None:
    """The same idempotency key with another payload (or event key) is another event:
    answering the first one would drop it silently, so it is ALREADY_EXISTS, as a
    submission's key reused for another input is."""
    rig = await make_rig(tmp_path / "reuse", ManualClock(), approval)
    try:
        first = await rig.engine.send_event("ok:o5", {"by": "ann"}, idempotency_key="k5")
        before = rig.store.log.next_id
        with pytest.raises(
            AlreadyExistsError,
            match=rf"idempotency key 'k5' already names event {first.event_id} \(another "
            rf"payload\); the same key must carry the same event key and payload",
        ):
            await rig.engine.send_event("ok:o5", {"by": "bob"}, idempotency_key="k5")
        with pytest.raises(
            AlreadyExistsError,
            match=rf"'k5' already names event {first.event_id} \(another event key\)",
        ):
            await rig.engine.send_event("ok:o6", {"by": "ann"}, idempotency_key="k5")
        assert rig.store.log.next_id == before, "nothing written"
        # the same event again is still the first one, as before
        again = await rig.engine.send_event("ok:o5", {"by": "ann"}, idempotency_key="k5")
        assert not again.created and again.event_id == first.event_id
        # ...and while the first is still being written, too
        a, b = await asyncio.gather(
            rig.engine.send_event("ok:o7", 1, idempotency_key="k7"),
            rig.engine.send_event("ok:o7", 2, idempotency_key="k7"),
            return_exceptions=True,
        )
        assert not isinstance(a, BaseException) and a.created
        assert isinstance(b, AlreadyExistsError), b
        assert "'k7' already names an event being sent (another payload)" in str(b)
        assert [p for _, p in rig.store.state.events["ok:o7"]] == [1]
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_a_restart_while_waiting_resumes_without_repeating_steps(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    ledger = tmp_path / "ledger"
    sub = await rig.engine.submit("approval", {"id": "o3", "ledger": str(ledger)})
    await _until(rig, sub.task_id, TaskStatus.WAITING)
    rig = await rig.reopen(approval)  # the node restarts: the task is only its log
    try:
        task = rig.store.state.peek(sub.task_id)
        assert task is not None and task.status is TaskStatus.WAITING
        sent = await rig.engine.send_event("approval:o3", {"by": "bob"})
        assert sent.created
        async with asyncio.timeout(10):
            done = await rig.engine.wait(sub.task_id)
        assert done.status is TaskStatus.SUCCEEDED
        assert done.steps["main"].result["approved_by"] == {"by": "bob"}
        assert _ledger(ledger) == ["charge", "ship"]  # the charge ran once
        resolved = [
            e.payload
            for e in rig.store.log.read()
            if e.task_id == sub.task_id and e.event_type is EventType.CHECKPOINT
        ]
        assert [c["kind"] for c in resolved] == ["step", "event", "step"]
        assert resolved[1]["event_id"] == sent.event_id
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_the_timer_is_rearmed_after_a_restart(tmp_path: Path) -> None:
    rig = await _rig(tmp_path)
    sub = await rig.engine.submit("approval", {"id": "o4", "timeout_s": 60})
    await _until(rig, sub.task_id, TaskStatus.WAITING)
    rig = await rig.reopen(approval)
    try:
        # the new engine decides every unfinished task at start: the deadline is re-armed
        async with asyncio.timeout(10):
            while (sub.task_id, "main") not in rig.engine._timers:
                await asyncio.sleep(0.002)
        rig.clock.advance(61)
        async with asyncio.timeout(10):
            done = await rig.engine.wait(sub.task_id)
        assert done.steps["main"].result["state"] == "refunded"
    finally:
        await rig.engine.stop()
        await rig.store.close()


async def test_an_event_key_dedupes_within_its_ttl_only(tmp_path: Path) -> None:
    rig = await make_rig(tmp_path / "ttl", ManualClock(), approval)
    try:
        ttl = rig.engine.idempotency_ttl_s
        first = await rig.engine.send_event("k", 1, idempotency_key="i")
        again = await rig.engine.send_event("k", 1, idempotency_key="i")
        assert first.created and not again.created and again.event_id == first.event_id
        rig.clock.advance(ttl + 1)
        later = await rig.engine.send_event("k", 3, idempotency_key="i")
        assert later.created and later.event_id > first.event_id
        assert [p for _, p in rig.store.state.events["k"]] == [1, 3]
        # the log replays to the same index (the renewal is a fact in the log)
        rig = await rig.reopen(approval)
        assert [p for _, p in rig.store.state.events["k"]] == [1, 3]
        assert rig.store.state.event_keys == {"i": later.event_id}
    finally:
        await rig.engine.stop()
        await rig.store.close()


UNDONE: list[str] = []


def _book(order: str) -> str:
    return f"seat-{order}"


def _unbook(seat: Any, order: str) -> None:
    UNDONE.append(f"{order}:{seat}")


trip = DurableWorkflow("trip", version=1)


@trip.main
async def run_trip(ctx: DurableContext, order: str) -> Any:
    from apollo11.scheduler.workflow import Idempotent, NotIdempotent

    hotel = await ctx.step("hotel", _book, order, idempotency=NotIdempotent(compensate=_unbook))
    plane = await ctx.step(
        "plane", _book, f"{order}-p", idempotency=NotIdempotent(compensate=_unbook)
    )
    note = await ctx.step("note", len, order, idempotency=Idempotent())
    await ctx.wait_for_event(f"pay:{order}")
    return [hotel, plane, note]


async def test_cancelling_a_durable_task_undoes_its_not_idempotent_steps_last_first(
    tmp_path: Path,
) -> None:
    UNDONE.clear()
    rig = await make_rig(tmp_path / "c", ManualClock(), trip)
    try:
        sub = await rig.engine.submit("trip", "t9")
        await _until(rig, sub.task_id, TaskStatus.WAITING)
        await rig.engine.cancel_task(sub.task_id, operator="alice", reason="trip called off")
        async with asyncio.timeout(10):
            done = await rig.engine.wait(sub.task_id)
        assert done.status is TaskStatus.CANCELLED and done.quiescent
        assert done.steps["main"].status is StepStatus.COMPENSATED
        assert UNDONE == ["t9-p:seat-t9-p", "t9:seat-t9"]  # the plane, then the hotel
        assert "STEP_COMPENSATED" in _types(rig, sub.task_id)
    finally:
        await rig.engine.stop()
        await rig.store.close()


approval_v2 = DurableWorkflow("approval", version=2)


@approval_v2.main
async def approval_next(ctx: DurableContext, order: Any) -> Any:
    return "v2"


async def test_a_task_whose_version_is_not_loaded_waits_for_it_and_says_so(
    tmp_path: Path,
) -> None:
    """Issue 18, item 6: a task runs the version it started with; a deploy that drops
    it leaves the task waiting with a problem that names the version, not failed."""
    rig = await _rig(tmp_path)
    ledger = tmp_path / "ledger"
    sub = await rig.engine.submit("approval", {"id": "o9", "ledger": str(ledger)})
    await _until(rig, sub.task_id, TaskStatus.WAITING)
    rig = await rig.reopen(approval_v2)  # the new deploy has v2 only
    try:
        await rig.engine.send_event("approval:o9", {"by": "ann"})
        async with asyncio.timeout(10):
            while sub.task_id not in rig.engine.problems:
                await asyncio.sleep(0.005)
        assert rig.engine.problems[sub.task_id] == "workflow 'approval' v1 is not loaded here"
        task = rig.store.state.peek(sub.task_id)
        assert task is not None and task.status is TaskStatus.WAITING
        assert task.steps["main"].status is StepStatus.WAITING  # not failed, not woken
        rig = await rig.reopen(approval, approval_v2)  # v1 is back: the task goes on
        async with asyncio.timeout(10):
            done = await rig.engine.wait(sub.task_id)
        assert done.status is TaskStatus.SUCCEEDED
        assert done.steps["main"].result["approved_by"] == {"by": "ann"}
        assert _ledger(ledger) == ["charge", "ship"]
        assert sub.task_id not in rig.engine.problems
    finally:
        await rig.engine.stop()
        await rig.store.close()
