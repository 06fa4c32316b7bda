"""The workflow engine: decides, from the replayed state, what runs next, and acts.

* `decide.py`: `decide(task, workflow, busy, now) -> list[Action]`, pure (whether and
  when a step runs again is `scheduler/retry.py`'s, which durable mains ask too);
* `engine.py`: the `Engine`: which tasks to decide, when, and acting on the actions;
* `steps.py`: one attempt under its timeout, its outcome recorded; compensation;
* `exhaustion.py`: a step's retries ran out: its TASK_PAUSED or TASK_COMPENSATING;
* `intake.py`: what clients and operators ask (submissions with their idempotency
  keys, events, retry, skip, cancel), checked, written and answered once committed;
* `retention.py`: the retention sweep (TASK_PURGED) and legal holds (TASK_HELD);
* `executor.py`: the seam where step code runs (`Executor`; in process today).

Import from here, not from the modules inside.
"""

from apollo11.scheduler.engine.decide import (
    Action,
    CancelAttempt,
    Compensate,
    CompensateTask,
    FailLost,
    NoWorkflow,
    PauseTask,
    StartAttempt,
    Stuck,
    WakeAt,
    decide,
)
from apollo11.scheduler.engine.engine import DEFAULT_CONCURRENCY, Engine
from apollo11.scheduler.engine.executor import (
    EMBEDDED,
    Attempt,
    AttemptToken,
    Executor,
    Failed,
    InProcessExecutor,
    Lost,
    NotBegun,
    Outcome,
    Succeeded,
    failure,
)
from apollo11.scheduler.engine.intake import (
    DEFAULT_IDEMPOTENCY_TTL_S,
    EventSent,
    SubmitItem,
    Submitted,
    new_task_id,
)
from apollo11.scheduler.engine.journal import StoreJournal
from apollo11.scheduler.engine.limits import KeyLoad, LimitsView, LimitView
from apollo11.scheduler.engine.retention import RetentionOptions, RetentionSweep
from apollo11.scheduler.engine.steps import ERROR_TEXT_MAX, Key

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_IDEMPOTENCY_TTL_S",
    "EMBEDDED",
    "ERROR_TEXT_MAX",
    "Action",
    "Attempt",
    "AttemptToken",
    "CancelAttempt",
    "Compensate",
    "CompensateTask",
    "Engine",
    "EventSent",
    "Executor",
    "FailLost",
    "Failed",
    "InProcessExecutor",
    "Key",
    "KeyLoad",
    "LimitView",
    "LimitsView",
    "Lost",
    "NoWorkflow",
    "NotBegun",
    "Outcome",
    "PauseTask",
    "RetentionOptions",
    "RetentionSweep",
    "StartAttempt",
    "StoreJournal",
    "Stuck",
    "SubmitItem",
    "Submitted",
    "Succeeded",
    "WakeAt",
    "decide",
    "failure",
    "new_task_id",
]
