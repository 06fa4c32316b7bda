"""One retry rule: a DAG step's attempts and a durable `ctx.step`'s tries, given the
same policy and the same failures, run the same number of times with the same
backoffs (scheduler/retry.py decides both)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.durable import DurableContext, DurableStepError, DurableWorkflow
from apollo11.scheduler.workflow import (
    FINAL,
    Idempotent,
    Retry,
    StepContext,
    StepError,
    Workflow,
)
from tests.scheduler.test_engine import make_rig

# Backoffs far above any other sleep of the engine's, no jitter: the sleeps say the rule.
POLICY = Retry(attempts=3, backoff_s=100, multiplier=2, max_backoff_s=1000, jitter=0, max_lost=6)


def _boom(kind: str) -> Callable[[], None]:
    def boom() -> None:
        if kind == "declared lost":  # a step's own detail is not the engine's word
            raise StepError("card declined", lost=True)
        if kind == "declared final":
            raise StepError("card declined", final=True)
        raise RuntimeError("card declined")

    return boom


async def _dag_runs(tmp_path: Path, kind: str) -> tuple[int, list[float]]:
    runs: list[int] = []
    wf = Workflow("dag")

    def step(ctx: StepContext) -> None:
        runs.append(ctx.attempt)
        _boom(kind)()

    wf.step(name="pay", idempotency=Idempotent(), retry=POLICY)(step)
    clock = FakeClock()
    rig = await make_rig(tmp_path / "dag", clock, wf)
    try:
        sub = await rig.engine.submit("dag", None)
        async with asyncio.timeout(20):
            await rig.engine.wait(sub.task_id)
    finally:
        await rig.engine.stop()
        await rig.store.close()
    return len(runs), [s for s in clock.sleeps if s >= POLICY.backoff_s]


async def _durable_runs(tmp_path: Path, kind: str) -> tuple[int, list[float]]:
    runs: list[int] = []
    wf = DurableWorkflow("durable")

    def step() -> None:
        runs.append(1)
        _boom(kind)()

    @wf.main
    async def main(ctx: DurableContext, _: Any) -> str:
        try:
            await ctx.step("pay", step, idempotency=Idempotent(), retry=POLICY)
        except DurableStepError:
            return "failed for good"
        return "paid"

    clock = FakeClock()
    rig = await make_rig(tmp_path / "durable", clock, wf)
    try:
        sub = await rig.engine.submit("durable", None)
        async with asyncio.timeout(20):
            done = await rig.engine.wait(sub.task_id)
        assert done.steps["main"].result == "failed for good"
    finally:
        await rig.engine.stop()
        await rig.store.close()
    return len(runs), [s for s in clock.sleeps if s >= POLICY.backoff_s]


@pytest.mark.parametrize("kind", ["failure", "declared final", "declared lost"])
async def test_a_dag_step_and_a_ctx_step_retry_alike(tmp_path: Path, kind: str) -> None:
    dag = await _dag_runs(tmp_path, kind)
    durable = await _durable_runs(tmp_path, kind)
    assert dag == durable
    runs, sleeps = dag
    assert runs == (1 if kind == "declared final" else POLICY.attempts)
    assert sleeps == [100.0, 200.0][: runs - 1]


# Rules by cause (issue 32): the same script of failures, the same tries and sleeps.
BY_CAUSE = Retry(
    attempts=2,
    backoff_s=100,
    jitter=0,
    on={
        TimeoutError: Retry(attempts=3, backoff_s=300, max_backoff_s=1000, jitter=0),
        ValueError: FINAL,
    },
)
SCRIPTS: dict[str, tuple[list[Exception], list[float]]] = {
    # two timeouts and one Retry-After of the default rule, then its budget is spent
    "by cause": (
        [TimeoutError(), StepError("429", retry_after=500), TimeoutError(), KeyError()],
        [300.0, 500.0, 600.0],
    ),
    "final": ([TimeoutError(), ValueError("bad")], [300.0]),
}


async def _scripted(tmp_path: Path, script: list[Exception], durable: bool) -> tuple[int, Any]:
    runs: list[int] = []

    def call() -> None:
        runs.append(1)
        raise script[len(runs) - 1]

    if durable:
        wf: Any = DurableWorkflow("w")

        @wf.main
        async def main(ctx: DurableContext, _: Any) -> str:
            try:
                await ctx.step("pay", call, idempotency=Idempotent(), retry=BY_CAUSE)
            except DurableStepError as e:
                return e.type
            return "paid"
    else:
        wf = Workflow("w")
        wf.step(name="pay", idempotency=Idempotent(), retry=BY_CAUSE)(lambda ctx: call())
    clock = FakeClock()
    rig = await make_rig(tmp_path / f"d{durable}", clock, wf)
    try:
        sub = await rig.engine.submit("w", None)
        async with asyncio.timeout(20):
            await rig.engine.wait(sub.task_id)
    finally:
        await rig.engine.stop()
        await rig.store.close()
    return len(runs), [s for s in clock.sleeps if s >= BY_CAUSE.backoff_s]


@pytest.mark.parametrize("name", list(SCRIPTS))
async def test_a_ctx_step_follows_the_rules_by_cause_as_a_dag_step(
    tmp_path: Path, name: str
) -> None:
    script, sleeps = SCRIPTS[name]
    dag = await _scripted(tmp_path, script, durable=False)
    assert dag == (len(script), sleeps)
    assert await _scripted(tmp_path, script, durable=True) == dag


async def test_a_ctx_step_s_bad_policy_is_refused_naming_it(tmp_path: Path) -> None:
    wf = DurableWorkflow("w")

    @wf.main
    async def main(ctx: DurableContext, _: Any) -> str:
        bad = Retry(on={"TimeoutError": Retry()})  # type: ignore[dict-item]
        await ctx.step("pay", lambda: None, idempotency=Idempotent(), retry=bad)
        return "paid"

    rig = await make_rig(tmp_path / "bad", FakeClock(), wf)
    try:
        sub = await rig.engine.submit("w", None)
        async with asyncio.timeout(20):
            done = await rig.engine.wait(sub.task_id)
    finally:
        await rig.engine.stop()
        await rig.store.close()
    error = done.steps["main"].error or ""
    assert "ctx.step 'pay': retry on key 'TimeoutError' is not an exception class" in error
    assert done.steps["main"].final
