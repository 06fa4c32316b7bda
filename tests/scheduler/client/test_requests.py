"""The request messages the client builds, without a server."""

from __future__ import annotations

import pytest

from apollo11.scheduler.client import InvalidArgumentError
from apollo11.scheduler.client._requests import json_text, list_request
from apollo11.v1 import scheduler_pb2 as pb


def test_a_state_filter_is_sent_by_its_wire_value() -> None:
    assert list_request("RUNNING", "", 10, "").state == pb.TASK_STATE_RUNNING
    assert list_request(None, "etl", 10, "").state == pb.TASK_STATE_UNSPECIFIED


def test_an_unknown_state_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(InvalidArgumentError, match="one of PENDING, RUNNING"):
        list_request("DONE", "", 10, "")


def test_json_it_cannot_encode_is_refused_naming_the_argument() -> None:
    """orjson encodes 254 levels at most: past that the client raised a bare
    TypeError ("Recursion limit reached"), which the CLI printed as a traceback."""
    deep: list[object] = []
    for _ in range(899):
        deep = [deep]
    with pytest.raises(InvalidArgumentError, match=r"^input nests deeper than 254 levels"):
        json_text(deep, "input")
    with pytest.raises(InvalidArgumentError, match=r"^payload cannot be sent as JSON: Type"):
        json_text({1, 2}, "payload")
    assert json_text({"a": [1]}, "input") == '{"a":[1]}'
