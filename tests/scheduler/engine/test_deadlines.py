"""The running attempts' timeouts: each fires at its time unless cancelled, and the
event loop holds one timer for them all."""

from __future__ import annotations

import asyncio

from apollo11.scheduler.engine.deadlines import SWEEP_MIN, Deadlines


async def test_due_deadlines_fire_in_order_never_before_their_time() -> None:
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    fired: list[tuple[str, float, float]] = []

    def note(name: str, when: float) -> None:
        fired.append((name, when, loop.time()))

    t0 = loop.time()
    deadlines.add(0.06, note, "late", t0 + 0.06)
    deadlines.add(0.03, note, "early", t0 + 0.03)  # earlier than the armed one: re-armed
    gone = deadlines.add(0.01, note, "cancelled", t0 + 0.01)
    deadlines.cancel(gone)
    async with asyncio.timeout(10):
        while len(fired) < 2:
            await asyncio.sleep(0.005)
    assert [name for name, _, _ in fired] == ["early", "late"]
    resolution = getattr(loop, "_clock_resolution", 0.0)
    assert all(at >= when - resolution for _, when, at in fired)
    assert len(deadlines) == 0


async def test_one_loop_timer_for_all_and_cancelled_deadlines_never_fire() -> None:
    loop = asyncio.get_running_loop()
    before = len(loop._scheduled)  # type: ignore[attr-defined]
    deadlines = Deadlines()
    fired: list[int] = []
    ids = [deadlines.add(600, fired.append, i) for i in range(1_000)]
    # one loop timer for all of them, not one each (each a Python-compared heap entry)
    assert len(loop._scheduled) == before + 1  # type: ignore[attr-defined]
    for n in ids[:500]:  # in the order they began, as attempts mostly end
        deadlines.cancel(n)
    for n in reversed(ids[500:]):  # and out of it: the sweep keeps the heap bounded
        deadlines.cancel(n)
        assert len(deadlines._heap) <= max(SWEEP_MIN, 2 * len(deadlines)) + 1
    assert len(deadlines) == 0 and not deadlines._heap
    deadlines.cancel(ids[0])  # twice: a no-op
    # attempts that end before the next begins (a step that never awaits): no loop
    # timer armed or cancelled for each, the one armed stays
    for i in range(1_000):
        deadlines.cancel(deadlines.add(600, fired.append, i))
    assert len(loop._scheduled) == before + 1  # type: ignore[attr-defined]
    assert fired == []


async def test_a_deadline_fires_among_cancelled_ones_and_a_failing_callback_is_reported() -> None:
    loop = asyncio.get_running_loop()
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx["exception"]))
    deadlines = Deadlines()
    fired: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    keep = [deadlines.add(600, fired.append, "far")]
    dead = [deadlines.add(0.01 * i, fired.append, f"dead{i}") for i in range(1, 5)]
    deadlines.add(0.02, boom)
    deadlines.add(0.05, fired.append, "due")
    for n in dead:
        deadlines.cancel(n)
    async with asyncio.timeout(10):
        while "due" not in fired:
            await asyncio.sleep(0.005)
    assert fired == ["due"] and [str(e) for e in reported] == ["boom"]
    assert len(deadlines) == 1
    deadlines.cancel(keep[0])
    loop.set_exception_handler(None)
