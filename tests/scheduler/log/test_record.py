from __future__ import annotations

import pytest

from apollo11.scheduler.errors import (
    CorruptLogError,
    InvalidEventError,
    PayloadTooDeepError,
    PayloadTooLargeError,
)
from apollo11.scheduler.log.record import (
    EventType,
    check_record,
    decode_record,
    encode_payload,
    encode_record,
)


def _record(**kw: object) -> bytes:
    fields: dict[str, object] = dict(
        event_id=7,
        term=3,
        instance_id="node-1",
        task_id="t-1",
        step_name="clean",
        event_type=EventType.STEP_SUCCEEDED,
        payload=b'{"result":{"rows":3}}',
        timestamp=1234,
        attempt=2,
    )
    fields.update(kw)
    return encode_record(**fields)  # type: ignore[arg-type]


def test_roundtrip_keeps_every_field() -> None:
    data = _record()
    info = check_record(data, 0, "x")
    assert info is not None and info.end == len(data) and info.event_id == 7 and info.term == 3
    e = decode_record(data, 0, info.end, "x")
    assert e.event_id == 7
    assert e.term == 3
    assert e.instance_id == "node-1"
    assert e.task_id == "t-1"
    assert e.step_name == "clean"
    assert e.event_type is EventType.STEP_SUCCEEDED
    assert e.payload == {"result": {"rows": 3}}
    assert e.timestamp == 1234
    assert e.attempt == 2


def test_unicode_fields_roundtrip() -> None:
    data = _record(task_id="任务-1", step_name="清洗", payload='{"说明":"ok"}'.encode())
    info = check_record(data, 0, "x")
    assert info is not None
    e = decode_record(data, 0, info.end, "x")
    assert (e.task_id, e.step_name, e.payload) == ("任务-1", "清洗", {"说明": "ok"})


@pytest.mark.parametrize("at", range(0, 60, 3))
def test_any_flipped_byte_is_detected(at: int) -> None:
    data = bytearray(_record())
    at = min(at, len(data) - 1)
    data[at] ^= 0x40
    try:
        info = check_record(bytes(data), 0, "seg")
    except CorruptLogError:
        return
    # A flipped length can make the record look longer than the buffer: that
    # reads as incomplete (a torn tail), never as a valid record.
    assert info is None


def test_short_buffer_is_incomplete_not_corrupt() -> None:
    data = _record()
    for cut in (0, 5, 41, len(data) - 1):
        assert check_record(data[:cut], 0, "x") is None


def test_error_names_file_and_offset() -> None:
    data = b"\0" * 10 + bytearray(_record())
    data = bytes(data[:30]) + b"\xff" + bytes(data[31:])
    with pytest.raises(CorruptLogError) as exc:
        check_record(data, 10, "/data/log/1.seg", base=4096)
    assert exc.value.path == "/data/log/1.seg"
    assert exc.value.offset == 4106
    assert "/data/log/1.seg" in str(exc.value) and "4106" in str(exc.value)


def test_payload_over_cap_names_the_limit() -> None:
    with pytest.raises(PayloadTooLargeError, match="4096-byte limit"):
        encode_payload({"blob": "x" * 5000}, 4096)
    assert len(encode_payload({"blob": "x" * 4000}, 4096)) <= 4096


def _deep(depth: int) -> object:
    value: object = 0
    for _ in range(depth):
        value = [value]
    return value


def test_a_payload_whose_values_nest_past_json_max_depth_is_refused_naming_it() -> None:
    """A result 250 levels deep was written, and broke every later snapshot (a result
    sits 3 levels deep in its task's line, and orjson stops at 254); one 900 deep was
    refused as "Recursion limit reached". Both name the setting now."""
    encode_payload({"result": _deep(64)}, 64 * 1024, max_depth=64)
    encode_payload({"result": "[" * 500}, 64 * 1024, max_depth=64)  # brackets in text
    for depth in (65, 250, 900):
        with pytest.raises(PayloadTooDeepError) as exc:
            encode_payload({"result": _deep(depth)}, 64 * 1024, max_depth=64)
        assert str(exc.value) == (
            f"a value in the payload is nested {depth} levels deep, over the limit of 64 "
            f"(json_max_depth)"
        )
    # a checkpoint's gather keeps its outputs in a list: one level more of its own
    encode_payload({"output": [_deep(64)]}, 64 * 1024, max_depth=64, levels=2)
    cyclic: list[object] = []
    cyclic.append(cyclic)
    with pytest.raises(PayloadTooDeepError, match="nested more than 2540 levels deep"):
        encode_payload({"result": cyclic}, 64 * 1024, max_depth=64)


@pytest.mark.parametrize(
    "payload",
    [{"when": object()}, {"s": {1, 2}}, {"b": b"bytes"}],
)
def test_non_json_payload_is_rejected(payload: dict[str, object]) -> None:
    with pytest.raises(InvalidEventError, match="not JSON-serializable"):
        encode_payload(payload, 4096)


@pytest.mark.parametrize("payload", [[1, 2], "text", 3])
def test_payload_must_be_an_object(payload: object) -> None:
    with pytest.raises(InvalidEventError, match="JSON object"):
        encode_payload(payload, 4096)  # type: ignore[arg-type]


def test_oversize_identifiers_are_rejected() -> None:
    with pytest.raises(InvalidEventError, match="task_id is 300 bytes, over the 256-byte limit"):
        _record(task_id="x" * 300)
    with pytest.raises(InvalidEventError, match="instance_id"):
        _record(instance_id="n" * 256)
