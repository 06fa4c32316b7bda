"""The retry budget through the engine (scheduler/retrypace.py, engine/retrypacer.py):
a herd of failures is spread, a step failing now and then is not delayed, and a
replay of the log decides as the primary did."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.cause import verdict_line
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import SubmitItem, decide
from apollo11.scheduler.engine.decide import WakeAt
from apollo11.scheduler.engine.retrypacer import RetryPacer
from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.state import State, apply
from apollo11.scheduler.tools.bench.retries_bench import worst_second
from apollo11.scheduler.workflow import Idempotent, Retry, StepContext, Workflow
from tests.scheduler.test_engine import Rig, make_rig

HERD = 1_000


def fails_first(name: str, *, every: int = 1) -> Workflow:
    """One step: its first attempt fails (of tasks whose input's n is a multiple of
    `every`), the retry succeeds; the default Retry()."""
    wf = Workflow(name)

    async def call(ctx: StepContext) -> None:
        if ctx.attempt == 1 and ctx.input["n"] % every == 0:
            raise TimeoutError("upstream down")

    wf.step(name="call", idempotency=Idempotent(), retry=Retry())(call)
    return wf


@pytest.fixture
async def rigs() -> AsyncIterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for r in made:
        await r.engine.stop()
        await r.store.close()


def _by_type(rig: Rig, kind: EventType) -> list[Event]:
    return [e for e in rig.store.log.read() if e.event_type is kind and e.task_id]


async def test_a_herd_failing_together_is_spread_and_a_replay_agrees(
    rigs: list[Rig], tmp_path: Path
) -> None:
    wf = fails_first("herd")
    rig = await make_rig(tmp_path / "n1", FakeClock(), wf, concurrency=HERD)
    rigs.append(rig)
    before = metrics.RETRIES_PACED.labels("herd", "call")._value.get()
    ids: list[str] = []
    for k in range(0, HERD, 500):
        batch = [SubmitItem("herd", {"n": n}) for n in range(k, k + 500)]
        ids += [x.task_id for x in await rig.engine.submit_many(batch)]
    async with asyncio.timeout(120):
        await asyncio.gather(*(rig.engine.wait(t) for t in ids))
    failed = _by_type(rig, EventType.STEP_FAILED)
    retries = [e for e in _by_type(rig, EventType.STEP_STARTED) if e.attempt == 2]
    assert len(failed) == len(retries) == HERD
    assert max(e.timestamp for e in failed) - min(e.timestamp for e in failed) == 0
    # no second of the log's time holds more than 5 % of the herd's retries
    worst = worst_second([e.timestamp for e in retries])
    assert worst <= 0.05 * HERD, worst
    paced = [e for e in failed if e.payload.get("paced_s")]
    assert len(paced) >= HERD - 10
    assert metrics.RETRIES_PACED.labels("herd", "call")._value.get() - before == len(paced)
    assert max(e.payload["failing"] for e in paced) == HERD
    # a replay (a standby's) wakes each step when the primary's verdict said: the
    # pacing is in the recorded verdict, not recomputed
    standby = State()
    started = {e.task_id: e.timestamp for e in retries}
    for e in rig.store.log.read():
        apply(standby, e)
        if e.event_type is not EventType.STEP_FAILED:
            continue
        task = standby.tasks[e.task_id]
        wake = [a for a in decide(task, wf, (), e.timestamp / 1000) if isinstance(a, WakeAt)]
        assert len(wake) == 1
        assert wake[0].at == pytest.approx(e.timestamp / 1000 + e.payload["retry_in_s"])
        # never before (a fake clock's sleepers move it on together: later is no news)
        assert started[e.task_id] / 1000 >= wake[0].at - 0.001
    for t in ids[:: HERD // 20]:
        primary = rig.store.state.peek(t)
        assert primary is not None and standby.tasks[t].to_dict() == primary.to_dict()


async def test_a_step_failing_now_and_then_is_not_delayed(rigs: list[Rig], tmp_path: Path) -> None:
    clock = FakeClock()
    rig = await make_rig(tmp_path / "n1", clock, fails_first("steady", every=10))
    rigs.append(rig)
    for n in range(200):  # one task every 50 ms, one in ten failing once
        sub = await rig.engine.submit("steady", {"n": n})
        async with asyncio.timeout(10):
            await rig.engine.wait(sub.task_id)
        clock.advance(0.05)
    failed = _by_type(rig, EventType.STEP_FAILED)
    assert len(failed) == 20
    assert not any("paced_s" in e.payload for e in failed)
    assert all(0.8 <= e.payload["retry_in_s"] <= 1.2 for e in failed)


async def test_no_budget_no_pacing(rigs: list[Rig], tmp_path: Path) -> None:
    """`retry_budget=None` (a node's retry_budget_min = 0): the herd is not paced."""
    rig = await make_rig(tmp_path / "n1", FakeClock(), fails_first("herd"), concurrency=64)
    rigs.append(rig)
    rig.engine.steps.pacer = RetryPacer(None)
    subs = await rig.engine.submit_many([SubmitItem("herd", {"n": n}) for n in range(64)])
    async with asyncio.timeout(20):
        await asyncio.gather(*(rig.engine.wait(s.task_id) for s in subs))
    failed = _by_type(rig, EventType.STEP_FAILED)
    assert len(failed) == 64 and not any("paced_s" in e.payload for e in failed)


async def test_failures_of_tasks_that_start_nothing_more_take_no_slot(
    rigs: list[Rig], tmp_path: Path
) -> None:
    """A step failing in a task already failed for good (here: another step's retries
    ran out) will not run again on its own: it takes no place in its step's budget,
    which would delay the retries of the tasks that will run again."""
    n = 40
    wf = Workflow("doomed")
    state = State()  # the rig's, once it is made

    @wf.step(name="bad", idempotency=Idempotent(), retry=Retry(attempts=1))
    def bad(ctx: StepContext) -> None:
        raise ValueError("bad input")

    @wf.step(name="call", idempotency=Idempotent(), retry=Retry())
    async def call(ctx: StepContext) -> None:
        while not state.tasks[ctx.task_id].failed_final:
            await asyncio.sleep(0.01)  # until `bad` failed for good
        raise TimeoutError("upstream down")

    rig = await make_rig(tmp_path / "n1", FakeClock(), wf, concurrency=2 * n)
    rigs.append(rig)
    state = rig.store.state
    subs = await rig.engine.submit_many([SubmitItem("doomed", {"n": k}) for k in range(n)])
    async with asyncio.timeout(60):
        await asyncio.gather(*(rig.engine.wait(s.task_id) for s in subs))
    calls = [e for e in _by_type(rig, EventType.STEP_FAILED) if e.step_name == "call"]
    assert len(calls) == n
    assert not any(e.payload.get("paced_s") for e in calls)
    window = rig.engine.steps.pacer._keys.get(("doomed", "call"))
    assert window is None or window.tat_ms is None


async def test_attempts_lost_at_a_takeover_are_paced_and_a_replay_agrees(
    rigs: list[Rig], tmp_path: Path
) -> None:
    """A herd of attempts lost with their primary is failed as lost by the next one all
    at once: their retries are paced by the step's budget like any herd (issue 32)."""
    n = 60
    hang = Workflow("herdlost")

    @hang.step(name="call", idempotency=Idempotent(), retry=Retry())
    async def call(ctx: StepContext) -> None:
        await asyncio.Event().wait()  # runs until its primary is gone

    clock = FakeClock()
    old = await make_rig(tmp_path / "n1", clock, hang, concurrency=n)
    subs = await old.engine.submit_many([SubmitItem("herdlost", {"n": k}) for k in range(n)])
    async with asyncio.timeout(30):
        while sum(old.store.state.tasks[s.task_id].steps["call"].attempt for s in subs) < n:
            await asyncio.sleep(0.01)
    ok = Workflow("herdlost")
    ok.step(name="call", idempotency=Idempotent(), retry=Retry())(lambda ctx: None)
    rig = await old.reopen(ok)  # the next primary, over the same log
    rigs.append(rig)
    async with asyncio.timeout(60):
        await asyncio.gather(*(rig.engine.wait(s.task_id) for s in subs))
    lost = [e for e in _by_type(rig, EventType.STEP_FAILED) if e.payload.get("lost")]
    assert len(lost) == n
    paced = [e for e in lost if e.payload.get("paced_s")]
    assert len(paced) >= n - 10  # past the burst, each waits for its slot
    assert max(e.payload["failing"] for e in paced) == n
    line = verdict_line(paced[-1].payload)
    assert line is not None and line.startswith("lost (its node died) → retry in ")
    assert f"s paced: {n} failing)" in line
    # the pacing is in the record: a replay (a standby's) wakes each when it says
    standby = State()
    for e in rig.store.log.read():
        apply(standby, e)
        if e in paced:
            task = standby.tasks[e.task_id]
            wake = [a for a in decide(task, ok, (), e.timestamp / 1000) if isinstance(a, WakeAt)]
            assert wake and wake[0].at == pytest.approx(
                e.timestamp / 1000 + e.payload["retry_in_s"]
            )
            assert e.payload["retry_in_s"] >= e.payload["paced_s"]
