"""What a gRPC status becomes in the client: one of the project's errors.

A standby answers a write FAILED_PRECONDITION with the primary's address in
trailing metadata (`wire.LEADER_METADATA`): that becomes a NotLeaderError the
client follows.
"""

from __future__ import annotations

import grpc

from apollo11.scheduler.api.wire import LEADER_METADATA
from apollo11.scheduler.errors import (
    AlreadyExistsError,
    ApolloError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    NotLeaderError,
    ResourceExhaustedError,
)


class UnavailableError(ApolloError):
    """No node could serve the call (after retries)."""


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
