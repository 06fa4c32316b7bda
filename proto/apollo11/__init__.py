"""Apollo-11: durable task orchestration. What a program that uses it imports:

    from apollo11 import DedupeKey, Idempotent, Retry, StepContext, Workflow

    hello = Workflow("hello", version=1)

    @hello.step(idempotency=Idempotent(), retry=Retry(attempts=3))
    def fetch(ctx: StepContext) -> dict: ...

    with Client("127.0.0.1:7411") as c:             # AsyncClient: the same API, awaited
        print(c.submit(hello, {}).result())        # a TaskHandle, typed by hello's result=

Definitions (`Workflow`, `DurableWorkflow`, the idempotency declarations, `Retry`,
a step's `Limits`, `Schedule`, flow control's `Concurrency`, `Rate`, `Debounce`), the
contexts a step and a durable main receive, the errors a step raises (and those it
fails with at its limits) and a caller catches, and the clients.
`apollo11.scheduler.*` is the engine's own layout: internal, free to move.

The names load on first use (PEP 562): `apollo11.scheduler.*` imports this package
first, and `import apollo11` alone must cost an application nothing, load no server
module and register no metric (tests/test_face.py checks both in a fresh process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apollo11.scheduler.client import ApiError, TaskCancelled, TaskFailed, UnavailableError
    from apollo11.scheduler.client import Client as AsyncClient
    from apollo11.scheduler.client import SyncClient as Client
    from apollo11.scheduler.client import SyncTaskHandle as TaskHandle
    from apollo11.scheduler.client import TaskHandle as AsyncTaskHandle
    from apollo11.scheduler.durable import (
        ChildFailed,
        DurableContext,
        DurableStepError,
        DurableWorkflow,
        NonDeterminism,
        current_step,
    )
    from apollo11.scheduler.errors import (
        ApolloError,
        InvalidArgumentError,
        NotFoundError,
        WorkflowDefinitionError,
    )
    from apollo11.scheduler.schedules import Schedule
    from apollo11.scheduler.workflow import (
        FINAL,
        Checkpoint,
        Concurrency,
        CpuLimitExceeded,
        Debounce,
        DedupeKey,
        Idempotent,
        Limits,
        MemoryLimitExceeded,
        NotIdempotent,
        Rate,
        ResultNotVisible,
        Retry,
        StepContext,
        StepError,
        StepLimitExceeded,
        Workflow,
    )

# name -> (module, its name there). Client is the blocking client and AsyncClient the
# asyncio one, as in httpx; inside apollo11.scheduler.client they are SyncClient and
# Client (and their handles TaskHandle and AsyncTaskHandle, SyncTaskHandle and
# TaskHandle there).
_WHERE: dict[str, tuple[str, str]] = {
    # definitions
    "Workflow": ("apollo11.scheduler.workflow", "Workflow"),
    "StepContext": ("apollo11.scheduler.workflow", "StepContext"),
    "Idempotent": ("apollo11.scheduler.workflow", "Idempotent"),
    "DedupeKey": ("apollo11.scheduler.workflow", "DedupeKey"),
    "Checkpoint": ("apollo11.scheduler.workflow", "Checkpoint"),
    "NotIdempotent": ("apollo11.scheduler.workflow", "NotIdempotent"),
    "Retry": ("apollo11.scheduler.workflow", "Retry"),
    "FINAL": ("apollo11.scheduler.workflow", "FINAL"),
    "StepError": ("apollo11.scheduler.workflow", "StepError"),
    "ResultNotVisible": ("apollo11.scheduler.workflow", "ResultNotVisible"),
    "Concurrency": ("apollo11.scheduler.workflow", "Concurrency"),
    "Rate": ("apollo11.scheduler.workflow", "Rate"),
    "Debounce": ("apollo11.scheduler.workflow", "Debounce"),
    "Limits": ("apollo11.scheduler.workflow", "Limits"),
    "StepLimitExceeded": ("apollo11.scheduler.workflow", "StepLimitExceeded"),
    "MemoryLimitExceeded": ("apollo11.scheduler.workflow", "MemoryLimitExceeded"),
    "CpuLimitExceeded": ("apollo11.scheduler.workflow", "CpuLimitExceeded"),
    "Schedule": ("apollo11.scheduler.schedules", "Schedule"),
    # durable tasks
    "DurableWorkflow": ("apollo11.scheduler.durable", "DurableWorkflow"),
    "DurableContext": ("apollo11.scheduler.durable", "DurableContext"),
    "DurableStepError": ("apollo11.scheduler.durable", "DurableStepError"),
    "ChildFailed": ("apollo11.scheduler.durable", "ChildFailed"),
    "NonDeterminism": ("apollo11.scheduler.durable", "NonDeterminism"),
    "current_step": ("apollo11.scheduler.durable", "current_step"),
    # clients and what they raise
    "Client": ("apollo11.scheduler.client", "SyncClient"),
    "AsyncClient": ("apollo11.scheduler.client", "Client"),
    "TaskHandle": ("apollo11.scheduler.client", "SyncTaskHandle"),
    "AsyncTaskHandle": ("apollo11.scheduler.client", "TaskHandle"),
    "ApiError": ("apollo11.scheduler.client", "ApiError"),
    "TaskFailed": ("apollo11.scheduler.client", "TaskFailed"),
    "TaskCancelled": ("apollo11.scheduler.client", "TaskCancelled"),
    "UnavailableError": ("apollo11.scheduler.client", "UnavailableError"),
    # the error tree
    "ApolloError": ("apollo11.scheduler.errors", "ApolloError"),
    "InvalidArgumentError": ("apollo11.scheduler.errors", "InvalidArgumentError"),
    "NotFoundError": ("apollo11.scheduler.errors", "NotFoundError"),
    "WorkflowDefinitionError": ("apollo11.scheduler.errors", "WorkflowDefinitionError"),
}

__all__ = [
    "FINAL",
    "ApiError",
    "ApolloError",
    "AsyncClient",
    "AsyncTaskHandle",
    "Checkpoint",
    "ChildFailed",
    "Client",
    "Concurrency",
    "CpuLimitExceeded",
    "Debounce",
    "DedupeKey",
    "DurableContext",
    "DurableStepError",
    "DurableWorkflow",
    "Idempotent",
    "InvalidArgumentError",
    "Limits",
    "MemoryLimitExceeded",
    "NonDeterminism",
    "NotFoundError",
    "NotIdempotent",
    "Rate",
    "ResultNotVisible",
    "Retry",
    "Schedule",
    "StepContext",
    "StepError",
    "StepLimitExceeded",
    "TaskCancelled",
    "TaskFailed",
    "TaskHandle",
    "UnavailableError",
    "Workflow",
    "WorkflowDefinitionError",
    "current_step",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'apollo11' has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0]), where[1])
    globals()[name] = value  # once: later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
