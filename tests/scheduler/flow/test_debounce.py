"""The debounce window: when the task may start, and which submissions join it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apollo11.scheduler.flow import deadline, extended, joins, not_before

QUIET, MAX_WAIT = 5_000, 60_000


def test_one_submission_starts_after_quiet() -> None:
    assert not_before(1_000, 1_000, quiet_ms=QUIET, max_wait_ms=MAX_WAIT) == 6_000
    assert deadline(1_000, max_wait_ms=MAX_WAIT) == 61_000


def test_each_submission_pushes_the_start_back_up_to_max_wait() -> None:
    assert not_before(0, 20_000, quiet_ms=QUIET, max_wait_ms=MAX_WAIT) == 25_000
    assert not_before(0, 58_000, quiet_ms=QUIET, max_wait_ms=MAX_WAIT) == 60_000
    assert extended(60_000, 20_000, quiet_ms=QUIET) == 25_000
    assert extended(60_000, 58_000, quiet_ms=QUIET) == 60_000


def test_a_submission_joins_only_before_the_start_time() -> None:
    assert joins(6_000, 5_999)
    assert not joins(6_000, 6_000)
    assert not joins(6_000, 9_000)


@given(st.lists(st.integers(0, 4_999), min_size=1, max_size=100))
def test_a_steady_trickle_starts_the_task_by_the_deadline(gaps: list[int]) -> None:
    """Submissions closer together than `quiet` all join, and the task starts no later
    than `first + max_wait`; the last input is the one that starts."""
    first = now = 1_000
    start = not_before(first, first, quiet_ms=QUIET, max_wait_ms=MAX_WAIT)
    end = deadline(first, max_wait_ms=MAX_WAIT)
    for gap in gaps:
        now += gap
        if not joins(start, now):
            break
        moved = extended(end, now, quiet_ms=QUIET)
        assert moved == not_before(first, now, quiet_ms=QUIET, max_wait_ms=MAX_WAIT)
        assert start <= moved <= end
        start = moved
    assert start <= first + MAX_WAIT
