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

import asyncio
import contextlib
import datetime
import logging
import os
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from struct import Struct

import orjson

from apollo11.scheduler import metrics
from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.log.datadir import fsync_dir

log = logging.getLogger(__name__)

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


class Keeper:
    """Keeps one log's manifest up to date, on a thread of its own: the append path
    never waits for it (nor for its two fsyncs).

    `end(reason)` gives the durable end now (loop thread: sizes are those of landed
    batches); `live()` says whether the log still writes (not closed, not failed).
    A keeper opened with `writing=False` (a read-only log) never writes.
    """

    def __init__(
        self,
        log_dir: str,
        last: Manifest | None,
        *,
        sync: bool,
        writing: bool,
        end: Callable[[str], Manifest],
        live: Callable[[], bool],
    ) -> None:
        self.manifest = last  # the last one read or written
        self._log_dir = log_dir
        self._sync = sync
        self._end = end
        self._live = live
        self._io = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="apollo11-manifest")
            if writing
            else None
        )
        self.at = time.perf_counter()  # when the end was last marked
        self._busy: asyncio.Future[None] | None = None
        self._again: str | None = None  # asked for while one was being written

    def mark(self, reason: str) -> None:
        """Record the durable end, on the manifest's thread (no wait).

        While one write is under way, the next waits for it and takes the end as it
        is then: writes never pile up, and a newer end never loses to an older one.
        """
        if self._io is None or not self._live():
            return
        self.at = time.perf_counter()
        if self._busy is not None:
            self._again = reason
            return
        m = self._end(reason)
        if self.manifest is not None and m.segments == self.manifest.segments:
            return  # nothing new since the last one
        fut = asyncio.get_running_loop().run_in_executor(self._io, self._write, m)
        self._busy = fut
        fut.add_done_callback(self._written)

    def _write(self, m: Manifest) -> None:
        """Runs on the manifest thread (or at close)."""
        write(self._log_dir, m, sync=self._sync)
        self.manifest = m
        metrics.LOG_MANIFEST_WRITES.inc()

    def _written(self, fut: asyncio.Future[None]) -> None:
        self._busy = None
        if not fut.cancelled() and (exc := fut.exception()) is not None:
            metrics.LOG_MANIFEST_FAILURES.inc()
            log.error(
                "event log: could not write the manifest (appends go on; a lost tail "
                "would be detected only up to the last manifest written): %s",
                exc,
            )
        again, self._again = self._again, None
        if again is not None:
            self.mark(again)

    async def wait(self) -> None:
        """Wait until no manifest write is under way (tests, and close)."""
        while self._busy is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._busy)
            await asyncio.sleep(0)  # let its done-callback start the next one

    def close(self, *, exact: bool) -> None:
        """At a close: with `exact` (a clean one), the exact end, synchronously; then
        no more writes. Without (the log failed), the last manifest stays: it lags,
        which is always safe."""
        io, self._io = self._io, None
        if io is None:
            return
        io.shutdown(wait=True)
        if not exact:
            return
        try:
            self._write(self._end("a clean shutdown"))
        except OSError as e:
            metrics.LOG_MANIFEST_FAILURES.inc()
            log.error("event log: could not write the manifest at close: %s", e)
