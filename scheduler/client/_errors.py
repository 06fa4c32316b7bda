"""What a gRPC status becomes in the client: one of the project's errors.

A standby answers a write FAILED_PRECONDITION with the primary's address in
trailing metadata (`wire.LEADER_METADATA`): that becomes a NotLeaderError the
client follows.
"""

from __future__ import annotations

import grpc

from apollo11.scheduler.client._views import TaskView
from apollo11.scheduler.errors import (
    AlreadyExistsError,
    ApolloError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
    ResourceExhaustedError,
)
from apollo11.scheduler.wire import LEADER_METADATA


class UnavailableError(ApolloError):
    """No node could serve the call (after retries)."""


class TaskFailed(ApolloError):
    """`wait` or `result`: the task ended FAILED (or NONDETERMINISTIC); `task` is how."""

    def __init__(self, task: TaskView) -> None:
        failed = [s for s in task.steps if s.state == "FAILED"]
        why = f": step {failed[0].name}: {failed[0].error}" if failed else ""
        super().__init__(f"task {task.task_id} ({task.workflow}) ended {task.state}{why}")
        self.task = task


class TaskCancelled(ApolloError):
    """`wait` or `result`: the task was cancelled; `task` says by whom and why."""

    def __init__(self, task: TaskView) -> None:
        by = task.cancelled or {}
        who = f" by {by.get('operator')}" if by.get("operator") else ""
        why = f": {by.get('reason')}" if by.get("reason") else ""
        super().__init__(f"task {task.task_id} ({task.workflow}) was cancelled{who}{why}")
        self.task = task


class ApiError(ApolloError):
    """Any other error status from the server."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code


def _leader_from(err: grpc.aio.AioRpcError) -> str | None:
    for key, value in err.trailing_metadata() or ():
        if key == LEADER_METADATA:
            return str(value)
    return None


def translate(err: grpc.aio.AioRpcError) -> ApolloError:
    code, msg = err.code(), err.details() or ""
    if code is grpc.StatusCode.NOT_FOUND:
        return NotFoundError(msg)
    if code is grpc.StatusCode.ALREADY_EXISTS:
        return AlreadyExistsError(msg)
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgumentError(msg)
    if code is grpc.StatusCode.FAILED_PRECONDITION:
        leader = _leader_from(err)
        return NotLeaderError(msg, leader=leader) if leader else FailedPreconditionError(msg)
    if code is grpc.StatusCode.UNAVAILABLE:
        return UnavailableError(msg)
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        # not retried: a node at its limit (or a message over it) is not helped by more
        return ResourceExhaustedError(msg)
    return ApiError(code, msg)
