"""Retries by cause through the engine (issue 32): what a FAILED records, when the next
attempt begins, and a replay of the log (a standby's) deciding the same."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import decide
from apollo11.scheduler.engine.decide import WakeAt
from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.state import State, StepStatus, TaskStatus, apply
from apollo11.scheduler.workflow import FINAL, Idempotent, Retry, StepContext, StepError, Workflow
from tests.scheduler.test_engine import Rig, make_rig

POLICY = Retry(
    attempts=3,
    backoff_s=1,
    jitter=0,
    on={TimeoutError: Retry(attempts=3, backoff_s=0.5, jitter=0), ValueError: FINAL},
)


class ReadTimeout(TimeoutError):
    pass


def flaky(script: list[BaseException | None]) -> Workflow:
    """A workflow whose step raises `script[attempt - 1]` (None: it succeeds)."""
    wf = Workflow("flaky")

    async def call(ctx: StepContext) -> dict[str, int]:
        e = script[ctx.attempt - 1]
        if e is not None:
            raise e
        return {"attempt": ctx.attempt}

    wf.step(name="call", idempotency=Idempotent(), retry=POLICY)(call)
    return wf


@pytest.fixture
async def rigs(tmp_path: Path) -> AsyncIterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for r in made:
        await r.engine.stop()
        await r.store.close()


async def _run(rigs: list[Rig], tmp_path: Path, wf: Workflow) -> tuple[Rig, str]:
    rig = await make_rig(tmp_path / "n1", FakeClock(), wf)
    rigs.append(rig)
    sub = await rig.engine.submit("flaky", None)
    async with asyncio.timeout(20):
        await rig.engine.wait(sub.task_id)
    return rig, sub.task_id


def _failed(rig: Rig, task_id: str) -> list[Event]:
    return [
        e
        for e in rig.store.log.read()
        if e.task_id == task_id and e.event_type is EventType.STEP_FAILED
    ]


async def test_each_cause_is_retried_by_its_rule_and_recorded(
    rigs: list[Rig], tmp_path: Path
) -> None:
    script: list[BaseException | None] = [
        TimeoutError("slow"),
        StepError("rate limited", retry_after=30),
        ReadTimeout("slower"),
        KeyError("k"),
        None,
    ]
    before = metrics.STEP_FAILURE_CAUSES.labels("flaky", "call", "TimeoutError")._value.get()
    rig, task_id = await _run(rigs, tmp_path, flaky(script))
    task = rig.store.state.peek(task_id)
    assert task is not None and task.status is TaskStatus.SUCCEEDED
    assert task.steps["call"].attempt == 5, "two timeouts and two others: no budget spent"
    f = [dict(e.payload) for e in _failed(rig, task_id)]
    assert [p["rule"] for p in f] == [
        "builtins.TimeoutError",
        "default",
        "builtins.TimeoutError",
        "default",
    ]
    assert f[0]["cause"] == {
        "type": "builtins.TimeoutError",
        "mro": [
            "builtins.TimeoutError",
            "builtins.OSError",
            "builtins.Exception",
            "builtins.BaseException",
        ],
        "message": "slow",
    }
    assert f[2]["cause"]["type"] == f"{__name__}.ReadTimeout"
    assert f[1]["cause"]["retry_after_s"] == 30.0 and f[1]["retry_after"] == 30
    assert [p["retry_in_s"] for p in f] == [0.5, 30.0, 1.0, 2.0]
    assert [p["decision"] for p in f] == [
        {"failures": 1, "attempts": 3},
        {"failures": 1, "attempts": 3},
        {"failures": 2, "attempts": 3},
        {"failures": 2, "attempts": 3},
    ]
    assert not any(p["final"] for p in f)
    # Retry-After on the log's time: the next STARTED not before the FAILED + 30 s
    events = [e for e in rig.store.log.read() if e.task_id == task_id]
    failed2 = _failed(rig, task_id)[1]
    started3 = next(e for e in events if e.event_type is EventType.STEP_STARTED and e.attempt == 3)
    assert started3.timestamp - failed2.timestamp >= 30_000
    after = metrics.STEP_FAILURE_CAUSES.labels("flaky", "call", "TimeoutError")._value.get()
    assert after - before == 2


async def test_final_and_a_spent_budget_fail_the_step(rigs: list[Rig], tmp_path: Path) -> None:
    rig, task_id = await _run(rigs, tmp_path, flaky([TimeoutError(), ValueError("bad"), None]))
    task = rig.store.state.peek(task_id)
    assert task is not None and task.status is TaskStatus.FAILED
    last = dict(_failed(rig, task_id)[-1].payload)
    assert (last["rule"], last["final"], "retry_in_s" in last) == (
        "builtins.ValueError",
        True,
        False,
    )
    assert task.steps["call"].error == "ValueError: bad"


async def test_a_replay_of_the_log_decides_as_the_primary_did(
    rigs: list[Rig], tmp_path: Path
) -> None:
    """A standby folds the same events: after each FAILED, `decide` on its replayed
    state wakes the step when the primary ran it again, and the state it reaches is
    the primary's, field for field."""
    script: list[BaseException | None] = [
        TimeoutError(),
        StepError("429", retry_after=12.5),
        ConnectionResetError(),
        TimeoutError(),
        None,
    ]
    wf = flaky(script)
    rig, task_id = await _run(rigs, tmp_path, wf)
    events = [e for e in rig.store.log.read() if e.task_id == task_id]
    standby = State()
    woke = []
    for i, e in enumerate(events):
        apply(standby, e)
        if e.event_type is not EventType.STEP_FAILED:
            continue
        task = standby.tasks[task_id]
        actions = decide(task, wf, (), e.timestamp / 1000)
        wake = [a for a in actions if isinstance(a, WakeAt)]
        assert len(wake) == 1, actions
        nxt = next(x for x in events[i:] if x.event_type is EventType.STEP_STARTED)
        # the primary began it on time (its clock is the fake one: no later either)
        assert nxt.timestamp / 1000 >= wake[0].at
        assert abs(nxt.timestamp / 1000 - wake[0].at) < 0.01
        woke.append(round(wake[0].at - e.timestamp / 1000, 3))
    assert woke == [0.5, 12.5, 2.0, 1.0]
    primary = rig.store.state.tasks[task_id]
    assert standby.tasks[task_id].to_dict() == primary.to_dict()
    assert primary.steps["call"].causes == {"builtins.TimeoutError": 2}
    assert primary.steps["call"].status is StepStatus.SUCCEEDED


async def test_an_engine_timeout_is_a_timeout_error_to_the_rules(
    rigs: list[Rig], tmp_path: Path
) -> None:
    wf = Workflow("flaky")

    async def hang(ctx: StepContext) -> None:
        if ctx.attempt < 3:
            await asyncio.sleep(60)

    wf.step(name="call", idempotency=Idempotent(), timeout=0.05, retry=POLICY)(hang)
    rig, task_id = await _run(rigs, tmp_path, wf)
    task = rig.store.state.peek(task_id)
    assert task is not None and task.status is TaskStatus.SUCCEEDED, "2 timeouts: within 3"
    f = [dict(e.payload) for e in _failed(rig, task_id)]
    assert [(p["rule"], p["timeout"]) for p in f] == [("builtins.TimeoutError", True)] * 2


def _old(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v for k, v in payload.items() if k not in ("cause", "rule", "decision", "retry_in_s")
    }


async def test_an_old_log_without_causes_still_replays(rigs: list[Rig], tmp_path: Path) -> None:
    """FAILED events written before issue 32 (no cause, rule or verdict) replay to the
    state they always did, and a step keeps its old budget and backoff."""
    rig, task_id = await _run(rigs, tmp_path, flaky([KeyError(), TimeoutError(), None]))
    events = [e for e in rig.store.log.read() if e.task_id == task_id]
    standby = State()
    for e in events:
        if e.event_type is EventType.STEP_FAILED:
            e = e._replace(payload=_old(e.payload))
        apply(standby, e)
    step = standby.tasks[task_id].steps["call"]
    assert (step.status, step.attempt, step.causes) == (StepStatus.SUCCEEDED, 3, None)
