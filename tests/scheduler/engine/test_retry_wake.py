"""A retry that comes due while every slot is taken waits for a slot without a decision:
deciding it then could only queue it (engine.py `_woken_up`), and it is decided once,
when a slot frees."""

from __future__ import annotations

import asyncio
from pathlib import Path

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.workflow import Idempotent, Retry, StepContext, Workflow
from tests.scheduler.test_engine import make_rig


class _HeldClock(FakeClock):
    """Moves only when the test says: a sleeper waits for it (a FakeClock's sleep jumps
    ahead, which would fire the retry's timer at once)."""

    async def sleep(self, seconds: float) -> None:
        end = self.t + seconds
        while self.t < end:
            await asyncio.sleep(0.002)


async def _until(ok: object, what: str) -> None:
    assert callable(ok)
    async with asyncio.timeout(20):
        while not ok():
            await asyncio.sleep(0.005)


async def test_a_retry_due_while_every_slot_is_taken_is_decided_once(tmp_path: Path) -> None:
    gate = asyncio.Event()
    holding = asyncio.Event()
    flaky = Workflow("flaky")

    @flaky.step(idempotency=Idempotent(), retry=Retry(attempts=3, backoff_s=1, jitter=0))
    async def s(ctx: StepContext) -> None:
        if ctx.attempt == 1:
            raise TimeoutError("upstream down")

    hold = Workflow("hold")

    @hold.step(idempotency=Idempotent())
    async def h(ctx: StepContext) -> None:
        holding.set()
        await gate.wait()

    clock = _HeldClock()
    rig = await make_rig(tmp_path / "d", clock, flaky, hold, concurrency=1)
    engine = rig.engine
    try:
        a = (await engine.submit("flaky")).task_id
        # its first attempt failed and freed the slot; its retry is armed for 1 s on
        await _until(lambda: (a, "s") in engine._timers and not engine.is_busy(a, "s"), "armed")
        b = (await engine.submit("hold")).task_id
        async with asyncio.timeout(20):
            await holding.wait()  # the one slot is taken
        await _until(lambda: b not in engine._dirty, "b decided")
        decided = engine.decisions
        clock.advance(2)
        await _until(lambda: (a, "s") not in engine._timers, "the retry came due")
        await asyncio.sleep(0.05)  # a pass of the loop, if one was owed
        # nothing to decide: it waits for the slot, as deciding it would have made it
        assert engine.decisions == decided
        assert rig.store.state.tasks[a].status is not TaskStatus.SUCCEEDED
        gate.set()
        async with asyncio.timeout(20):
            await engine.wait(b)
            done = await engine.wait(a)
        assert done.status is TaskStatus.SUCCEEDED
        starts = [
            e.attempt
            for e in rig.store.log.read()
            if e.event_type is EventType.STEP_STARTED and e.task_id == a
        ]
        assert starts == [1, 2]
    finally:
        await engine.stop()
        await rig.store.close()
