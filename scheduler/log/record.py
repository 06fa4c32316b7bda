"""The event record: its model, its binary framing and its checksum.

A record on disk is self-delimiting and checksummed::

    u32 crc32        over everything after this field (length included)
    u32 body_len     bytes after this field
    u64 event_id
    u64 term
    u64 timestamp_ms
    u32 attempt
    u8  event_type
    u8  len(instance_id)
    u16 len(task_id)
    u16 len(step_name)
    instance_id, task_id, step_name   UTF-8
    payload                           a JSON object, UTF-8, the rest of the body

All integers are little-endian. The checksum covers the length, so a torn or
flipped length is caught as surely as a flipped payload byte.
"""

from __future__ import annotations

import enum
import zlib
from collections.abc import Mapping
from struct import Struct
from typing import Any, NamedTuple

import orjson

from apollo11.scheduler import defaults, jsondepth
from apollo11.scheduler.errors import (
    CorruptLogError,
    InvalidEventError,
    PayloadTooDeepError,
    PayloadTooLargeError,
)

HEADER = Struct("<IIQQQIBBHH")
FRAME = Struct("<II")  # crc32, body_len: enough to know how long a record claims to be
_IDENTITY = Struct("<IIQQ")  # crc32, body_len, event_id, term: what a check reads
HEADER_SIZE = HEADER.size  # 42
_FIXED_BODY = HEADER_SIZE - 8  # body bytes before the strings
MAX_RECORD_BYTES = 16 * 1024 * 1024  # framing sanity bound, far above any payload cap

DEFAULT_PAYLOAD_MAX_BYTES = defaults.PAYLOAD_MAX_BYTES
MAX_INSTANCE_ID_BYTES = 255
MAX_TASK_ID_BYTES = 256
MAX_STEP_NAME_BYTES = 256


class EventType(enum.IntEnum):
    """The only facts the log records: state transitions, nothing else.

    The numbers are on disk: never renumber, only add.
    """

    TASK_SUBMITTED = 1
    STEP_STARTED = 2
    STEP_SUCCEEDED = 3
    STEP_FAILED = 4
    STEP_COMPENSATING = 5
    STEP_COMPENSATED = 6
    MANUAL_OVERRIDE = 7
    TASK_CANCELLED = 8
    TERM_STARTED = 9
    # Durable tasks (docs/durable.md): a checkpoint of a durable main, a wait that
    # ends its attempt, an external event (no task: waits match it by key).
    CHECKPOINT = 10
    WAIT = 11
    EVENT = 12
    # Schedules (scheduler/state/schedule.py): a schedule created, updated, paused,
    # unpaused or deleted; a nominal time missed, skipped or buffered (one fired is
    # the TASK_SUBMITTED that carries it).
    SCHEDULE = 13
    OCCURRENCE = 14
    # Flow control (scheduler/flow/, scheduler/state/occupancy.py): a debounced
    # submission that replaced a waiting task's input and pushed its start back; an
    # operator's runtime change of a limit or a fairness weight.
    DEBOUNCED = 15
    LIMIT = 16
    # A step's retries ran out (scheduler/retry.py) under `on_exhausted="pause"`: the
    # task waits for an operator; under "compensate": the steps named owe their
    # compensation and the task ends COMPENSATED (the engine's decision, recorded once).
    TASK_PAUSED = 17
    TASK_COMPENSATING = 18
    # An operator removed a finished task's input and outputs (scheduler/log/redact.py):
    # {"operator", "reason"}; the task's events before it read as redacted everywhere.
    TASK_REDACTED = 19
    # Retention (docs/retention.md): a legal hold set or released on a task; finished
    # tasks purged by the primary's sweep, a batch an event (task_id ""), so every node
    # and every replay drops the same tasks ({"tasks", "by"}; "forget": purged redacted
    # tasks whose redaction is carried out, which the state stops remembering).
    TASK_HELD = 20
    TASK_PURGED = 21


_TYPES: dict[int, EventType] = {t.value: t for t in EventType}

# The levels of its own an event's payload puts around the values it carries, which
# nest at most json_max_depth: one (a result's {"result": ...}, an input's, a
# heartbeat's, an event's), but a checkpoint's two (the outputs of a gather in a
# list, a ctx.step error's details in its "error").
VALUE_LEVELS: dict[EventType, int] = {t: 1 for t in EventType} | {EventType.CHECKPOINT: 2}


class Event(NamedTuple):
    """An immutable fact in the log.

    A NamedTuple rather than a frozen dataclass: it is just as immutable and
    several times cheaper to build (docs/benchmarks.md), which matters when
    replay decodes hundreds of thousands of events per second.
    """

    event_id: int
    term: int
    instance_id: str
    task_id: str
    step_name: str
    event_type: EventType
    payload: Mapping[str, Any]
    timestamp: int  # ms since the epoch; for display only, never for ordering
    attempt: int


def encode_payload(
    payload: Mapping[str, Any] | None,
    max_bytes: int,
    setting: str = "payload_max_bytes",
    max_depth: int = defaults.JSON_MAX_DEPTH,
    levels: int = 1,
) -> bytes:
    """Serialize a payload to JSON, refusing anything that is not a small JSON object:
    at most `max_bytes`, its values nested at most `max_depth` levels (json_max_depth)
    below the payload's own `levels` (VALUE_LEVELS)."""
    if payload is None:
        return b"{}"
    if type(payload) is not dict and not isinstance(payload, Mapping):
        raise InvalidEventError(
            f"payload must be a JSON object (a mapping), got {type(payload).__name__}"
        )
    try:
        data = orjson.dumps(payload)
    except TypeError as e:
        # past orjson's own limit (254 levels), or a cycle: say so by the setting
        depth = jsondepth.value_depth(payload)
        if depth > max_depth + levels:
            raise _too_deep(depth, max_depth, counted=True) from None
        raise InvalidEventError(f"payload is not JSON-serializable: {e}") from e
    if len(data) > max_bytes:
        raise PayloadTooLargeError(
            f"payload is {len(data)} bytes, over the {max_bytes}-byte limit "
            f"({setting}); store bulk output elsewhere and put a reference "
            f"(path, URL, checksum) in the payload"
        )
    # Refused before it is written: written, a value that deep would sit past orjson's
    # limit in a snapshot, and every later snapshot of the node would fail.
    deep = jsondepth.deeper_than(data, max_depth + levels)
    if deep is not None:
        raise _too_deep(deep, max_depth)
    return data


def _too_deep(depth: int, limit: int, *, counted: bool = False) -> PayloadTooDeepError:
    """`depth`: the payload's (`counted`: by value_depth, not from its text); its
    values' is one less (a checkpoint's may be one more than the limit, in its extra
    level: a ctx.step's output is checked by the step)."""
    what = "a value in the payload"
    if counted and depth > jsondepth.VALUE_DEPTH_CAP:
        return PayloadTooDeepError(jsondepth.too_deep_value(what, depth, limit))
    return PayloadTooDeepError(jsondepth.too_deep(what, depth - 1, limit))


_BODY_HEAD = Struct("<IQQQIBBHH")  # HEADER without the crc
_CRC = Struct("<I")


def _too_long(name: str, data: bytes, limit: int) -> InvalidEventError:
    return InvalidEventError(f"{name} is {len(data)} bytes, over the {limit}-byte limit")


def encode_record(
    event_id: int,
    term: int,
    instance_id: str,
    task_id: str,
    step_name: str,
    event_type: EventType,
    payload: bytes,
    timestamp: int,
    attempt: int,
) -> bytes:
    """Frame one record. `payload` is already-validated JSON bytes."""
    inst = instance_id.encode()
    task = task_id.encode()
    step = step_name.encode()
    li, lt, ls = len(inst), len(task), len(step)
    if li > MAX_INSTANCE_ID_BYTES:
        raise _too_long("instance_id", inst, MAX_INSTANCE_ID_BYTES)
    if lt > MAX_TASK_ID_BYTES:
        raise _too_long("task_id", task, MAX_TASK_ID_BYTES)
    if ls > MAX_STEP_NAME_BYTES:
        raise _too_long("step_name", step, MAX_STEP_NAME_BYTES)
    if not 0 <= attempt <= 0xFFFFFFFF:
        raise InvalidEventError(f"attempt must be between 0 and {0xFFFFFFFF}, got {attempt}")
    body = b"".join(
        (
            _BODY_HEAD.pack(
                _FIXED_BODY + li + lt + ls + len(payload),
                event_id,
                term,
                timestamp,
                attempt,
                event_type,
                li,
                lt,
                ls,
            ),
            inst,
            task,
            step,
            payload,
        )
    )
    return _CRC.pack(zlib.crc32(body)) + body


class RecordInfo(NamedTuple):
    """Where a record sits and what it is, without decoding its payload."""

    offset: int
    end: int
    event_id: int
    term: int


def check_record(
    buf: bytes | memoryview, offset: int, path: str, base: int = 0
) -> RecordInfo | None:
    """Validate framing and CRC of the record at `offset`.

    Returns None when the buffer ends before the record does (a short read
    or a torn tail: the caller decides which), and raises CorruptLogError when
    the bytes are there but wrong.
    """
    size = len(buf)
    if offset + HEADER_SIZE > size:
        return None
    crc, body_len, event_id, term = HEADER.unpack_from(buf, offset)[:4]
    if body_len < _FIXED_BODY or body_len > MAX_RECORD_BYTES:
        raise CorruptLogError(
            f"impossible record length {body_len}", path=path, offset=base + offset
        )
    end = offset + 8 + body_len
    if end > size:
        return None
    if zlib.crc32(buf[offset + 4 : end]) != crc:
        raise CorruptLogError("record checksum mismatch", path=path, offset=base + offset)
    return RecordInfo(offset, end, event_id, term)


def check_records(buf: bytes, first_id: int, path: str) -> tuple[int, int, int]:
    """Check every record of a whole segment's bytes in one tight loop (framing, CRC,
    ids running on from `first_id`, terms never going down) without decoding them:
    (last id, first term, last term). CorruptLogError at the first that fails, or
    when the bytes end inside a record; `first_id - 1, 0, 0` for no bytes.

    What the archive checks a segment with, before it uploads one and after it
    downloads one: check_record per record made a tuple and a call of each, and
    took twice as long (10^7 records in a restore: docs/benchmarks.md)."""
    head = _IDENTITY.unpack_from
    crc32 = zlib.crc32
    view = memoryview(buf)
    size = len(buf)
    pos = 0
    expect = first_id
    first_term = term = 0
    while pos < size:
        if pos + HEADER_SIZE > size:
            raise CorruptLogError("the segment ends inside a record", path=path, offset=pos)
        crc, body_len, eid, t = head(buf, pos)
        if body_len < _FIXED_BODY or body_len > MAX_RECORD_BYTES:
            raise CorruptLogError(f"impossible record length {body_len}", path=path, offset=pos)
        end = pos + 8 + body_len
        if end > size:
            raise CorruptLogError("the segment ends inside a record", path=path, offset=pos)
        if crc32(view[pos + 4 : end]) != crc:
            raise CorruptLogError("record checksum mismatch", path=path, offset=pos)
        if eid != expect:
            raise CorruptLogError(f"expected event {expect}, found {eid}", path=path, offset=pos)
        if t < term:
            raise CorruptLogError(f"term goes down from {term} to {t}", path=path, offset=pos)
        if eid == first_id:
            first_term = t
        term = t
        expect += 1
        pos = end
    return expect - 1, first_term, term


def decode_record(
    buf: bytes | memoryview, offset: int, end: int, path: str, base: int = 0
) -> Event:
    """Decode a record whose framing and CRC were already checked."""
    (_, _, event_id, term, ts, attempt, etype, li, lt, ls) = HEADER.unpack_from(buf, offset)
    p = offset + HEADER_SIZE
    q = p + li
    r = q + lt
    s = r + ls
    try:
        kind = _TYPES[etype]
    except KeyError:
        raise CorruptLogError(
            f"unknown event type {etype} in a record with a valid checksum; "
            f"was this log written by a newer Apollo-11?",
            path=path,
            offset=base + offset,
        ) from None
    try:
        return Event(
            event_id,
            term,
            str(buf[p:q], "utf-8"),
            str(buf[q:r], "utf-8"),
            str(buf[r:s], "utf-8"),
            kind,
            orjson.loads(buf[s:end]),
            ts,
            attempt,
        )
    except (UnicodeDecodeError, orjson.JSONDecodeError) as e:
        raise CorruptLogError(f"undecodable record: {e}", path=path, offset=base + offset) from e


class DecodedBatch(NamedTuple):
    events: list[Event]
    end: int  # offset in the buffer just after the last good record
    next_id: int
    term: int
    error: CorruptLogError | None  # why decoding stopped before the buffer ended, if damage


def decode_batch(
    buf: bytes, start: int, *, base: int, path: str, expect: int, term: int
) -> DecodedBatch:
    """Check and decode every complete record in `buf[start:]`, in one tight loop.

    Stops at the first incomplete record (error None), or at the first bad
    one (error set): a CRC or framing failure, an id other than `expect`, a
    term lower than the one before. This is the replay hot path: one header
    unpack, one CRC and one JSON parse per record, no per-record calls
    beyond those.
    """
    unpack = HEADER.unpack_from
    crc32 = zlib.crc32
    loads = orjson.loads
    new = tuple.__new__
    types = _TYPES
    view = memoryview(buf)
    size = len(buf)
    out: list[Event] = []
    add = out.append
    pos = start
    error: CorruptLogError | None = None
    # One node writes long runs of records: reuse its decoded id.
    inst_raw = b""
    inst = ""
    while pos + HEADER_SIZE <= size:
        crc, body_len, eid, t, ts, attempt, etype, li, lt, ls = unpack(buf, pos)
        end = pos + 8 + body_len
        if body_len < _FIXED_BODY or body_len > MAX_RECORD_BYTES:
            error = CorruptLogError(
                f"impossible record length {body_len}", path=path, offset=base + pos
            )
            break
        if end > size:
            break
        if crc32(view[pos + 4 : end]) != crc:
            error = CorruptLogError("record checksum mismatch", path=path, offset=base + pos)
            break
        if eid != expect or t < term:
            what = (
                f"expected event {expect}, found {eid}"
                if eid != expect
                else f"event {eid} has term {t} after term {term}"
            )
            error = CorruptLogError(what, path=path, offset=base + pos)
            break
        p = pos + HEADER_SIZE
        q = p + li
        r = q + lt
        s = r + ls
        try:
            raw = buf[p:q]
            if raw != inst_raw:
                inst_raw = raw
                inst = raw.decode()
            add(
                new(
                    Event,
                    (
                        eid,
                        t,
                        inst,
                        buf[q:r].decode(),
                        buf[r:s].decode(),
                        types[etype],
                        loads(view[s:end]) if end - s > 2 else {},
                        ts,
                        attempt,
                    ),
                )
            )
        except (KeyError, UnicodeDecodeError, orjson.JSONDecodeError) as e:
            why = f"unknown event type {etype}" if isinstance(e, KeyError) else str(e)
            error = CorruptLogError(
                f"undecodable record ({why}); was this log written by a newer Apollo-11?",
                path=path,
                offset=base + pos,
            )
            break
        expect += 1
        term = t
        pos = end
    return DecodedBatch(out, pos, expect, term, error)
