"""Shortening the log on purpose: from the front (retention), from the back (cuts).

- `drop_before`: retention deletes sealed segments a snapshot covers;
- `cut_unsynced`: after a failed write, what it left past the durable
  position goes, before the log is reopened (fsyncgate);
- `cut_after`: a deposed primary rejoining moves its divergent tail, byte for
  byte, to a quarantine file, and cuts it off.

A cut of the back writes the shorter manifest first, then cuts; a crash in
between leaves a log longer than its manifest (fine), never shorter (refused
at start). Every byte changed goes through the writer's primitives
(scheduler/log/writer.py); a torn tail found at open is cut by recovery.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from apollo11.scheduler.errors import LogError
from apollo11.scheduler.log import manifest as manifests
from apollo11.scheduler.log import writer
from apollo11.scheduler.log.datadir import DataDir, fsync_dir
from apollo11.scheduler.log.manifest import Manifest
from apollo11.scheduler.log.reader import pread
from apollo11.scheduler.log.recovery import recover
from apollo11.scheduler.log.segment import Position, Segment, list_segments


class NothingInCommonError(LogError):
    """The log starts after the point it should be cut back to."""


def drop_before(data: DataDir, segments: list[Segment], event_id: int) -> int:
    """Delete sealed segments of an open log (`segments`, its own list) holding only
    events before `event_id`; how many went."""
    dropped = 0
    while len(segments) > 1 and segments[0].last_id < event_id:
        writer.remove_segment(segments.pop(0), missing_ok=True)
        dropped += 1
    if dropped:
        data.fsync_log_dir()
    return dropped


def cut_unsynced(data_dir: str | os.PathLike[str], durable: Position) -> int:
    """Cut a closed log back to `durable` (its `position()` when a write failed).

    What a failed batch left behind (a partial record, whole records whose
    fsync failed, a segment it opened) was never acknowledged, and after a
    failed fsync the page cache may show bytes the disk never got (the
    PostgreSQL fsyncgate lesson): reopening must not find them valid. Needs no
    free space, frees some. Returns how many bytes went; cutting twice cuts nothing.
    """
    data = DataDir.open_existing(data_dir)
    cut = 0
    for seg in list_segments(data.log_dir):
        if seg.first_id > durable.segment_id:
            cut += seg.size
            writer.remove_segment(seg)
        elif seg.first_id == durable.segment_id and seg.size > durable.offset:
            cut += seg.size - durable.offset
            writer.truncate(seg.path, durable.offset)
            writer.remove_index(seg)  # derived; rebuilt on demand
    if cut:
        data.fsync_log_dir()
    return cut


def cut_after(data_dir: str | os.PathLike[str], keep_through: int, quarantine: str) -> int:
    """Cut every record after `keep_through` off a closed log, keeping them for audit.

    The records go, byte for byte, to the file `quarantine` (same framing as
    a segment: `apollo11 replay` style tools can read them). Returns how many
    records were cut. Used when a deposed primary rejoins: its divergent tail
    was never acknowledged under a term the cluster kept.
    """
    data = DataDir.open_existing(data_dir)
    segments = recover(data.root, read_only=True).segments
    last = segments[-1].last_id
    if keep_through >= last:
        return 0
    if keep_through < segments[0].first_id - 1:
        raise NothingInCommonError(
            f"nothing to keep: the log starts at {segments[0].first_id}, after event "
            f"{keep_through}; start this node from an empty data directory"
        )
    os.makedirs(os.path.dirname(quarantine), exist_ok=True)
    cut = last - keep_through
    writer.copy_out(quarantine, _records_after(segments, keep_through))
    fsync_dir(os.path.dirname(quarantine))
    # The shorter end goes into the manifest before anything is cut: a crash in between
    # leaves a log longer than its manifest (fine), never shorter (refused at start).
    kept: list[tuple[int, int]] = []
    for seg in segments:
        if seg.last_id <= keep_through:
            kept.append((seg.first_id, seg.size))
        elif seg.first_id <= keep_through or seg is segments[0]:
            kept.append((seg.first_id, seg.locate(keep_through + 1)))
    manifests.write(
        data.log_dir,
        Manifest(
            event_id=keep_through,
            segment_id=kept[-1][0],
            offset=kept[-1][1],
            segments=tuple(kept),
            written_ms=writer.now_ms(),
            reason=f"a cut of the divergent tail after event {keep_through}",
        ),
    )
    for seg in segments:
        if seg.last_id <= keep_through:
            continue
        if seg.first_id > keep_through and seg is not segments[0]:
            writer.remove_segment(seg)
            continue
        writer.truncate(
            seg.path, 0 if seg.first_id > keep_through else seg.locate(keep_through + 1)
        )
        writer.remove_index(seg)  # derived; rebuilt on demand
    data.fsync_log_dir()
    return cut


def _records_after(segments: list[Segment], keep_through: int) -> Iterator[bytes]:
    """The durable records after `keep_through`, as on disk, a segment at a time."""
    for seg in segments:
        if seg.last_id <= keep_through:
            continue
        at = 0 if seg.first_id > keep_through else seg.locate(keep_through + 1)
        yield pread(seg.path, at, seg.size - at)
