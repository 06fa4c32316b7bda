"""The sync gate: writes wait for N standbys, time out as "unknown", never leak."""

from __future__ import annotations

import asyncio

import pytest

from apollo11.replicator.hub import ReplicationHub, ReplicationTimeout, StandbyView


def _hub(*names: str) -> tuple[ReplicationHub, list[StandbyView]]:
    hub = ReplicationHub()
    views = []
    for name in names:
        v = hub.register(name, f"{name}:1")
        v.connected = True
        views.append(v)
    return hub, views


async def test_a_write_waits_for_as_many_standbys_as_asked() -> None:
    hub, (a, b) = _hub("a", "b")
    one = asyncio.create_task(hub.wait(5, 1, 10))
    two = asyncio.create_task(hub.wait(5, 2, 10))
    await asyncio.sleep(0)
    hub.on_ack(a, 5, 5)
    await asyncio.sleep(0)
    assert one.done() and not two.done()
    hub.on_ack(b, 4, 5)  # not far enough
    await asyncio.sleep(0)
    assert not two.done()
    hub.on_ack(b, 7, 7)
    await asyncio.wait_for(two, 1)


async def test_waiters_are_released_in_event_order() -> None:
    hub, (a,) = _hub("a")
    tasks = {i: asyncio.create_task(hub.wait(i, 1, 10)) for i in (3, 1, 2)}
    await asyncio.sleep(0)
    hub.on_ack(a, 2, 3)
    await asyncio.sleep(0)
    assert [i for i, t in sorted(tasks.items()) if t.done()] == [1, 2]
    hub.on_ack(a, 3, 3)
    await asyncio.gather(*tasks.values())


async def test_no_ack_in_time_is_an_unknown_outcome_naming_the_event() -> None:
    hub, _ = _hub("a")
    with pytest.raises(ReplicationTimeout, match=r"event 9 .* within 0.2s .*unknown"):
        await hub.wait(9, 1, 0.2)
    assert not hub._deadlines


async def test_a_timeout_says_which_standbys_were_counted_and_how_far_they_acked() -> None:
    hub, (a, b) = _hub("a", "b")
    hub.on_ack(a, 8, 9)
    b.connected = False  # its stream is being set up
    with pytest.raises(ReplicationTimeout) as e:
        await hub.wait(9, 2, 0.1)
    text = str(e.value)
    assert "needs 2 standby acknowledgement(s) and got 0" in text, text
    assert "a connected, acked 8" in text and "b connecting" in text, text


def test_a_second_stream_under_one_node_id_leaving_does_not_unhook_the_first() -> None:
    """The wedge of issue 15: another process with the same node id followed the
    primary and left; the live standby went on acking but was no longer counted."""
    hub, (first,) = _hub("n2")
    second = hub.register("n2", "elsewhere:1")
    second.connected = True
    hub.on_ack(first, 5, 5)
    assert [v.stream for v in hub.connected()] == [first.stream], "counted once, the furthest"
    hub.unregister(second)
    hub.on_ack(first, 6, 6)
    assert hub.connected() == [first] and hub.acked_by(1) == 6
    assert hub.by_node()["n2"] is first


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    hub, (a,) = _hub("a")
    t = asyncio.create_task(hub.wait(4, 1, 0.2))
    await asyncio.sleep(0)
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    await asyncio.sleep(0.3)  # the sweep runs and stops
    assert hub._sweep is None and not hub._deadlines
    hub.on_ack(a, 4, 4)  # pops the dead waiter without touching it
    assert not hub._waiters[1]


async def test_many_expired_waiters_are_dropped_without_an_ack() -> None:
    hub, _ = _hub("a")
    tasks = [asyncio.create_task(hub.wait(i, 1, 0.05)) for i in range(1, 500)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, ReplicationTimeout) for r in results)
    assert len(hub._waiters[1]) == 0


async def test_no_dead_waiter_lingers_once_the_last_deadline_passed() -> None:
    """Waiters whose deadlines fall in different sweeps (a loaded loop spreads them):
    once none is left waiting, none is kept, however few were left over."""
    hub, _ = _hub("a")
    early = [asyncio.create_task(hub.wait(i, 1, 0.05)) for i in range(1, 101)]
    await asyncio.sleep(0.03)
    late = [asyncio.create_task(hub.wait(i, 1, 0.05)) for i in range(101, 121)]
    results = await asyncio.gather(*early, *late, return_exceptions=True)
    assert all(isinstance(r, ReplicationTimeout) for r in results)
    assert len(hub._waiters[1]) == 0


async def test_fail_all_fails_every_waiter() -> None:
    hub, _ = _hub("a")
    t = asyncio.create_task(hub.wait(4, 1, 10))
    await asyncio.sleep(0)
    hub.fail_all("demoted")
    with pytest.raises(ReplicationTimeout, match="demoted"):
        await t
    assert hub._sweep is None


def test_a_standby_silent_for_long_enough_on_a_responsive_loop_is_not_connected() -> None:
    import time

    from apollo11.replicator.hub import SILENT_TICKS, STANDBY_SILENCE_S

    hub, (a, b) = _hub("a", "b")
    now = time.monotonic()
    a.acked_at = now - STANDBY_SILENCE_S - 1  # silent
    b.acked_at = now  # just acked
    for _ in range(SILENT_TICKS - 1):
        hub.tick(responsive=True)
    assert {v.node_id for v in hub.connected()} == {"a", "b"}, "not silent for long enough yet"
    hub.tick(responsive=False)  # our own loop stalled: acks may be queued, start again
    for _ in range(SILENT_TICKS - 1):
        hub.tick(responsive=True)
    assert {v.node_id for v in hub.connected()} == {"a", "b"}
    hub.tick(responsive=True)
    assert [v.node_id for v in hub.connected()] == ["b"]
    assert hub.acked_by(2) == 0, "a silent standby does not count towards --sync-replicas"
    hub.on_ack(a, 1, 1)  # heard from again
    assert {v.node_id for v in hub.connected()} == {"a", "b"}


async def test_an_ack_that_comes_before_local_durability_counts_as_no_wait() -> None:
    hub, (a, b) = _hub("a", "b")
    hub.on_durable(3)
    hub.on_ack(a, 3, 3)
    hub.on_ack(a, 6, 3)  # batch 4..6 shipped ahead: stored there before here
    assert len(a.lags) == 1
    hub.on_durable(6)
    assert len(a.lags) == 2 and a.lags[-1] == 0.0, "timed as soon as it is durable here"
    assert not b.lags, "a standby that has not acked is not timed"
    hub.on_ack(b, 6, 6)
    assert len(b.lags) == 2
    await asyncio.wait_for(hub.wait(6, 2, 1), 1)


def test_a_standby_back_from_a_restart_does_not_report_its_downtime_as_ack_latency() -> None:
    hub, (view,) = _hub("n2")
    hub.time_from_now(view)
    for eid in (10, 20, 30):  # written while n2 was down
        hub.on_durable(eid)
    back = hub.register("n2", "n2:1")  # its new stream, starting at event 1
    back.connected = True
    hub.time_from_now(back)
    hub.on_ack(back, 30, 30)  # it caught up: nothing of that is its ack latency
    assert list(back.lags) == [] and back.lag_ms(0.99) == 0.0
    hub.on_durable(40)
    hub.on_ack(back, 40, 40)
    assert len(back.lags) == 1 and back.lag_ms(0.99) < 1000
