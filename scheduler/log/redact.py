"""Redaction (`apollo11 redact`): which parts of a task's events are its payloads, and
what takes their place.

A task's input and outputs are the values its events carry under `PAYLOAD_KEYS`: a
TASK_SUBMITTED's or DEBOUNCED's `input`, a STEP_SUCCEEDED's `result`, a CHECKPOINT's
`output`. Everything else is the event's skeleton (ids, term, type, step, attempt,
timestamps, errors, who acted and why) and stays: the history still says what happened,
when and by whom, not with what data.

A redacted value becomes `{"$redacted": N}`, N the TASK_REDACTED event that removed it:
a reader sees that something was there, and which audited act took it out. Pure
functions: the fold (state), the answers (GetEvents, WatchTask) and a rewrite of the
records on disk all call `redact_payload`, so they agree.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from struct import Struct
from typing import Any

import orjson

from apollo11.scheduler.log.record import HEADER, HEADER_SIZE

PAYLOAD_KEYS = frozenset({"input", "result", "output"})
MARKER_KEY = "$redacted"
_CRC = Struct("<I")


def redaction_marker(redaction_id: int) -> dict[str, int]:
    """What a redacted value is replaced by."""
    return {MARKER_KEY: redaction_id}


def redact_payload(payload: Mapping[str, Any], redaction_id: int) -> Mapping[str, Any]:
    """`payload` without the task's data (the same object when it carries none)."""
    if not PAYLOAD_KEYS.intersection(payload):
        return payload
    return {
        k: (redaction_marker(redaction_id) if k in PAYLOAD_KEYS and v is not None else v)
        for k, v in payload.items()
    }


def redact_record(rec: bytes, redaction_id: int) -> bytes:
    """A framed record (checked) with its payload's data replaced, *the same length*:
    the same ids, term, type, step, attempt and timestamp, a new CRC. `rec` itself when
    it carries no data. Idempotent: a record rewritten once comes back the same.

    The same length keeps every byte offset in the segment where it was: its sparse
    index, the manifest's sizes, a standby's position and a shipping cursor stay true,
    so the records can be rewritten in place on every member and the members' copies,
    each rewritten by the same function, stay byte for byte alike. A value is replaced
    by the marker when its JSON is at least as long, else by 0 (never null: a replay of
    the rewritten record must still see a value there, as replay before the rewrite
    saw one); the payload is padded with JSON whitespace to its old length.
    """
    li, lt, ls = HEADER.unpack_from(rec, 0)[7:]
    start = HEADER_SIZE + li + lt + ls
    old = rec[start:]
    payload = orjson.loads(old)
    if not PAYLOAD_KEYS.intersection(payload):
        return rec
    mark = redaction_marker(redaction_id)
    room = len(orjson.dumps(mark))
    new = orjson.dumps(
        {
            k: (v if k not in PAYLOAD_KEYS or v is None else _fit(v, mark, room))
            for k, v in payload.items()
        }
    )
    if len(new) > len(old):  # pragma: no cover - each value only shrinks
        raise ValueError(f"redacted payload of {len(new)} bytes does not fit in {len(old)}")
    body = rec[4:start] + new + b" " * (len(old) - len(new))
    return _CRC.pack(zlib.crc32(body)) + body


def _fit(value: Any, mark: dict[str, int], room: int) -> Any:
    return mark if len(orjson.dumps(value)) >= room else 0
