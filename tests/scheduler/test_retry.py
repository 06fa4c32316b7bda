"""retry: will a step run again, and when? Pure functions of a replayed step, and of a
durable ctx.step's tries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from apollo11.scheduler import retry
from apollo11.scheduler.state import StepStatus
from apollo11.scheduler.workflow import Retry
from tests.scheduler.engine.histories import E, History

RETRY = {"action": "retry", "operator": "o", "reason": "r"}


def test_failures_and_losses_are_counted_apart() -> None:
    h = History({"s": []}).fail("s", 1).fail("s", 2, lost=True).fail("s", 3, lost=True)
    step = h.task.steps["s"]
    assert retry.budget(step) == retry.Budget(failed=1, lost=2)
    h.add(E.STEP_STARTED, "s", 4)
    assert retry.budget(h.task.steps["s"]) == retry.Budget(failed=2, lost=2), (
        "the running attempt counts"
    )


def test_an_operator_retry_gives_a_fresh_budget() -> None:
    policy = Retry(attempts=2, max_lost=2)
    h = History({"s": []}).fail("s", 1, lost=True).fail("s", 2).fail("s", 3, final=True)
    step = h.task.steps["s"]
    assert not retry.may_run_again(step)
    h.add(E.MANUAL_OVERRIDE, "s", payload=RETRY)
    step = h.task.steps["s"]
    assert retry.may_run_again(step) and retry.budget(step) == retry.Budget(0, 0)
    assert retry.due_at("t", step, policy) is None, "an operator's retry runs at once"
    h.add(E.STEP_STARTED, "s", 4)
    step = h.task.steps["s"]
    assert not retry.final_after_failure(step, policy) and not retry.final_after_loss(step, policy)


def test_a_failure_is_final_when_the_attempts_are_spent() -> None:
    policy = Retry(attempts=3)
    h = History({"s": []}).fail("s", 1).fail("s", 2)
    h.add(E.STEP_STARTED, "s", 3)
    assert retry.final_after_failure(h.task.steps["s"], policy)
    assert not retry.final_after_failure(h.task.steps["s"], Retry(attempts=4))


def test_losses_do_not_use_up_attempts_but_are_capped() -> None:
    policy = Retry(attempts=2, max_lost=3)
    h = History({"s": []}).fail("s", 1, lost=True).fail("s", 2, lost=True)
    h.add(E.STEP_STARTED, "s", 3)
    step = h.task.steps["s"]
    assert retry.budget(step).failed == 1, "attempt 3 is the step's first own attempt"
    assert not retry.final_after_failure(step, policy)
    assert retry.final_after_failure(step, Retry(attempts=1, max_lost=3))
    assert retry.final_after_loss(step, policy), "a third loss is the last"
    assert not retry.final_after_loss(step, Retry(max_lost=4))


def test_what_may_run_again() -> None:
    h = History({"p": [], "f": [], "x": [], "c": [], "r": [], "ok": []})
    h.fail("f", 1).fail("x", 1, final=True).fail("c", 1, compensate=True)
    h.add(E.STEP_COMPENSATING, "c", 1).add(E.STEP_COMPENSATED, "c", 1)
    h.add(E.STEP_STARTED, "r", 1).ok("ok")
    steps = h.task.steps
    assert {n for n, s in steps.items() if retry.may_run_again(s)} == {"p", "f", "c"}
    assert steps["c"].status is StepStatus.COMPENSATED


def test_a_retry_is_due_its_backoff_after_the_failure_by_the_log_clock() -> None:
    policy = Retry(attempts=5, backoff_s=1, multiplier=2, jitter=0.2)
    h = History({"s": []}).fail("s", 1)
    step = h.task.steps["s"]
    assert step.finished_ms is not None
    due = retry.due_at("t", step, policy)
    assert due == step.finished_ms / 1000 + policy.delay_s(1, "t:s")
    assert 0.8 <= due - step.finished_ms / 1000 <= 1.2
    assert retry.due_at("t", step, policy) == due, "the same on every node: no clock, no randomness"
    assert retry.due_at("u", step, policy) != due, "jitter spreads tasks apart"
    h.fail("s", 2, lost=True)
    lost = retry.due_at("t", h.task.steps["s"], policy)
    assert lost == h.task.steps["s"].finished_ms / 1000 + policy.delay_s(1, "t:s"), (  # type: ignore[operator]
        "a loss does not lengthen the backoff: it is not the step's failure"
    )


def test_a_pending_step_is_due_now() -> None:
    step = History({"s": []}).task.steps["s"]
    assert retry.due_at("t", step, Retry()) is None


def test_a_compensated_step_waits_its_backoff_from_the_compensation() -> None:
    h = History({"s": []}).fail("s", 1, compensate=True)
    h.add(E.STEP_COMPENSATING, "s", 1).add(E.STEP_COMPENSATED, "s", 1, after_s=5)
    step = h.task.steps["s"]
    policy = Retry(backoff_s=2, jitter=0)
    assert retry.due_at("t", step, policy) == step.finished_ms / 1000 + 2  # type: ignore[operator]


def test_compensation_retries_have_a_seed_of_their_own() -> None:
    policy = Retry(attempts=1_000_000, max_backoff_s=300)
    assert retry.compensation_delay(policy, 3, "t", "s") == policy.delay_s(3, "t:s:c")
    assert retry.compensation_delay(policy, 3, "t", "s") != policy.delay_s(3, "t:s")


@given(st.lists(st.booleans(), min_size=1, max_size=30), st.integers(1, 10))
def test_only_own_failures_use_up_attempts(lost: list[bool], attempts: int) -> None:
    h = History({"s": []})
    for n, was_lost in enumerate(lost, start=1):
        h.fail("s", n, lost=was_lost)
    b = retry.budget(h.task.steps["s"])
    assert b == retry.Budget(failed=lost.count(False), lost=lost.count(True))
    h.add(E.STEP_STARTED, "s", len(lost) + 1)
    policy = Retry(attempts=attempts)
    assert retry.final_after_failure(h.task.steps["s"], policy) == (b.failed + 1 >= attempts)


def test_a_failure_says_it_is_final_by_its_details() -> None:
    assert retry.says_final({"final": True, "code": 51})
    assert not retry.says_final({"code": 51}) and not retry.says_final({"final": False})


@given(st.integers(1, 12), st.integers(1, 12), st.booleans())
def test_a_ctx_step_s_tries_follow_the_step_rule(tries: int, attempts: int, final: bool) -> None:
    """The same answer a DAG step's attempt gets after as many own failures."""
    policy = Retry(attempts=attempts)
    h = History({"s": []})
    for n in range(1, tries):
        h.fail("s", n)
    h.add(E.STEP_STARTED, "s", tries)
    last = final or retry.final_after_failure(h.task.steps["s"], policy)
    got = retry.next_try_in(policy, tries, "t", 4, final=final)
    assert (got is None) == last
    if got is not None:
        assert got == policy.delay_s(tries, "t:4")


def test_a_ctx_step_s_backoff_is_seeded_by_task_and_position() -> None:
    policy = Retry(attempts=5)
    assert retry.next_try_in(policy, 2, "t", 4, final=False) != retry.next_try_in(
        policy, 2, "t", 5, final=False
    )
    assert retry.next_try_in(policy, 2, "t", 4, final=False) == retry.next_try_in(
        policy, 2, "t", 4, final=False
    ), "no clock, no randomness"


def test_an_undo_of_a_ctx_step_stops_when_its_attempts_are_spent() -> None:
    policy = Retry(attempts=3)
    assert retry.next_undo_in(policy, 1, "t", 4) == policy.delay_s(1, "t:4:undo")
    assert retry.next_undo_in(policy, 2, "t", 4) == policy.delay_s(2, "t:4:undo")
    assert retry.next_undo_in(policy, 3, "t", 4) is None
