"""GCRA: admit or hold, until when, bursts, and the rate it keeps over a long run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apollo11.scheduler.flow import Paced, gcra


def test_the_first_start_is_admitted_and_sets_the_tat_one_interval_ahead() -> None:
    assert gcra(None, 1_000, 100, 1) == Paced(True, 1_100)


def test_without_burst_the_next_start_waits_one_interval() -> None:
    held = gcra(1_100, 1_000, 100, 1)
    assert held == Paced(False, 1_100, until_ms=1_100)
    assert gcra(1_100, 1_099, 100, 1).admitted is False
    assert gcra(1_100, 1_100, 100, 1) == Paced(True, 1_200)
    # a late start counts from its own time, not the TAT: idle time is not saved up
    assert gcra(1_100, 5_000, 100, 1) == Paced(True, 5_100)


def test_a_burst_admits_that_many_at_once_then_paces() -> None:
    tat = None
    admitted = 0
    for _ in range(25):
        pace = gcra(tat, 0, 100, 20)
        if not pace.admitted:
            break
        admitted += 1
        tat = pace.tat_ms
    assert admitted == 20
    assert tat == 2_000
    held = gcra(tat, 0, 100, 20)
    # tat - tau = 2000 - 19 * 100
    assert held == Paced(False, 2_000, until_ms=100)
    assert gcra(tat, 100, 100, 20) == Paced(True, 2_100)


def test_a_fractional_interval_is_kept_and_until_is_rounded_up() -> None:
    third = 1000 / 3
    first = gcra(None, 0, third, 1)
    assert first.tat_ms == pytest.approx(third)
    held = gcra(first.tat_ms, 0, third, 1)
    assert held.until_ms == 334  # woken at 334 ms, the same rule admits it
    assert gcra(first.tat_ms, 334, third, 1).admitted


def test_a_whole_tat_is_an_integer() -> None:
    assert isinstance(gcra(None, 5, 100.0, 1).tat_ms, int)


@pytest.mark.parametrize(
    ("limit", "per_ms", "burst"), [(10, 1000, 1), (10, 1000, 20), (3, 1000, 5), (7, 60_000, 1)]
)
def test_a_greedy_client_gets_the_limit_within_two_percent_over_a_long_run(
    limit: int, per_ms: int, burst: int
) -> None:
    """A caller that tries again exactly when told (a fake clock, jumping to until_ms),
    for 1,000 periods: the starts per period are within 2 % of the limit."""
    interval = per_ms / limit
    periods = 1_000
    end = periods * per_ms
    now, tat, starts = 0, None, 0
    while now < end:
        pace = gcra(tat, now, interval, burst)
        if pace.admitted:
            starts += 1
            tat = pace.tat_ms
        else:
            assert pace.until_ms is not None and pace.until_ms > now
            now = pace.until_ms
    assert starts / periods == pytest.approx(limit, rel=0.02)


def test_a_steady_stream_above_the_limit_is_paced_to_the_limit() -> None:
    """Requests every 10 ms against 10 per second, each retried at its until_ms: over
    an hour of simulated time, starts per second stay within 2 % of 10."""
    interval, tat, starts = 100.0, None, 0
    waiting: list[int] = []
    for now in range(0, 3_600_000, 10):
        waiting.append(now)
        while waiting:
            pace = gcra(tat, now, interval, 5)
            if not pace.admitted:
                break
            waiting.pop(0)
            starts += 1
            tat = pace.tat_ms
    assert starts / 3_600 == pytest.approx(10, rel=0.02)


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=200),
    st.integers(1, 10),
    st.sampled_from([50.0, 100.0, 1000 / 7]),
)
def test_no_window_holds_more_than_burst_plus_its_share(
    gaps: list[int], burst: int, interval: float
) -> None:
    """GCRA's guarantee: in any window of length w, at most burst + w / T starts."""
    now, tat, starts = 0, None, []
    for gap in gaps:
        now += gap
        pace = gcra(tat, now, interval, burst)
        if pace.admitted:
            starts.append(now)
            tat = pace.tat_ms
        else:
            assert pace.until_ms is not None and now < pace.until_ms
            assert gcra(tat, pace.until_ms, interval, burst).admitted
    for i, first in enumerate(starts):
        for j in range(i, len(starts)):
            window = starts[j] - first
            assert j - i + 1 <= burst + window / interval + 1e-9
