"""The append-only event log: recovery, group commit, reads.

One asyncio loop owns an EventLog. Appenders encode their record in the
caller (no thread hop per event) and join the batch being formed; one writer
task hands each whole batch to a single I/O thread for one write and one
fdatasync, then acknowledges every appender of the batch at once. While the
thread is busy the next batch fills up, so batches grow with load by
themselves and an idle log commits a lone event immediately.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import itertools
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

from scheduler import metrics
from scheduler.errors import (
    CorruptLogError,
    InvalidEventError,
    LogClosedError,
    LogError,
    LogFailedError,
    LogTruncatedError,
    SnapshotMismatchError,
    StaleTermError,
)
from scheduler.log import manifest as manifests
from scheduler.log.datadir import DataDir, fsync_dir
from scheduler.log.manifest import Manifest
from scheduler.log.record import (
    DEFAULT_PAYLOAD_MAX_BYTES,
    FRAME,
    HEADER_SIZE,
    Event,
    EventType,
    RecordInfo,
    check_record,
    decode_batch,
    encode_payload,
    encode_record,
)
from scheduler.log.segment import (
    INDEX_ENTRY,
    INDEX_INTERVAL,
    READ_CHUNK,
    Segment,
    parse_segment_name,
    segment_name,
)

log = logging.getLogger(__name__)
_new_event = tuple.__new__

DEFAULT_SEGMENT_MAX_BYTES = 100 * 1024 * 1024
ID_READ_WINDOW = 16 * 1024  # read_ids: bytes read at each located id (~100 events)
# Look this many ids past a bad record for a valid one before calling it a torn tail.
_TORN_PROBE_IDS = 64
# A standby writes on its event loop while writes take less than this (see _write_loop).
INLINE_WRITE_MAX_S = 0.002
INLINE_WRITE_MAX_BYTES = 64 * 1024


class FsyncPolicy(enum.StrEnum):
    ALWAYS = "always"
    # Acknowledges before data is on disk. For tests and benchmarks only.
    UNSAFE_NEVER = "unsafe-never"


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_max_bytes: int = DEFAULT_SEGMENT_MAX_BYTES
    payload_max_bytes: int = DEFAULT_PAYLOAD_MAX_BYTES
    # A submission carries the task's input and its DAG (a runbook of a hundred
    # shell steps does not fit in 4 KiB); every other event keeps the small cap.
    submit_max_bytes: int = 64 * 1024
    fsync: FsyncPolicy = FsyncPolicy.ALWAYS
    max_batch_bytes: int = 8 * 1024 * 1024
    # newest records kept in memory for followers that keep up (0: always read disk)
    recent_bytes: int = 4 * 1024 * 1024
    # The manifest (see scheduler/log/manifest.py) records the durable end at most this
    # often while events arrive, and at every rotation, snapshot and clean close.
    manifest_interval_s: float = 1.0

    def __post_init__(self) -> None:
        if self.segment_max_bytes < 4096:
            raise ValueError(
                f"segment_max_bytes must be at least 4096, got {self.segment_max_bytes}"
            )
        if not 64 <= self.payload_max_bytes <= 1024 * 1024:
            raise ValueError(
                f"payload_max_bytes must be between 64 and 1048576, got {self.payload_max_bytes}"
            )
        if not self.payload_max_bytes <= self.submit_max_bytes <= 8 * 1024 * 1024:
            raise ValueError(
                f"submit_max_bytes must be between payload_max_bytes and 8388608, "
                f"got {self.submit_max_bytes}"
            )
        if not self.manifest_interval_s > 0:
            raise ValueError(
                f"manifest_interval_s must be more than 0, got {self.manifest_interval_s}"
            )


class Draft(NamedTuple):
    """What a caller says about an event; the log adds id, term, node and time."""

    event_type: EventType
    task_id: str
    step_name: str = ""
    payload: Mapping[str, Any] | None = None
    attempt: int = 0


class Position(NamedTuple):
    """Where the record after `event_id` starts: segment `segment_id`, byte `offset`."""

    event_id: int
    segment_id: int
    offset: int


class RawBatch(NamedTuple):
    """Whole records exactly as on disk, for shipping byte for byte."""

    first_id: int
    last_id: int
    data: bytes
    # where the next record starts: pass it back as `at` to skip locating it
    segment_id: int = 0
    end_offset: int = 0


class NothingInCommonError(LogError):
    """The log starts after the point it should be cut back to."""


class _Part:
    """Bytes of one batch that go to one segment."""

    __slots__ = ("chunks", "data", "first_id", "index", "new_segment")

    def __init__(self, new_segment: bool, first_id: int) -> None:
        self.new_segment = new_segment
        self.first_id = first_id  # segment the part goes to
        self.chunks: list[bytes] = []
        self.data = b""  # the chunks joined, once written
        self.index: list[tuple[int, int]] = []


class _Recent(NamedTuple):
    """Bytes of a recently written run of records, kept for shipping them again."""

    first_id: int
    last_id: int
    segment_id: int
    end_offset: int  # in the segment, after the last record
    data: bytes


class _Batch:
    __slots__ = ("events", "nbytes", "parts", "replicated", "waiters")

    def __init__(self, segment_id: int) -> None:
        self.waiters: list[asyncio.Future[None]] = []
        self.parts = [_Part(False, segment_id)]
        self.events: list[Event] = []
        self.nbytes = 0
        self.replicated = False  # records from the primary (a standby's batch)


Listener = Callable[[Sequence[Event]], object]


class EventLog:
    """The durable, segmented, checksummed event log of one node."""

    def __init__(
        self,
        data: DataDir,
        segments: list[Segment],
        *,
        config: LogConfig,
        instance_id: str,
        last_term: int,
        clock: Callable[[], int],
        read_only: bool = False,
        manifest: Manifest | None = None,
    ) -> None:
        self._data = data
        self.read_only = read_only
        self._segments = segments
        self.config = config
        self.instance_id = instance_id
        self._clock = clock
        self._last_term = last_term  # highest term durable or staged
        self.term = last_term  # term stamped on new events; the node raises it
        tail = segments[-1]
        self._next_id = tail.last_id + 1  # next id to assign
        self._durable_id = tail.last_id
        # The last event handed to the writer: shippable to standbys before it is
        # durable here (see _publish_ahead).
        self._written_id = tail.last_id
        self._written_waiters: asyncio.Future[None] | None = None
        self._tail_size = tail.size  # projected size once staged batches land
        self._tail_id = tail.first_id  # projected last segment
        self._next_index_at = _next_index_at(tail)
        self._batch: _Batch | None = None
        self._listeners: list[Listener] = []
        self._failed: BaseException | None = None
        if read_only:
            self._failed = LogError("this event log was opened read-only")
        self._closed = False
        self._wake: asyncio.Event | None = None
        self._writer: asyncio.Task[None] | None = None
        self._durable_waiters: asyncio.Future[None] | None = None
        self._last_write_s = 0.0  # how long the last write and fsync took
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="apollo11-log")
        # The newest durable records, as written: followers that keep up are served
        # from here, with no read and no second CRC pass (the bytes never left memory).
        self._recent: dict[int, _Recent] = {}  # first event id -> run; insertion order
        self._recent_bytes = 0
        self._fd = -1 if read_only else _open_append(tail.path)
        self._idx_fd = -1 if read_only else _open_append(tail.index_path)
        # The manifest is written by a thread of its own, so that the append path never
        # waits for it (nor for its two fsyncs).
        self.manifest = manifest  # the last one read or written
        self._manifest_io = (
            None
            if read_only
            else ThreadPoolExecutor(max_workers=1, thread_name_prefix="apollo11-manifest")
        )
        self._manifest_at = time.perf_counter()
        self._manifest_busy: asyncio.Future[None] | None = None
        self._manifest_again: str | None = None  # asked for while one was being written

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike[str],
        *,
        config: LogConfig | None = None,
        instance_id: str = "node",
        replay_from: int | None = None,
        hint: Position | None = None,
        hint_term: int = 0,
        on_events: Listener | None = None,
        base_id: int = 1,
        clock: Callable[[], int] | None = None,
        read_only: bool = False,
        until: int | None = None,
    ) -> EventLog:
        """Open (creating when new) the log in `data_dir` and recover it.

        Records from `replay_from` (default: the first) to the end are read,
        checked and passed to `on_events` in order; that scan is also what
        validates the tail. A torn tail of the last segment is cut off and
        reported; a bad record anywhere else raises CorruptLogError.
        `hint` (from a snapshot) says where `replay_from` starts, and
        `hint_term` the highest term before it. `base_id` names the first
        segment of a brand-new log (a standby seeded from a snapshot).
        `read_only` opens an existing log for offline tools: nothing is
        created or cut, a torn tail is only reported, appends are refused;
        with `until` it stops reading after that event (time travel).
        """
        if until is not None and not read_only:
            raise ValueError("until= is for read-only opens (a writer must see its whole log)")
        cfg = config or LogConfig()
        data = DataDir.open_existing(data_dir) if read_only else DataDir.open(data_dir)
        # The manifest before the listing: a live node (read here by `apollo11 replay`)
        # may rotate in between, and then the listing holds more than the manifest names,
        # never less.
        manifest = manifests.load(data.log_dir)
        segments = _list_segments(data.log_dir)
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
            _create_file(path)
            data.fsync_log_dir()
            segments = [Segment(base_id, path, 0, base_id - 1, [(base_id, 0)], index_loaded=True)]
        last_term = _recover(
            segments, replay_from, hint, hint_term, on_events, read_only, until, manifest
        )
        return cls(
            data,
            segments,
            config=cfg,
            instance_id=instance_id,
            last_term=last_term,
            clock=clock or _now_ms,
            read_only=read_only,
            manifest=manifest,
        )

    # ------------------------------------------------------------- properties

    @property
    def data_dir(self) -> DataDir:
        return self._data

    @property
    def durable_id(self) -> int:
        """Id of the last durable event (0 when the log is empty)."""
        return self._durable_id

    @property
    def next_id(self) -> int:
        return self._next_id

    @property
    def first_id(self) -> int:
        """Id of the first event this log still holds."""
        return self._segments[0].first_id

    @property
    def last_term(self) -> int:
        return self._last_term

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    def position(self) -> Position:
        """Position just after the last durable record."""
        tail = self._segments[-1]
        return Position(self._durable_id, tail.first_id, tail.size)

    def drop_before(self, event_id: int) -> int:
        """Delete sealed segments holding only events before `event_id`; how many went.

        For log retention: what a snapshot covers need not stay on disk, unless
        the history is wanted for audits and time travel (the default keeps it).
        """
        dropped = 0
        self._forget_recent()
        while len(self._segments) > 1 and self._segments[0].last_id < event_id:
            seg = self._segments.pop(0)
            for path in (seg.path, seg.index_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
            dropped += 1
        if dropped:
            self._data.fsync_log_dir()
        return dropped

    def position_after(self, event_id: int) -> Position:
        """Where the record after durable event `event_id` starts."""
        if event_id >= self._durable_id:
            return self.position()
        self._check_range(event_id + 1)
        seg = self._segments[self._segment_for(event_id + 1)]
        return Position(event_id, seg.first_id, seg.locate(event_id + 1))

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` with every durable batch, before its appenders resume."""
        self._listeners.append(listener)

    # ------------------------------------------------------------- appending

    def _check_writable(self) -> None:
        # Appends call this only when a cheap check failed; read-only logs have
        # _failed set (see __init__), so they land here too.
        if self.read_only:
            raise LogError("this event log was opened read-only")
        if self._closed:
            raise LogClosedError("the event log is closed")
        if self._failed is not None:
            raise LogFailedError(
                f"the event log failed and refuses appends until it is reopened: {self._failed}"
            )
        if self.term < self._last_term:
            raise StaleTermError(
                f"this node writes in term {self.term} but the log already holds term "
                f"{self._last_term}; a newer primary exists"
            )

    def _encode(
        self,
        event_type: EventType,
        task_id: str,
        step_name: str,
        payload: Mapping[str, Any] | None,
        attempt: int,
        event_id: int,
        now: int,
    ) -> tuple[Event, bytes]:
        if event_type.__class__ is not EventType:
            raise InvalidEventError(f"unknown event type {event_type!r}")
        term = self.term
        data = encode_record(
            event_id,
            term,
            self.instance_id,
            task_id,
            step_name,
            event_type,
            encode_payload(
                payload,
                self.config.submit_max_bytes
                if event_type is EventType.TASK_SUBMITTED
                else self.config.payload_max_bytes,
                "submit_max_bytes"
                if event_type is EventType.TASK_SUBMITTED
                else "payload_max_bytes",
            ),
            now,
            attempt,
        )
        # The event keeps its own copy: a caller mutating its dict later changes no fact.
        event = _new_event(
            Event,
            (
                event_id,
                term,
                self.instance_id,
                task_id,
                step_name,
                event_type,
                dict(payload) if payload else {},
                now,
                attempt,
            ),
        )
        return event, data

    async def append(
        self,
        event_type: EventType,
        task_id: str,
        step_name: str = "",
        payload: Mapping[str, Any] | None = None,
        attempt: int = 0,
    ) -> Event:
        """Append one event; return it once it is durable."""
        if self._closed or self._failed is not None or self.term < self._last_term:
            self._check_writable()
        event, data = self._encode(
            event_type, task_id, step_name, payload, attempt, self._next_id, self._clock()
        )
        await self._durable(self._admit(data, event))
        return event

    async def append_many(self, drafts: Sequence[Draft]) -> list[Event]:
        """Append several events as one unit of validation; return them once durable.

        Either every draft is valid and all are staged together, or none is.
        """
        self._check_writable()
        now = self._clock()
        encoded = [self._encode(*d, self._next_id + i, now) for i, d in enumerate(drafts)]
        if not encoded:
            return []
        await self._stage_all(encoded)
        return [e for e, _ in encoded]

    async def append_raw(self, data: bytes) -> list[Event]:
        """Append whole records received from the primary, byte for byte.

        Every CRC is checked, ids must continue this log exactly, and terms
        must not go down. Returns the decoded events once durable.
        """
        events, durable = self._stage_raw(data)
        await durable
        return events

    def stage_raw(self, data: bytes) -> asyncio.Future[None]:
        """`append_raw` in two halves: check and stage now (errors raise here), and
        return a future that is done once the records are durable. A standby stages
        the next batch while the previous one is still being written, so one fsync
        can cover both."""
        return self._stage_raw(data)[1]

    def _stage_raw(self, data: bytes) -> tuple[list[Event], asyncio.Future[None]]:
        term_now = self.term
        self.term = self._last_term  # raw records carry their own terms
        try:
            self._check_writable()
        finally:
            self.term = term_now
        where = "<replicated batch>"
        decoded = decode_batch(
            data, 0, base=0, path=where, expect=self._next_id, term=self._last_term
        )
        if decoded.error is not None:
            reason = decoded.error.reason
            if reason.startswith("expected event"):
                raise LogError(f"replicated batch does not continue this log: {reason}")
            if " has term " in reason:
                raise StaleTermError(f"replicated batch from a deposed primary: {reason}")
            raise decoded.error
        if decoded.end != len(data):
            raise CorruptLogError(
                "replicated batch ends inside a record", path=where, offset=decoded.end
            )
        staged: list[tuple[Event, bytes]] = []
        off = 0
        for event in decoded.events:
            end = off + 8 + FRAME.unpack_from(data, off)[1]
            staged.append((event, data[off:end]))
            off = end
        term = decoded.term
        self.term = max(self.term, term)
        events = [e for e, _ in staged]
        if not staged:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return events, done
        batch: _Batch | None = None
        for event, rec in staged:
            batch = self._admit(rec, event)
        assert batch is not None
        batch.replicated = True
        fut = self._loop.create_future()
        batch.waiters.append(fut)
        return events, fut

    async def _stage_all(self, records: Sequence[tuple[Event, bytes]]) -> None:
        """Stage records into the forming batch together; return once they are durable."""
        batch: _Batch | None = None
        for event, data in records:
            batch = self._admit(data, event)
        assert batch is not None
        await self._durable(batch)

    async def _durable(self, batch: _Batch) -> None:
        # Each appender awaits its own future: cancelling one appender must not
        # cancel a future the whole batch shares.
        fut = self._loop.create_future()
        batch.waiters.append(fut)
        await fut

    def _admit(self, data: bytes, event: Event) -> _Batch:
        """Add one encoded record to the batch being formed (no I/O here)."""
        batch = self._batch
        if batch is None:
            if self._writer is None:
                self._start()
            batch = self._batch = _Batch(self._tail_id)
            assert self._wake is not None
            self._wake.set()
        eid = event.event_id
        # Rotation is decided per record from sizes alone, so a replica that
        # receives the same records cuts its segments at the same places.
        if self._tail_size >= self.config.segment_max_bytes:
            self._tail_id = eid
            self._tail_size = 0
            self._next_index_at = 0
            batch.parts.append(_Part(True, eid))
        part = batch.parts[-1]
        size = self._tail_size
        if size >= self._next_index_at and size:
            self._next_index_at = size + INDEX_INTERVAL
            part.index.append((eid, size))
        part.chunks.append(data)
        self._tail_size += len(data)
        self._next_id = eid + 1
        if event.term > self._last_term:
            self._last_term = event.term
        batch.events.append(event)
        batch.nbytes += len(data)
        return batch

    # ---------------------------------------------------------------- writer

    def _start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wake is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch = self._batch
            if batch is None:
                if self._closed:
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
                    # hops cost more than the write (0.2-0.5 ms here), and on a busy
                    # machine each hop waits for a CPU. A slow write sends the next
                    # one back to the thread until writes are fast again; so do a big
                    # batch (catching up) and a segment rotation (two more fsyncs).
                    self._write_batch(batch.parts)
                else:
                    await loop.run_in_executor(self._io, self._write_batch, batch.parts)
            except BaseException as e:
                self._failed = e
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
            if rotated or started - self._manifest_at >= self.config.manifest_interval_s:
                self.mark_end("segment rotation" if rotated else "periodic")
            try:
                for listener in self._listeners:
                    listener(batch.events)
            except Exception as e:
                # The batch is durable, but what depends on it (the state) could not
                # follow: stop here rather than acknowledge on top of a broken state.
                self._failed = e
                log.exception("a listener of the event log failed; refusing further appends")
                _resolve(batch.waiters, LogFailedError(f"durable, but not applied: {e}"))
                self._fail_pending()
                self._wake_durable_waiters()
                return
            _resolve(batch.waiters, None)
            self._wake_durable_waiters()
            if self._batch is not None:
                self._wake.set()

    def _wake_durable_waiters(self) -> None:
        for waiters in (self._durable_waiters, self._written_waiters):
            if waiters is not None and not waiters.done():
                waiters.set_result(None)
        self._durable_waiters = self._written_waiters = None

    def _fail_pending(self) -> None:
        if self._batch is not None:
            _resolve(self._batch.waiters, LogFailedError(f"write failed: {self._failed}"))
            self._batch = None

    def _write_batch(self, parts: list[_Part]) -> None:
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
                self._fd = _open_append(path, create=True)
                self._idx_fd = _open_append(path[:-4] + ".idx", create=True)
                if sync:
                    self._data.fsync_log_dir()
            _write_all(self._fd, part.data)
            if part.index:
                _write_all(self._idx_fd, b"".join(INDEX_ENTRY.pack(*e) for e in part.index))
        if sync:
            os.fdatasync(self._fd)
        self._last_write_s = time.perf_counter() - started

    def _land(self, batch: _Batch) -> bool:
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
        self._durable_id = events[-1].event_id
        return rotated

    # -------------------------------------------------------------- manifest

    def mark_end(self, reason: str) -> None:
        """Record the durable end in the manifest, on the manifest's thread (no wait).

        Called at rotations and now and then by the writer, at snapshots by the store.
        While one write is under way, the next waits for it and takes the end as it
        is then: writes never pile up, and a newer end never loses to an older one.
        """
        if self._manifest_io is None or self._closed or self._failed is not None:
            return
        self._manifest_at = time.perf_counter()
        if self._manifest_busy is not None:
            self._manifest_again = reason
            return
        m = self._end_manifest(reason)
        if self.manifest is not None and m.segments == self.manifest.segments:
            return  # nothing new since the last one
        fut = asyncio.get_running_loop().run_in_executor(self._manifest_io, self._write_manifest, m)
        self._manifest_busy = fut
        fut.add_done_callback(self._manifest_written)

    def _end_manifest(self, reason: str) -> Manifest:
        """The durable end now (loop thread: sizes are those of landed batches)."""
        tail = self._segments[-1]
        # one entry per segment, once a second at most: 100 MB segments keep this short
        return Manifest(
            event_id=self._durable_id,
            segment_id=tail.first_id,
            offset=tail.size,
            segments=tuple((s.first_id, s.size) for s in self._segments),
            written_ms=_now_ms(),
            reason=reason,
        )

    def _write_manifest(self, m: Manifest) -> None:
        """Runs on the manifest thread (or at close)."""
        manifests.write(self._data.log_dir, m, sync=self.config.fsync is FsyncPolicy.ALWAYS)
        self.manifest = m
        metrics.LOG_MANIFEST_WRITES.inc()

    def _manifest_written(self, fut: asyncio.Future[None]) -> None:
        self._manifest_busy = None
        if not fut.cancelled() and (exc := fut.exception()) is not None:
            metrics.LOG_MANIFEST_FAILURES.inc()
            log.error(
                "event log: could not write the manifest (appends go on; a lost tail "
                "would be detected only up to the last manifest written): %s",
                exc,
            )
        again, self._manifest_again = self._manifest_again, None
        if again is not None:
            self.mark_end(again)

    async def wait_manifest(self) -> None:
        """Wait until no manifest write is under way (tests, and close)."""
        while self._manifest_busy is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._manifest_busy)
            await asyncio.sleep(0)  # let its done-callback start the next one

    def _close_manifest(self) -> None:
        """At a clean close: the exact end, synchronously; then no more writes."""
        io, self._manifest_io = self._manifest_io, None
        if io is None:
            return
        io.shutdown(wait=True)
        if self._failed is not None:
            return  # the last manifest stays: it lags, which is always safe
        try:
            self._write_manifest(self._end_manifest("a clean shutdown"))
        except OSError as e:
            metrics.LOG_MANIFEST_FAILURES.inc()
            log.error("event log: could not write the manifest at close: %s", e)

    def _publish_ahead(self, batch: _Batch) -> None:
        """Make a batch's records readable by followers as it goes to the writer.

        Raft's parallel write: a standby stores them while this node does, so a
        synchronous write waits for the slower of the two, not for both in turn.
        A standby may then hold records this node never makes durable (it crashes
        first): those were never acknowledged, and the election prefers the most
        complete log, or the rejoin quarantines them if this node comes back first.
        """
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
            self._remember(_Recent(events[i].event_id, last, part.first_id, size, part.data))
            i += n
        self._written_id = events[-1].event_id
        waiters, self._written_waiters = self._written_waiters, None
        if waiters is not None and not waiters.done():
            waiters.set_result(None)

    def _remember(self, run: _Recent) -> None:
        recent = self._recent
        recent[run.first_id] = run
        self._recent_bytes += len(run.data)
        while self._recent_bytes > self.config.recent_bytes and recent:
            oldest = recent.pop(next(iter(recent)))
            self._recent_bytes -= len(oldest.data)

    def _read_recent(self, from_id: int, max_bytes: int, limit: int) -> RawBatch | None:
        """Runs starting at `from_id` and ending by `limit`, from memory, within one
        segment; None if not there."""
        run = self._recent.get(from_id)
        if run is None or run.last_id > limit:
            return None
        if len(run.data) > max_bytes and run.last_id > run.first_id:
            return None  # fewer records than the run is asked for: cut it from disk
        parts = [run.data]
        size = len(run.data)
        last = run
        while size < max_bytes:
            nxt = self._recent.get(last.last_id + 1)
            if nxt is None or nxt.segment_id != run.segment_id or nxt.last_id > limit:
                break
            parts.append(nxt.data)
            size += len(nxt.data)
            last = nxt
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        return RawBatch(from_id, last.last_id, data, run.segment_id, last.end_offset)

    def _forget_recent(self) -> None:
        self._recent.clear()
        self._recent_bytes = 0

    # --------------------------------------------------------------- reading

    def _segment_for(self, event_id: int) -> int:
        """Index into self._segments of the segment holding `event_id`."""
        segs = self._segments
        lo, hi = 0, len(segs) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if segs[mid].first_id <= event_id:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _check_range(self, from_id: int) -> None:
        if from_id < self.first_id:
            raise LogError(
                f"event {from_id} is no longer in this log (it starts at {self.first_id})"
            )

    def read_raw(
        self,
        from_id: int,
        max_bytes: int = 1024 * 1024,
        at: tuple[int, int] | None = None,
        ahead: bool = False,
    ) -> RawBatch:
        """Whole durable records from `from_id`, about `max_bytes` of them (at least one).

        Stays within one segment; call again from `last_id + 1` for more, with
        `at=(batch.segment_id, batch.end_offset)` so the record need not be
        located again (a follower reading batch after batch). Every record's
        CRC is checked before it leaves: a corrupt record is refused here
        rather than shipped. `ahead`: also records being written, not yet durable.
        """
        self._check_range(from_id)
        limit = self._written_id if ahead and self._failed is None else self._durable_id
        if from_id > limit:
            return RawBatch(from_id, from_id - 1, b"", *(at or (0, 0)))
        cached = self._read_recent(from_id, max_bytes, limit)
        if cached is not None:
            return cached
        if from_id > self._durable_id:  # not in memory any more: from disk, once durable
            return RawBatch(from_id, from_id - 1, b"", *(at or (0, 0)))
        seg = self._segments[self._segment_for(from_id)]
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
                            f"the record of event {from_id} runs past the durable end of its "
                            f"segment",
                            path=seg.path,
                            offset=start,
                        )
                    data = bigger
                    view = memoryview(data)
                    continue
                break
            if info.event_id != last + 1:
                if off == 0 and at is not None:
                    return self.read_raw(from_id, max_bytes)  # a stale hint: locate it
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

    def read(self, from_id: int = 1, to_id: int | None = None) -> Iterator[Event]:
        """Durable events with ids in [from_id, to_id], checked and decoded, in order."""
        from_id = max(from_id, self.first_id)
        end = self._durable_id if to_id is None else min(to_id, self._durable_id)
        i = self._segment_for(from_id)
        next_id = from_id
        while next_id <= end and i < len(self._segments):
            seg = self._segments[i]
            if next_id > seg.last_id:
                i += 1
                continue
            for events in _scan(seg, seg.locate(next_id), next_id, min(end, seg.last_id)):
                yield from events
                next_id = events[-1].event_id + 1
            if next_id <= min(end, seg.last_id):
                raise CorruptLogError(
                    f"segment ends before event {next_id}", path=seg.path, offset=seg.size
                )
            i += 1

    def read_ids(self, ids: Sequence[int]) -> list[Event]:
        """The durable events with these ids (ascending), checked and decoded; ids the
        log no longer keeps (retention) are skipped, as read() skips them.

        Each is found through the sparse index; a small window read there also
        serves the ids just after it. Only the wanted records are decoded (the
        others are stepped over by their length), so a task's history costs
        about one lookup per event, not a scan of every event in between.
        """
        out: list[Event] = []
        end = self._durable_id
        k = 0
        while k < len(ids):
            eid = ids[k]
            if eid > end:
                break
            if eid < self.first_id:  # dropped by retention, as read() skips them
                k += 1
                continue
            seg = self._segments[self._segment_for(eid)]
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

    async def wait_durable(self, after_id: int) -> None:
        """Wait until an event after `after_id` is durable (wrap in asyncio.timeout)."""
        while self._durable_id <= after_id:
            if self._closed or self._failed is not None:
                raise LogClosedError("the event log is closed")
            if self._durable_waiters is None:
                self._durable_waiters = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._durable_waiters)

    @property
    def writable(self) -> bool:
        """Neither closed nor failed."""
        return not self._closed and self._failed is None

    @property
    def failure(self) -> BaseException | None:
        """What made this log refuse appends (a failed write or fsync, a failed
        listener); None while it is writable, closed, or opened read-only."""
        return None if self.read_only else self._failed

    @property
    def written_id(self) -> int:
        """The last event handed to the writer (durable or about to be)."""
        return self._written_id

    async def wait_written(self, after_id: int) -> None:
        """Wait until an event after `after_id` is handed to the writer, or durable
        (wrap in asyncio.timeout)."""
        while self._written_id <= after_id:  # never below the durable id
            if self._closed or self._failed is not None:
                raise LogClosedError("the event log is closed")
            if self._written_waiters is None:
                self._written_waiters = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._written_waiters)

    # ------------------------------------------------------------- lifecycle

    async def flush(self) -> None:
        """Wait for everything staged so far to be durable."""
        if self._batch is not None:
            await self._durable(self._batch)

    async def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(LogError):
            await self.flush()
        self._closed = True
        if self._wake is not None:
            self._wake.set()
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer
        self._wake_durable_waiters()
        self._io.shutdown(wait=True)
        await self.wait_manifest()
        self._close_manifest()
        os.close(self._fd)
        os.close(self._idx_fd)

    def close_sync(self) -> None:
        """Close a log that never started writing (offline tools)."""
        if self._writer is not None:
            raise LogError("close_sync() on a log with a running writer; await close()")
        self._closed = True
        self._io.shutdown(wait=True)
        self._close_manifest()
        self._close_fds()

    def _close_fds(self) -> None:
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


# ---------------------------------------------------------------- recovery


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _open_append(path: str, create: bool = False) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_CREAT
    if create:
        flags |= os.O_EXCL
    return os.open(path, flags, 0o644)


def _create_file(path: str) -> None:
    os.close(_open_append(path, create=True))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _next_index_at(seg: Segment) -> int:
    if not seg.size:
        return 0
    return seg.index[-1][1] + INDEX_INTERVAL if seg.index else INDEX_INTERVAL


def _list_segments(log_dir: str) -> list[Segment]:
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
        # A sealed segment ends where the next begins; the tail's end is found by scanning.
        last = found[i + 1][0] - 1 if i + 1 < len(found) else first - 1
        segments.append(Segment(first, path, size, last))
    return segments


class _Walk:
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
            chunk = _pread(path, self.offset, min(want, self.end - self.offset))
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


def _pread(path: str, offset: int, length: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


def _scan(seg: Segment, offset: int, first_id: int, last_id: int) -> Iterator[list[Event]]:
    """Checked events first_id..last_id of the durable part of a segment."""
    # A few events need a few KiB, not a 4 MiB read and decode; long reads grow to it.
    first_read = min(READ_CHUNK, max(16 * 1024, (last_id - first_id + 1) * 512))
    walk = _Walk(seg, offset, seg.size, first_id, 0, first_read)
    for events in walk:
        if events[-1].event_id >= last_id:
            yield events[: last_id - events[0].event_id + 1]
            return
        yield events
    if walk.error is not None:
        raise walk.error


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
        _rewrite_index(tail)
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
        walk = _Walk(seg, offset, file_size, expect, term)
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
    rest = _pread(path, bad_at + 1, file_size - bad_at - 1) if file_size > bad_at + 1 else b""
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
    walk = _Walk(seg, 0, seg.size, seg.first_id, 0)
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
    with open(seg.path, "r+b") as f:
        f.truncate(at)
        os.fsync(f.fileno())


def _rewrite_index(seg: Segment) -> None:
    """Drop index entries that point past a cut tail (derived data, no fsync)."""
    with open(seg.index_path, "wb") as f:
        f.write(b"".join(INDEX_ENTRY.pack(*e) for e in seg.index if e[1] > 0))


# ------------------------------------------------------------ rejoining


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
    for seg in _list_segments(data.log_dir):
        if seg.first_id > durable.segment_id:
            cut += seg.size
            os.unlink(seg.path)
        elif seg.first_id == durable.segment_id and seg.size > durable.offset:
            cut += seg.size - durable.offset
            with open(seg.path, "r+b") as f:
                f.truncate(durable.offset)
                os.fsync(f.fileno())
        else:
            continue
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.index_path)  # derived; rebuilt on demand
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
    log_ = EventLog.open(data.root, read_only=True, replay_from=None)
    try:
        segments = list(log_.segments)
        last = log_.durable_id
    finally:
        log_.close_sync()
    if keep_through >= last:
        return 0
    if keep_through < segments[0].first_id - 1:
        raise NothingInCommonError(
            f"nothing to keep: the log starts at {segments[0].first_id}, after event "
            f"{keep_through}; start this node from an empty data directory"
        )
    os.makedirs(os.path.dirname(quarantine), exist_ok=True)
    cut = last - keep_through
    with open(quarantine, "ab") as q:
        for seg in segments:
            if seg.last_id <= keep_through:
                continue
            if seg.first_id > keep_through:
                q.write(_pread(seg.path, 0, seg.size))
                continue
            at = seg.locate(keep_through + 1)
            q.write(_pread(seg.path, at, seg.size - at))
        q.flush()
        os.fsync(q.fileno())
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
            written_ms=_now_ms(),
            reason=f"a cut of the divergent tail after event {keep_through}",
        ),
    )
    for seg in segments:
        if seg.last_id <= keep_through:
            continue
        if seg.first_id > keep_through and seg is not segments[0]:
            os.unlink(seg.path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seg.index_path)
            continue
        at = 0 if seg.first_id > keep_through else seg.locate(keep_through + 1)
        with open(seg.path, "r+b") as f:
            f.truncate(at)
            os.fsync(f.fileno())
        with contextlib.suppress(FileNotFoundError):
            os.unlink(seg.index_path)  # derived; rebuilt on demand
    data.fsync_log_dir()
    return cut
