"""Segment files: naming, listing, positions, the sparse index, positioned reads.

A segment is named by the id of its first event (20 digits, so names sort
numerically). Its sparse index (`.idx`, 16-byte entries `u64 event_id, u64
offset`, one every INDEX_INTERVAL bytes of log) is derived data: it is written
without fsync, checked before use, and rebuilt by walking record headers when
it is missing or wrong.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass, field
from struct import Struct
from typing import NamedTuple

from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.log.record import HEADER, HEADER_SIZE, MAX_RECORD_BYTES

SEGMENT_SUFFIX = ".seg"
INDEX_SUFFIX = ".idx"
INDEX_INTERVAL = 64 * 1024
INDEX_ENTRY = Struct("<QQ")
READ_CHUNK = 4 * 1024 * 1024


def segment_name(first_id: int) -> str:
    return f"{first_id:020d}{SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    stem, dot, suffix = name.partition(".")
    if dot and "." + suffix == SEGMENT_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class Position(NamedTuple):
    """Where the record after `event_id` starts: segment `segment_id`, byte `offset`."""

    event_id: int
    segment_id: int
    offset: int


def list_segments(log_dir: str) -> list[Segment]:
    """The segment files in `log_dir`, oldest first, sized as found on disk.

    A sealed segment ends where the next begins; the last one's end is found
    by scanning it (scheduler/log/recovery.py), so its last id is left unknown.
    """
    found: list[tuple[int, str]] = []
    try:
        names = os.listdir(log_dir)
    except OSError as e:
        raise CorruptLogError(f"cannot list the log: {e.strerror}", path=log_dir, offset=0) from e
    for name in names:
        first = parse_segment_name(name)
        if first is not None:
            found.append((first, os.path.join(log_dir, name)))
    found.sort()
    segments = []
    for i, (first, path) in enumerate(found):
        try:
            size = os.path.getsize(path)
        except OSError as e:
            raise CorruptLogError(
                f"cannot read a segment: {e.strerror}", path=path, offset=0
            ) from e
        last = found[i + 1][0] - 1 if i + 1 < len(found) else first - 1
        segments.append(Segment(first, path, size, last))
    return segments


@dataclass(slots=True)
class Segment:
    """One segment file and what is known to be durable in it."""

    first_id: int
    path: str
    size: int  # durable bytes; readers never look past this
    last_id: int  # last durable event id here; first_id - 1 when empty
    index: list[tuple[int, int]] = field(default_factory=list)  # (event_id, offset)
    index_loaded: bool = False

    @property
    def index_path(self) -> str:
        return self.path[: -len(SEGMENT_SUFFIX)] + INDEX_SUFFIX

    @property
    def empty(self) -> bool:
        return self.last_id < self.first_id

    def read(self, offset: int, length: int) -> bytes:
        """Read durable bytes [offset, offset+length) (clipped to the durable size)."""
        length = min(length, self.size - offset)
        if length <= 0:
            return b""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        if len(data) < length:
            raise CorruptLogError(
                f"segment is shorter than its durable size {self.size}",
                path=self.path,
                offset=offset + len(data),
            )
        return data

    def load_index(self) -> None:
        """Load the persisted sparse index, keeping only entries that can be right."""
        if self.index_loaded:
            return
        entries: list[tuple[int, int]] = [(self.first_id, 0)]
        try:
            with open(self.index_path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b""
        for eid, off in INDEX_ENTRY.iter_unpack(raw[: len(raw) - len(raw) % INDEX_ENTRY.size]):
            prev_id, prev_off = entries[-1]
            if eid <= prev_id or off <= prev_off or off >= self.size or eid > self.last_id:
                break  # unsynced file: trust only the well-formed prefix
            entries.append((eid, off))
        # Keep entries already learned from writes (they are exact).
        merged = dict(entries)
        merged.update(self.index)
        self.index = sorted(merged.items())
        self.index_loaded = True

    def locate(self, event_id: int) -> int:
        """Byte offset of the record with `event_id` (which must be in this segment)."""
        if event_id == self.first_id:
            return 0
        if event_id == self.last_id + 1:
            return self.size
        self.load_index()
        i = bisect.bisect_right(self.index, (event_id, 1 << 64)) - 1
        start_id, start_off = self.index[i] if i >= 0 else (self.first_id, 0)
        off = self._walk(start_off, start_id, event_id)
        if off is None:  # the index lied (unsynced file); walk from the start
            self.index = [(self.first_id, 0)]
            off = self._walk(0, self.first_id, event_id)
            if off is None:
                raise CorruptLogError(
                    f"event {event_id} not found where the segment says it is",
                    path=self.path,
                    offset=0,
                )
        return off

    def _walk(self, off: int, expect_id: int, target: int) -> int | None:
        """Walk record headers from `off` (record `expect_id`) to `target`.

        Where the index has a gap (its file lost unsynced entries in a crash, or
        was cut), the walk fills it in memory, so the next lookup there is short.
        """
        want = 2 * INDEX_INTERVAL  # the next index entry is at most this far, usually
        learned: list[tuple[int, int]] = []
        mark = off
        try:
            while True:
                chunk = self.read(off, want)
                want = READ_CHUNK
                pos = 0
                while pos + HEADER_SIZE <= len(chunk):
                    _, body_len, eid = HEADER.unpack_from(chunk, pos)[:3]
                    if eid != expect_id or body_len > MAX_RECORD_BYTES:
                        learned.clear()  # not trusted: the walk went wrong
                        return None
                    if eid == target:
                        return off + pos
                    if off + pos - mark >= INDEX_INTERVAL:
                        mark = off + pos
                        learned.append((eid, mark))
                    pos += 8 + body_len
                    expect_id += 1
                if not chunk or pos == 0:
                    learned.clear()
                    return None
                off += pos
        finally:
            if learned:
                self.index = sorted({*self.index, *learned})
