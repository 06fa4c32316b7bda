"""Reading the log's segment files: checked records, by position, by range, by id.

Only durable bytes are read (a segment's `size`), and every record is checked
(framing, CRC, ids running on, terms never going down) before it is decoded or
shipped: a corrupt record is refused where it is read, never passed on.
Recovery (scheduler/log/recovery.py) walks segments with the same `Walk`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.log.record import (
    FRAME,
    HEADER_SIZE,
    Event,
    check_record,
    decode_batch,
)
from apollo11.scheduler.log.segment import READ_CHUNK, Segment
from apollo11.scheduler.log.ship import RawBatch

ID_READ_WINDOW = 16 * 1024  # read_ids: bytes read at each located id (~100 events)


def segment_for(segments: Sequence[Segment], event_id: int) -> int:
    """Index into `segments` (oldest first) of the segment holding `event_id`."""
    lo, hi = 0, len(segments) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if segments[mid].first_id <= event_id:
            lo = mid
        else:
            hi = mid - 1
    return lo


def raw(seg: Segment, from_id: int, max_bytes: int, at: tuple[int, int] | None) -> RawBatch:
    """Whole durable records of `seg` from `from_id`, about `max_bytes` of them (at
    least one), each CRC checked; `at` (segment id, offset) is where the caller says
    the record starts (checked: a stale hint is located again)."""
    if at is not None and at[0] == seg.first_id and at[1] < seg.size:
        start = at[1]  # checked below: the record there must be `from_id`
    else:
        start = seg.locate(from_id)
    data = seg.read(start, max(max_bytes, HEADER_SIZE))
    off = 0
    last = from_id - 1
    view = memoryview(data)
    while True:
        info = check_record(view, off, seg.path)
        if info is None:
            if off == 0:  # one record bigger than max_bytes
                body_len = FRAME.unpack_from(data, 0)[1] if len(data) >= 8 else 0
                bigger = seg.read(start, 8 + body_len)
                if len(bigger) <= len(data):
                    raise CorruptLogError(
                        f"the record of event {from_id} runs past the durable end of its segment",
                        path=seg.path,
                        offset=start,
                    )
                data = bigger
                view = memoryview(data)
                continue
            break
        if info.event_id != last + 1:
            if off == 0 and at is not None:
                return raw(seg, from_id, max_bytes, None)  # a stale hint: locate it
            raise CorruptLogError(
                f"expected event {last + 1}, found {info.event_id}",
                path=seg.path,
                offset=start + off,
            )
        last = info.event_id
        off = info.end
        if off >= max_bytes:
            break
    return RawBatch(from_id, last, data[:off], seg.first_id, start + off)


def events(segments: Sequence[Segment], from_id: int, end: int) -> Iterator[Event]:
    """Durable events with ids in [from_id, end], checked and decoded, in order
    (`from_id` at or after the first segment's first id)."""
    i = segment_for(segments, from_id)
    next_id = from_id
    while next_id <= end and i < len(segments):
        seg = segments[i]
        if next_id > seg.last_id:
            i += 1
            continue
        for batch in scan(seg, seg.locate(next_id), next_id, min(end, seg.last_id)):
            yield from batch
            next_id = batch[-1].event_id + 1
        if next_id <= min(end, seg.last_id):
            raise CorruptLogError(
                f"segment ends before event {next_id}", path=seg.path, offset=seg.size
            )
        i += 1


def by_ids(segments: Sequence[Segment], ids: Sequence[int], end: int) -> list[Event]:
    """The events with these ids (ascending) up to `end`, checked and decoded; ids
    before the first segment (dropped by retention) are skipped.

    Each is found through the sparse index; a small window read there also
    serves the ids just after it. Only the wanted records are decoded (the
    others are stepped over by their length), so a task's history costs
    about one lookup per event, not a scan of every event in between.
    """
    out: list[Event] = []
    first_id = segments[0].first_id
    k = 0
    while k < len(ids):
        eid = ids[k]
        if eid > end:
            break
        if eid < first_id:  # dropped by retention, as read() skips them
            k += 1
            continue
        seg = segments[segment_for(segments, eid)]
        off = seg.locate(eid)
        data = seg.read(off, ID_READ_WINDOW)
        pos, cur = 0, eid
        while k < len(ids) and cur <= seg.last_id and pos + 8 <= len(data):
            rec_end = pos + 8 + FRAME.unpack_from(data, pos)[1]
            if rec_end > len(data):
                if pos == 0 and len(data) == ID_READ_WINDOW:  # bigger than the window
                    data = seg.read(off, rec_end)
                    if len(data) == rec_end:
                        continue
                if pos == 0:
                    raise CorruptLogError(
                        f"the record of event {cur} runs past the durable end of its segment",
                        path=seg.path,
                        offset=off,
                    )
                break
            if cur == ids[k]:
                got = decode_batch(
                    data[pos:rec_end], 0, base=off + pos, path=seg.path, expect=cur, term=0
                )
                if got.error is not None:
                    raise got.error
                if not got.events:
                    raise CorruptLogError(
                        f"event {cur} is not where the index says", path=seg.path, offset=off
                    )
                out.append(got.events[0])
                k += 1
            pos, cur = rec_end, cur + 1
        if k < len(ids) and ids[k] == eid:
            raise CorruptLogError(
                f"event {eid} not found where the index says it is", path=seg.path, offset=off
            )
    return out


class Walk:
    """Checked records of one segment from `offset` up to byte `end`, a chunk at a time.

    Iterating yields lists of events; ids must run on from `expect` and
    terms must not go down. Afterwards `offset` is where valid data ends and
    `error` says why the walk stopped early: a CorruptLogError, or None when
    the bytes simply ran out (clean end, or an incomplete record when
    `offset < end`).
    """

    def __init__(
        self,
        seg: Segment,
        offset: int,
        end: int,
        expect: int,
        term: int,
        first_read: int = READ_CHUNK,
    ) -> None:
        self.seg = seg
        self.offset = offset
        self.end = end
        self.expect = expect
        self.term = term
        self.first_read = first_read
        self.error: CorruptLogError | None = None

    def __iter__(self) -> Iterator[list[Event]]:
        path = self.seg.path
        want = self.first_read
        while self.offset < self.end:
            chunk = pread(path, self.offset, min(want, self.end - self.offset))
            got = decode_batch(
                chunk, 0, base=self.offset, path=path, expect=self.expect, term=self.term
            )
            if got.events:
                self.offset += got.end
                self.expect = got.next_id
                self.term = got.term
                yield got.events
            if got.error is not None:
                self.error = got.error
                return
            if got.end:
                want = min(READ_CHUNK, max(want, self.first_read) * 4)
                continue
            # Not even one record fit: it is bigger than the read, or incomplete.
            need = 8 + FRAME.unpack_from(chunk, 0)[1] if len(chunk) >= 8 else HEADER_SIZE
            if need <= len(chunk) or self.offset + need > self.end:
                return
            want = need


def pread(path: str, offset: int, length: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


def scan(seg: Segment, offset: int, first_id: int, last_id: int) -> Iterator[list[Event]]:
    """Checked events first_id..last_id of the durable part of a segment."""
    # A few events need a few KiB, not a 4 MiB read and decode; long reads grow to it.
    first_read = min(READ_CHUNK, max(16 * 1024, (last_id - first_id + 1) * 512))
    walk = Walk(seg, offset, seg.size, first_id, 0, first_read)
    for batch in walk:
        if batch[-1].event_id >= last_id:
            yield batch[: last_id - batch[0].event_id + 1]
            return
        yield batch
    if walk.error is not None:
        raise walk.error
