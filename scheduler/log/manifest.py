"""The log's manifest: where the log was known to end.

Without it, a log whose newest segment was deleted, or whose tail was cut,
looks exactly like a shorter log: recovery scans what is there, finds a
clean end, and the node starts on it. Acknowledged events are gone, tasks
that SUCCEEDED go back to RUNNING and their steps run again. A CRC catches a
damaged record; only something written elsewhere can catch a missing one.

`log/MANIFEST` says what was durable when it was written: the last event id,
the segment holding it and the byte offset where that record ends, and every
segment then in the log with its durable size::

    b"A11MANI1" | u32 crc32(body) | u64 len(body) | body (JSON)

Why a manifest and not chained checksums in segment headers: a chain proves
that what is present is unbroken, but the newest segment, deleted whole,
leaves a chain that is unbroken and short. Only a record of the end kept
outside the segments can say "there was more". It is also one small file,
read once at start, that changes no record's framing: golden logs, shipped
bytes and standbys' segments stay byte for byte what they were.

When it is written: never on the append path. The writer hands the durable
end (known after a batch landed) to a thread of its own, at a segment
rotation, at a snapshot, every `LogConfig.manifest_interval_s` while events
arrive, and, exactly, at a clean close. Each write is atomic (temp file,
fsync, rename, directory fsync), so a crash leaves the old one or the new one.

The trade-off: the manifest lags the true end by up to the interval. So:

- the log may be *longer* than the manifest says: events after it were being
  written when the node died; a torn tail past it is cut as before, reported
  as "not known to have been acknowledged" (they may or may not have been);
- the log is never legitimately *shorter* than the manifest says: what it
  names was durable, so a missing or short segment, or a bad record, before
  that end is damage, and the log is refused with the file, the end expected
  and the end found. After a clean close the manifest holds the exact end, so
  then any truncation at all is refused.

What it does not cover: segments before the first one present (retention
deletes those on purpose; the store refuses a log whose start no snapshot
covers), and damage inside a sealed segment's bytes (that is the CRC's job,
when the range is read).

Whatever shortens the log on purpose (cutting a divergent tail) writes the
shorter manifest first, then cuts; a crash between leaves a log longer than
its manifest, which is fine.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import zlib
from dataclasses import dataclass
from struct import Struct

import orjson

from scheduler.errors import CorruptLogError
from scheduler.log.datadir import fsync_dir

MANIFEST_FILE = "MANIFEST"
MAGIC = b"A11MANI1"
HEADER = Struct("<8sIQ")


@dataclass(frozen=True, slots=True)
class Manifest:
    """The durable end of the log at `written_ms`, and why it was written then."""

    event_id: int  # last durable event (segment_id - 1 when that segment is empty)
    segment_id: int  # first event id of the segment holding it: its file name
    offset: int  # where the record after `event_id` starts in that segment
    segments: tuple[tuple[int, int], ...]  # (first event id, durable size), oldest first
    written_ms: int  # wall clock, for the message only
    reason: str  # "clean shutdown", "segment rotation", "snapshot", "periodic", ...

    @property
    def written_at(self) -> str:
        """When, for a person: UTC, to the second."""
        when = datetime.datetime.fromtimestamp(self.written_ms / 1000, datetime.UTC)
        return when.strftime("%Y-%m-%d %H:%M:%S UTC")

    @property
    def describe(self) -> str:
        """`the last manifest (written at ..., at a clean shutdown)`, for messages."""
        return f"the last manifest (written {self.written_at}, at {self.reason})"

    def encode(self) -> bytes:
        body = orjson.dumps(
            {
                "event_id": self.event_id,
                "segment_id": self.segment_id,
                "offset": self.offset,
                "segments": self.segments,
                "written_ms": self.written_ms,
                "reason": self.reason,
            }
        )
        return HEADER.pack(MAGIC, zlib.crc32(body), len(body)) + body


def manifest_path(log_dir: str) -> str:
    return os.path.join(log_dir, MANIFEST_FILE)


def load(log_dir: str) -> Manifest | None:
    """The manifest in `log_dir`, None when there is none (a log from before manifests,
    or one that never wrote one). A damaged one raises: it cannot be told from a
    manifest of a longer log."""
    path = manifest_path(log_dir)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    what_to_do = (
        "it is written atomically, so something else changed it; delete it to open the "
        "log without checking its end"
    )
    if len(raw) < HEADER.size:
        raise CorruptLogError(f"the log's manifest is truncated; {what_to_do}", path=path, offset=0)
    magic, crc, length = HEADER.unpack_from(raw)
    body = raw[HEADER.size :]
    if magic != MAGIC or length != len(body) or zlib.crc32(body) != crc:
        raise CorruptLogError(
            f"the log's manifest fails its checksum; {what_to_do}", path=path, offset=0
        )
    try:
        d = orjson.loads(body)
        return Manifest(
            event_id=int(d["event_id"]),
            segment_id=int(d["segment_id"]),
            offset=int(d["offset"]),
            segments=tuple((int(a), int(b)) for a, b in d["segments"]),
            written_ms=int(d["written_ms"]),
            reason=str(d["reason"]),
        )
    except (ValueError, KeyError, TypeError) as e:
        raise CorruptLogError(
            f"the log's manifest is unreadable ({e}); {what_to_do}", path=path, offset=0
        ) from e


def write(log_dir: str, manifest: Manifest, *, sync: bool = True) -> None:
    """Replace the manifest atomically (temp file, fsync, rename, directory fsync).

    `sync=False` (a log with fsync off, for tests and benchmarks) still renames
    atomically, but promises nothing across a machine crash, as its log does not.
    """
    path = manifest_path(log_dir)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(manifest.encode())
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(log_dir)


def remove(log_dir: str) -> None:
    """Delete the manifest (before wiping the log: never a manifest without its log)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(manifest_path(log_dir))
    fsync_dir(log_dir)
