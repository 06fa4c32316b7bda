from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import pytest

from apollo11.scheduler.errors import ReplayError
from apollo11.scheduler.log.eventlog import Draft
from apollo11.scheduler.log.record import Event, EventType
from apollo11.scheduler.state import State, StepStatus, TaskStatus, apply, replay
from apollo11.scheduler.testing.history import etl_history

E = EventType
STEPS = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}


def events(drafts: Iterable[Draft], term: int = 1) -> list[Event]:
    ids = itertools.count(1)
    return [
        Event(
            next(ids),
            term,
            "n1",
            d.task_id,
            d.step_name,
            d.event_type,
            d.payload or {},
            1000 + i * 10,
            d.attempt,
        )
        for i, d in enumerate(drafts)
    ]


def submit(task: str = "t1", steps: dict[str, list[str]] | None = None, **extra: Any) -> Draft:
    return Draft(
        E.TASK_SUBMITTED, task, payload={"workflow": "wf", "steps": steps or STEPS, **extra}
    )


def run(step: str, attempt: int = 1, task: str = "t1", result: Any = None) -> list[Draft]:
    return [
        Draft(E.STEP_STARTED, task, step, attempt=attempt),
        Draft(E.STEP_SUCCEEDED, task, step, {"result": result}, attempt=attempt),
    ]


def test_a_diamond_runs_to_success_with_results_and_durations() -> None:
    st = replay(events([submit(), *run("a", result={"rows": 3}), *run("b"), *run("c"), *run("d")]))
    t = st.tasks["t1"]
    assert t.status is TaskStatus.SUCCEEDED
    assert [s.status for s in t.steps.values()] == [StepStatus.SUCCEEDED] * 4
    assert t.steps["a"].result == {"rows": 3}
    assert st.durations["wf"]["a"] == [10]
    assert st.last_event_id == 9 and t.last_event_id == 9
    assert not t.anomalies and not st.anomalies


def test_pending_then_running() -> None:
    st = replay(events([submit()]))
    assert st.tasks["t1"].status is TaskStatus.PENDING
    st = replay(events([submit(), Draft(E.STEP_STARTED, "t1", "a", attempt=1)]))
    assert st.tasks["t1"].status is TaskStatus.RUNNING
    assert st.tasks["t1"].steps["a"].status is StepStatus.STARTED


def test_retries_then_final_failure_then_operator_retry() -> None:
    fail = {"error": "boom"}
    st = replay(
        events(
            [
                submit(),
                Draft(E.STEP_STARTED, "t1", "a", attempt=1),
                Draft(E.STEP_FAILED, "t1", "a", fail, attempt=1),
                Draft(E.STEP_STARTED, "t1", "a", attempt=2),
                Draft(E.STEP_FAILED, "t1", "a", {"error": "boom again", "final": True}, attempt=2),
            ]
        )
    )
    t = st.tasks["t1"]
    assert t.status is TaskStatus.FAILED
    assert (t.steps["a"].status, t.steps["a"].attempt, t.steps["a"].error) == (
        StepStatus.FAILED,
        2,
        "boom again",
    )
    more = [
        Draft(
            E.MANUAL_OVERRIDE, "t1", "a", {"action": "retry", "operator": "ops", "reason": "fixed"}
        ),
        *run("a", attempt=3),
    ]
    st2 = replay(events([*_submitted_failed(), *more]))
    t2 = st2.tasks["t1"]
    assert t2.status is TaskStatus.RUNNING
    assert t2.steps["a"].status is StepStatus.SUCCEEDED and t2.steps["a"].attempt == 3
    assert t2.steps["a"].override is not None
    assert t2.steps["a"].override["operator"] == "ops"
    assert t2.steps["a"].override["reason"] == "fixed"


def _submitted_failed() -> list[Draft]:
    return [
        submit(),
        Draft(E.STEP_STARTED, "t1", "a", attempt=1),
        Draft(E.STEP_FAILED, "t1", "a", {"error": "x", "final": True}, attempt=1),
    ]


def test_skip_counts_as_done_for_dependents() -> None:
    st = replay(
        events(
            [
                *_submitted_failed(),
                Draft(
                    E.MANUAL_OVERRIDE, "t1", "a", {"action": "skip", "operator": "o", "reason": "r"}
                ),
                *run("b"),
                *run("c"),
                *run("d"),
            ]
        )
    )
    t = st.tasks["t1"]
    assert t.steps["a"].status is StepStatus.SKIPPED
    assert t.status is TaskStatus.SUCCEEDED


def test_compensation_cycle_and_failed_compensation_stays_visible() -> None:
    st = replay(
        events(
            [
                submit(),
                *run("a"),
                Draft(E.STEP_STARTED, "t1", "b", attempt=1),
                Draft(E.STEP_FAILED, "t1", "b", {"error": "half written"}, attempt=1),
                Draft(E.STEP_COMPENSATING, "t1", "b", attempt=1),
                Draft(E.STEP_FAILED, "t1", "b", {"error": "refund API down", "compensation": True}),
            ]
        )
    )
    b = st.tasks["t1"].steps["b"]
    assert b.status is StepStatus.COMPENSATING
    assert b.compensation_error == "refund API down"
    assert st.tasks["t1"].busy == 1
    st = replay(
        events(
            [
                submit(),
                *run("a"),
                Draft(E.STEP_STARTED, "t1", "b", attempt=1),
                Draft(E.STEP_FAILED, "t1", "b", {"error": "half written"}, attempt=1),
                Draft(E.STEP_COMPENSATING, "t1", "b", attempt=1),
                Draft(E.STEP_COMPENSATED, "t1", "b", attempt=1),
                *run("b", attempt=2),
            ]
        )
    )
    b = st.tasks["t1"].steps["b"]
    assert b.status is StepStatus.SUCCEEDED and b.compensations == 1
    assert not st.tasks["t1"].anomalies


def test_success_after_compensation_without_a_new_start_is_flagged() -> None:
    st = replay(
        events(
            [
                submit(),
                *run("a"),
                Draft(E.STEP_COMPENSATING, "t1", "a", attempt=1),
                Draft(E.STEP_COMPENSATED, "t1", "a", attempt=1),
                Draft(E.STEP_SUCCEEDED, "t1", "a", {"result": 1}, attempt=1),
            ]
        )
    )
    t = st.tasks["t1"]
    assert t.steps["a"].status is StepStatus.COMPENSATED, "not silently accepted"
    assert t.steps["a"].anomaly is not None and "without a new start" in t.steps["a"].anomaly
    assert t.anomalies and "event 6" in t.anomalies[0]


@pytest.mark.parametrize(
    ("drafts", "needle"),
    [
        (
            [
                submit(),
                Draft(E.STEP_STARTED, "t1", "a", attempt=1),
                Draft(E.STEP_STARTED, "t1", "a", attempt=2),
            ],
            "without an end",
        ),
        ([submit(), *run("a"), Draft(E.STEP_STARTED, "t1", "a", attempt=2)], "after it SUCCEEDED"),
        (
            [
                submit(),
                Draft(E.STEP_STARTED, "t1", "a", attempt=2),
                Draft(E.STEP_FAILED, "t1", "a", attempt=2),
                Draft(E.STEP_STARTED, "t1", "a", attempt=1),
            ],
            "is not new",
        ),
        ([submit(), Draft(E.STEP_SUCCEEDED, "t1", "a", attempt=1)], "succeeded while PENDING"),
        ([submit(), Draft(E.STEP_STARTED, "t1", "zzz", attempt=1)], "unknown step"),
    ],
)
def test_impossible_transitions_are_flagged(drafts: list[Draft], needle: str) -> None:
    t = replay(events(drafts)).tasks["t1"]
    assert any(needle in a for a in t.anomalies), t.anomalies


def test_events_for_unknown_tasks_and_duplicate_submits_are_state_anomalies() -> None:
    st = replay(events([submit(), submit(), Draft(E.STEP_STARTED, "ghost", "a", attempt=1)]))
    assert any("submitted twice" in a for a in st.anomalies)
    assert any("unknown task 'ghost'" in a for a in st.anomalies)


def test_cancel() -> None:
    st = replay(
        events(
            [
                submit(),
                Draft(E.STEP_STARTED, "t1", "a", attempt=1),
                Draft(E.TASK_CANCELLED, "t1", payload={"operator": "ops", "reason": "wrong input"}),
            ]
        )
    )
    t = st.tasks["t1"]
    assert t.status is TaskStatus.CANCELLED
    assert t.cancelled is not None and t.cancelled["reason"] == "wrong input"
    assert not t.quiescent, "a step is still running"


def test_terms_and_idempotency_keys() -> None:
    evs = events([submit(idempotency_key="k1")], term=4)
    evs.append(Event(2, 5, "n2", "", "", E.TERM_STARTED, {}, 2000, 0))
    st = replay(evs)
    assert st.terms == [(5, 2)] and st.term == 5
    assert st.idempotency == {"k1": "t1"}
    assert st.tasks["t1"].idempotency_key == "k1"


def test_unknown_event_type_raises() -> None:
    bogus = Event(1, 1, "n1", "t", "", 99, {}, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(ReplayError, match="unknown type 99"):
        apply(State(), bogus)
    with pytest.raises(ReplayError):
        replay([*events([submit()]), bogus._replace(event_id=2)])


def test_replay_is_deterministic_and_lawful_histories_have_no_anomalies() -> None:
    evs = events(etl_history(300, seed=11))
    a, b = replay(evs), replay(evs)
    assert a.to_dict() == b.to_dict()
    assert not a.anomalies
    assert not any(t.anomalies for t in a.tasks.values())
    statuses = {t.status for t in a.tasks.values()}
    assert statuses <= {TaskStatus.SUCCEEDED, TaskStatus.CANCELLED}


def test_a_final_failure_stays_final_through_compensation() -> None:
    st = replay(
        events(
            [
                submit(),
                Draft(E.STEP_STARTED, "t1", "a", attempt=1),
                Draft(E.STEP_FAILED, "t1", "a", {"error": "x", "final": True}, attempt=1),
                Draft(E.STEP_COMPENSATING, "t1", "a", attempt=1),
                Draft(E.STEP_COMPENSATED, "t1", "a", attempt=1),
            ]
        )
    )
    t = st.tasks["t1"]
    assert t.steps["a"].status is StepStatus.COMPENSATED and t.steps["a"].final
    assert t.status is TaskStatus.FAILED and t.quiescent


def test_a_backfills_end_is_no_change_by_anyone() -> None:
    # "backfilled" is the primary's record that a backfill ran out, with no principal:
    # the schedule's last change stays the operator's who made it
    spec = {"cron": "0 3 * * *"}
    st = replay(
        events(
            [
                Draft(
                    E.SCHEDULE,
                    "",
                    payload={"action": "create", "schedule": "s", "workflow": "wf", "spec": spec},
                ),
                Draft(E.SCHEDULE, "", payload={"action": "pause", "schedule": "s", "by": "ana"}),
                Draft(
                    E.SCHEDULE,
                    "",
                    payload={
                        "action": "backfill",
                        "schedule": "s",
                        "from_ms": 0,
                        "to_ms": 1,
                        "overlap": "allow-all",
                        "by": "bo",
                    },
                ),
                Draft(
                    E.SCHEDULE,
                    "",
                    payload={"action": "backfilled", "schedule": "s", "backfill": 3, "fired": 0},
                ),
            ]
        )
    )
    s = st.schedules["s"]
    assert not s.backfills, "ended"
    assert (s.by, s.updated_ms) == ("bo", 1020), "the backfill's asker, when it was asked"
