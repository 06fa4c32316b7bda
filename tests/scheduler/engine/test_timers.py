"""The engine's wake-ups: one heap, one sleeper, due ones fired together."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest

from apollo11.scheduler.clock import Clock, FakeClock
from apollo11.scheduler.engine.timers import Timers, window_end


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


# ------------------------------------------------------- retries' wake-ups, coalesced


def test_a_window_ends_at_one_instant_for_all_it_holds_never_before_their_time() -> None:
    w = 0.016
    for at in (100.0001, 100.005, 100.0159, 1_700_000_000.123456, 7.0):
        end = window_end(at, w)
        assert at <= end <= at + w
    assert window_end(100.001, w) == window_end(100.015, w) != window_end(100.017, w)
    assert window_end(100.001, 0.0) == 100.001  # no window: its own time


async def test_retries_due_in_one_window_fire_together_and_due_ones_join_any_wake_up() -> None:
    clock = FakeClock(start=100.0)
    fired: list[tuple[float, list[str]]] = []
    timers = Timers(clock, lambda keys: fired.append((clock.now(), sorted(map(str, keys)))))
    w = 0.016
    for name, at in (("r1", 100.001), ("r5", 100.005), ("r15", 100.015), ("r17", 100.017)):
        timers.arm(name, at, window_s=w)
    timers.arm("sleep", 100.010)  # not a retry: at its own time
    async with asyncio.timeout(5):
        while len(fired) < 3:
            await asyncio.sleep(0)
    times = [t for t, _ in fired]
    groups = [keys for _, keys in fired]
    # the durable sleep wakes at its time and takes the retries already due with it;
    # r15 waits for its window's end (never before its time), r17 for the next one
    assert groups == [["r1", "r5", "sleep"], ["r15"], ["r17"]]
    assert times == [
        pytest.approx(100.010),
        pytest.approx(window_end(100.015, w)),
        pytest.approx(window_end(100.017, w)),
    ]
    assert len(timers) == 0


async def test_a_pass_takes_the_retries_whose_time_has_come_and_no_other() -> None:
    clock = FakeClock(start=100.0)
    fired: list[Hashable] = []
    timers = Timers(clock, fired.extend)
    timers.arm("early", 100.004, window_s=0.016)
    timers.arm("later", 100.009, window_s=0.016)
    clock.advance(0.003)
    assert timers.take_due(clock.now()) == []  # not yet: never before its time
    clock.advance(0.002)
    assert timers.take_due(clock.now()) == ["early"]
    assert "early" not in timers and "later" in timers  # taken: never fired again
    await timers.stop()
    assert fired == []
