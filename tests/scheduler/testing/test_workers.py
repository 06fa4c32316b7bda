"""The testing kit's workers (issue 33): steps run on the real worker code over the
engine's Workers stream; a worker killed mid-step loses its attempt, which is
retried once, and a step that had succeeded never runs again."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from apollo11.scheduler.errors import FailedPreconditionError
from apollo11.scheduler.workflow import Idempotent, Retry, StepContext, Workflow
from apollo11.testing import WorkflowEnvironment

# What ran, and where: (step, attempt, worker) for every execution.
RAN: list[tuple[str, int, str | None]] = []
ENTERED: list[asyncio.Event] = []  # the slow step began (on the worker, in this loop)

pipeline = Workflow("kit_pipeline", version=1)


@pipeline.step(idempotency=Idempotent())
async def fetch(ctx: StepContext) -> dict[str, Any]:
    RAN.append((ctx.step, ctx.attempt, ctx.worker))
    return {"rows": 3}


@pipeline.step(after=["fetch"], idempotency=Idempotent(), retry=Retry(attempts=3, backoff_s=60))
async def crunch(ctx: StepContext) -> dict[str, Any]:
    RAN.append((ctx.step, ctx.attempt, ctx.worker))
    if ctx.attempt == 1:
        ENTERED[0].set()
        await asyncio.sleep(3600)  # real time: only a kill ends it
    return {"rows": ctx.results["fetch"]["rows"] * 2}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    RAN.clear()
    ENTERED[:] = [asyncio.Event()]


async def test_a_step_on_a_killed_worker_is_retried_once_and_the_task_succeeds() -> None:
    async with WorkflowEnvironment(workflows=[pipeline], workers=1) as env:
        assert env.workers == ["w1"]
        h = await env.submit(pipeline)
        async with asyncio.timeout(10):
            await ENTERED[0].wait()
        assert await env.kill_worker() == "killed w1: 1 attempt(s) lost"
        assert env.workers == []
        # the retry's backoff (60 s) passes on the virtual clock; no worker yet
        await env.advance(timedelta(minutes=2))
        view = await h.task()
        assert view.state == "RUNNING" and "no worker" in (view.blocked or "")
        assert await env.start_worker() == "w2"
        assert await h.result() == {"fetch": {"rows": 3}, "crunch": {"rows": 6}}
        events = [(e.event_type, e.step_name, e.attempt) for e in await env.history(h)]
        failed = [e for e in await env.history(h) if e.event_type == "STEP_FAILED"]
        await env.replay_check()
    assert RAN == [("fetch", 1, "w1"), ("crunch", 1, "w1"), ("crunch", 2, "w2")]
    assert Counter(step for step, _, _ in RAN) == {"fetch": 1, "crunch": 2}
    assert events == [
        ("TASK_SUBMITTED", "", 0),
        ("STEP_STARTED", "fetch", 1),
        ("STEP_SUCCEEDED", "fetch", 1),
        ("STEP_STARTED", "crunch", 1),
        ("STEP_FAILED", "crunch", 1),  # lost with its worker
        ("STEP_STARTED", "crunch", 2),
        ("STEP_SUCCEEDED", "crunch", 2),
    ]
    assert failed[0].payload["lost"] is True and "w1" in failed[0].payload["error"]


async def test_workers_follow_a_failover_and_what_succeeded_does_not_run_again() -> None:
    async with WorkflowEnvironment(workflows=[pipeline], workers=1) as env:
        h = await env.submit(pipeline)
        async with asyncio.timeout(10):
            await ENTERED[0].wait()
        await env.kill_worker()
        said = await env.fail_over()
        assert said.startswith("node-2 took over in term 2")
        await env.start_worker()
        assert (await h.result())["crunch"] == {"rows": 6}
    assert [(s, a) for s, a, _ in RAN] == [("fetch", 1), ("crunch", 1), ("crunch", 2)]


async def test_kill_worker_without_workers_says_how_to_have_them() -> None:
    async with WorkflowEnvironment(workflows=[pipeline]) as env:
        with pytest.raises(FailedPreconditionError) as e:
            await env.kill_worker()
    assert "WorkflowEnvironment(workers=1)" in str(e.value)


GATE: list[asyncio.Event] = []
held = Workflow("kit_held", version=1)


@held.step(idempotency=Idempotent())
async def hold(ctx: StepContext) -> str:
    RAN.append((ctx.step, ctx.attempt, ctx.worker))
    ENTERED[0].set()
    await GATE[0].wait()
    return ctx.node_id


async def test_a_failover_mid_step_the_worker_runs_on_and_the_new_primary_adopts_it() -> None:
    GATE[:] = [asyncio.Event()]
    async with WorkflowEnvironment(workflows=[held], workers=1) as env:
        h = await env.submit(held)
        async with asyncio.timeout(10):
            await ENTERED[0].wait()
        await env.fail_over(at_rest=False)  # the worker reconnects, reporting it
        GATE[0].set()
        assert await h.result() == {"hold": "node-1"}  # the attempt node-1 started
        kinds = [e.event_type for e in await env.history(h)]
    assert RAN == [("hold", 1, "w1")]
    assert kinds == ["TASK_SUBMITTED", "STEP_STARTED", "STEP_SUCCEEDED"]
