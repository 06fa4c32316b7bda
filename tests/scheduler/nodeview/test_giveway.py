"""Bulk reads give way to dispatch (scheduler/nodeview/giveway.py): the decision, and
its pacer on a clock that moves only when slept on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.nodeview import GiveWay, dispatching
from apollo11.scheduler.nodeview.giveway import FIRST_SLICE_S, MIN_WAIT_S, SHARE, wait_s


def test_a_quiet_loop_lets_the_read_go_at_once() -> None:
    assert wait_s(False, 0.0, 0.002) == 0.0


def test_while_dispatching_a_read_waits_for_its_share_of_the_loop() -> None:
    slice_s = 0.002  # long enough that its share, not the minimum, decides
    owed = slice_s * (1 / SHARE - 1)
    assert owed > MIN_WAIT_S
    assert wait_s(True, 0.0, slice_s) == pytest.approx(owed)
    assert wait_s(True, owed / 2, slice_s) == pytest.approx(owed / 2)
    assert wait_s(True, owed, slice_s) == 0.0  # waited its share: goes, busy or not


def test_a_short_slice_still_waits_out_a_dispatch() -> None:
    # a wait shorter than a dispatch would end in the middle of it
    assert wait_s(True, 0.0, 0.0001) == pytest.approx(MIN_WAIT_S)


async def test_a_slice_starts_once_dispatch_is_over() -> None:
    polls = 0

    def busy() -> bool:
        nonlocal polls
        polls += 1
        return polls <= 3  # the dispatch ends before the read has waited its share

    clock = FakeClock()
    pace = GiveWay(busy, now=clock.now, sleep=clock.sleep)
    async with pace.slice():
        assert polls == 4  # started when it found the loop quiet, not before
    assert pace.waits == 1
    assert sum(clock.sleeps) < MIN_WAIT_S


async def test_a_loop_always_dispatching_does_not_starve_the_read() -> None:
    clock = FakeClock()
    pace = GiveWay(lambda: True, now=clock.now, sleep=clock.sleep)
    for _ in range(3):
        async with pace.slice():
            clock.advance(0.002)  # the slice's own work
    assert pace.waits == 3
    # each slice waited its share: the first of a slice as long as FIRST_SLICE_S
    share = max(FIRST_SLICE_S * (1 / SHARE - 1), MIN_WAIT_S) + 2 * 0.002 * (1 / SHARE - 1)
    assert sum(clock.sleeps) == pytest.approx(share, rel=1e-3)


async def test_a_quiet_loop_never_sleeps() -> None:
    clock = FakeClock()
    pace = GiveWay(lambda: False, now=clock.now, sleep=clock.sleep)
    for _ in range(3):
        async with pace.slice():
            pass
    assert pace.waits == 0 and clock.sleeps == []


def _log(writing: bool) -> SimpleNamespace:
    return SimpleNamespace(log=SimpleNamespace(writing=writing))


def test_a_leading_engine_dispatches_by_its_own_account() -> None:
    engine = SimpleNamespace(leading=True, dispatching=lambda: True)
    node = SimpleNamespace(engine=engine, store=_log(True))
    assert dispatching(node)  # type: ignore[arg-type]
    engine.dispatching = lambda: False
    assert not dispatching(node)  # type: ignore[arg-type]


def test_a_standby_holding_records_not_yet_durable_is_busy_for_its_primary() -> None:
    # its primary waits for the acknowledgement, which waits for the fsync and then
    # for the loop: a read slice begun meanwhile delays the primary's commit
    for engine in (None, SimpleNamespace(leading=False, dispatching=lambda: True)):
        assert dispatching(SimpleNamespace(engine=engine, store=_log(True)))  # type: ignore[arg-type]
        assert not dispatching(SimpleNamespace(engine=engine, store=_log(False)))  # type: ignore[arg-type]
    assert not dispatching(SimpleNamespace(engine=None, store=None))  # type: ignore[arg-type]
