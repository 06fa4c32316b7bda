"""Which gRPC status each refusal travels as: the client retries UNAVAILABLE, and
follows FAILED_PRECONDITION only when it names the leader to go to."""

from __future__ import annotations

import grpc

from apollo11.scheduler.api.server import _status_for
from apollo11.scheduler.errors import NotLeaderError


def test_not_the_leader_without_a_leader_to_name_is_unavailable() -> None:
    """A write that reached a node between its role turning primary and its engine
    starting (or while it stepped down) was FAILED_PRECONDITION with no leader, which
    no client retries: a test's submit failed so under load."""
    assert _status_for(NotLeaderError("not the primary yet")) is grpc.StatusCode.UNAVAILABLE
    redirect = NotLeaderError("a standby", leader="127.0.0.1:7001")
    assert _status_for(redirect) is grpc.StatusCode.FAILED_PRECONDITION
