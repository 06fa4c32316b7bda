"""A retry that comes due while every slot is taken waits for a slot without a decision:
deciding it then could only queue it (engine.py `_woken_up`), and it is decided once,
when a slot frees."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from pathlib import Path

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import Engine, SubmitItem
from apollo11.scheduler.engine.engine import RETRY_WINDOW_S
from apollo11.scheduler.engine.timers import window_end
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.state.store import Store
from apollo11.scheduler.workflow import Idempotent, Registry, Retry, StepContext, Workflow
from tests.scheduler.test_engine import CFG, make_rig


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


async def test_a_hundred_retries_due_together_wake_once_a_window_none_before_its_time(
    tmp_path: Path,
) -> None:
    """Retries due within one window (RETRY_WINDOW_S) wake the engine once for them
    all, at its end or with a pass already running, never before their recorded
    delay: before, each woke the loop on its own (engine.py, timers.py)."""
    flaky = Workflow("flaky")

    @flaky.step(idempotency=Idempotent(), retry=Retry(attempts=3, backoff_s=0.2, jitter=0.5))
    async def s(ctx: StepContext) -> None:
        if ctx.attempt == 1:
            raise TimeoutError("upstream down")

    registry = Registry()
    registry.register(flaky)
    store = Store.open(tmp_path / "d", config=CFG, instance_id="n1")
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node": "n1"})
    # no retry budget: the hundred are due together, not paced apart
    engine = Engine(store, registry, node_id="n1", concurrency=128, retry_budget=None)
    wakes: list[int] = []
    fire = engine._timers._fire

    def counted(keys: list[Hashable]) -> None:
        wakes.append(len(keys))
        fire(keys)

    engine._timers._fire = counted
    await engine.start()
    try:
        # one batch: their first attempts start in one pass and fail close together
        ids = [t.task_id for t in await engine.submit_many([SubmitItem("flaky")] * 100)]
        async with asyncio.timeout(60):
            for task_id in ids:
                assert (await engine.wait(task_id)).status is TaskStatus.SUCCEEDED
        failed: dict[str, tuple[int, float]] = {}
        started: dict[str, int] = {}
        for e in store.log.read():
            if e.event_type is EventType.STEP_FAILED:
                failed[e.task_id] = (e.timestamp, float(e.payload["retry_in_s"]))
            elif e.event_type is EventType.STEP_STARTED and e.attempt == 2:
                started[e.task_id] = e.timestamp
        assert set(started) == set(ids)
        windows = set()
        for task_id in ids:
            failed_ms, retry_in_s = failed[task_id]
            due = failed_ms / 1000 + retry_in_s  # as retry.due_at reads the log
            # never before its recorded delay (a timestamp is the ms it falls in)
            assert started[task_id] >= due * 1000 - 1, task_id
            windows.add(window_end(due, RETRY_WINDOW_S))
        # fewer windows than retries: several shared one; about one wake-up a window
        # (fewer: a pass took them first). Twice as many at most: on a loaded machine
        # a pass that decides a failure late arms its retry once its window has ended,
        # and that wakes the loop once more (main before the change: 64 for 14).
        assert len(windows) < len(ids)
        assert len(wakes) <= 2 * len(windows), (wakes, len(windows))
    finally:
        await engine.stop()
        await store.close()
