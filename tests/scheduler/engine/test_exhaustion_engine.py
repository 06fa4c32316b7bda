"""on_exhausted through the engine, on a real store: a paused task resumed by an
operator's retry, and a task compensated in reverse dependency order; then the log
replayed from its first event folds to the same state (issue 32 part 2)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.errors import FailedPreconditionError
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import State, StepStatus, TaskStatus, replay
from apollo11.scheduler.workflow import (
    Idempotent,
    NotIdempotent,
    Retry,
    StepContext,
    StepError,
    Workflow,
)
from tests.scheduler.test_engine import Rig, make_rig


@pytest.fixture
async def rigs(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    made: list[Rig] = []

    async def make(*workflows: Workflow) -> Rig:
        r = await make_rig(tmp_path / f"d{len(made)}", FakeClock(), *workflows)
        made.append(r)
        return r

    yield make
    for r in made:
        await r.engine.stop()
        await r.store.close()


async def _until(rig: Rig, task_id: str, status: TaskStatus) -> None:
    async with asyncio.timeout(10):
        while rig.store.state.tasks[task_id].status is not status:
            await asyncio.sleep(0.01)


def _replayed(rig: Rig, task_id: str) -> dict[str, Any]:
    return replay(rig.store.log.read(), State()).tasks[task_id].to_dict()


async def test_pause_then_an_operators_retry_runs_it_again_and_it_succeeds(rigs: Any) -> None:
    broken = {"yes": True}
    calls: list[str] = []
    wf = Workflow("billing", on_exhausted="pause")  # the workflow's default

    @wf.step(idempotency=Idempotent())
    def fetch(ctx: StepContext) -> str:
        calls.append("fetch")
        return "rows"

    @wf.step(after=["fetch"], idempotency=Idempotent(), retry=Retry(attempts=2, backoff_s=0))
    def charge(ctx: StepContext) -> str:
        calls.append(f"charge:{ctx.attempt}")
        if broken["yes"]:
            raise StepError("card processor down")
        return "charged"

    rig = await rigs(wf)
    sub = await rig.engine.submit("billing")
    await _until(rig, sub.task_id, TaskStatus.PAUSED)
    task = rig.store.state.tasks[sub.task_id]
    assert task.paused is not None and task.paused["step"] == "charge"
    assert not task.quiescent  # never archived as finished
    kinds = [k for k, *_ in rig.events(sub.task_id)]
    assert kinds.count("TASK_PAUSED") == 1
    failed = [p for k, s, _, p in rig.events(sub.task_id) if k == "STEP_FAILED"]
    assert failed[-1]["exhausted"] == "pause" and failed[-1]["final"] is True
    # a retry that names no step resumes it: the step runs with a fresh budget
    broken["yes"] = False
    await rig.engine.retry_step(sub.task_id, "", operator="alice", reason="processor back")
    async with asyncio.timeout(10):
        done = await rig.engine.wait(sub.task_id)
    assert done.status is TaskStatus.SUCCEEDED and done.paused is None
    assert calls == ["fetch", "charge:1", "charge:2", "charge:3"]  # fetch not run again
    override = done.steps["charge"].override
    assert override is not None
    assert (override["action"], override["operator"]) == ("retry", "alice")
    overrides = [p for k, _, _, p in rig.events(sub.task_id) if k == "MANUAL_OVERRIDE"]
    assert overrides == [{"action": "retry", "operator": "alice", "reason": "processor back"}]
    assert _replayed(rig, sub.task_id) == done.to_dict()


async def test_a_resume_of_a_task_with_nothing_failed_for_good_is_refused(rigs: Any) -> None:
    wf = Workflow("ok")
    wf.step(idempotency=Idempotent())(lambda ctx: None)
    rig = await rigs(wf)
    task_id = await rig.run("ok")
    with pytest.raises(FailedPreconditionError, match="no step of it failed for good"):
        await rig.engine.retry_step(task_id, "", operator="bob", reason="why not")


async def test_compensate_undoes_the_succeeded_steps_dependents_first(rigs: Any) -> None:
    undone: list[str] = []
    wf = Workflow("order", on_exhausted="compensate")

    def undo(ctx: StepContext) -> None:
        undone.append(ctx.step)

    for name, after in (("reserve", []), ("pay", ["reserve"]), ("email", ["reserve"])):
        wf.step(name=name, after=after, idempotency=NotIdempotent(compensate=undo))(
            lambda ctx: "done"
        )

    @wf.step(after=["pay", "email"], idempotency=Idempotent(), retry=Retry(attempts=2, backoff_s=0))
    def ship(ctx: StepContext) -> None:
        raise ValueError("no courier")

    rig = await rigs(wf)
    sub = await rig.engine.submit("order")
    async with asyncio.timeout(10):
        task = await rig.engine.wait(sub.task_id)
    assert task.status is TaskStatus.COMPENSATED
    assert undone[-1] == "reserve" and sorted(undone[:2]) == ["email", "pay"]
    assert len(undone) == 3  # each once
    for name in ("reserve", "pay", "email"):
        assert task.steps[name].status is StepStatus.COMPENSATED
    assert task.steps["ship"].status is StepStatus.FAILED
    assert task.compensating is not None
    assert task.compensating["compensate"] == ["reserve", "pay", "email"]
    kinds = [k for k, *_ in rig.events(sub.task_id)]
    assert kinds.count("TASK_COMPENSATING") == 1
    with pytest.raises(FailedPreconditionError, match="compensated"):
        await rig.engine.retry_step(sub.task_id, "ship", operator="bob", reason="again")
    assert _replayed(rig, sub.task_id) == task.to_dict()


async def test_an_old_style_fail_still_fails(rigs: Any) -> None:
    wf = Workflow("plain")

    @wf.step(idempotency=Idempotent(), retry=Retry(attempts=1))
    def boom(ctx: StepContext) -> None:
        raise RuntimeError("boom")

    rig = await rigs(wf)
    task_id = await rig.run("plain")
    assert rig.store.state.tasks[task_id].status is TaskStatus.FAILED
    failed = [p for k, _, _, p in rig.events(task_id) if k == "STEP_FAILED"]
    assert "exhausted" not in failed[-1]
    assert EventType.TASK_PAUSED not in {e.event_type for e in rig.store.log.read()}


# ------------------------------------------------------------------ durable mains


async def test_a_durable_main_pauses_and_resumes_from_its_checkpoints(rigs: Any) -> None:
    from apollo11.scheduler.durable import DurableContext, DurableWorkflow

    ran: list[str] = []
    broken = {"yes": True}
    dw = DurableWorkflow("pipeline", on_exhausted="pause")

    def load(n: int) -> int:
        ran.append(f"load{n}")
        return n

    @dw.main
    async def main(ctx: DurableContext, input: Any) -> int:
        n = await ctx.step("load", load, 1, idempotency=Idempotent())
        if broken["yes"]:
            raise RuntimeError("bug in the main")
        return int(n) + 1

    rig = await rigs(dw)
    sub = await rig.engine.submit("pipeline")
    await _until(rig, sub.task_id, TaskStatus.PAUSED)
    broken["yes"] = False  # the bug fixed
    await rig.engine.retry_step(sub.task_id, "", operator="carol", reason="fixed")
    async with asyncio.timeout(10):
        task = await rig.engine.wait(sub.task_id)
    assert task.status is TaskStatus.SUCCEEDED and task.steps["main"].result == 2
    assert ran == ["load1"]  # replayed from its checkpoint, not run again


async def test_a_durable_main_that_fails_for_good_undoes_its_steps_last_first(rigs: Any) -> None:
    from apollo11.scheduler.durable import DurableContext, DurableWorkflow

    undone: list[str] = []
    dw = DurableWorkflow("booking", on_exhausted="compensate")

    def book(what: str) -> str:
        return what

    def unbook(output: Any, what: str) -> None:
        undone.append(what)

    @dw.main
    async def main(ctx: DurableContext, input: Any) -> None:
        for what in ("flight", "hotel"):
            await ctx.step(what, book, what, idempotency=NotIdempotent(compensate=unbook))
        raise RuntimeError("no car")

    rig = await rigs(dw)
    sub = await rig.engine.submit("booking")
    async with asyncio.timeout(10):
        task = await rig.engine.wait(sub.task_id)
    assert task.status is TaskStatus.COMPENSATED
    assert undone == ["hotel", "flight"]


async def test_a_ctx_steps_own_on_exhausted_is_refused_naming_where_it_belongs(rigs: Any) -> None:
    from apollo11.scheduler.durable import DurableContext, DurableWorkflow

    dw = DurableWorkflow("odd")

    @dw.main
    async def main(ctx: DurableContext, input: Any) -> None:
        await ctx.step("x", len, "ab", idempotency=Idempotent(), retry=Retry(on_exhausted="pause"))

    rig = await rigs(dw)
    sub = await rig.engine.submit("odd")
    async with asyncio.timeout(10):
        task = await rig.engine.wait(sub.task_id)
    assert task.status is TaskStatus.FAILED
    assert "pass on_exhausted= to DurableWorkflow" in (task.steps["main"].error or "")


async def test_a_pause_whose_write_failed_is_written_again(
    rigs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's TASK_PAUSED refused by the log (an error, not leadership lost) is
    not forgotten: the task is decided again, and written once the log takes it."""
    from apollo11.scheduler.engine import exhaustion
    from apollo11.scheduler.errors import ApolloError

    real = exhaustion.record
    tries: list[str] = []

    async def flaky(store: Any, task_id: str, action: Any) -> Any:
        tries.append(task_id)
        if len(tries) == 1:
            raise ApolloError("append refused (a test's fault)")
        return await real(store, task_id, action)

    monkeypatch.setattr(exhaustion, "record", flaky)
    wf = Workflow("flaky", on_exhausted="pause")

    @wf.step(idempotency=Idempotent(), retry=Retry(attempts=1))
    def once(ctx: StepContext) -> None:
        raise StepError("down")

    rig = await rigs(wf)
    sub = await rig.engine.submit("flaky")
    await _until(rig, sub.task_id, TaskStatus.PAUSED)
    assert len(tries) == 2
    kinds = [k for k, *_ in rig.events(sub.task_id)]
    assert kinds.count("TASK_PAUSED") == 1
