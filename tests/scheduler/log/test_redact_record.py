"""A record rewritten without its data (scheduler/log/redact.py): the same length and
skeleton, a valid CRC, a value that is still there, and the same bytes when rewritten
again."""

from __future__ import annotations

from apollo11.scheduler.log import EventType, redact_record
from apollo11.scheduler.log.record import check_record, decode_record, encode_payload, encode_record


def _record(payload: dict[str, object]) -> bytes:
    data = encode_payload(payload, 1 << 20)
    return encode_record(7, 2, "n1", "t1", "load", EventType.STEP_SUCCEEDED, data, 1234, 3)


def test_a_record_keeps_its_length_and_skeleton_and_loses_its_data() -> None:
    rec = _record({"result": {"name": "Ana Lima", "card": "4111 1111 1111 1111"}, "ms": 5})
    new = redact_record(rec, 99)
    assert len(new) == len(rec) and new != rec
    info = check_record(new, 0, "seg")  # a valid CRC
    assert info is not None and info.end == len(new)
    e = decode_record(new, 0, len(new), "seg")
    assert (e.event_id, e.term, e.task_id, e.step_name, e.attempt, e.timestamp) == (
        7, 2, "t1", "load", 3, 1234,
    )  # fmt: skip
    assert e.event_type is EventType.STEP_SUCCEEDED
    assert e.payload == {"result": {"$redacted": 99}, "ms": 5}
    assert redact_record(new, 99) == new  # idempotent


def test_a_value_too_short_for_the_marker_becomes_zero_never_null() -> None:
    rec = _record({"result": "ok", "input": None})
    new = redact_record(rec, 12345)
    assert len(new) == len(rec)
    assert decode_record(new, 0, len(new), "seg").payload == {"result": 0, "input": None}
    assert redact_record(new, 12345) == new


def test_a_record_without_data_is_left_as_it_is() -> None:
    rec = _record({"error": "boom", "final": True})
    assert redact_record(rec, 3) is rec
