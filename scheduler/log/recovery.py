"""Recovery at open: list the segments, check them against the manifest, scan, cut a torn tail.

What was durable must come back exactly, and nothing else. The manifest
(manifest.py) is checked first, one stat per segment: a segment it names that
is missing or shorter is refused before any scan, since a snapshot may let the
scan start past the damage. Then records from `replay_from` to the end are
read, checked and handed over in order; that scan also validates the tail. A
bad record in the last segment with nothing valid after it is a torn write: it
is cut off (through writer.truncate) and reported, unless the manifest says it
was durable; anywhere else, or with a valid record after it, it is damage and
raises CorruptLogError. Read-only opens (offline tools, time travel) change
nothing: a torn tail is only reported.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from typing import NamedTuple

from apollo11.scheduler import metrics
from apollo11.scheduler.errors import (
    CorruptLogError,
    LogError,
    LogTruncatedError,
    SnapshotMismatchError,
)
from apollo11.scheduler.log import manifest as manifests
from apollo11.scheduler.log import writer
from apollo11.scheduler.log.datadir import DataDir
from apollo11.scheduler.log.manifest import Manifest
from apollo11.scheduler.log.reader import Walk, pread
from apollo11.scheduler.log.record import Event, RecordInfo, check_record
from apollo11.scheduler.log.segment import Position, Segment, list_segments, segment_name
from apollo11.scheduler.log.writer import Listener

log = logging.getLogger(__name__)

# Look this many ids past a bad record for a valid one before calling it a torn tail.
_TORN_PROBE_IDS = 64


class Recovered(NamedTuple):
    """A log's files as recovery left them: what an EventLog opens on."""

    data: DataDir
    segments: list[Segment]  # oldest first; sizes and last ids as found valid
    last_term: int  # the highest term in the log (or before the snapshot's hint)
    manifest: Manifest | None  # as read at open


def recover(
    data_dir: str | os.PathLike[str],
    *,
    replay_from: int | None = None,
    hint: Position | None = None,
    hint_term: int = 0,
    on_events: Listener | None = None,
    base_id: int = 1,
    read_only: bool = False,
    until: int | None = None,
) -> Recovered:
    """Open (creating when new, unless `read_only`) the log files in `data_dir` and
    recover them; see EventLog.open for the arguments."""
    data = DataDir.open_existing(data_dir) if read_only else DataDir.open(data_dir)
    # The manifest before the listing: a live node (read here by `apollo11 replay`)
    # may rotate in between, and then the listing holds more than the manifest names,
    # never less.
    manifest = manifests.load(data.log_dir)
    segments = list_segments(data.log_dir)
    if not segments and manifest is not None and manifest.event_id >= manifest.segment_id:
        name = segment_name(manifest.segment_id)
        raise LogTruncatedError(
            f"events through {manifest.event_id} were durable at {manifest.describe}; "
            f"{data.log_dir} now holds no segment at all: refusing. Expected the log to "
            f"end at offset {manifest.offset} of {name}. {_RESTORE}",
            path=os.path.join(data.log_dir, name),
            offset=0,
            expected_id=manifest.event_id,
            found_id=0,
        )
    if not segments and read_only:
        raise LogError(f"{data.root} holds no event log segments")
    if not segments:
        path = os.path.join(data.log_dir, segment_name(base_id))
        writer.create_segment(path)
        data.fsync_log_dir()
        segments = [Segment(base_id, path, 0, base_id - 1, [(base_id, 0)], index_loaded=True)]
    last_term = _recover(
        segments, replay_from, hint, hint_term, on_events, read_only, until, manifest
    )
    return Recovered(data, segments, last_term, manifest)


def _recover(
    segments: list[Segment],
    replay_from: int | None,
    hint: Position | None,
    hint_term: int,
    on_events: Listener | None,
    read_only: bool = False,
    until: int | None = None,
    manifest: Manifest | None = None,
) -> int:
    """Scan from `replay_from` to the end; cut a torn tail; return the highest term."""
    term = hint_term
    _check_manifest(segments, manifest)
    for events in _iter_segments(segments, replay_from, hint, hint_term, read_only, manifest):
        if until is not None and events[-1].event_id >= until:
            events = events[: until - events[0].event_id + 1]
            if events and on_events is not None:
                on_events(events)
            return events[-1].term if events else term
        term = events[-1].term
        if on_events is not None:
            on_events(events)
    if not read_only:
        tail = segments[-1]
        tail.load_index()
        writer.write_index(tail)  # drop entries that point past a cut tail
    return term


def _iter_segments(
    segments: list[Segment],
    replay_from: int | None,
    hint: Position | None,
    hint_term: int,
    read_only: bool,
    manifest: Manifest | None = None,
) -> Iterator[list[Event]]:
    """Checked events from `replay_from` to the end of the log, in batches.

    Leaves every segment's size and last id set to what was found valid. A
    bad record in the tail with nothing valid after it is a torn write: it
    is cut off (or, read-only, just reported), unless the manifest says it
    was durable. Anywhere else it raises.
    """
    for prev, seg in itertools.pairwise(segments):
        if seg.first_id <= prev.first_id:
            raise CorruptLogError("segments out of order", path=seg.path, offset=0)
    start_id = segments[0].first_id if replay_from is None else replay_from
    if start_id < segments[0].first_id:
        raise SnapshotMismatchError(
            f"replay must start at event {start_id} but the log starts at "
            f"{segments[0].first_id}; is a snapshot missing?"
        )
    i = 0
    while i + 1 < len(segments) and segments[i + 1].first_id <= start_id:
        i += 1
    first = segments[i]
    if hint is not None and hint.segment_id == first.first_id and hint.event_id + 1 == start_id:
        if hint.offset > os.path.getsize(first.path):
            raise SnapshotMismatchError(
                f"the snapshot at event {hint.event_id} points past the end of "
                f"{first.path}: the log lost data the snapshot had"
            )
        offset, expect = hint.offset, start_id
    else:
        offset, expect = 0, first.first_id  # scan the whole segment, hand over from start_id
    term = hint_term
    for j in range(i, len(segments)):
        seg = segments[j]
        tail = j == len(segments) - 1
        if j > i:
            offset = 0
            if expect != seg.first_id:
                raise CorruptLogError(
                    f"segment should start at event {expect}", path=seg.path, offset=0
                )
        file_size = os.path.getsize(seg.path)
        walk = Walk(seg, offset, file_size, expect, term)
        for events in walk:
            if events[0].event_id < start_id:
                events = events[start_id - events[0].event_id :]
            if events:
                yield events
        expect, term, bad = walk.expect, walk.term, walk.error
        if walk.offset < file_size:
            if bad is None:
                bad = CorruptLogError("incomplete record", path=seg.path, offset=walk.offset)
            if not tail or _valid_record_after(seg.path, walk.offset, expect, file_size):
                raise bad
            if manifest is not None and (seg.first_id, walk.offset) < (
                manifest.segment_id,
                manifest.offset,
            ):
                raise _truncated(
                    manifest,
                    expect - 1,
                    seg.path,
                    walk.offset,
                    f"{bad.reason} at offset {walk.offset} of {os.path.basename(seg.path)}",
                )
            if read_only:
                log.warning(
                    "event log: %s (in %s at offset %d: %s; read-only, left in place)",
                    _torn_tail_is(manifest),
                    seg.path,
                    walk.offset,
                    bad.reason,
                )
            else:
                _truncate_tail(seg, walk.offset, file_size, bad, manifest)
        seg.size = walk.offset
        seg.last_id = expect - 1
    if manifest is not None and expect - 1 < manifest.event_id:
        last = segments[-1]  # every file was long enough: these are not the same records
        raise _truncated(
            manifest,
            expect - 1,
            last.path,
            last.size,
            f"records up to event {expect - 1} only, ending at offset {last.size} of "
            f"{os.path.basename(last.path)}",
        )
    if expect < start_id:
        raise SnapshotMismatchError(
            f"the log ends at event {expect - 1}, before event {start_id - 1} that the "
            f"snapshot covers: the log lost data the snapshot had"
        )


def _valid_record_after(path: str, bad_at: int, expect: int, file_size: int) -> bool:
    """Is there a valid record later in the file? Then this is damage, not a torn tail."""
    rest = pread(path, bad_at + 1, file_size - bad_at - 1) if file_size > bad_at + 1 else b""
    view = memoryview(rest)
    for eid in range(expect, expect + _TORN_PROBE_IDS):
        needle = eid.to_bytes(8, "little")
        pos = rest.find(needle, 8)
        while pos != -1:
            try:
                info: RecordInfo | None = check_record(view, pos - 8, path)
            except CorruptLogError:
                info = None
            if info is not None and info.event_id == eid:
                return True
            pos = rest.find(needle, pos + 1)
    return False


_RESTORE = (
    "Restore the log from a standby or a backup; to accept losing those events, delete "
    "log/MANIFEST and start again"
)


def _torn_tail_is(manifest: Manifest | None) -> str:
    """What is known about a torn tail past the manifest's end: not much."""
    if manifest is None:
        return (
            "a torn tail; this log has no manifest, so whether those events had been "
            "acknowledged is not known"
        )
    return (
        f"a torn tail after {manifest.describe}: events past {manifest.event_id}, not known "
        f"to have been acknowledged"
    )


def _truncated(m: Manifest, found_id: int, path: str, offset: int, found: str) -> LogTruncatedError:
    return LogTruncatedError(
        f"events {found_id + 1}..{m.event_id} were durable at {m.describe}; the log now "
        f"ends at event {found_id}: refusing. Expected the log to end at offset {m.offset} "
        f"of {segment_name(m.segment_id)}; found {found}. {_RESTORE}",
        path=path,
        offset=offset,
        expected_id=m.event_id,
        found_id=found_id,
    )


def _check_manifest(segments: list[Segment], m: Manifest | None) -> None:
    """Refuse a log missing a segment the manifest names, or holding fewer bytes of one.

    A stat per segment, before any scan: a snapshot may let recovery start past
    the damage, and would then never see it. Segments before the first one
    present are not checked: retention deletes those (see manifest.py).
    """
    if m is None or not segments:
        return
    present = {s.first_id: s for s in segments}
    for first, size in m.segments:
        if first < segments[0].first_id or first > m.segment_id:
            continue
        seg = present.get(first)
        if seg is not None and seg.size >= size:
            continue
        name = segment_name(first)
        if seg is None:
            before = [s for s in segments if s.first_id < first]
            found_id = _valid_end(before[-1])[0] if before else first - 1
            path, offset = os.path.join(os.path.dirname(segments[0].path), name), 0
            found = f"{name} is missing"
        else:
            found_id, offset = _valid_end(seg)
            path = seg.path
            found = f"{name} holds {seg.size} bytes of the {size} it had"
        if any(s.first_id > first for s in segments):
            found += " (later segments are there, but the log cannot be replayed across the gap)"
        raise _truncated(m, found_id, path, offset, found)


def _valid_end(seg: Segment) -> tuple[int, int]:
    """The last valid event id in a segment and where its valid records end (a scan)."""
    walk = Walk(seg, 0, seg.size, seg.first_id, 0)
    for _ in walk:
        pass
    return walk.expect - 1, walk.offset


def _truncate_tail(
    seg: Segment, at: int, file_size: int, why: CorruptLogError, manifest: Manifest | None
) -> None:
    log.warning(
        "event log: cut %s (%d bytes off %s at offset %d: %s)",
        _torn_tail_is(manifest),
        file_size - at,
        seg.path,
        at,
        why.reason,
    )
    metrics.LOG_TORN_TAILS.inc()
    writer.truncate(seg.path, at)
