"""What follows when a step's retries run out, recorded: TASK_PAUSED or TASK_COMPENSATING.

`decide` names it (`PauseTask`, `CompensateTask`) from the task's replayed state,
where a final FAILED left `TaskState.exhausted` (its rule's `on_exhausted`,
scheduler/retry.py); this module writes the one event that answers it, once, and
the fold does the rest (state/fold.py): a paused task starts nothing until an
operator's retry, a compensating one owes the compensations of the steps named.

Written by the primary as a decision, not in the FAILED's batch: the steps that
succeeded are known only once nothing of the task runs any more, and a primary
that dies before the event is durable leaves the task as the FAILED left it, to
be decided again by the next one (which writes it then); one whose append fails
on a primary that goes on is decided again a second later (engine.py
`_record_end`), never left owed until a failover. A decision overtaken by
an operator (a cancel, a retry of the step) between the decision and the write
is not written: checked against the state right before the append, with nothing
awaited between the two.
"""

from __future__ import annotations

from typing import Any

from apollo11.scheduler.engine.decide import CompensateTask, PauseTask
from apollo11.scheduler.log import Event, EventType
from apollo11.scheduler.state import Store, TaskState


def still_owed(task: TaskState | None, action: PauseTask | CompensateTask) -> bool:
    """Does the task still wait for this record (nothing overtook the decision)?"""
    if task is None or task.cancelled is not None or task.exhausted is None:
        return False
    then = "pause" if isinstance(action, PauseTask) else "compensate"
    return task.exhausted.get("then") == then and task.exhausted.get("step") == action.step


def payload(task: TaskState, action: PauseTask | CompensateTask) -> dict[str, Any]:
    """The event's payload: the step whose retries ran out, its error and the rule that
    judged it (what `apollo11 task` and the page show), and for a compensation the
    steps that owe theirs, in the order the task declared them."""
    step = task.steps.get(action.step)
    out: dict[str, Any] = {"step": action.step}
    if step is not None and step.error:
        out["error"] = step.error
    if isinstance(action, CompensateTask):
        out["compensate"] = list(action.compensate)
    return out


async def record(store: Store, task_id: str, action: PauseTask | CompensateTask) -> Event | None:
    """Append the TASK_PAUSED or TASK_COMPENSATING the decision names; None when the
    task no longer waits for it. Returns once it is durable (commit is the caller's)."""
    task = store.state.tasks.get(task_id)
    if task is None or not still_owed(task, action):
        return None
    kind = EventType.TASK_PAUSED if isinstance(action, PauseTask) else EventType.TASK_COMPENSATING
    return await store.log.append(kind, task_id, payload=payload(task, action))
