"""The task page's timeline as data: bars, a time axis, and a line where a new primary
took over while the task ran."""

from __future__ import annotations

from typing import Any

from apollo11.scheduler.log.record import Event, EventType
from apollo11.scheduler.web import timeline

T0 = 1_700_000_000_000


def _e(i: int, kind: EventType, step: str, at: int, term: int, node: str, **p: Any) -> Event:
    return Event(i, term, node, "t1", step, kind, p, T0 + at, 1 if step else 0)


EVENTS = [
    _e(1, EventType.TASK_SUBMITTED, "", 0, 3, "n1"),
    _e(2, EventType.STEP_STARTED, "a", 10, 3, "n1"),
    _e(3, EventType.STEP_SUCCEEDED, "a", 1200, 3, "n1"),
    _e(4, EventType.STEP_STARTED, "b", 1210, 3, "n1"),
    # n1 dies with b running; n2 takes over at term 7 and fails b as lost
    _e(5, EventType.STEP_FAILED, "b", 6300, 7, "n2", lost=True, error="lost"),
    _e(6, EventType.STEP_STARTED, "b", 6400, 7, "n2"),
    _e(7, EventType.STEP_SUCCEEDED, "b", 7000, 7, "n2"),
]


def test_a_takeover_is_the_first_event_in_a_higher_term() -> None:
    assert timeline.term_changes(EVENTS) == [(T0 + 6300, 7, "n2", 5)]
    assert timeline.term_changes(EVENTS[:4]) == []


def test_the_layout_has_a_round_time_axis_and_the_takeover_line() -> None:
    svg = timeline.layout(
        ["a", "b"], timeline.bars(EVENTS), T0 + 8000, (), timeline.term_changes(EVENTS)
    )
    labels = [t.label for t in svg.ticks]
    assert labels == ["0", "+2 s", "+4 s", "+6 s"], labels  # 6,990 ms from the first attempt
    xs = [t.x for t in svg.ticks]
    assert xs == sorted(xs) and xs[0] == timeline.LABEL_W
    (line,) = svg.takeovers
    assert line.term == 7 and line.node == "n2" and line.event_id == 5
    # at its place in time: between the end of attempt 1 of b and attempt 2
    lost, second = [r for r in svg.rects if r.title.startswith("b ")]
    assert lost.x + lost.w <= line.x + 0.01 and line.x <= second.x
    assert svg.start_ms == T0 + 10 and svg.axis_y < svg.height


def test_durations_read_as_a_person_would_say_them() -> None:
    f = timeline._duration
    assert [f(500), f(1500), f(120_000), f(5_400_000), f(172_800_000)] == [
        "500 ms",
        "1.5 s",
        "2 min",
        "1.5 h",
        "2 d",
    ]


def test_the_recorded_actions_hold_release_and_redaction_too() -> None:
    """The task page's actions table lists every operator's act on the task, with
    the principal the event recorded (a hold's is `by`)."""
    events = [
        *EVENTS,
        _e(8, EventType.MANUAL_OVERRIDE, "b", 7100, 7, "n2", action="retry", operator="ann",
           reason="flaky"),
        _e(9, EventType.TASK_HELD, "", 7200, 7, "n2", held=True, by="olga", reason="case 7"),
        _e(10, EventType.TASK_HELD, "", 7300, 7, "n2", held=False, by="olga", reason=""),
        _e(11, EventType.TASK_REDACTED, "", 7400, 7, "n2", operator="olga", reason="erasure",
           **{"as": "Olga O."}),
        _e(12, EventType.TASK_CANCELLED, "", 7500, 7, "n2", operator="bob", reason="stop"),
    ]  # fmt: skip
    got = [(a.event_id, a.action, a.step, a.who, a.reason) for a in timeline.actions(events)]
    assert got == [
        (8, "retry", "b", "ann", "flaky"),
        (9, "hold", "", "olga", "case 7"),
        (10, "release", "", "olga", ""),
        (11, "redact", "", "olga (as Olga O.)", "erasure"),
        (12, "cancel", "", "bob", "stop"),
    ]
