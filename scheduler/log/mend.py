"""Mending a sealed segment in place from another member's copy of its records.

A sealed segment is never written again, and every member holds the same
records byte for byte (a standby appends what it is shipped), so the records
of the segment's id range, read from a healthy member, are the segment file
as it was written. They replace the damaged file only after they pass every
check the scrub makes (framing, CRC, ids running first..last, terms never
going down) and come to exactly the segment's durable size: records of
another history could not do that by accident. The file is replaced whole
(a temporary file, fsync, rename, fsync of the directory), so a crash leaves
either the damaged file or the mended one; readers open the path for each
read and see one or the other, and the sparse index stays valid (same
offsets).
"""

from __future__ import annotations

import os

from scheduler.errors import ApolloError, CorruptLogError
from scheduler.log.datadir import fsync_dir
from scheduler.log.record import check_record
from scheduler.log.segment import Segment

MEND_SUFFIX = ".mend"


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


def replace(seg: Segment, records: bytes) -> None:
    """Check `records`, then put them in place of the segment's file, all or nothing."""
    check(seg, records)
    tmp = seg.path + MEND_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(records)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, seg.path)
    fsync_dir(os.path.dirname(seg.path))
