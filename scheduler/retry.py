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
* A failed (or compensated) step that is not final runs again once its
  backoff is over: `Retry.delay_s(failures so far)` after the failure was
  recorded. The time is the log's (`finished_ms`) and the jitter is seeded by
  task and step, so a standby that takes over arms the same retry time.
* A failed compensation is retried without end (its node's operators see the
  error on the step), `compensation_retry.delay_s(n)` apart.
* A durable `ctx.step`'s tries follow the same rule within one attempt of the
  main (`next_try_in`): final when the failure says so or `attempts` are
  spent, else the next try after `delay_s(tries)`, seeded by task and position.
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

from apollo11.scheduler.taskstatus import StepStatus
from apollo11.scheduler.workflow import Retry

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
    """The running attempt failed on its own: was it the last one? (`step` is the
    state with that attempt STARTED.)"""
    return spent(policy, budget(step).failed)


def final_after_loss(step: StepState, policy: Retry) -> bool:
    """The running attempt is lost: is this loss the one that uses up `max_lost`?"""
    return budget(step).lost + 1 >= policy.max_lost


def due_at(task_id: str, step: StepState, policy: Retry) -> float | None:
    """When the next attempt may begin (seconds, on the log's clock); None: now."""
    if step.status is _PENDING or step.finished_ms is None:
        return None
    delay = policy.delay_s(budget(step).failed, f"{task_id}:{step.name}")
    return step.finished_ms / 1000 + delay


def compensation_delay(policy: Retry, failures: int, task_id: str, step: str) -> float:
    """How long to wait after the `failures`-th failed try of a compensation."""
    return policy.delay_s(failures, f"{task_id}:{step}:c")


def next_try_in(policy: Retry, tries: int, task_id: str, seq: int, *, final: bool) -> float | None:
    """A durable `ctx.step`'s `tries`-th try (within this call, from 1) failed: how long
    until the next one, or None when that was its last. `final`: the failure said so."""
    if final or spent(policy, tries):
        return None
    return policy.delay_s(tries, f"{task_id}:{seq}")


def next_undo_in(policy: Retry, tries: int, task_id: str, seq: int) -> float | None:
    """The `tries`-th try to undo a NotIdempotent `ctx.step` failed: how long until the
    next one, or None when the main must stop instead."""
    if spent(policy, tries):
        return None
    return policy.delay_s(tries, f"{task_id}:{seq}:undo")
