"""Mending a log segment in place from another member's copy of its records.

Durable records are never written again, and every member holds the same
records byte for byte (a standby appends what it is shipped), so the records
of the segment's id range, read from a healthy member, are the segment file
as it was written. They replace the damaged file only after they pass every
check the scrub makes (framing, CRC, ids running first..last, terms never
going down) and come to exactly the segment's durable size: records of
another history could not do that by accident. They are written over the
file's first bytes in place (the same bytes wherever it was not damaged),
which also works for the segment being written (its writer only appends,
past them), keeps the sparse index valid (same offsets), and leaves after a
crash part way a file damaged at most where it was before.
"""

from __future__ import annotations

from apollo11.scheduler.errors import ApolloError, CorruptLogError
from apollo11.scheduler.log import writer
from apollo11.scheduler.log.record import check_record
from apollo11.scheduler.log.segment import Segment


class MendRefused(ApolloError):
    """The records offered do not make this segment again."""


def check(seg: Segment, records: bytes) -> None:
    """Refuse records that are not exactly this segment's."""
    if len(records) != seg.size:
        raise MendRefused(
            f"the records of events {seg.first_id}..{seg.last_id} come to {len(records)} "
            f"bytes, the segment {seg.path} held {seg.size}: not the same history"
        )
    off, expect, term = 0, seg.first_id, 0
    view = memoryview(records)
    try:
        while (info := check_record(view, off, seg.path)) is not None:
            if info.event_id != expect or info.term < term:
                raise MendRefused(
                    f"record {info.event_id} (term {info.term}) where event {expect} "
                    f"(term {term} or later) belongs"
                )
            off, expect, term = info.end, expect + 1, info.term
    except CorruptLogError as e:
        raise MendRefused(f"the records offered are damaged too: {e}") from e
    if off != len(records) or expect - 1 != seg.last_id:
        raise MendRefused(
            f"the records offered end at event {expect - 1} (byte {off} of {len(records)}), "
            f"the segment at event {seg.last_id}"
        )


def rewrite(seg: Segment, records: bytes) -> None:
    """Check `records`, then write them over the segment's first `seg.size` bytes and
    sync. `seg` is a copy of what was durable when the records were asked for: the
    segment may have grown since (the one being written) and what follows stays."""
    check(seg, records)
    writer.overwrite(seg.path, records)
