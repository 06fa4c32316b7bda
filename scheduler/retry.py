"""Will a step run again, and when? The one place that answers.

Pure functions of what happened to a step and its declared `Retry`
(scheduler/workflow.py: the policy and its backoff curve). Nothing here reads a
clock or writes an event; the engine asks, and so does every decision
(`decide`), with the same answers on every node; a durable main's `ctx.step`
asks too, about its tries. Outside the engine's package on purpose: durable
mains run on workers, which load no engine (tests/scheduler/durable/test_imports.py).

The rules:

* An attempt that failed on its own uses one of `attempts`. One lost to a
  dying node (or a lost lease) does not, it uses one of `max_lost`: not the
  step's fault, but a step that keeps killing its node must stop somewhere.
  Only the engine says an attempt was lost: a step's own `lost` detail is not
  a loss (engine/steps.py `failure_payload`).
* An attempt of a durable main that ended in a WAIT (`StepState.waits`) is
  neither: the task went to sleep, and a task that wakes a thousand times must
  not use up its main's attempts (docs/durable.md).
* An operator's retry gives a fresh budget: replay keeps, in the step's
  `override`, the attempt and loss counts it was given at (`_on_override`), and
  both budgets count from there.
* A failure is final when its budget is spent (`spent`), or when the failure
  says so (`says_final`: the step raised `StepError(..., final=True)`, its
  result was refused, the task was cancelled). Replay keeps `final` on the step
  until a new STARTED or an operator's action clears it. A final failure never
  runs again on its own.
* A failure has a cause (scheduler/cause.py: its classes' names, most specific
  first) and is judged by the rule of the first of them the policy's `on` names,
  else by the policy's own numbers, the default rule (`rule_for`). Each rule has
  its own budget: own failures matched to it since the last operator retry
  (`counts`: `StepState.causes`, folded from each FAILED's `rule`, and the rest
  of its own failures for the default rule), so five timeouts do not
  spend the validation budget. `FINAL`: the first failure is the last. A FAILED
  written before rules were recorded counts as the default rule's, which is what
  every failure was then.
* `judge` decides once, when the failure is recorded, and the FAILED records the
  verdict: `rule`, `final` and, when it will run again, `retry_in_s`. That is
  `max(rule.delay_s(failures of that cause), the failure's retry_after_s)`: a
  StepError's `retry_after` is a floor, never a shortcut past the backoff. On the
  primary the step's retry budget (scheduler/retrypace.py) may add its pacing, passed
  in as the failure's `Slot`: then `retry_in_s` includes it and `paced_s` says how
  much of it was the budget's. A replay reads the recorded verdict, never the budget.
* A loss is paced too: a herd of attempts lost with their primary (or a worker),
  failed as lost together, is the herd the budget is for. When its slot paces it,
  its FAILED records `retry_in_s` (the loss's backoff plus the pacing, `paced_s`,
  `paced_after_loss`); otherwise it records none, as before.
* A failed (or compensated) step that is not final runs again once its
  backoff is over: `retry_in_s` after the failure was recorded (for a loss, or
  a FAILED written before verdicts were, `Retry.delay_s(failures so far)`). The
  time is the log's (`finished_ms`) and the jitter is seeded by task and step,
  so a standby that takes over, or a replay, arms the same retry time.
* A final failure says what follows for the task (`Verdict.then`, the rule's
  `on_exhausted`, inherited from its policy and its workflow): "fail", "pause" or
  "compensate", recorded in the FAILED as `exhausted` when it is not "fail" (a
  loss that spends `max_lost` follows the policy's own, `then_after_loss`). The
  engine acts on it once (engine/decide.py: a TASK_PAUSED or a TASK_COMPENSATING),
  so a FAILED without it (an old log) fails the task as it always did.
* A failed compensation is retried without end (its node's operators see the
  error on the step), `compensation_retry.delay_s(n)` apart.
* A durable `ctx.step`'s tries follow the same rule within one attempt of the
  main (`judge`, over the call's own counts by cause): final when the failure
  says so or its rule's budget is spent, else the next try after `retry_in_s`,
  seeded by task and position.
  Its tries are not in the log (only its outcome is), and it has no losses of
  its own: a main cut off mid-call is lost as a whole, and the call's budget
  starts afresh when it is re-run.
* An undo of a NotIdempotent `ctx.step`'s try (`next_undo_in`) runs inside the
  main's attempt, which cannot wait without end as a compensation does: when
  its policy's `attempts` are spent the main stops, for an operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from apollo11.scheduler.cause import Cause, short
from apollo11.scheduler.retrypace import Slot
from apollo11.scheduler.retrypolicy import DEFAULT_RULE, Exhausted, Never, Retry
from apollo11.scheduler.taskstatus import StepStatus

if TYPE_CHECKING:  # read, never built: the worker that asks about tries loads no state
    from apollo11.scheduler.state.model import StepState

_PENDING = StepStatus.PENDING
_FAILED = StepStatus.FAILED
_COMPENSATED = StepStatus.COMPENSATED


class Budget(NamedTuple):
    """What a step has used since the last operator retry."""

    failed: int  # attempts that failed on their own (or are running: the current one counts)
    lost: int  # attempts interrupted by a node dying


def budget(step: StepState) -> Budget:
    base_attempt = base_losses = base_waits = 0
    override = step.override
    if override and override.get("action") == "retry":
        base_attempt = int(override.get("attempt", 0))
        base_losses = int(override.get("losses", 0))
        base_waits = int(override.get("waits", 0))
    lost = step.losses - base_losses
    return Budget(step.attempt - base_attempt - lost - (step.waits - base_waits), lost)


def may_run_again(step: StepState) -> bool:
    """Is another attempt owed, once its dependencies are done and its backoff is over?"""
    status = step.status
    return status is _PENDING or ((status is _FAILED or status is _COMPENSATED) and not step.final)


def says_final(details: Mapping[str, Any]) -> bool:
    """Did the failure say it is the last (`StepError(..., final=True)`: its details,
    or a FAILED payload that carries them)?"""
    return bool(details.get("final"))


def spent(policy: Retry, failed: int) -> bool:
    """`failed` own failures, the one that just ended included: is the budget spent?"""
    return failed >= policy.attempts


def final_after_failure(step: StepState, policy: Retry) -> bool:
    """The running attempt failed on its own, of no cause a rule names: was it the last
    one? (`step` is the state with that attempt STARTED; `judge` answers for a cause.)"""
    return judge(policy, counts(step), None, "").final


def final_after_loss(step: StepState, policy: Retry) -> bool:
    """The running attempt is lost: is this loss the one that uses up `max_lost`?"""
    return budget(step).lost + 1 >= policy.max_lost


def paced_after_loss(step: StepState, policy: Retry, seed: str, slot: Slot) -> dict[str, Any]:
    """The running attempt of `step` is lost and will be retried, and the step's retry
    budget paces it (`slot`): what its FAILED records. `retry_in_s` is the delay
    `due_at` computes for a loss once it is folded (one loss more, so one own failure
    fewer than `budget(step)` counts now) plus the pacing, so a replay reads it."""
    paced = round(slot.paced_s, 3)  # the log's milliseconds
    delay = policy.delay_s(budget(step).failed - 1, seed)
    return {"retry_in_s": delay + paced, "paced_s": paced, "failing": slot.failing}


def then_after_loss(policy: Retry) -> Exhausted:
    """What a loss that spent `max_lost` does to the task: the policy's own mode."""
    return policy.exhausted_by(policy)


def counts(step: StepState) -> dict[str, int]:
    """The running attempt's step: its own failures before that attempt, by rule (each
    rule's budget spent). The default rule's are those no `on` rule judged."""
    named = step.causes or {}
    return {**named, DEFAULT_RULE: budget(step).failed - 1 - sum(named.values())}


def due_at(task_id: str, step: StepState, policy: Retry) -> float | None:
    """When the next attempt may begin (seconds, on the log's clock); None: now."""
    if step.status is _PENDING or step.finished_ms is None:
        return None
    delay = step.retry_in_s
    if delay is None:  # a loss, or a FAILED older than verdicts
        delay = policy.delay_s(budget(step).failed, f"{task_id}:{step.name}")
    return step.finished_ms / 1000 + delay


Rule = Retry | Never

_RULES_KEPT = 1024  # policies whose rules by name are kept (a workflow made on the fly)
_rules_kept: dict[Retry, dict[str, Rule]] = {}


def _rules(policy: Retry) -> dict[str, Rule]:
    """`policy.rules()`, kept per policy: a step's policy is declared once, and every
    failure of it asks (equal policies have equal rules: `on` is compared, read only)."""
    found = _rules_kept.get(policy)
    if found is None:
        if len(_rules_kept) >= _RULES_KEPT:
            _rules_kept.clear()
        found = _rules_kept[policy] = policy.rules()
    return found


def rule_for(policy: Retry, cause: Cause | None) -> tuple[str, Rule]:
    """The rule a failure is judged by, and its name: the first of the cause's classes
    (most specific first) that `policy.on` names; else the default rule, the policy
    itself. A cause known by its short type name alone (an older worker's) matches a
    rule whose class has that name."""
    if cause is None or not policy.on:
        return DEFAULT_RULE, policy
    rules = _rules(policy)
    if cause.legacy:
        by_short = {name.rpartition(".")[2]: name for name in rules}
        found = by_short.get(cause.type.rpartition(".")[2])
        return (found, rules[found]) if found is not None else (DEFAULT_RULE, policy)
    for name in cause.names:
        rule = rules.get(name)
        if rule is not None:
            return name, rule
    return DEFAULT_RULE, policy


class Verdict(NamedTuple):
    """A failure judged: what its FAILED records (`record`)."""

    rule: str  # the rule's name: a class's qualified name, or DEFAULT_RULE
    failures: int  # own failures matched to that rule, this one included
    attempts: int  # the rule's budget (1 for FINAL)
    final: bool
    retry_in_s: float | None  # when it is not final: how long after the failure
    # when it is final: what follows for the task (the rule's on_exhausted)
    then: Exhausted = "fail"
    # of retry_in_s, what the step's retry budget added (retrypace.py), and the step's
    # failures in the budget's window then
    paced_s: float = 0.0
    failing: int = 0

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rule": self.rule,
            "final": self.final,
            "decision": {"failures": self.failures, "attempts": self.attempts},
        }
        if self.retry_in_s is not None:
            out["retry_in_s"] = self.retry_in_s
            if self.paced_s > 0:
                out["paced_s"] = self.paced_s
                out["failing"] = self.failing
        if self.final and self.then != "fail":  # "fail": the FAILED as it always was
            out["exhausted"] = self.then
        return out


def judge(
    policy: Retry,
    before: Mapping[str, int] | None,
    cause: Cause | None,
    seed: str,
    *,
    final: bool = False,
    slot: Slot | None = None,
) -> Verdict:
    """Judge a failure by its rule. `before`: own failures by rule before this one
    (`counts(step)`, or a ctx.step's own); `seed`: the jitter's (task and step, or
    task and position); `final`: the failure says it is the last (`says_final`);
    `slot`: its place in the step's retry budget (None: not paced), added to the delay
    of a retry."""
    name, rule = rule_for(policy, cause)
    failures = (before or {}).get(name, 0) + 1
    if isinstance(rule, Never):
        return Verdict(name, failures, 1, True, None, policy.exhausted_by(rule))
    if final or spent(rule, failures):
        return Verdict(name, failures, rule.attempts, True, None, policy.exhausted_by(rule))
    delay = rule.delay_s(failures, seed)
    after = cause.retry_after_s if cause is not None else None
    if after is not None and after > delay:
        delay = after
    verdict = Verdict(name, failures, rule.attempts, False, delay)
    return paced_by(verdict, slot) if slot is not None else verdict


def paced_by(verdict: Verdict, slot: Slot) -> Verdict:
    """A retry's verdict with its slot in the step's retry budget (retrypace.py) added to
    its delay: what `judge` says given that slot, without judging again (a final
    verdict, or a slot that paces nothing, is returned as it is)."""
    if verdict.final or verdict.retry_in_s is None or slot.paced_s <= 0:
        return verdict
    paced = round(slot.paced_s, 3)  # the log's milliseconds
    return verdict._replace(
        retry_in_s=verdict.retry_in_s + paced, paced_s=paced, failing=slot.failing
    )


def rule_label(rule: str) -> str:
    """A rule's name as a metric label: its class's short name (`TimeoutError`,
    `ReadTimeout`), or `default`. Bounded: rules are declared, never a message."""
    return short(rule) if rule != DEFAULT_RULE else DEFAULT_RULE


def compensation_delay(policy: Retry, failures: int, task_id: str, step: str) -> float:
    """How long to wait after the `failures`-th failed try of a compensation."""
    return policy.delay_s(failures, f"{task_id}:{step}:c")


def next_try(
    policy: Retry,
    before: Mapping[str, int],
    cause: Cause | None,
    task_id: str,
    seq: int,
    *,
    final: bool,
) -> Verdict:
    """A durable `ctx.step`'s try failed with `cause`: judged as a step's failure is,
    over the call's own failed tries by rule (`before`), seeded by task and position.
    `final`: the failure said so."""
    return judge(policy, before, cause, f"{task_id}:{seq}", final=final)


def next_try_in(policy: Retry, tries: int, task_id: str, seq: int, *, final: bool) -> float | None:
    """A durable `ctx.step`'s `tries`-th try (within this call, from 1) failed of no
    cause in particular (the default rule): how long until the next one, or None when
    that was its last. `final`: the failure said so."""
    return next_try(policy, {DEFAULT_RULE: tries - 1}, None, task_id, seq, final=final).retry_in_s


def next_undo_in(policy: Retry, tries: int, task_id: str, seq: int) -> float | None:
    """The `tries`-th try to undo a NotIdempotent `ctx.step` failed: how long until the
    next one, or None when the main must stop instead."""
    if spent(policy, tries):
        return None
    return policy.delay_s(tries, f"{task_id}:{seq}:undo")
