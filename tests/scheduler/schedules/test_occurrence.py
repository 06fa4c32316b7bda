"""The catch-up decision: each due nominal time fired, missed, skipped or buffered, with why.

A schedule every minute (epoch-anchored: on the minute), a five-minute catch-up
window, no jitter unless a test says; the watermark at 10:00Z.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from apollo11.scheduler.schedules import (
    MAX_DECIDED,
    MAX_FIRES,
    Decision,
    Occurrence,
    Outcome,
    ScheduleSpec,
    decide,
    jitter_for,
)

F, M, S, B = Outcome.FIRED, Outcome.MISSED, Outcome.SKIPPED, Outcome.BUFFERED
WATERMARK = datetime(2025, 1, 1, 10, tzinfo=UTC)


def at(clock: str) -> datetime:
    """ "10:03:30" on the test's day, in UTC."""
    return datetime.fromisoformat(f"2025-01-01T{clock}+00:00")


def spec(**fields: Any) -> ScheduleSpec:
    return ScheduleSpec(**{"every": "1m", "catchup_window": "5m", **fields})


def run(schedule: ScheduleSpec, now: str, **kw: Any) -> Decision:
    state: dict[str, Any] = {"watermark": WATERMARK, "running": False, **kw}
    return decide(schedule, schedule_id="s", now=at(now), **state)


def outcomes(decision: Decision) -> list[tuple[str, Outcome]]:
    return [(o.nominal_time.strftime("%H:%M"), o.outcome) for o in decision.occurrences]


def test_on_time_fires_and_the_decision_says_when_to_ask_again() -> None:
    decision = run(spec(), "10:01:00.2")
    assert outcomes(decision) == [("10:01", F)]
    assert decision.watermark == at("10:01") and decision.next_start == at("10:02")
    assert not decision.more
    assert decision.sentence == "fired 1; next at 2025-01-01T10:02:00+00:00"


def test_nothing_due_leaves_the_watermark() -> None:
    decision = run(spec(), "10:00:59")
    assert decision.occurrences == () and decision.watermark == WATERMARK
    assert decision.sentence == "nothing due; next at 2025-01-01T10:01:00+00:00"


def test_older_than_the_window_is_missed_with_how_late() -> None:
    # now 10:10:30: 10:01 to 10:05 are 9m30s to 5m30s late (missed), 10:06 is 4m30s late.
    decision = run(spec(), "10:10:30")
    assert outcomes(decision)[:6] == [
        ("10:01", M), ("10:02", M), ("10:03", M), ("10:04", M), ("10:05", M), ("10:06", F),
    ]  # fmt: skip
    assert decision.occurrences[0].reason == "9m30s late, past the catch-up window of 5m"
    assert decision.occurrences[4].reason == "5m30s late, past the catch-up window of 5m"
    assert decision.watermark == at("10:10"), "every time up to now has its outcome"


def test_exactly_the_window_late_still_fires() -> None:
    decision = run(spec(), "10:06")
    assert outcomes(decision)[0] == ("10:01", F)


def test_skip_fires_one_and_skips_the_rest_while_it_runs() -> None:
    decision = run(spec(), "10:03:30")
    assert outcomes(decision) == [("10:01", F), ("10:02", S), ("10:03", S)]
    assert (
        decision.occurrences[1].reason == "overlap skip: the previous occurrence is still running"
    )
    assert outcomes(run(spec(), "10:01:30", running=True)) == [("10:01", S)]


def test_buffer_one_keeps_one_waiting_and_skips_the_others() -> None:
    decision = run(spec(overlap="buffer-one"), "10:03:30", running=True)
    assert outcomes(decision) == [("10:01", B), ("10:02", S), ("10:03", S)]
    assert (
        decision.occurrences[0].reason == "overlap buffer-one: waits for the occurrences before it"
    )
    assert decision.occurrences[1].reason == "overlap buffer-one: an occurrence already waits"
    idle = run(spec(overlap="buffer-one"), "10:03:30")
    assert outcomes(idle) == [("10:01", F), ("10:02", B), ("10:03", S)]
    full = run(spec(overlap="buffer-one"), "10:01:30", running=False, buffered=1)
    assert outcomes(full) == [("10:01", S)], "the waiting one goes first, and fills the buffer"


def test_buffer_all_keeps_them_all_waiting() -> None:
    running = run(spec(overlap="buffer-all"), "10:03:30", running=True)
    assert outcomes(running) == [("10:01", B), ("10:02", B), ("10:03", B)]
    idle = run(spec(overlap="buffer-all"), "10:03:30")
    assert outcomes(idle) == [("10:01", F), ("10:02", B), ("10:03", B)]
    behind = run(spec(overlap="buffer-all"), "10:01:30", buffered=2)
    assert outcomes(behind) == [("10:01", B)], "behind the two already waiting"


def test_cancel_other_fires_the_latest_and_cancels_the_running_one() -> None:
    decision = run(spec(overlap="cancel-other"), "10:03:30", running=True)
    assert outcomes(decision) == [("10:01", S), ("10:02", S), ("10:03", F)]
    assert decision.occurrences[0].reason == (
        "overlap cancel-other: superseded by 2025-01-01T10:03:00+00:00"
    )
    fired = decision.occurrences[2]
    assert fired.cancel_running
    assert fired.reason == "overlap cancel-other: the running occurrence is cancelled"
    idle = run(spec(overlap="cancel-other"), "10:01:30")
    assert outcomes(idle) == [("10:01", F)] and not idle.occurrences[0].cancel_running


def test_cancel_other_is_not_superseded_by_a_missed_one() -> None:
    # now 10:07:30: 10:01 and 10:02 are missed; 10:03 to 10:07 in the window, 10:07 wins.
    decision = run(spec(overlap="cancel-other"), "10:07:30")
    assert outcomes(decision) == [
        ("10:01", M), ("10:02", M), ("10:03", S), ("10:04", S), ("10:05", S), ("10:06", S),
        ("10:07", F),
    ]  # fmt: skip


def test_allow_all_fires_every_one() -> None:
    decision = run(spec(overlap="allow-all"), "10:03:30", running=True)
    assert outcomes(decision) == [("10:01", F), ("10:02", F), ("10:03", F)]
    assert not any(o.cancel_running for o in decision.occurrences)


def test_allow_all_catch_up_is_capped_and_the_rest_wait_undecided() -> None:
    # 30 minutes down, a window of an hour: 30 due; the cap fires 10 a decision.
    schedule = spec(overlap="allow-all", catchup_window="1h")
    first = run(schedule, "10:30:30")
    assert MAX_FIRES == 10
    assert [o.outcome for o in first.occurrences] == [F] * 10
    assert first.watermark == at("10:10")
    assert first.more and first.next_start == at("10:11")
    assert first.sentence == "fired 10; more are due"
    second = decide(
        schedule, schedule_id="s", watermark=first.watermark, now=at("10:30:31"), running=True
    )
    assert [o.nominal_time for o in second.occurrences] == [at(f"10:{m}") for m in range(11, 21)]


def test_paused_skips_even_the_late_ones() -> None:
    decision = run(spec(), "10:10:30", paused=True)
    assert [o.outcome for o in decision.occurrences] == [S] * 10
    assert {o.reason for o in decision.occurrences} == {"paused"}


def test_an_outage_is_decided_in_batches_and_nothing_is_dropped() -> None:
    # A day down for a once-a-minute schedule: 1,440 nominal times, every one decided once.
    schedule = spec(overlap="allow-all", catchup_window="10m")
    now = at("10:00") + timedelta(days=1)
    watermark, rounds = WATERMARK, 0
    seen: list[Occurrence] = []
    while True:
        decision = decide(schedule, schedule_id="s", watermark=watermark, now=now, running=True)
        assert len(decision.occurrences) <= MAX_DECIDED
        seen += decision.occurrences
        watermark, rounds = decision.watermark, rounds + 1
        if not decision.more:
            break
    assert [o.nominal_time for o in seen] == [
        WATERMARK + timedelta(minutes=k) for k in range(1, 1441)
    ]
    counts = {outcome: sum(o.outcome is outcome for o in seen) for outcome in Outcome}
    # 10 minutes late at most: 10:00 next day (0 late) back to 09:50 (10m, included): 11 fire
    assert counts[F] == 11 and counts[M] == 1429
    assert rounds == 3, "1,000 outcomes, then 429 missed and 10 fired (the cap), then 1"


def test_jitter_delays_the_start_to_the_millisecond() -> None:
    schedule = spec(jitter="50s")
    delays = [jitter_for("s", at(f"10:0{m}"), timedelta(seconds=50)) for m in (1, 2, 3)]
    for m, delay in zip((1, 2, 3), delays, strict=True):
        start = at(f"10:0{m}") + delay
        decided = run(schedule, "10:00:00", watermark=at(f"10:0{m - 1}") if m > 1 else WATERMARK)
        assert decided.next_start == start, "the next start is the nominal time plus its jitter"
        just_before = decide(schedule, schedule_id="s", watermark=decided.watermark,
                             now=start - timedelta(milliseconds=1), running=False)  # fmt: skip
        assert just_before.occurrences == ()
        on_time = decide(
            schedule, schedule_id="s", watermark=decided.watermark, now=start, running=False
        )
        assert [(o.nominal_time, o.start_at, o.outcome) for o in on_time.occurrences] == [
            (at(f"10:0{m}"), start, F)
        ]


def test_a_later_occurrence_waits_behind_an_earlier_one_not_yet_started() -> None:
    # jitter longer than the interval: find a pair whose starts are out of order.
    schedule = spec(jitter="5m")
    for m in range(1, 59):
        one, two = at(f"10:{m:02}"), at(f"10:{m + 1:02}")
        start_one = one + jitter_for("s", one, timedelta(minutes=5))
        start_two = two + jitter_for("s", two, timedelta(minutes=5))
        if start_two < start_one:
            break
    else:
        pytest.fail("no out-of-order pair in an hour: the hash is not spreading")
    decision = decide(
        schedule,
        schedule_id="s",
        watermark=one - timedelta(minutes=1),
        now=start_two,
        running=False,
    )
    assert decision.occurrences == () and decision.next_start == start_one


def test_at_fires_once_then_the_schedule_is_over() -> None:
    schedule = ScheduleSpec(at="2025-01-01T10:01:00Z")
    fired = decide(schedule, schedule_id="s", watermark=WATERMARK, now=at("10:05"), running=False)
    assert outcomes(fired) == [("10:01", F)] and fired.next_start is None
    assert fired.sentence == "fired 1; no more times"
    again = decide(
        schedule, schedule_id="s", watermark=fired.watermark, now=at("11:00"), running=False
    )
    assert again.occurrences == () and again.sentence == "nothing due; no more times"


def test_occurrences_past_the_end_are_never_due() -> None:
    schedule = spec(end="2025-01-01T10:02:00Z")
    decision = run(schedule, "10:30")
    assert [o.nominal_time for o in decision.occurrences] == [at("10:01"), at("10:02")]
    assert decision.next_start is None


@pytest.mark.parametrize(
    "overlap", ["skip", "buffer-one", "buffer-all", "cancel-other", "allow-all"]
)
def test_every_policy_records_every_due_time(overlap: str) -> None:
    decision = run(spec(overlap=overlap), "10:20:30", running=True)
    assert [o.nominal_time for o in decision.occurrences] == [
        at(f"10:{m:02}") for m in range(1, 21)
    ]
    assert all(o.start_at == o.nominal_time for o in decision.occurrences)
