"""The task page's attempts as data: each attempt of each step, how it ended and the
tail of its error and output, from the task's events."""

from __future__ import annotations

from typing import Any

from apollo11.scheduler.log.record import Event, EventType
from apollo11.scheduler.web import attempts

T0 = 1_700_000_000_000


def _e(i: int, kind: EventType, step: str, attempt: int = 1, node: str = "n1", **p: Any) -> Event:
    return Event(i, 1, node, "t1", step, kind, p, T0 + i * 100, attempt)


def test_each_attempt_with_its_outcome_error_and_output() -> None:
    found = attempts.attempts(
        [
            _e(1, EventType.TASK_SUBMITTED, "", 0),
            _e(2, EventType.STEP_STARTED, "a"),
            _e(3, EventType.STEP_FAILED, "a", error="RuntimeError: injected", final=False),
            _e(4, EventType.STEP_STARTED, "a", 2),
            _e(5, EventType.STEP_FAILED, "a", 2, error="timed out after 1s", timeout=True),
            _e(6, EventType.STEP_STARTED, "a", 3),
            _e(7, EventType.STEP_FAILED, "a", 3, node="n2", error="lost: died", lost=True),
            _e(8, EventType.STEP_STARTED, "a", 4, node="n2"),
            _e(9, EventType.STEP_SUCCEEDED, "a", 4, node="n2", result={"rows": 3}),
            _e(10, EventType.STEP_STARTED, "b"),
        ]
    )
    assert [(a.step, a.attempt, a.outcome) for a in found] == [
        ("a", 1, "failed"),
        ("a", 2, "timed out"),
        ("a", 3, "lost"),
        ("a", 4, "succeeded"),
        ("b", 1, "running"),
    ]
    first, _, _, last, running = found
    assert first.error.text == "RuntimeError: injected" and first.output.text == ""
    assert first.duration_ms == 100 and running.duration_ms is None
    assert last.error.text == "" and last.output.text == '{"rows": 3}'
    assert last.node == "n2"


def test_a_shell_step_shows_its_captured_output() -> None:
    found = attempts.attempts(
        [
            _e(1, EventType.STEP_STARTED, "dump"),
            _e(
                2,
                EventType.STEP_FAILED,
                "dump",
                error="command exited with code 3",
                exit_code=3,
                output_tail="pg_dump: connection refused\n",
            ),
            _e(3, EventType.STEP_STARTED, "dump", 2),
            _e(
                4,
                EventType.STEP_SUCCEEDED,
                "dump",
                2,
                result={"exit_code": 0, "output_tail": "dumped 12 tables\n"},
            ),
        ]
    )
    failed, ok = found
    assert failed.error.text == "command exited with code 3"
    assert failed.output.text == "pg_dump: connection refused\n"
    assert ok.output.text == "dumped 12 tables\n"


def test_compensations_are_attempts_of_their_own() -> None:
    found = attempts.attempts(
        [
            _e(1, EventType.STEP_STARTED, "a"),
            _e(2, EventType.STEP_FAILED, "a", error="x", compensate=True),
            _e(3, EventType.STEP_COMPENSATING, "a"),
            _e(4, EventType.STEP_FAILED, "a", error="refund down", compensation=True),
            _e(5, EventType.STEP_COMPENSATING, "a"),
            _e(6, EventType.STEP_COMPENSATED, "a"),
        ]
    )
    assert [(a.kind, a.outcome, a.error.text) for a in found] == [
        ("attempt", "failed", "x"),
        ("compensation", "compensation failed", "refund down"),
        ("compensation", "compensated", ""),
    ]


def test_an_end_without_its_start_is_still_shown() -> None:
    (a,) = attempts.attempts([_e(7, EventType.STEP_FAILED, "a", 2, error="lost", lost=True)])
    assert (a.attempt, a.outcome, a.started_ms, a.duration_ms) == (2, "lost", T0 + 700, 0)


def test_a_long_text_keeps_its_end_and_says_what_was_cut() -> None:
    text = "x" * 2500 + "the cause"
    t = attempts.tail(text)
    assert len(t.text) == attempts.TAIL and t.text.endswith("the cause")
    assert t.cut == len(text) - attempts.TAIL
    assert attempts.tail("short") == attempts.Tail("short", 0)


def test_attempts_in_the_workflows_step_order() -> None:
    found = attempts.attempts(
        [
            _e(1, EventType.STEP_STARTED, "b"),
            _e(2, EventType.STEP_STARTED, "a"),
            _e(3, EventType.STEP_FAILED, "b", error="e"),
            _e(4, EventType.STEP_STARTED, "b", 2),
        ]
    )
    ordered = attempts.in_step_order(found, ["a", "b"])
    assert [(a.step, a.attempt) for a in ordered] == [("a", 1), ("b", 1), ("b", 2)]


def _durable(i: int, record: EventType, attempt: int, **p: Any) -> Event:
    """A durable main's record (its payload has a `kind` of its own)."""
    return Event(i, 1, "n1", "t1", "main", record, p, T0 + i * 100, attempt)


def test_a_durable_mains_wait_ends_its_attempt_as_waited() -> None:
    # review finding: a WAIT ends the attempt (replay's _on_wait), and the table showed
    # every waiting main as running forever
    until = T0 + 3_600_000
    found = attempts.attempts(
        [
            _e(1, EventType.STEP_STARTED, "main"),
            _durable(2, EventType.CHECKPOINT, 1, seq=0, kind="step", name="reserve"),
            _durable(3, EventType.WAIT, 1, seq=1, kind="sleep", name="", until_ms=until),
            _e(4, EventType.STEP_STARTED, "main", 2),
            _durable(5, EventType.WAIT, 2, seq=2, kind="event", key="approved:o-1", since=5),
            _e(6, EventType.STEP_STARTED, "main", 3),
            _e(7, EventType.STEP_SUCCEEDED, "main", 3, result={"ok": True}),
        ]
    )
    assert [(a.attempt, a.outcome) for a in found] == [
        (1, "waited"),
        (2, "waited"),
        (3, "succeeded"),
    ]
    assert found[0].output.text == "sleep until 2023-11-14 23:13:20 UTC"
    assert found[0].ended_ms == T0 + 300
    assert found[1].output.text == "event 'approved:o-1'"


def test_a_wait_of_an_earlier_attempt_leaves_the_running_one_running() -> None:
    # review finding: a late WAIT from attempt 1 (replay ignores it) closed attempt 2
    found = attempts.attempts(
        [
            _e(1, EventType.STEP_STARTED, "main"),
            _e(2, EventType.STEP_FAILED, "main", error="timed out after 1s", timeout=True),
            _e(3, EventType.STEP_STARTED, "main", 2),
            _durable(4, EventType.WAIT, 1, seq=1, kind="sleep", name="", until_ms=T0),
        ]
    )
    assert [(a.attempt, a.outcome) for a in found] == [(1, "timed out"), (2, "running")]


def test_a_failed_attempt_shows_its_cause_and_the_verdict() -> None:
    """Issue 32: the task page says why each attempt failed and what was decided."""
    cause = {"type": "builtins.TimeoutError", "mro": ["builtins.TimeoutError"], "message": ""}
    first, old = attempts.attempts(
        [
            _e(1, EventType.STEP_STARTED, "a"),
            _e(
                2,
                EventType.STEP_FAILED,
                "a",
                error="TimeoutError: ",
                cause=cause,
                rule="builtins.TimeoutError",
                final=False,
                decision={"failures": 3, "attempts": 10},
                retry_in_s=0.5,
            ),
            _e(3, EventType.STEP_STARTED, "a", 2),
            _e(4, EventType.STEP_FAILED, "a", 2, error="broke", final=False),  # an old FAILED
        ]
    )
    assert first.decision == "TimeoutError → retry 3/10 in 0.5 s"
    assert old.decision == ""
