"""The retry budget's pure decisions (scheduler/retrypace.py) and the verdict it shapes
(scheduler/retry.py `judge`, scheduler/cause.py `verdict_line`)."""

from __future__ import annotations

import pytest

from apollo11.scheduler.cause import of_class, verdict_line
from apollo11.scheduler.retry import judge, paced_by
from apollo11.scheduler.retrypace import (
    FREE,
    RetryBudget,
    Slot,
    credited,
    pace,
    rate_per_s,
    rescaled,
)
from apollo11.scheduler.workflow import Retry

B = RetryBudget(min_per_s=40, min_burst=4)  # 0.2 of successes, 10 s, a burst of 0.1 s


def test_the_rate_is_the_floor_until_successes_pay_for_more() -> None:
    assert rate_per_s(B, 0, 10) == 40
    assert rate_per_s(B, 1_000, 10) == 40  # 100 successes/s x 0.2 = 20 < 40
    assert rate_per_s(B, 20_000, 10) == 400  # 2,000/s x 0.2
    # over the time seen, not the whole window (a new primary), but at least 0.25 s
    assert rate_per_s(B, 500, 0.5) == 200
    assert rate_per_s(B, 500, 0.0) == 2_000  # over 0.05 s
    assert rate_per_s(B, 50_000, 60) == 1_000  # never more than the window


def test_failures_slower_than_the_rate_are_never_paced() -> None:
    tat = None
    for i in range(100):  # one every 30 ms at 40/s (one per 25 ms): all free
        p = pace(B, tat, 1_000 + 30 * i, 40, i + 1)
        assert p.slot.paced_s == 0
        tat = p.tat_ms


def test_a_herd_is_paced_at_the_rate_after_its_burst() -> None:
    tat = None
    paced = []
    for i in range(1_000):  # all in the same millisecond
        p = pace(B, tat, 5_000, 40, i + 1)
        paced.append(p.slot.paced_s)
        tat = p.tat_ms
    assert paced[:4] == [0, 0, 0, 0], "the burst: 40/s x 0.1 s, and min_burst"
    assert paced[4] == pytest.approx(0.025)
    assert paced[-1] == pytest.approx((1_000 - 4) / 40, abs=0.002)
    per_second: dict[int, int] = {}
    for s in paced:
        per_second[int(s)] = per_second.get(int(s), 0) + 1
    assert max(per_second.values()) <= 44


def test_a_slot_lengthens_a_retry_and_the_verdict_says_by_how_much() -> None:
    policy = Retry(backoff_s=1, jitter=0)
    free = judge(policy, None, None, "t:s", slot=FREE)
    assert free.retry_in_s == 1.0 and "paced_s" not in free.record()
    v = judge(policy, None, None, "t:s", slot=Slot(12.9, 1_000))
    assert v.retry_in_s == pytest.approx(13.9)
    rec = v.record()
    assert rec["paced_s"] == 12.9 and rec["failing"] == 1_000
    # a final failure is never paced, whatever its slot
    spent = judge(Retry(attempts=1), None, None, "t:s", slot=Slot(5, 10))
    assert spent.final and "paced_s" not in spent.record()


@pytest.mark.parametrize(
    ("policy", "before", "slot"),
    [
        (Retry(backoff_s=1, jitter=0), None, Slot(12.9, 1_000)),
        (Retry(backoff_s=0.05), {"default": 1}, Slot(0.0123456, 40)),
        (Retry(backoff_s=2), None, FREE),
        (Retry(attempts=1), None, Slot(5, 10)),  # final: never paced
    ],
)
def test_a_verdict_paced_afterwards_is_the_verdict_judged_with_its_slot(
    policy: Retry, before: dict[str, int] | None, slot: Slot
) -> None:
    # the engine judges once, asks the budget for a slot only when it will retry, and
    # adds the slot (engine/steps.py): what it records must be what judge says with it
    cause = of_class(TimeoutError, "slow", retry_after_s=0.5)
    for c in (None, cause):
        judged_once = judge(policy, before, c, "t:s")
        assert paced_by(judged_once, slot) == judge(policy, before, c, "t:s", slot=slot)


def test_retry_after_is_a_floor_the_pacing_adds_to() -> None:
    cause = of_class(TimeoutError, "slow", retry_after_s=30)
    v = judge(Retry(backoff_s=1, jitter=0), None, cause, "t:s", slot=Slot(2.5, 300))
    assert v.retry_in_s == pytest.approx(32.5)
    line = verdict_line({**v.record(), "cause": cause.record()})
    assert line == (
        "TimeoutError → retry 1/3 in 32.5 s (its retry_after) (2.5 s paced: 300 failing)"
    )


def test_the_verdict_line_shows_the_pacing() -> None:
    v = judge(Retry(backoff_s=1.3, jitter=0), {"default": 1}, None, "t:s", slot=Slot(12.9, 1_000))
    p = {**v.record(), "cause": of_class(TimeoutError).record()}
    assert verdict_line(p) == "TimeoutError → retry 2/3 in 15.5 s (12.9 s paced: 1,000 failing)"


def test_the_defaults_hold_a_herd_under_five_percent_a_second() -> None:
    d = RetryBudget()
    tat = None
    paced = []
    for i in range(1_000):
        p = pace(d, tat, 0, rate_per_s(d, 0, 0), i + 1)
        paced.append(p.slot.paced_s)
        tat = p.tat_ms
    per_second: dict[int, int] = {}
    for s in paced:
        per_second[int(s)] = per_second.get(int(s), 0) + 1
    assert max(per_second.values()) <= 40  # the burst of 10, and 30 a second


def test_a_backlog_shrinks_when_the_rate_grows() -> None:
    assert rescaled(None, 0, 40, 400) is None
    assert rescaled(500, 1_000, 40, 400) == 500  # behind now: nothing queued
    # 1 s of slots at 40/s is 40 retries: at 400/s they take 0.1 s
    assert rescaled(2_000, 1_000, 40, 400) == pytest.approx(1_100)
    assert rescaled(2_000, 1_000, 40, 40) == 2_000


@pytest.mark.parametrize(
    "kw",
    [
        {"min_per_s": 0},
        {"share": -1},
        {"window_s": 0.5},
        {"burst_s": float("nan")},
        {"min_burst": 0},
        {"max_paced_s": 0},
    ],
)
def test_a_malformed_budget_is_refused(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryBudget(**kw)


def test_a_success_gives_back_a_share_of_a_slot() -> None:
    assert credited(None, 40, 0.2) is None
    assert credited(1_000, 40, 0.2) == pytest.approx(995)  # 0.2 x 25 ms


def test_the_pacing_is_bounded_and_a_recovered_step_is_not_held_for_an_hour() -> None:
    # Before: an hour of 100 failures a second and no success put the last retry
    # 8,400 s out, and a failure a minute after the step recovered 1,192 s out (a
    # review of the budget).
    budget = RetryBudget(min_per_s=30, max_paced_s=300)
    tat = None
    worst = 0.0
    for i in range(360_000):  # 100 a second for an hour
        p = pace(budget, tat, i * 10, 30, 1_000)
        worst = max(worst, p.slot.paced_s)
        tat = p.tat_ms
    assert worst <= 300 + 0.1, worst
    later = pace(budget, tat, 3_600_000 + 60_000, 30, 1)
    assert later.slot.paced_s <= 300 - 60 + 0.1
