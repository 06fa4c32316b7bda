"""Retention's decision (scheduler/retention.py) over a fake clock: which finished
tasks are due, by workflow and status, counted from finish or submit."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apollo11.scheduler import retention
from apollo11.scheduler.taskstatus import TaskStatus

DAY = 86_400_000
RULES = retention.parse("FAILED=90d,SUCCEEDED=7d,etl:*=30d,etl:FAILED=365d")


class Task(NamedTuple):
    task_id: str
    workflow: str
    status: TaskStatus
    submitted_ms: int
    updated_ms: int


class FakeClock:
    def __init__(self) -> None:
        self.ms = 0

    def advance(self, days: float) -> int:
        self.ms += int(days * DAY)
        return self.ms


def test_the_most_specific_rule_wins() -> None:
    assert RULES.keep_for("etl", TaskStatus.FAILED) == 365 * DAY
    assert RULES.keep_for("etl", TaskStatus.SUCCEEDED) == 30 * DAY
    assert RULES.keep_for("etl", TaskStatus.CANCELLED) == 30 * DAY
    assert RULES.keep_for("nightly", TaskStatus.FAILED) == 90 * DAY
    assert RULES.keep_for("nightly", TaskStatus.SUCCEEDED) == 7 * DAY
    assert RULES.keep_for("nightly", TaskStatus.CANCELLED) is None  # no rule: kept
    assert retention.parse("*=1d,SUCCEEDED=2d").keep_for("x", TaskStatus.CANCELLED) == DAY


def test_unfinished_tasks_are_never_due() -> None:
    every = retention.parse("*=1s")
    for status in TaskStatus:
        if status not in retention.FINISHED:
            assert every.keep_for("etl", status) is None


def test_tasks_fall_due_by_workflow_and_status_as_the_clock_moves() -> None:
    clock = FakeClock()
    tasks = [
        Task("a", "nightly", TaskStatus.SUCCEEDED, 0, 0),
        Task("b", "nightly", TaskStatus.FAILED, 0, 0),
        Task("c", "etl", TaskStatus.SUCCEEDED, 0, 0),
        Task("d", "etl", TaskStatus.FAILED, 0, 0),
        Task("e", "nightly", TaskStatus.CANCELLED, 0, 0),
        Task("f", "nightly", TaskStatus.RUNNING, 0, 0),
    ]
    seen = {}
    for day in (6, 7, 29, 30, 89, 90, 364, 365, 10_000):
        clock.advance(day - clock.ms / DAY)
        seen[day] = retention.due(RULES, tasks, clock.ms)
    assert seen[6] == []
    assert seen[7] == ["a"]
    assert seen[29] == ["a"]
    assert seen[30] == ["a", "c"]
    assert seen[90] == ["a", "b", "c"]
    assert seen[364] == ["a", "b", "c"]
    assert seen[365] == ["a", "b", "c", "d"]
    assert seen[10_000] == ["a", "b", "c", "d"]  # e has no rule; f is running


def test_counted_from_finish_or_from_submit() -> None:
    # submitted on day 0, finished on day 5: 7 days from finish is day 12
    t = Task("a", "nightly", TaskStatus.SUCCEEDED, 0, 5 * DAY)
    assert not retention.is_due(RULES, t, 8 * DAY, "finish")
    assert retention.is_due(RULES, t, 8 * DAY, "submit")
    assert retention.is_due(RULES, t, 12 * DAY, "finish")


def test_a_held_task_is_never_due_and_limit_caps_a_batch() -> None:
    tasks = [Task(str(i), "w", TaskStatus.FAILED, 0, 0) for i in range(10)]
    assert retention.due(RULES, tasks, 1000 * DAY, held={"3"}, limit=4) == ["0", "1", "2", "4"]


def test_no_rules_purge_nothing() -> None:
    rules = retention.parse("")
    assert not rules
    assert retention.due(rules, [Task("a", "w", TaskStatus.FAILED, 0, 0)], 10**15) == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("FAILED", "is not KEY=DURATION"),
        ("DONE=1d", "'DONE' is not a finished status"),
        ("RUNNING=1d", "'RUNNING' is not a finished status"),
        ("FAILED=1 day", "not a duration"),
        ("FAILED=0s", "longer than 0s"),
        (":FAILED=1d", "names no workflow"),
        ("FAILED=1d,FAILED=2d", "named twice"),
    ],
)
def test_bad_rules_are_refused_naming_the_rule(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        retention.parse(text)


def test_the_canonical_spelling_reads_back() -> None:
    assert retention.parse(RULES.text()) == RULES


_statuses = st.sampled_from(list(TaskStatus))
_workflows = st.sampled_from(["etl", "nightly", "runbook"])
_tasks = st.builds(
    Task,
    st.uuids().map(str),
    _workflows,
    _statuses,
    st.integers(0, 400 * DAY),
    st.integers(0, 400 * DAY),
)


@given(st.lists(_tasks, max_size=30), st.integers(0, 800 * DAY), st.integers(0, 800 * DAY))
def test_due_only_grows_as_time_passes(tasks: list[Task], t1: int, t2: int) -> None:
    early, late = sorted((t1, t2))
    assert set(retention.due(RULES, tasks, early)) <= set(retention.due(RULES, tasks, late))


@given(st.lists(_tasks, max_size=30), st.integers(0, 800 * DAY), st.sampled_from(retention.FROM))
def test_what_is_due_is_finished_unheld_and_past_its_rule(
    tasks: list[Task], now: int, counted_from: retention.From
) -> None:
    held = {t.task_id for t in tasks[::3]}
    due = retention.due(RULES, tasks, now, held=held, counted_from=counted_from)
    by_id = {t.task_id: t for t in tasks}
    for task_id in due:
        t = by_id[task_id]
        keep = RULES.keep_for(t.workflow, t.status)
        assert t.status in retention.FINISHED and task_id not in held and keep is not None
        start = t.updated_ms if counted_from == "finish" else t.submitted_ms
        assert now - start >= keep
    for t in tasks:
        if t.task_id not in due and t.task_id not in held:
            assert not retention.is_due(RULES, t, now, counted_from)


class Rest(NamedTuple):
    task_id: str
    status: TaskStatus
    busy: int = 0
    owed: int = 0


def test_only_a_quiescent_task_whose_parent_finished_may_be_purged() -> None:
    done = Rest("c", TaskStatus.SUCCEEDED)
    assert retention.refusal(done, None, held=False) is None
    assert retention.refusal(done, Rest("p", TaskStatus.FAILED), held=False) is None
    assert retention.refusal(done, None, held=True) == "held"
    waiting = Rest("p", TaskStatus.WAITING)
    assert "parent 'p' has not finished" in str(retention.refusal(done, waiting, held=False))
    compensating = Rest("p", TaskStatus.CANCELLED, owed=1)
    assert "parent 'p'" in str(retention.refusal(done, compensating, held=False))
    owing = Rest("c", TaskStatus.CANCELLED, owed=2)
    assert "owing compensation" in str(retention.refusal(owing, None, held=False))
    running = Rest("c", TaskStatus.CANCELLED, busy=1)
    assert "still running" in str(retention.refusal(running, None, held=False))
    assert "not finished" in str(retention.refusal(Rest("c", TaskStatus.RUNNING), None, held=False))


def test_a_refused_task_is_not_due_and_does_not_take_a_place_in_the_batch() -> None:
    tasks = [Task(f"t{i}", "x", TaskStatus.SUCCEEDED, 0, 0) for i in range(4)]
    blocked = {"t0", "t1"}
    got = retention.due(
        RULES, tasks, 30 * DAY, limit=2, refused=lambda t: "x" if t in blocked else None
    )
    assert got == ["t2", "t3"]
