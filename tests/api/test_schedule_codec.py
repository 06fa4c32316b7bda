"""A request's schedule spec as the server reads it: defaults, updates over the current
spec, and refusals in `explain`'s words, naming the field and why."""

from __future__ import annotations

import pytest

from apollo11.scheduler.api import codec
from apollo11.scheduler.errors import InvalidArgumentError
from apollo11.scheduler.schedules import ScheduleSpec
from apollo11.v1 import scheduler_pb2 as pb


def test_an_empty_option_takes_its_default() -> None:
    spec = codec.spec_from_pb(pb.ScheduleSpec(cron="0 3 * * *", tz="", jitter=""))
    assert spec == ScheduleSpec(cron="0 3 * * *")


def test_a_bad_spec_is_refused_with_the_fields_reason() -> None:
    with pytest.raises(InvalidArgumentError, match=r'^cron "61 \* \* \* \*": minute 61'):
        codec.spec_from_pb(pb.ScheduleSpec(cron="61 * * * *"))
    with pytest.raises(InvalidArgumentError, match=r'^tz "Mars/Olympus": unknown time zone'):
        codec.spec_from_pb(pb.ScheduleSpec(every="15m", tz="Mars/Olympus"))
    with pytest.raises(InvalidArgumentError, match=r"exactly one of cron, every or at .*got none"):
        codec.spec_from_pb(pb.ScheduleSpec(tz="UTC"))
    with pytest.raises(InvalidArgumentError, match=r'^cron "": '):
        codec.spec_from_pb(pb.ScheduleSpec(cron=""))  # said what is wrong, not "none given"


def test_an_oversize_field_is_refused_naming_the_limit() -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"^spec\.cron is 300 characters, over the limit of 256$"
    ):
        codec.spec_from_pb(pb.ScheduleSpec(cron="*" * 300))


def test_an_answer_carries_every_field_and_reads_back() -> None:
    spec = ScheduleSpec(cron="0 3 * * *", tz="Europe/Berlin", start="2026-01-01T00:00:00+01:00")
    msg = codec.spec_to_pb(spec)
    assert msg.WhichOneof("when") == "cron"
    assert (msg.tz, msg.start, msg.jitter, msg.catchup_window, msg.overlap) == (
        "Europe/Berlin",
        "2025-12-31T23:00:00Z",
        "0s",
        "1d",
        "skip",
    )
    assert not msg.HasField("end")
    assert codec.spec_from_pb(msg) == spec


def test_an_update_changes_what_it_gives_and_keeps_the_rest() -> None:
    current = ScheduleSpec(
        cron="0 3 * * *", tz="Europe/Berlin", jitter="5m", end="2027-01-01T00:00:00Z"
    )
    moved = codec.spec_updated(current, pb.ScheduleSpec(every="1h"))
    assert moved == ScheduleSpec(
        every="1h", tz="Europe/Berlin", jitter="5m", end="2027-01-01T00:00:00Z"
    )
    reset = codec.spec_updated(current, pb.ScheduleSpec(jitter="", end="", overlap="allow-all"))
    assert reset == ScheduleSpec(cron="0 3 * * *", tz="Europe/Berlin", overlap="allow-all")
    assert codec.spec_updated(current, pb.ScheduleSpec()) == current
    with pytest.raises(InvalidArgumentError, match=r'^overlap "never": must be one of skip'):
        codec.spec_updated(current, pb.ScheduleSpec(overlap="never"))


def test_times_are_iso_in_utc_to_the_millisecond() -> None:
    assert codec.iso_ms(0) == "1970-01-01T00:00:00Z"
    assert codec.iso_ms(1_774_746_000_000) == "2026-03-29T01:00:00Z"
    assert codec.iso_ms(1_774_746_000_001) == "2026-03-29T01:00:00.001000Z"
