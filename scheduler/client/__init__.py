"""The Python client: typed, async (`Client`) and sync (`SyncClient`).

    async with Client(["node-1:7411", "node-2:7411", "node-3:7411"]) as c:
        handle = await c.submit("etl", {"step_seconds": 1})
        async for event in handle.watch():
            print(event.event_type, event.step_name)

It follows the primary: a write that lands on a standby comes back
FAILED_PRECONDITION with the primary's address, and the client retries it
there. Calls that are safe to repeat (reads, and submissions, which always
carry an idempotency key: one is generated when you give none) are retried
with capped backoff on UNAVAILABLE, moving to the next endpoint.

It imports no server module (`apollo11.scheduler.wire` holds what both sides share)
and registers no metric: tests/scheduler/client/test_imports.py checks both.

_client.py      Client, SyncClient: follow the primary, retry what is safe
_handle.py      TaskHandle, SyncTaskHandle: a submitted task, typed by its workflow's result
_connection.py  endpoints, TLS, token and channel options, from arguments or APOLLO11_*
_errors.py      a gRPC status -> one of the project's errors
_convert.py     protobuf messages -> views
_requests.py    the request messages
_views.py       the typed results, and the JSON shapes the CLI prints
"""

from apollo11.scheduler.client._client import Client, SyncClient
from apollo11.scheduler.client._connection import (
    DEFAULT_SERVER,
    channel_credentials_for,
    endpoints_from,
)
from apollo11.scheduler.client._errors import (
    ApiError,
    TaskCancelled,
    TaskFailed,
    UnavailableError,
)
from apollo11.scheduler.client._handle import SyncTaskHandle, TaskHandle, task_result
from apollo11.scheduler.client._views import (
    BackfillStarted,
    BackfillView,
    EventsPage,
    EventView,
    KeyLoadView,
    LimitChange,
    LimitsView,
    LimitView,
    MemberView,
    OccurrenceView,
    Page,
    ScheduleDescription,
    SchedulePage,
    ScheduleSpecView,
    ScheduleView,
    SentEvent,
    StatusView,
    StepView,
    Submission,
    TaskRead,
    TaskSummaryView,
    TaskView,
    TermView,
    WorkerView,
)
from apollo11.scheduler.errors import (
    AlreadyExistsError,
    ApolloError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
    ResourceExhaustedError,
)

__all__ = [
    "DEFAULT_SERVER",
    "AlreadyExistsError",
    "ApiError",
    "ApolloError",
    "BackfillStarted",
    "BackfillView",
    "Client",
    "EventView",
    "EventsPage",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "KeyLoadView",
    "LimitChange",
    "LimitView",
    "LimitsView",
    "MemberView",
    "NotFoundError",
    "NotLeaderError",
    "OccurrenceView",
    "Page",
    "ResourceExhaustedError",
    "ScheduleDescription",
    "SchedulePage",
    "ScheduleSpecView",
    "ScheduleView",
    "SentEvent",
    "StatusView",
    "StepView",
    "Submission",
    "SyncClient",
    "SyncTaskHandle",
    "TaskCancelled",
    "TaskFailed",
    "TaskHandle",
    "TaskRead",
    "TaskSummaryView",
    "TaskView",
    "TermView",
    "UnavailableError",
    "WorkerView",
    "channel_credentials_for",
    "endpoints_from",
    "task_result",
]
