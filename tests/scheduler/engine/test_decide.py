"""decide() on tasks built by replay: no store, no event loop, no clock."""

from __future__ import annotations

import json

from apollo11.scheduler.engine import (
    CancelAttempt,
    Compensate,
    FailLost,
    NoWorkflow,
    StartAttempt,
    Stuck,
    WakeAt,
    decide,
)
from apollo11.scheduler.workflow import Retry
from tests.scheduler.engine.histories import CHAIN, DIAMOND, E, History, workflow

NOTHING: frozenset[str] = frozenset()
FAST = Retry(attempts=3, backoff_s=0)


def test_a_new_task_starts_its_roots_then_what_their_results_unblock() -> None:
    h = History(DIAMOND)
    wf = workflow(DIAMOND)
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("fetch", 1)]
    h.ok("fetch")
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("left", 1), StartAttempt("right", 1)]
    h.ok("left")
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("right", 1)]
    h.ok("right")
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("join", 1)]
    h.ok("join")
    assert h.task.quiescent and decide(h.task, wf, NOTHING, h.now) == []


def test_a_step_this_engine_runs_is_left_alone() -> None:
    h = History(DIAMOND).ok("fetch").add(E.STEP_STARTED, "left", 1)
    wf = workflow(DIAMOND)
    assert decide(h.task, wf, {"left"}, h.now) == [StartAttempt("right", 1)]
    # The same STARTED with nothing running it here: its node died mid-step.
    assert decide(h.task, wf, NOTHING, h.now) == [
        FailLost("left", 1, final=False, compensate=False),
        StartAttempt("right", 1),
    ]


def test_cancel_gives_up_on_running_attempts_and_starts_nothing() -> None:
    h = History(DIAMOND).ok("fetch").add(E.STEP_STARTED, "left", 1)
    h.add(E.TASK_CANCELLED, payload={"operator": "o", "reason": "r"})
    wf = workflow(DIAMOND)
    assert decide(h.task, wf, {"left"}, h.now) == [CancelAttempt("left", "cancelled by operator")]
    # Not running here (a former primary's): lost, and final, since the task is cancelled.
    assert decide(h.task, wf, NOTHING, h.now) == [FailLost("left", 1, final=True, compensate=False)]


def test_lost_attempts_are_capped_by_max_lost_and_owe_a_compensation_when_not_idempotent() -> None:
    deps = {"a": []}
    wf = workflow(deps, not_idempotent=["a"], retry=Retry(attempts=1, max_lost=3))
    h = History(deps)
    for attempt in (1, 2):
        h.fail("a", attempt, lost=True, compensate=True)
        h.add(E.STEP_COMPENSATING, "a", attempt).add(E.STEP_COMPENSATED, "a", attempt)
    h.add(E.STEP_STARTED, "a", 3)
    assert decide(h.task, wf, NOTHING, h.now) == [FailLost("a", 3, final=True, compensate=True)]


def test_a_failed_attempt_runs_again_when_its_backoff_ends() -> None:
    deps = {"a": []}
    policy = Retry(attempts=3, backoff_s=2, jitter=0)
    wf = workflow(deps, retry=policy)
    h = History(deps).fail("a", 1)
    due = h.task.steps["a"].finished_ms / 1000 + 2  # type: ignore[operator]
    assert decide(h.task, wf, NOTHING, h.now) == [WakeAt("a", due)]
    assert decide(h.task, wf, NOTHING, due - 0.001) == [WakeAt("a", due)]
    assert decide(h.task, wf, NOTHING, due) == [StartAttempt("a", 2)]
    h.fail("a", 2, after_s=2)
    due = h.task.steps["a"].finished_ms / 1000 + 4  # type: ignore[operator]
    assert decide(h.task, wf, NOTHING, h.now) == [WakeAt("a", due)]


def test_a_final_failure_starts_nothing_more_in_its_task() -> None:
    wf = workflow(DIAMOND, retry=Retry(attempts=1))
    h = History(DIAMOND).ok("fetch").add(E.STEP_STARTED, "right", 1).fail("left", 1, final=True)
    assert decide(h.task, wf, {"right"}, h.now) == []
    # An operator's retry gives it a fresh budget, and the task goes on.
    h.add(E.MANUAL_OVERRIDE, "left", payload={"action": "retry", "operator": "o", "reason": "r"})
    assert decide(h.task, wf, {"right"}, h.now) == [StartAttempt("left", 2)]


def test_a_failed_non_idempotent_step_is_compensated_before_it_runs_again() -> None:
    wf = workflow(DIAMOND, not_idempotent=["left"], retry=FAST)
    h = History(DIAMOND).ok("fetch").fail("left", 1, compensate=True)
    assert decide(h.task, wf, NOTHING, h.now) == [
        Compensate("left", resume=False),
        StartAttempt("right", 1),
    ]
    h.add(E.STEP_COMPENSATING, "left", 1)
    # A compensation found COMPENSATING with nothing running it here is resumed.
    assert decide(h.task, wf, NOTHING, h.now)[0] == Compensate("left", resume=True)
    assert decide(h.task, wf, {"left"}, h.now) == [StartAttempt("right", 1)]
    h.add(E.STEP_COMPENSATED, "left", 1)
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("left", 2), StartAttempt("right", 1)]


def test_compensation_runs_dependents_first_in_reverse_topological_order() -> None:
    wf = workflow(CHAIN, not_idempotent=["a", "c"])
    h = History(CHAIN).ok("a").ok("b").ok("c")
    h.add(E.TASK_CANCELLED, payload={"operator": "o", "reason": "r", "compensate": ["a", "c"]})
    assert decide(h.task, wf, NOTHING, h.now) == [Compensate("c", resume=False)]
    h.add(E.STEP_COMPENSATING, "c", 1)
    assert decide(h.task, wf, {"c"}, h.now) == [], "a waits for c, two steps downstream"
    h.add(E.STEP_COMPENSATED, "c", 1)
    assert decide(h.task, wf, NOTHING, h.now) == [Compensate("a", resume=False)]


def test_a_compensation_waits_for_a_downstream_step_still_running() -> None:
    wf = workflow(CHAIN, not_idempotent=["a"])
    h = History(CHAIN).ok("a").ok("b").add(E.STEP_STARTED, "c", 1)
    h.add(E.TASK_CANCELLED, payload={"operator": "o", "reason": "r", "compensate": ["a"]})
    assert decide(h.task, wf, {"c"}, h.now) == [CancelAttempt("c", "cancelled by operator")]


def test_a_compensation_waits_for_a_downstream_step_this_decision_starts() -> None:
    # y is downstream of x through m, which an operator skipped, so y may start while x
    # owes a compensation. Declared before x, y is started by this decision before it
    # reaches x: x's compensation waits for it, as for a step already running.
    deps = {"y": ["m"], "m": ["x"], "x": []}
    skip = {"action": "skip", "operator": "o", "reason": "r"}
    h = History(deps).add(E.MANUAL_OVERRIDE, "m", payload=skip).fail("x", 1, compensate=True)
    wf = workflow(deps, not_idempotent=["x"], retry=FAST)
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("y", 1)]
    # Declared after x, y is not yet started when x is decided (the engine did the same).
    later = {"x": [], "m": ["x"], "y": ["m"]}
    h = History(later).add(E.MANUAL_OVERRIDE, "m", payload=skip).fail("x", 1, compensate=True)
    wf = workflow(later, not_idempotent=["x"], retry=FAST)
    assert decide(h.task, wf, NOTHING, h.now) == [
        Compensate("x", resume=False),
        StartAttempt("y", 1),
    ]


def test_what_cannot_be_scheduled_says_why_and_never_raises() -> None:
    h = History(DIAMOND)
    wf = workflow(DIAMOND)
    assert decide(h.task, NoWorkflow("workflow 'w' v1 is not loaded here"), NOTHING, h.now) == [
        Stuck("workflow 'w' v1 is not loaded here")
    ]
    other = workflow({"fetch": [], "other": ["fetch"]})
    h.ok("fetch")
    assert decide(h.task, other, NOTHING, h.now) == [Stuck("step 'left' is not in workflow w v1")]
    # A compensation the log owes, for a step that declares none (a changed workflow).
    h2 = History(DIAMOND).ok("fetch").fail("left", 1, compensate=True)
    (stuck,) = decide(h2.task, wf, NOTHING, h2.now)
    assert isinstance(stuck, Stuck) and "declares no compensation action" in stuck.reason
    # Dependencies naming a step the task lacks (a hand-written submission).
    h3 = History({"a": ["ghost"]})
    assert decide(h3.task, workflow({"a": []}), NOTHING, h3.now) == [
        Stuck("step 'a' depends on 'ghost', which the task lacks")
    ]


def test_a_task_with_anomalies_waits_for_an_operator() -> None:
    h = History(DIAMOND).ok("fetch").add(E.STEP_SUCCEEDED, "fetch", 1, {"result": 1})
    (stuck,) = decide(h.task, workflow(DIAMOND), NOTHING, h.now)
    assert isinstance(stuck, Stuck) and stuck.reason.startswith("has anomalies")


def test_a_decision_that_breaks_is_a_stuck_task_not_an_exception() -> None:
    h = History(DIAMOND)

    class Broken:
        def __contains__(self, step: object) -> bool:
            raise RuntimeError("boom")

    assert decide(h.task, workflow(DIAMOND), Broken(), h.now) == [
        Stuck("deciding it failed: RuntimeError: boom")
    ]


def test_decide_reads_the_task_and_changes_nothing() -> None:
    wf = workflow(CHAIN, not_idempotent=["a"], retry=FAST)
    h = History(CHAIN).fail("a", 1, compensate=True)
    before = json.dumps(h.task.to_dict(), sort_keys=True)
    first = decide(h.task, wf, NOTHING, h.now)
    assert decide(h.task, wf, NOTHING, h.now) == first, "same input, same actions"
    assert json.dumps(h.task.to_dict(), sort_keys=True) == before
