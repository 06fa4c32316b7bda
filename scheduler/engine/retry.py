"""Will a step run again, and when? The one place that answers.

Pure functions of a step's replayed state (what the log says happened) and its
declared `Retry` (scheduler/workflow.py: the policy and its backoff curve).
Nothing here reads a clock or writes an event; the engine asks, and so does
every decision (`decide`), with the same answers on every node.

The rules:

* An attempt that failed on its own uses one of `attempts`. One lost to a
  dying node (or a lost lease) does not, it uses one of `max_lost`: not the
  step's fault, but a step that keeps killing its node must stop somewhere.
* An attempt of a durable main that ended in a WAIT (`StepState.waits`) is
  neither: the task went to sleep, and a task that wakes a thousand times must
  not use up its main's attempts (docs/durable.md).
* An operator's retry gives a fresh budget: replay keeps, in the step's
  `override`, the attempt and loss counts it was given at (`_on_override`), and
  both budgets count from there.
* A failure is final when its budget is spent, or when the failure says so
  (the step raised `StepError(..., final=True)`, its result was refused, the
  task was cancelled). Replay keeps `final` on the step until a new STARTED or
  an operator's action clears it. A final failure never runs again on its own.
* A failed (or compensated) step that is not final runs again once its
  backoff is over: `Retry.delay_s(failures so far)` after the failure was
  recorded. The time is the log's (`finished_ms`) and the jitter is seeded by
  task and step, so a standby that takes over arms the same retry time.
* A failed compensation is retried without end (its node's operators see the
  error on the step), `compensation_retry.delay_s(n)` apart.
"""

from __future__ import annotations

from typing import NamedTuple

from apollo11.scheduler.replay import StepState, StepStatus
from apollo11.scheduler.workflow import Retry

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


def final_after_failure(step: StepState, policy: Retry) -> bool:
    """The running attempt failed on its own: was it the last one? (`step` is the
    state with that attempt STARTED.)"""
    return budget(step).failed >= policy.attempts


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
