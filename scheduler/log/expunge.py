"""Rewriting a redacted task's records in place (scheduler/log/redact.py says what
changes in a record, and why its length does not).

Each record is read at its offset (the segment's sparse index finds it), checked
(framing, CRC, its event id: damage is never rewritten, it is reported), rewritten
by `redact_record` and written back over itself; each segment touched is synced
once. Only durable records are touched, and only before the writer's end, which it
never rewrites: appends go on beside this.

A crash part way leaves some records rewritten and the rest as they were, each
whole or, at worst, one torn: the next pass (at start, for every redacted task)
rewrites the rest, and a torn record is damage the scrub finds and mends from a
peer's copy of the segment (scheduler/log/mend.py accepts either version: the
records are the same history, the same size). A reader racing a rewrite of the
record it reads can, rarely, see it torn and is answered an error it can retry.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.log.reader import segment_for
from apollo11.scheduler.log.record import FRAME, check_record
from apollo11.scheduler.log.redact import redact_record
from apollo11.scheduler.log.segment import Segment


def expunge(segments: Sequence[Segment], ids: Sequence[int], redaction_id: int) -> int:
    """Rewrite the records of events `ids` (ascending, each before `redaction_id`)
    without their data; how many changed. Ids before the first segment (retention
    dropped them) are skipped."""
    if not segments:
        return 0
    changed = 0
    touched: dict[str, int] = {}
    try:
        for eid in ids:
            if eid < segments[0].first_id or eid >= redaction_id:
                continue
            seg = segments[segment_for(segments, eid)]
            if eid > seg.last_id:
                continue  # past the durable end: not this call's to touch
            off = seg.locate(eid)
            rec = seg.read(off, 8)
            rec = seg.read(off, 8 + FRAME.unpack(rec)[1]) if len(rec) == 8 else rec
            info = check_record(rec, 0, seg.path, base=off)
            if info is None or info.end != len(rec) or info.event_id != eid:
                raise CorruptLogError(
                    f"event {eid} is not whole where the index says", path=seg.path, offset=off
                )
            new = redact_record(rec, redaction_id)
            if new == rec:
                continue
            fd = touched.get(seg.path)
            if fd is None:
                fd = touched[seg.path] = os.open(seg.path, os.O_WRONLY | os.O_CLOEXEC)
            os.pwrite(fd, new, off)
            changed += 1
    finally:
        for fd in touched.values():
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
    return changed


def expunged(raw: bytes, ids: Sequence[int], redaction_id: int, where: str) -> bytes:
    """A segment's bytes (a copy from the bucket) with the records of events `ids`
    rewritten as `expunge` rewrites them on disk: the same bytes a member's segment has
    once rewritten, so a restore and the members agree. Every record is checked."""
    wanted = {i for i in ids if i < redaction_id}
    out = bytearray(raw)
    off = 0
    while (info := check_record(raw, off, where)) is not None:
        if info.event_id in wanted:
            out[off : info.end] = redact_record(raw[off : info.end], redaction_id)
        off = info.end
    if off != len(raw):
        raise CorruptLogError("a record runs past the end of the segment", path=where, offset=off)
    return bytes(out)
