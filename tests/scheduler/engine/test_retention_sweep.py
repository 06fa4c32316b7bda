"""The retention sweep through the engine on a fake clock: tasks purged by workflow
and status as time passes, a held one kept, the purge a replayable event."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apollo11.scheduler import retention
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import RetentionOptions
from apollo11.scheduler.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import State, replay
from apollo11.scheduler.workflow import Idempotent, StepContext, StepError, Workflow
from tests.scheduler.test_engine import Rig, make_rig

DAY = 86_400


def _workflows() -> list[Workflow]:
    out = []
    for name in ("etl", "nightly"):
        wf = Workflow(name)

        @wf.step(idempotency=Idempotent())
        def work(ctx: StepContext) -> str:
            if ctx.input == "fail":
                raise StepError("asked to")
            return "ok"

        out.append(wf)
    return out


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    r = await make_rig(tmp_path / "d", FakeClock(), *_workflows())
    r.engine.retention.options = RetentionOptions(
        rules=retention.parse("FAILED=90d,SUCCEEDED=7d,etl:*=30d,etl:FAILED=365d")
    )
    yield r
    await r.engine.stop()
    await r.store.close()


async def _finish(rig: Rig, workflow: str, fail: bool) -> str:
    sub = await rig.engine.submit(workflow, "fail" if fail else "go")
    await rig.engine.wait(sub.task_id)
    return sub.task_id


async def test_tasks_are_purged_by_workflow_and_status_as_time_passes(rig: Rig) -> None:
    ids: dict[str, str] = {}
    for wf in ("etl", "nightly"):
        for fail in (False, True):
            ids[f"{wf}:{'FAILED' if fail else 'SUCCEEDED'}"] = await _finish(rig, wf, fail)
    held = await _finish(rig, "nightly", False)
    await rig.engine.retention.hold(held, operator="ann", reason="litigation", held=True)
    sweep = rig.engine.retention.sweep

    def alive() -> set[str]:
        return {k for k, t in ids.items() if rig.store.state.peek(t) is not None}

    assert await sweep() == ""
    rig.clock.advance(7 * DAY + 1)
    assert "purged 1 tasks" in await sweep()
    assert alive() == {"etl:SUCCEEDED", "etl:FAILED", "nightly:FAILED"}
    rig.clock.advance(23 * DAY)
    await sweep()
    assert alive() == {"etl:FAILED", "nightly:FAILED"}
    rig.clock.advance(60 * DAY)
    await sweep()
    assert alive() == {"etl:FAILED"}
    rig.clock.advance(275 * DAY)
    await sweep()
    assert alive() == set()
    assert rig.store.state.peek(held) is not None, "a held task is never purged"
    assert rig.engine.retention.purged == 4

    with pytest.raises(NotFoundError, match="purged by retention"):
        await rig.engine.retention.hold(
            ids["etl:FAILED"], operator="ann", reason="too late", held=True
        )
    # every replay drops the same tasks
    again = replay(rig.store.log.read(), State())
    assert again.to_dict() == rig.store.state.to_dict()

    await rig.engine.retention.hold(held, operator="bob", reason="", held=False)
    await sweep()
    assert rig.store.state.peek(held) is None, "released, it is purged like any other"
    kinds = [e.event_type for e in rig.store.log.read()]
    assert kinds.count(EventType.TASK_PURGED) == 5
    assert kinds.count(EventType.TASK_HELD) == 2


async def test_holds_refuse_what_makes_no_sense(rig: Rig) -> None:
    task = await _finish(rig, "etl", False)
    hold = rig.engine.retention.hold
    with pytest.raises(InvalidArgumentError, match="reason is required"):
        await hold(task, operator="ann", reason=" ", held=True)
    with pytest.raises(InvalidArgumentError, match="at most 1024"):
        await hold(task, operator="ann", reason="x" * 1025, held=True)
    with pytest.raises(FailedPreconditionError, match="is not held"):
        await hold(task, operator="ann", reason="", held=False)
    await hold(task, operator="ann", reason="audit", held=True)
    with pytest.raises(FailedPreconditionError, match="is held already"):
        await hold(task, operator="ann", reason="audit", held=True)
    assert rig.store.state.holds[task]["by"] == "ann"
    with pytest.raises(NotFoundError, match="no task 'nope'"):
        await hold("nope", operator="ann", reason="x", held=True)


async def test_counted_from_submit(rig: Rig) -> None:
    rig.engine.retention.options = RetentionOptions(
        rules=retention.parse("SUCCEEDED=7d"), counted_from="submit"
    )
    task = await _finish(rig, "nightly", False)
    rig.clock.advance(7 * DAY)
    await rig.engine.retention.sweep()
    assert rig.store.state.peek(task) is None


async def test_no_rules_purge_nothing(rig: Rig) -> None:
    rig.engine.retention.options = RetentionOptions()
    task = await _finish(rig, "nightly", True)
    rig.clock.advance(10_000 * DAY)
    assert await rig.engine.retention.sweep() == ""
    assert rig.store.state.peek(task) is not None


async def test_a_sweep_forgets_event_keys_past_their_ttl(rig: Rig) -> None:
    await rig.engine.send_event("k", 1, idempotency_key="once")
    assert "once" in rig.store.state.event_keys
    rig.clock.advance(rig.engine.idempotency_ttl_s + 1)
    assert "forgot event idempotency keys" in await rig.engine.retention.sweep()
    assert "once" not in rig.store.state.event_keys
