"""The request messages the client builds, without a server."""

from __future__ import annotations

import pytest

from apollo11.scheduler.client import InvalidArgumentError
from apollo11.scheduler.client._requests import list_request
from apollo11.v1 import scheduler_pb2 as pb


def test_a_state_filter_is_sent_by_its_wire_value() -> None:
    assert list_request("RUNNING", "", 10, "").state == pb.TASK_STATE_RUNNING
    assert list_request(None, "etl", 10, "").state == pb.TASK_STATE_UNSPECIFIED


def test_an_unknown_state_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidArgumentError, match="one of PENDING, RUNNING"):
        list_request("DONE", "", 10, "")
