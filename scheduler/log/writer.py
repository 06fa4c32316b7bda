"""The only place log bytes are written and fsynced.

Two halves. `Writer` is the group commit of an open log: appenders encode
their record in the caller (no thread hop per event) and join the batch being
formed (`admit`); one writer task hands each whole batch to a single I/O
thread for one write and one fdatasync, then answers every appender of the
batch at once. While the thread is busy the next batch fills up, so batches
grow with load by themselves and an idle log commits a lone event at once.

The effects of one batch, in this order and nowhere else:

1. publish ahead: its records become shippable to standbys (ship.py), so a
   standby stores them while this node does;
2. write + fdatasync: one write per segment touched and one fdatasync, on the
   I/O thread (on a standby's loop while writes are fast); a failure makes the
   log refuse appends until it is reopened (after fsyncgate, a retry would lie);
3. land: segment sizes and `durable_id` move, readers see the records; at a
   rotation, and now and then, the durable end goes to the manifest's own
   thread (manifest.py), never waited for;
4. apply: the listeners get the events (the store applies them to its state)...
5. observers: ...and, inside the store's listener, its observers; a failure
   here stops the log too: nothing is acknowledged on top of a broken state;
6. resolve appenders: every appender of the batch resumes;
7. commit gate: `wait_durable` / `wait_written` waiters wake (the senders ship
   from the new end); an appender resumed in 6 then waits for its standbys'
   acks at the replication hub's sync gate (replicator/sender.py), outside the log.

The other half: the file primitives every other change of segment bytes goes
through, so that a reader finds each here: creating a segment, cutting one
back (`truncate`), removing one, rewriting an index, writing over a damaged
segment's durable prefix (`overwrite`, scheduler/log/mend.py) and copying
records out to a quarantine file (`copy_out`, scheduler/log/cut.py). Other
formats are written by their own modules: the manifest (manifest.py), the
data directory's FORMAT (datadir.py), snapshots and archive chunks
(scheduler/state/snapshot.py, scheduler/state/archive.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from apollo11.scheduler import metrics
from apollo11.scheduler.errors import LogClosedError, LogError, LogFailedError
from apollo11.scheduler.log.config import FsyncPolicy, LogConfig
from apollo11.scheduler.log.datadir import DataDir
from apollo11.scheduler.log.manifest import Keeper, Manifest
from apollo11.scheduler.log.record import Event
from apollo11.scheduler.log.segment import INDEX_ENTRY, INDEX_INTERVAL, Segment, segment_name
from apollo11.scheduler.log.ship import RecentRun, ShipAhead

log = logging.getLogger(__name__)

# A standby writes on its event loop while writes take less than this (see _write_loop).
INLINE_WRITE_MAX_S = 0.002
INLINE_WRITE_MAX_BYTES = 64 * 1024

Listener = Callable[[Sequence[Event]], object]


class Part:
    """Bytes of one batch that go to one segment."""

    __slots__ = ("chunks", "data", "first_id", "index", "new_segment")

    def __init__(self, new_segment: bool, first_id: int) -> None:
        self.new_segment = new_segment
        self.first_id = first_id  # segment the part goes to
        self.chunks: list[bytes] = []
        self.data = b""  # the chunks joined, once written
        self.index: list[tuple[int, int]] = []


class Batch:
    __slots__ = ("events", "nbytes", "parts", "replicated", "waiters")

    def __init__(self, segment_id: int) -> None:
        self.waiters: list[asyncio.Future[None]] = []
        self.parts = [Part(False, segment_id)]
        self.events: list[Event] = []
        self.nbytes = 0
        self.replicated = False  # records from the primary (a standby's batch)


class Writer:
    """The group commit of one open log, and its append-side state.

    `segments` is the log's own list (oldest first): the writer grows its last
    segment and appends new ones as batches land; retention removes from the
    front (scheduler/log/cut.py). Loop thread, except `_write_batch`.
    """

    def __init__(
        self,
        data: DataDir,
        segments: list[Segment],
        *,
        config: LogConfig,
        ship: ShipAhead,
        last_term: int,
        read_only: bool,
        manifest: Manifest | None,
    ) -> None:
        self._data = data
        self._segments = segments
        self.config = config
        self._ship = ship
        tail = segments[-1]
        self.next_id = tail.last_id + 1  # next id to assign
        self.durable_id = tail.last_id
        self.last_term = last_term  # highest term durable or staged
        self._tail_size = tail.size  # projected size once staged batches land
        self._tail_id = tail.first_id  # projected last segment
        self._next_index_at = _next_index_at(tail)
        self._batch: Batch | None = None
        self.listeners: list[Listener] = []
        self.failed: BaseException | None = None
        if read_only:
            self.failed = LogError("this event log was opened read-only")
        self.closed = False
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._durable_waiters: asyncio.Future[None] | None = None
        self._last_write_s = 0.0  # how long the last write and fsync took
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="apollo11-log")
        self._fd = -1 if read_only else open_append(tail.path)
        self._idx_fd = -1 if read_only else open_append(tail.index_path)
        self.manifest = Keeper(
            data.log_dir,
            manifest,
            sync=config.fsync is FsyncPolicy.ALWAYS,
            writing=not read_only,
            end=self._end_manifest,
            live=lambda: self.writable,
        )

    @property
    def writable(self) -> bool:
        return not self.closed and self.failed is None

    # --------------------------------------------------------------- staging

    def admit(self, data: bytes, event: Event) -> Batch:
        """Add one encoded record to the batch being formed (no I/O here)."""
        batch = self._batch
        if batch is None:
            if self._task is None:
                self._start()
            batch = self._batch = Batch(self._tail_id)
            assert self._wake is not None
            self._wake.set()
        eid = event.event_id
        # Rotation is decided per record from sizes alone, so a replica that
        # receives the same records cuts its segments at the same places.
        if self._tail_size >= self.config.segment_max_bytes:
            self._tail_id = eid
            self._tail_size = 0
            self._next_index_at = 0
            batch.parts.append(Part(True, eid))
        part = batch.parts[-1]
        size = self._tail_size
        if size >= self._next_index_at and size:
            self._next_index_at = size + INDEX_INTERVAL
            part.index.append((eid, size))
        part.chunks.append(data)
        self._tail_size += len(data)
        self.next_id = eid + 1
        if event.term > self.last_term:
            self.last_term = event.term
        batch.events.append(event)
        batch.nbytes += len(data)
        return batch

    def stage(self, records: Sequence[tuple[Event, bytes]]) -> Batch:
        """Admit several records together (at least one): they go in one batch."""
        batch: Batch | None = None
        for event, data in records:
            batch = self.admit(data, event)
        assert batch is not None
        return batch

    def waiter(self, batch: Batch) -> asyncio.Future[None]:
        """A future of its own, done once `batch` is durable (or failed)."""
        fut = self._loop.create_future()
        batch.waiters.append(fut)
        return fut

    async def durable(self, batch: Batch) -> None:
        # Each appender awaits its own future: cancelling one appender must not
        # cancel a future the whole batch shares. (waiter() inlined: once per append.)
        fut = self._loop.create_future()
        batch.waiters.append(fut)
        await fut

    async def flush(self) -> None:
        """Wait for everything staged so far to be durable."""
        if self._batch is not None:
            await self.durable(self._batch)

    # ---------------------------------------------------------------- writer

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._write_loop())

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = self._batch
            if batch is None:
                if self.closed:
                    return
                continue
            self._batch = None
            self._publish_ahead(batch)
            started = time.perf_counter()
            try:
                if (
                    batch.replicated
                    and self._last_write_s < INLINE_WRITE_MAX_S
                    and batch.nbytes <= INLINE_WRITE_MAX_BYTES
                    and not any(p.new_segment for p in batch.parts)
                ):
                    # A standby's loop has nothing better to do meanwhile; two thread
                    # hops cost more than a small write (docs/benchmarks.md), and on a
                    # busy machine each hop waits for a CPU. A slow write sends the next
                    # one back to the thread until writes are fast again; so do a big
                    # batch (catching up) and a segment rotation (two more fsyncs).
                    self._write_batch(batch.parts)
                else:
                    await loop.run_in_executor(self._io, self._write_batch, batch.parts)
            except BaseException as e:
                self.failed = e
                metrics.LOG_WRITE_ERRORS.inc()
                log.error("event log write failed; refusing further appends: %s", e)
                # Its records may have been shipped ahead to standbys already.
                _resolve(
                    batch.waiters,
                    LogFailedError(
                        f"write failed: {e}; the records may have reached standbys, so "
                        f"whether they took effect is unknown"
                    ),
                )
                self._fail_pending()
                self._wake_durable_waiters()
                return
            metrics.LOG_FSYNC_SECONDS.observe(time.perf_counter() - started)
            metrics.LOG_BATCH_EVENTS.observe(len(batch.events))
            metrics.LOG_APPENDS.inc(len(batch.events))
            rotated = self._land(batch)
            # Not a write here: a future for the manifest's own thread, now and then.
            if rotated or started - self.manifest.at >= self.config.manifest_interval_s:
                self.manifest.mark("segment rotation" if rotated else "periodic")
            try:
                for listener in self.listeners:
                    listener(batch.events)
            except Exception as e:
                # The batch is durable, but what depends on it (the state) could not
                # follow: stop here rather than acknowledge on top of a broken state.
                self.failed = e
                log.exception("a listener of the event log failed; refusing further appends")
                _resolve(batch.waiters, LogFailedError(f"durable, but not applied: {e}"))
                self._fail_pending()
                self._wake_durable_waiters()
                return
            _resolve(batch.waiters, None)
            self._wake_durable_waiters()
            if self._batch is not None:
                self._wake.set()

    def _publish_ahead(self, batch: Batch) -> None:
        """Make a batch's records readable by followers as it goes to the writer
        (Raft's parallel write: see ship.py)."""
        events = batch.events
        i = 0
        size = self._segments[-1].size  # the batch before has landed: sizes are final
        for part in batch.parts:
            if part.new_segment:
                size = 0
            n = len(part.chunks)
            if not n:
                continue
            part.data = b"".join(part.chunks)
            size += len(part.data)
            last = events[i + n - 1].event_id
            self._ship.remember(RecentRun(events[i].event_id, last, part.first_id, size, part.data))
            i += n
        self._ship.published(events[-1].event_id)

    def _wake_durable_waiters(self) -> None:
        waiters, self._durable_waiters = self._durable_waiters, None
        if waiters is not None and not waiters.done():
            waiters.set_result(None)
        self._ship.wake()

    def _fail_pending(self) -> None:
        if self._batch is not None:
            _resolve(self._batch.waiters, LogFailedError(f"write failed: {self.failed}"))
            self._batch = None

    def _write_batch(self, parts: list[Part]) -> None:
        """Runs on the I/O thread (or inline for a standby): one write per segment
        touched, and one fdatasync."""
        started = time.perf_counter()
        sync = self.config.fsync is FsyncPolicy.ALWAYS
        for part in parts:
            if part.new_segment:
                # Make the old segment whole before the new one exists, so a
                # crash can only ever tear the last segment.
                if sync:
                    os.fdatasync(self._fd)
                old_fd, old_idx = self._fd, self._idx_fd
                self._fd = self._idx_fd = -1  # never close them twice, whatever fails next
                os.close(old_fd)
                os.close(old_idx)
                path = os.path.join(self._data.log_dir, segment_name(part.first_id))
                self._fd = open_append(path, create=True)
                self._idx_fd = open_append(path[:-4] + ".idx", create=True)
                if sync:
                    self._data.fsync_log_dir()
            _write_all(self._fd, part.data)
            if part.index:
                _write_all(self._idx_fd, b"".join(INDEX_ENTRY.pack(*e) for e in part.index))
        if sync:
            os.fdatasync(self._fd)
        self._last_write_s = time.perf_counter() - started

    def _land(self, batch: Batch) -> bool:
        """Publish a durable batch to readers (loop thread); did it open a segment?"""
        events = batch.events
        i = 0
        rotated = False
        for part in batch.parts:
            if part.new_segment:
                rotated = True
                seg = Segment(
                    part.first_id,
                    os.path.join(self._data.log_dir, segment_name(part.first_id)),
                    0,
                    part.first_id - 1,
                    [(part.first_id, 0)],
                    index_loaded=True,
                )
                self._segments.append(seg)
            seg = self._segments[-1]
            n = len(part.chunks)
            if not n:
                continue  # a batch whose very first record opened a new segment
            seg.size += len(part.data)
            seg.last_id = events[i + n - 1].event_id
            seg.index.extend(part.index)
            i += n
        self.durable_id = events[-1].event_id
        return rotated

    def _end_manifest(self, reason: str) -> Manifest:
        """The durable end now (loop thread: sizes are those of landed batches)."""
        tail = self._segments[-1]
        # one entry per segment, once a second at most: 100 MB segments keep this short
        return Manifest(
            event_id=self.durable_id,
            segment_id=tail.first_id,
            offset=tail.size,
            segments=tuple((s.first_id, s.size) for s in self._segments),
            written_ms=now_ms(),
            reason=reason,
        )

    async def wait_durable(self, after_id: int) -> None:
        """Wait until an event after `after_id` is durable (wrap in asyncio.timeout)."""
        while self.durable_id <= after_id:
            if self.closed or self.failed is not None:
                raise LogClosedError("the event log is closed")
            if self._durable_waiters is None:
                self._durable_waiters = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._durable_waiters)

    # ------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        if self.closed:
            return
        with contextlib.suppress(LogError):
            await self.flush()
        self.closed = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
        self._wake_durable_waiters()
        self._io.shutdown(wait=True)
        await self.manifest.wait()
        self.manifest.close(exact=self.failed is None)
        self._close_fds()

    def close_sync(self) -> None:
        """Close a log that never started writing (offline tools)."""
        if self._task is not None:
            raise LogError("close_sync() on a log with a running writer; await close()")
        self.closed = True
        self._io.shutdown(wait=True)
        self.manifest.close(exact=self.failed is None)
        self._close_fds()

    def _close_fds(self) -> None:
        # -1 after a rotation that could not open the new segment (a full disk): the
        # close must still succeed, or the node's reopen of the failed log fails once.
        for fd in (self._fd, self._idx_fd):
            if fd >= 0:
                os.close(fd)
        self._fd = self._idx_fd = -1


def _resolve(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for fut in waiters:
        if not fut.done():  # a cancelled appender's future is done already
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


def _next_index_at(seg: Segment) -> int:
    if not seg.size:
        return 0
    return seg.index[-1][1] + INDEX_INTERVAL if seg.index else INDEX_INTERVAL


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# ------------------------------------------------------------ file primitives


def open_append(path: str, create: bool = False) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_CREAT
    if create:
        flags |= os.O_EXCL
    return os.open(path, flags, 0o644)


def create_segment(path: str) -> None:
    """Create an empty segment file (the caller syncs the directory)."""
    os.close(open_append(path, create=True))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def truncate(path: str, at: int) -> None:
    """Cut a segment file back to `at` bytes, durably."""
    with open(path, "r+b") as f:
        f.truncate(at)
        os.fsync(f.fileno())


def remove_index(seg: Segment) -> None:
    """Delete a segment's sparse index: derived data, rebuilt on demand."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(seg.index_path)


def remove_segment(seg: Segment, *, missing_ok: bool = False) -> None:
    """Delete a segment file and its index (the caller syncs the directory)."""
    if missing_ok:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.path)
    else:
        os.unlink(seg.path)
    remove_index(seg)


def write_index(seg: Segment) -> None:
    """Rewrite a segment's sparse index from `seg.index` (derived data, no fsync)."""
    with open(seg.index_path, "wb") as f:
        f.write(b"".join(INDEX_ENTRY.pack(*e) for e in seg.index if e[1] > 0))


def overwrite(path: str, data: bytes) -> None:
    """Write `data` over the first bytes of an existing segment file, in place (same
    inode, same offsets; what follows stays), and fdatasync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        view, off = memoryview(data), 0
        while off < len(view):
            off += os.pwrite(fd, view[off:], off)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def copy_out(path: str, chunks: Iterable[bytes]) -> None:
    """Append whole records to the file `path` (segment framing) and fsync it."""
    with open(path, "ab") as f:
        for chunk in chunks:
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
