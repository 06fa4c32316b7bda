"""What follows when a step's retries run out (on_exhausted), decided and folded: pure,
from replayed histories, no store, no loop (issue 32 part 2)."""

from __future__ import annotations

from apollo11.scheduler.cause import of_class, verdict_line
from apollo11.scheduler.engine import (
    CancelAttempt,
    Compensate,
    CompensateTask,
    FailLost,
    PauseTask,
    StartAttempt,
    decide,
)
from apollo11.scheduler.retry import judge, then_after_loss
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.workflow import FINAL, Retry
from tests.scheduler.engine.histories import CHAIN, DIAMOND, E, History, workflow

NOTHING: frozenset[str] = frozenset()


# ------------------------------------------------------------------ the verdict


def test_a_final_verdict_carries_its_rules_mode_inherited_from_the_policy() -> None:
    policy = Retry(
        attempts=2,
        on={ValueError: FINAL, KeyError: Retry(attempts=1, on_exhausted="compensate")},
        on_exhausted="pause",
    )
    spent = judge(policy, {"default": 1}, None, "t:s")
    assert spent.final and spent.then == "pause"
    assert spent.record()["exhausted"] == "pause"
    never = judge(policy, {}, of_class(ValueError), "t:s")
    assert never.final and never.then == "pause"  # FINAL inherits the policy's
    own = judge(policy, {}, of_class(KeyError), "t:s")
    assert own.final and own.then == "compensate"  # a rule's own mode wins
    again = judge(policy, {}, None, "t:s")
    assert not again.final and "exhausted" not in again.record()


def test_fail_is_recorded_as_before_and_a_loss_follows_the_policys_mode() -> None:
    v = judge(Retry(attempts=1), {}, None, "t:s")
    assert v.final and v.then == "fail" and "exhausted" not in v.record()
    assert then_after_loss(Retry()) == "fail"
    assert then_after_loss(Retry(on_exhausted="pause")) == "pause"


def test_the_verdict_line_says_what_followed() -> None:
    line = verdict_line(
        {
            "final": True,
            "rule": "default",
            "decision": {"failures": 3, "attempts": 3},
            "cause": of_class(TimeoutError).record(),
            "exhausted": "pause",
        }
    )
    assert line == "TimeoutError → final, 3/3 spent; task paused"


def test_a_workflow_default_reaches_steps_that_say_nothing() -> None:
    wf = workflow(CHAIN, retry=Retry(attempts=2))
    assert wf.steps["a"].retry.on_exhausted is None
    from apollo11.scheduler.workflow import Idempotent, Workflow

    w = Workflow("w2", on_exhausted="pause")
    w.step(name="a", idempotency=Idempotent())(lambda ctx: None)
    w.step(name="b", after=["a"], idempotency=Idempotent(), retry=Retry(on_exhausted="fail"))(
        lambda ctx: None
    )
    w.validate()
    assert w.steps["a"].retry.on_exhausted == "pause"
    assert w.steps["b"].retry.on_exhausted == "fail"  # settable per step


# ---------------------------------------------------------------------- pause


def _exhausted(h: History, step: str, attempt: int, then: str) -> History:
    return h.fail(step, attempt, final=True, rule="default", exhausted=then)


def test_pause_is_decided_once_recorded_and_starts_nothing_until_a_retry() -> None:
    wf = workflow(DIAMOND, retry=Retry(attempts=1, on_exhausted="pause"))
    h = History(DIAMOND).ok("fetch").add(E.STEP_STARTED, "right", 1)
    _exhausted(h, "left", 1, "pause")
    # not FAILED, never archived: the engine has yet to record the pause
    assert h.task.status is TaskStatus.RUNNING and not h.task.quiescent
    assert decide(h.task, wf, {"right"}, h.now) == [PauseTask("left")]
    h.add(E.TASK_PAUSED, payload={"step": "left", "error": "broke"})
    assert h.task.status is TaskStatus.PAUSED and not h.task.quiescent
    assert h.task.paused is not None and h.task.paused["step"] == "left"
    # the running step goes on; nothing new starts; no second pause
    assert decide(h.task, wf, {"right"}, h.now) == []
    h.add(E.STEP_SUCCEEDED, "right", 1, {"result": {}})
    assert decide(h.task, wf, NOTHING, h.now) == []
    assert h.task.status is TaskStatus.PAUSED
    # an operator's retry: fresh budgets, the task runs on
    h.add(E.MANUAL_OVERRIDE, "left", payload={"action": "retry", "operator": "ann", "reason": "r"})
    assert h.task.status is TaskStatus.RUNNING and h.task.paused is None
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("left", 2)]


def test_a_pause_overtaken_by_a_cancel_or_a_retry_changes_nothing() -> None:
    h = _exhausted(History(CHAIN), "a", 1, "pause")
    h.add(E.TASK_CANCELLED, payload={"operator": "o", "reason": "r"})
    h.add(E.TASK_PAUSED, payload={"step": "a"})
    assert h.task.status is TaskStatus.CANCELLED and h.task.paused is None
    assert not h.task.anomalies
    h2 = _exhausted(History(CHAIN), "a", 1, "pause")
    h2.add(E.MANUAL_OVERRIDE, "a", payload={"action": "retry", "operator": "o", "reason": "r"})
    h2.add(E.TASK_PAUSED, payload={"step": "a"})
    assert h2.task.status is TaskStatus.RUNNING and h2.task.paused is None


def test_a_fail_or_an_old_log_fails_the_task_as_before() -> None:
    h = History(CHAIN).fail("a", 1, final=True, rule="default")
    assert h.task.status is TaskStatus.FAILED and h.task.quiescent
    old = History(CHAIN).fail("a", 1, final=True)  # a FAILED from before verdicts
    assert old.task.status is TaskStatus.FAILED and old.task.exhausted is None


def test_a_loss_that_spends_max_lost_follows_the_policys_mode() -> None:
    wf = workflow(CHAIN, retry=Retry(attempts=3, max_lost=1, on_exhausted="pause"))
    h = History(CHAIN).add(E.STEP_STARTED, "a", 1)
    assert decide(h.task, wf, NOTHING, h.now) == [
        FailLost("a", 1, final=True, compensate=False, then="pause")
    ]


# ----------------------------------------------------------------- compensate


FORK = {"fetch": [], "left": ["fetch"], "right": ["fetch"], "tail": ["left"]}


def test_compensate_stops_running_attempts_then_owes_the_succeeded_in_reverse_order() -> None:
    wf = workflow(
        FORK,
        not_idempotent=["fetch", "left", "right"],
        retry=Retry(attempts=1, on_exhausted="compensate"),
    )
    h = History(FORK).ok("fetch").ok("left").add(E.STEP_STARTED, "right", 1)
    _exhausted(h, "tail", 1, "compensate")
    assert h.task.status is TaskStatus.RUNNING and not h.task.quiescent
    # right still runs here: it is given up on, and nothing is owed yet
    stopped = "stopped: step tail failed for good and the task is compensated"
    assert decide(h.task, wf, {"right"}, h.now) == [CancelAttempt("right", stopped)]
    # its FAILED (final, owes its own compensation: not idempotent)
    h.add(E.STEP_FAILED, "right", 1, {"error": stopped, "final": True, "compensate": True})
    assert decide(h.task, wf, NOTHING, h.now) == [
        Compensate("right", False),
        CompensateTask("tail", ("fetch", "left")),
    ]
    h.add(E.TASK_COMPENSATING, payload={"step": "tail", "compensate": ["fetch", "left"]})
    assert h.task.status is TaskStatus.COMPENSATING
    # dependents first: left and right before fetch
    assert decide(h.task, wf, NOTHING, h.now) == [
        Compensate("left", False),
        Compensate("right", False),
    ]
    for s in ("left", "right"):
        h.add(E.STEP_COMPENSATING, s).add(E.STEP_COMPENSATED, s)
    assert decide(h.task, wf, NOTHING, h.now) == [Compensate("fetch", False)]
    h.add(E.STEP_COMPENSATING, "fetch")
    # a new primary finds it COMPENSATING: resumed, not begun again
    assert decide(h.task, wf, NOTHING, h.now) == [Compensate("fetch", True)]
    assert h.task.status is TaskStatus.COMPENSATING and not h.task.quiescent
    h.add(E.STEP_COMPENSATED, "fetch")
    assert h.task.status is TaskStatus.COMPENSATED and h.task.quiescent
    assert decide(h.task, wf, NOTHING, h.now) == []


def test_a_lost_attempt_of_a_compensating_task_is_final_and_nothing_is_owed_before_it() -> None:
    deps = {"a": [], "b": ["a"], "c": ["a"]}
    wf = workflow(deps, not_idempotent=["a"], retry=Retry(attempts=1, on_exhausted="compensate"))
    h = History(deps).ok("a").add(E.STEP_STARTED, "c", 1)
    _exhausted(h, "b", 1, "compensate")
    # c was STARTED by a primary that died: lost, final; the compensation waits for it
    assert decide(h.task, wf, NOTHING, h.now) == [FailLost("c", 1, final=True, compensate=False)]
    h.add(E.STEP_FAILED, "c", 1, {"error": "lost", "lost": True, "final": True})
    assert decide(h.task, wf, NOTHING, h.now) == [CompensateTask("b", ("a",))]


def test_nothing_to_compensate_ends_the_task_at_once() -> None:
    h = _exhausted(History(CHAIN), "a", 1, "compensate")
    h.add(E.TASK_COMPENSATING, payload={"step": "a", "compensate": []})
    assert h.task.status is TaskStatus.COMPENSATED and h.task.quiescent


def test_a_standby_or_a_snapshot_decides_the_same() -> None:
    from apollo11.scheduler.state import TaskState

    wf = workflow(
        DIAMOND, not_idempotent=["fetch"], retry=Retry(attempts=1, on_exhausted="compensate")
    )
    a = History(DIAMOND).ok("fetch").ok("left")
    _exhausted(a, "right", 1, "compensate")
    b = History(DIAMOND).ok("fetch").ok("left")  # another node folding the same events
    _exhausted(b, "right", 1, "compensate")
    restored = TaskState.from_dict(a.task.to_dict())  # a snapshot's copy
    assert a.task.to_dict() == b.task.to_dict() == restored.to_dict()
    want = [CompensateTask("right", ("fetch",))]
    assert decide(a.task, wf, NOTHING, a.now) == want
    assert decide(b.task, wf, NOTHING, b.now) == want
    assert decide(restored, wf, NOTHING, a.now) == want


def test_a_cancel_before_the_compensation_is_recorded_still_owes_it() -> None:
    """A cancel that overtakes a compensate exhaustion (running steps not yet stopped,
    no TASK_COMPENSATING yet) ends the task CANCELLED, but never erases what the
    exhaustion owed: the succeeded steps are compensated, whatever the workflow's
    compensate_on_cancel says of a plain cancel."""
    from apollo11.scheduler.engine.intake import owed_by_cancel

    for on_cancel in (True, False):
        wf = workflow(
            FORK,
            not_idempotent=["fetch", "left", "right"],
            retry=Retry(attempts=1, on_exhausted="compensate"),
            compensate_on_cancel=on_cancel,
        )
        h = History(FORK).ok("fetch").ok("left").add(E.STEP_STARTED, "right", 1)
        _exhausted(h, "tail", 1, "compensate")
        owed = owed_by_cancel(h.task, wf)
        assert owed == ["fetch", "left"], on_cancel
        h.add(E.TASK_CANCELLED, payload={"operator": "o", "reason": "r", "compensate": owed})
        h.add(E.STEP_FAILED, "right", 1, {"error": "cancelled", "final": True, "compensate": True})
        assert h.task.status is TaskStatus.CANCELLED
        assert decide(h.task, wf, NOTHING, h.now) == [
            Compensate("left", False),
            Compensate("right", False),
        ]
    # a plain cancel of a workflow that does not compensate on cancel owes nothing
    plain = workflow(FORK, not_idempotent=["fetch"], compensate_on_cancel=False)
    h = History(FORK).ok("fetch").add(E.STEP_STARTED, "left", 1)
    assert owed_by_cancel(h.task, plain) == []


def _paused_then_right_fails(then: str | None) -> History:
    """left paused the task; right, still running then, fails for good under `then`."""
    h = History(DIAMOND).ok("fetch").add(E.STEP_STARTED, "right", 1)
    _exhausted(h, "left", 1, "pause")
    h.add(E.TASK_PAUSED, payload={"step": "left", "error": "broke"})
    extra = {"exhausted": then} if then is not None else {}
    h.add(E.STEP_FAILED, "right", 1, {"error": "broke", "final": True, "rule": "default", **extra})
    assert h.task.status is TaskStatus.PAUSED
    return h


def _retry(h: History, step: str) -> History:
    return h.add(
        E.MANUAL_OVERRIDE, step, payload={"action": "retry", "operator": "o", "reason": "r"}
    )


def test_a_second_exhaustion_while_paused_is_kept_and_follows_a_retry_of_the_first() -> None:
    from apollo11.scheduler.state import TaskState

    wf = workflow(DIAMOND, retry=Retry(attempts=1, on_exhausted="pause"))
    h = _paused_then_right_fails("pause")
    # a snapshot's copy keeps right's own mode
    assert TaskState.from_dict(h.task.to_dict()).to_dict() == h.task.to_dict()
    _retry(h, "left")
    # right is still failed for good under "pause": the task pauses again, for right
    assert h.task.exhausted == {"step": "right", "then": "pause"}
    assert decide(h.task, wf, NOTHING, h.now) == [PauseTask("right")]
    h.add(E.TASK_PAUSED, payload={"step": "right", "error": "broke"})
    assert h.task.status is TaskStatus.PAUSED and h.task.paused is not None
    assert h.task.paused["step"] == "right"
    assert decide(h.task, wf, NOTHING, h.now) == []
    _retry(h, "right")  # now nothing is failed for good: both run again
    assert h.task.status is TaskStatus.RUNNING and h.task.paused is None
    assert h.task.exhausted is None
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("left", 2), StartAttempt("right", 2)]


def test_a_resume_retrying_both_exhausted_steps_runs_both() -> None:
    wf = workflow(DIAMOND, retry=Retry(attempts=1, on_exhausted="pause"))
    h = _retry(_retry(_paused_then_right_fails("pause"), "left"), "right")
    assert h.task.status is TaskStatus.RUNNING and h.task.exhausted is None
    assert decide(h.task, wf, NOTHING, h.now) == [StartAttempt("left", 2), StartAttempt("right", 2)]


def test_a_second_exhaustion_under_fail_or_compensate_follows_a_retry_of_the_first() -> None:
    h = _retry(_paused_then_right_fails(None), "left")
    assert h.task.status is TaskStatus.FAILED and h.task.paused is None  # right's "fail"
    h = _retry(_paused_then_right_fails("compensate"), "left")
    assert h.task.exhausted == {"step": "right", "then": "compensate"}
    wf = workflow(DIAMOND, not_idempotent=["fetch"], retry=Retry(attempts=1))
    assert decide(h.task, wf, NOTHING, h.now) == [CompensateTask("right", ("fetch",))]


def test_a_loss_spending_max_lost_while_paused_keeps_its_mode() -> None:
    wf = workflow(DIAMOND, retry=Retry(attempts=1, max_lost=1, on_exhausted="pause"))
    h = History(DIAMOND).ok("fetch").add(E.STEP_STARTED, "right", 1)
    _exhausted(h, "left", 1, "pause")
    h.add(E.TASK_PAUSED, payload={"step": "left"})
    # right's node died: lost, max_lost spent; its own mode is recorded, not dropped
    assert decide(h.task, wf, NOTHING, h.now) == [
        FailLost("right", 1, final=True, compensate=False, then="pause")
    ]


def test_a_steps_own_mode_is_moot_only_once_the_tasks_end_is_set() -> None:
    from apollo11.scheduler.engine.decide import own_exhaustion_moot

    paused = _exhausted(History(CHAIN), "a", 1, "pause")
    assert not own_exhaustion_moot(paused.task)  # about to pause: kept for after a retry
    paused.add(E.TASK_PAUSED, payload={"step": "a"})
    assert not own_exhaustion_moot(paused.task)
    undoing = _exhausted(History(CHAIN), "a", 1, "compensate")
    assert own_exhaustion_moot(undoing.task)
    cancelled = History(CHAIN).add(E.TASK_CANCELLED, payload={"operator": "o", "reason": "r"})
    assert own_exhaustion_moot(cancelled.task)
    assert not own_exhaustion_moot(History(CHAIN).task)
