"""The engine's wake-ups: one heap, one sleeper, due ones fired together."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from apollo11.scheduler.clock import Clock, FakeClock
from apollo11.scheduler.engine.timers import Timers


async def test_due_wake_ups_fire_in_time_order_and_together() -> None:
    clock = FakeClock(start=100.0)
    fired: list[tuple[float, list[str]]] = []
    timers = Timers(clock, lambda keys: fired.append((clock.now(), sorted(map(str, keys)))))
    timers.arm("late", 110.0)
    timers.arm("b", 105.0)
    timers.arm("a", 105.0)
    timers.arm("late", 120.0)  # a later time for an armed key: the earlier one stays
    assert "late" in timers and len(timers) == 3 and timers.due("late") == 110.0
    async with asyncio.timeout(5):
        while len(fired) < 2:
            await asyncio.sleep(0)
    assert fired == [(105.0, ["a", "b"]), (110.0, ["late"])]
    assert len(timers) == 0 and "late" not in timers


async def test_an_earlier_wake_up_interrupts_the_sleeper() -> None:
    fired: list[Hashable] = []
    timers = Timers(Clock(), fired.extend)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    timers.arm("far", Clock().now() + 30)
    await asyncio.sleep(0.01)
    timers.arm("near", Clock().now() + 0.05)  # the sleeper was sleeping 30 s
    async with asyncio.timeout(5):
        while not fired:
            await asyncio.sleep(0.005)
    assert fired == ["near"] and loop.time() - t0 < 1
    assert "far" in timers
    await timers.stop()
    assert len(timers) == 0


async def test_many_wake_ups_cost_one_sleeper() -> None:
    fired: list[Hashable] = []
    timers = Timers(Clock(), fired.extend)
    at = Clock().now() + 0.2
    before = len(asyncio.all_tasks())
    for i in range(10_000):
        timers.arm(("t", i), at)
    assert len(asyncio.all_tasks()) == before + 1
    async with asyncio.timeout(5):
        while len(fired) < 10_000:
            await asyncio.sleep(0.01)
    assert set(fired) == {("t", i) for i in range(10_000)} and len(fired) == 10_000
