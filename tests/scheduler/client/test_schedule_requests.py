"""The schedule requests the client builds, without a server: spec fields as text,
unset ones left out, and the update's "keep" apart from "set to null"."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apollo11.scheduler.client import InvalidArgumentError, ScheduleSpecView
from apollo11.scheduler.client._requests import schedule_spec, update_schedule_request
from apollo11.v1 import scheduler_pb2 as pb


def test_durations_and_times_are_sent_as_the_node_reads_them() -> None:
    spec = schedule_spec(
        {
            "every": timedelta(minutes=15),
            "start": datetime(2026, 1, 1, 3, tzinfo=UTC),
            "jitter": "30s",
            "tz": None,
        }
    )
    assert spec.WhichOneof("when") == "every"
    assert (spec.every, spec.start, spec.jitter) == ("900s", "2026-01-01T03:00:00+00:00", "30s")
    assert not spec.HasField("tz"), "an unset field is not sent: the node's default holds"
    naive = schedule_spec({"at": datetime(2026, 3, 29, 2, 30)})
    assert naive.at == "2026-03-29T02:30:00", "a naive at stays a wall-clock time"


def test_two_whens_are_refused_before_the_oneof_drops_one() -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"^exactly one of cron, every or at is needed \(got cron and at"
    ):
        schedule_spec({"cron": "@daily", "every": None, "at": "2026-01-01T00:00:00Z"})


def test_an_update_sends_only_what_changes() -> None:
    keep = update_schedule_request("s", "", schedule_spec({"cron": None}), None, None)
    assert not keep.HasField("spec") and not keep.HasField("input_json")
    assert not keep.HasField("note")
    null = update_schedule_request("s", "", schedule_spec({"start": ""}), "null", "")
    assert null.HasField("spec") and null.spec.HasField("start") and null.spec.start == ""
    assert null.input_json == "null" and null.HasField("note")


def test_a_spec_view_gives_back_the_fields_with_a_value() -> None:
    view = ScheduleSpecView(
        cron=None,
        every="15m",
        at=None,
        tz="UTC",
        start=None,
        end=None,
        jitter="0s",
        catchup_window="1d",
        overlap="skip",
        nonexistent="next",
        ambiguous="first",
    )
    assert view.when == "every 15m"
    assert view.to_json() == {
        "every": "15m",
        "tz": "UTC",
        "jitter": "0s",
        "catchup_window": "1d",
        "overlap": "skip",
        "nonexistent": "next",
        "ambiguous": "first",
    }
    assert pb.ScheduleSpec(**view.to_json()).every == "15m"
