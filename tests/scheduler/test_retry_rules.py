"""Retries by cause (issue 32): which rule judges a failure, each rule's budget, FINAL,
Retry-After, the verdict a FAILED records, and the policies registration refuses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apollo11.scheduler import cause, retry
from apollo11.scheduler.durable import FINAL as DURABLE_FINAL
from apollo11.scheduler.errors import WorkflowDefinitionError
from apollo11.scheduler.retrypolicy import DEFAULT_RULE
from apollo11.scheduler.workflow import FINAL, Idempotent, Registry, Retry, StepError, Workflow
from tests.scheduler.engine.histories import E, History

POLICY = Retry(
    attempts=5,
    backoff_s=1,
    max_backoff_s=60,
    on={
        TimeoutError: Retry(attempts=10, backoff_s=0.5),
        ConnectionError: Retry(attempts=20, backoff_s=2),
        ValueError: FINAL,
    },
)
TIMEOUT = "builtins.TimeoutError"
CONNECTION = "builtins.ConnectionError"


class ReadTimeout(TimeoutError):
    """A library's timeout: a TimeoutError by its MRO."""


class Both(ConnectionResetError, ValueError):
    """Two rules' classes: the MRO says which is more specific (ConnectionError first)."""


def judged(e: BaseException, counts: dict[str, int] | None = None) -> retry.Verdict:
    return retry.judge(POLICY, counts, cause.of_exception(e), "t:s")


def test_final_is_importable_beside_retry() -> None:
    assert DURABLE_FINAL is FINAL and repr(FINAL) == "FINAL"


def test_a_cause_is_its_classes_names_most_specific_first() -> None:
    c = cause.of_exception(ReadTimeout("slow"))
    assert c.mro == (
        f"{__name__}.ReadTimeout",
        "builtins.TimeoutError",
        "builtins.OSError",
        "builtins.Exception",
        "builtins.BaseException",
    )
    assert c.type == c.mro[0] and c.message == "slow" and c.retry_after_s is None
    assert cause.Cause.from_record({"cause": c.record()}) == c


@pytest.mark.parametrize(
    ("error", "rule"),
    [
        (TimeoutError("t"), TIMEOUT),
        (ReadTimeout("t"), TIMEOUT),  # a subclass: isinstance, along the MRO
        (ConnectionRefusedError("c"), CONNECTION),
        (ConnectionResetError("c"), CONNECTION),
        (Both("b"), CONNECTION),  # the most specific class of the MRO first
        (ValueError("v"), "builtins.ValueError"),
        (KeyError("k"), DEFAULT_RULE),  # no rule names it: the policy's own numbers
        (OSError("o"), DEFAULT_RULE),  # a base of a rule's class is not that class
        (StepError("s"), DEFAULT_RULE),
    ],
)
def test_the_rule_is_the_most_specific_class_the_policy_names(
    error: BaseException, rule: str
) -> None:
    assert retry.rule_for(POLICY, cause.of_exception(error))[0] == rule


def test_a_more_specific_rule_wins_over_its_base() -> None:
    policy = Retry(on={OSError: Retry(attempts=2), TimeoutError: Retry(attempts=7)})
    assert retry.rule_for(policy, cause.of_exception(ReadTimeout()))[0] == TIMEOUT
    assert retry.rule_for(policy, cause.of_exception(FileNotFoundError()))[0] == "builtins.OSError"


def test_policies_alike_but_for_their_rules_keep_their_own_rules() -> None:
    # the same numbers (the same hash: `on` is not hashed), different rules: each
    # policy's failures are matched to its own rules, however often they are asked
    a = Retry(on={TimeoutError: Retry(attempts=7)})
    b = Retry(on={OSError: Retry(attempts=2)})
    same_as_a = Retry(on={TimeoutError: Retry(attempts=7)})
    timeout, missing = cause.of_exception(TimeoutError()), cause.of_exception(FileNotFoundError())
    for _ in range(2):
        assert retry.rule_for(a, timeout) == (TIMEOUT, Retry(attempts=7))
        assert retry.rule_for(a, missing)[0] == DEFAULT_RULE
        assert retry.rule_for(b, timeout) == ("builtins.OSError", Retry(attempts=2))
        assert retry.rule_for(same_as_a, timeout) == (TIMEOUT, Retry(attempts=7))
        assert retry.rule_for(Retry(), timeout)[0] == DEFAULT_RULE


def test_final_is_never_retried() -> None:
    v = judged(ValueError("bad input"))
    assert v == retry.Verdict("builtins.ValueError", 1, 1, True, None)
    assert v.record() == {
        "rule": "builtins.ValueError",
        "final": True,
        "decision": {"failures": 1, "attempts": 1},
    }


def test_each_cause_has_its_own_budget() -> None:
    """Five timeouts do not spend the default rule's budget, nor the connections'."""
    counts = {TIMEOUT: 9, DEFAULT_RULE: 4, CONNECTION: 0}
    assert judged(TimeoutError(), counts).final, "the 10th timeout spends its 10"
    assert judged(KeyError(), counts).final, "the 5th of the default rule spends its 5"
    v = judged(ConnectionResetError(), counts)
    assert not v.final and v.failures == 1 and v.attempts == 20
    assert not judged(TimeoutError(), {TIMEOUT: 8, DEFAULT_RULE: 4}).final


def test_the_backoff_is_the_rule_s() -> None:
    v = judged(TimeoutError(), {TIMEOUT: 2})
    assert v.retry_in_s == Retry(attempts=10, backoff_s=0.5).delay_s(3, "t:s")
    assert 0.8 * 2 <= v.retry_in_s <= 1.2 * 2  # type: ignore[operator]
    d = judged(KeyError(), {TIMEOUT: 2})
    assert d.retry_in_s == POLICY.delay_s(1, "t:s"), "the default rule: the policy's numbers"


def test_retry_after_is_a_floor_over_the_backoff() -> None:
    slow = cause.of_exception(StepError("rate limited", retry_after=30))
    assert slow.retry_after_s == 30.0
    assert retry.judge(POLICY, None, slow, "t:s").retry_in_s == 30.0
    soon = cause.of_exception(StepError("rate limited", retry_after=0.01))
    v = retry.judge(POLICY, {DEFAULT_RULE: 3}, soon, "t:s")
    assert v.retry_in_s == POLICY.delay_s(4, "t:s") > 0.01, "never sooner than the backoff"
    spent = retry.judge(POLICY, {DEFAULT_RULE: 4}, slow, "t:s")
    assert spent.final and spent.retry_in_s is None, "Retry-After is no fresh budget"


@pytest.mark.parametrize("bad", ["soon", -1, float("nan"), float("inf"), True, None])
def test_a_bad_retry_after_is_ignored_not_fatal(bad: Any) -> None:
    assert cause.of_exception(StepError("x", retry_after=bad)).retry_after_s is None


def test_a_failure_that_says_it_is_final_is_final_under_any_rule() -> None:
    v = retry.judge(POLICY, None, cause.of_exception(TimeoutError()), "t:s", final=True)
    assert v.final and v.rule == TIMEOUT


def test_a_legacy_cause_matches_by_short_name() -> None:
    """An older worker sends the type's short name alone."""
    assert retry.rule_for(POLICY, cause.legacy("TimeoutError"))[0] == TIMEOUT
    assert retry.rule_for(POLICY, cause.legacy("ReadTimeout"))[0] == DEFAULT_RULE
    assert retry.rule_for(POLICY, None)[0] == DEFAULT_RULE


def test_counts_come_from_the_log() -> None:
    """Own failures by rule: the named rules' from each FAILED's `rule`, the default's
    the rest; losses count apart; an operator's retry resets them all."""
    h = History({"s": []})
    h.fail("s", 1, rule=TIMEOUT).fail("s", 2, rule=TIMEOUT).fail("s", 3, lost=True)
    h.fail("s", 4, rule=DEFAULT_RULE).fail("s", 5)  # an old FAILED: no rule, the default's
    h.add(E.STEP_STARTED, "s", 6)
    assert retry.counts(h.task.steps["s"]) == {TIMEOUT: 2, DEFAULT_RULE: 2}
    h.fail("s", 6, rule=TIMEOUT)
    h.add(E.MANUAL_OVERRIDE, "s", payload={"action": "retry", "operator": "o", "reason": "r"})
    h.add(E.STEP_STARTED, "s", 7)
    assert retry.counts(h.task.steps["s"]) == {DEFAULT_RULE: 0}


def test_the_next_attempt_is_due_when_the_verdict_said() -> None:
    h = History({"s": []}).fail("s", 1, rule=TIMEOUT, retry_in_s=30.0)
    step = h.task.steps["s"]
    assert retry.due_at("t", step, POLICY) == step.finished_ms / 1000 + 30  # type: ignore[operator]


def test_an_old_failed_is_due_as_it_always_was() -> None:
    """A FAILED without a verdict (written before issue 32) replays to the old rule."""
    h = History({"s": []}).fail("s", 1).fail("s", 2)
    step = h.task.steps["s"]
    assert step.causes is None and step.retry_in_s is None
    due = retry.due_at("t", step, POLICY)
    assert due == step.finished_ms / 1000 + POLICY.delay_s(2, "t:s")  # type: ignore[operator]


@given(
    st.lists(
        st.sampled_from([TimeoutError, ConnectionResetError, KeyError, ReadTimeout]), max_size=40
    )
)
def test_a_cause_is_retried_exactly_its_rule_s_attempts(raised: list[type[Exception]]) -> None:
    """Whatever the order of causes, the n-th failure of a rule is final exactly when
    n reaches its attempts: no cause spends another's budget."""
    budget = {TIMEOUT: 10, CONNECTION: 20, DEFAULT_RULE: 5}
    counts: dict[str, int] = {}
    for cls in raised:
        v = retry.judge(POLICY, counts, cause.of_exception(cls()), "t:s")
        counts[v.rule] = v.failures
        assert v.final == (counts[v.rule] >= budget[v.rule])
        assert (v.retry_in_s is None) == v.final
    for rule, n in counts.items():
        expected = sum(1 for c in raised if retry.rule_for(POLICY, cause.of_class(c))[0] == rule)
        assert n == expected


def test_a_ctx_step_without_a_cause_keeps_its_old_answers() -> None:
    policy = Retry(attempts=3)
    assert retry.next_try_in(policy, 1, "t", 4, final=False) == policy.delay_s(1, "t:4")
    assert retry.next_try_in(policy, 3, "t", 4, final=False) is None


# ------------------------------------------------------------ registration


async def _step(ctx: Any) -> None:
    return None


def _register(policy: Any) -> None:
    wf = Workflow("billing", version=2)
    wf.step(name="charge", idempotency=Idempotent(), retry=policy)(_step)
    Registry().register(wf)


@pytest.mark.parametrize(
    ("policy", "said"),
    [
        (Retry(on={"TimeoutError": Retry()}), "on key 'TimeoutError' is not an exception class"),
        (Retry(on={int: Retry()}), "on key <class 'int'> is not an exception class"),
        (Retry(backoff_s=-1), "backoff_s must be seconds >= 0, got -1"),
        (Retry(max_backoff_s=-0.5), "max_backoff_s must be seconds >= 0"),
        (Retry(on={KeyError: Retry(backoff_s=-2)}), "on[KeyError]: backoff_s must be seconds >= 0"),
        (Retry(on={KeyError: 3}), "on[KeyError] must be a Retry or FINAL, got 3"),  # type: ignore[dict-item]
        (
            Retry(on_exhausted="explode"),
            "on_exhausted must be one of 'fail', 'pause', 'compensate'",
        ),  # type: ignore[arg-type]
        (
            Retry(on={KeyError: Retry(on_exhausted="later")}),  # type: ignore[arg-type]
            "on[KeyError]: on_exhausted must be one of 'fail', 'pause', 'compensate'",
        ),
        (Retry(on={KeyError: Retry(on={OSError: FINAL})}), "on[KeyError] has rules of its own"),
        (Retry(on=[TimeoutError]), "on must be a dict"),  # type: ignore[arg-type]
        (Retry(attempts=0), "attempts must be a whole number, at least 1"),
        (Retry(attempts=2.5), "attempts must be a whole number"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_policy_is_refused_at_registration_naming_workflow_and_step(
    policy: Retry, said: str
) -> None:
    with pytest.raises(WorkflowDefinitionError) as e:
        _register(policy)
    text = str(e.value)
    assert text.startswith("workflow 'billing' v2: ") and "step 'charge' retry: " in text
    assert said in text


def test_the_contract_registers() -> None:
    _register(POLICY)
    assert POLICY.rules() == {
        TIMEOUT: Retry(attempts=10, backoff_s=0.5),
        CONNECTION: Retry(attempts=20, backoff_s=2),
        "builtins.ValueError": FINAL,
    }
    assert Retry(attempts=5, backoff_s=1, max_backoff_s=60, on=dict(POLICY.on)) == POLICY
    assert hash(POLICY) == hash(Retry(attempts=5, backoff_s=1, max_backoff_s=60))


def test_rules_are_metric_labels_by_class_name() -> None:
    assert retry.rule_label(TIMEOUT) == "TimeoutError"
    assert retry.rule_label(f"{__name__}.ReadTimeout") == "ReadTimeout"
    assert retry.rule_label(DEFAULT_RULE) == "default"


def test_the_counts_and_the_verdict_survive_a_snapshot() -> None:
    """A new primary that recovers from a snapshot arms the same retry time."""
    from apollo11.scheduler.state import TaskState

    h = History({"s": []}).fail("s", 1, rule=TIMEOUT, retry_in_s=0.5)
    task = h.task
    again = TaskState.from_dict(task.to_dict())
    assert again.to_dict() == task.to_dict()
    step = again.steps["s"]
    assert (step.causes, step.retry_in_s) == ({TIMEOUT: 1}, 0.5)
    assert retry.due_at("t", step, POLICY) == retry.due_at("t", task.steps["s"], POLICY)
