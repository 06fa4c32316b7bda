"""The append-only event log of one node: its public face.

One asyncio loop owns an EventLog. What it does is done by one module each;
this class checks and encodes what callers append, and hands on:

- recovery.py: opening, the manifest checks, the scan, a torn tail cut;
- writer.py: the group commit, the only place log bytes are written and
  fsynced, and the order of a batch's effects (publish ahead, write and
  fdatasync, land, apply, observers, appenders, commit gate);
- ship.py: what standbys may be sent ahead of durability, and the newest
  records kept in memory for them;
- reader.py: checked records from the segment files, by range, by id, raw;
- cut.py: retention and the cuts of a closed log (after a failed write, a
  divergent tail).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from apollo11.scheduler.errors import (
    CorruptLogError,
    InvalidEventError,
    LogClosedError,
    LogError,
    LogFailedError,
    StaleTermError,
)
from apollo11.scheduler.log import cut, reader
from apollo11.scheduler.log.config import DEFAULT_SEGMENT_MAX_BYTES, FsyncPolicy, LogConfig
from apollo11.scheduler.log.cut import NothingInCommonError, cut_after, cut_unsynced
from apollo11.scheduler.log.datadir import DataDir
from apollo11.scheduler.log.manifest import Manifest
from apollo11.scheduler.log.reader import ID_READ_WINDOW
from apollo11.scheduler.log.record import (
    FRAME,
    VALUE_LEVELS,
    Event,
    EventType,
    decode_batch,
    encode_payload,
    encode_record,
)
from apollo11.scheduler.log.recovery import recover
from apollo11.scheduler.log.segment import Position, Segment
from apollo11.scheduler.log.ship import RawBatch, ShipAhead
from apollo11.scheduler.log.writer import (
    INLINE_WRITE_MAX_BYTES,
    INLINE_WRITE_MAX_S,
    Listener,
    Writer,
    now_ms,
)

# Names this module has always offered: `from apollo11.scheduler.log.eventlog import ...` works on.
__all__ = [
    "DEFAULT_SEGMENT_MAX_BYTES",
    "ID_READ_WINDOW",
    "INLINE_WRITE_MAX_BYTES",
    "INLINE_WRITE_MAX_S",
    "Draft",
    "EventLog",
    "FsyncPolicy",
    "Listener",
    "LogConfig",
    "NothingInCommonError",
    "Position",
    "RawBatch",
    "cut_after",
    "cut_unsynced",
]

_new_event = tuple.__new__

# The events that carry a submission's input, bounded by submit_max_bytes rather than
# payload_max_bytes: a task's, and a schedule's (created or updated: the input every
# task it fires is submitted with), and a debounced one's (the input that replaces
# a waiting task's).
_SUBMISSIONS = frozenset((EventType.TASK_SUBMITTED, EventType.SCHEDULE, EventType.DEBOUNCED))


class Draft(NamedTuple):
    """What a caller says about an event; the log adds id, term, node and time."""

    event_type: EventType
    task_id: str
    step_name: str = ""
    payload: Mapping[str, Any] | None = None
    attempt: int = 0


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
        self._segments = segments  # shared with the writer, which appends to it
        self.config = config
        self.instance_id = instance_id
        self._clock = clock
        self.term = last_term  # term stamped on new events; the node raises it
        self._ship = ShipAhead(segments[-1].last_id, config.recent_bytes)
        self._writer = Writer(
            data,
            segments,
            config=config,
            ship=self._ship,
            last_term=last_term,
            read_only=read_only,
            manifest=manifest,
        )

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
        found = recover(
            data_dir,
            replay_from=replay_from,
            hint=hint,
            hint_term=hint_term,
            on_events=on_events,
            base_id=base_id,
            read_only=read_only,
            until=until,
        )
        return cls(
            found.data,
            found.segments,
            config=cfg,
            instance_id=instance_id,
            last_term=found.last_term,
            clock=clock or now_ms,
            read_only=read_only,
            manifest=found.manifest,
        )

    # ------------------------------------------------------------- properties

    @property
    def data_dir(self) -> DataDir:
        return self._data

    @property
    def durable_id(self) -> int:
        """Id of the last durable event (0 when the log is empty)."""
        return self._writer.durable_id

    @property
    def next_id(self) -> int:
        return self._writer.next_id

    @property
    def writing(self) -> bool:
        """Are events appended (or, on a standby, staged) and not yet durable?"""
        return self._writer.next_id - 1 > self._writer.durable_id

    @property
    def first_id(self) -> int:
        """Id of the first event this log still holds."""
        return self._segments[0].first_id

    @property
    def last_term(self) -> int:
        return self._writer.last_term

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    @property
    def manifest(self) -> Manifest | None:
        """The last manifest read or written."""
        return self._writer.manifest.manifest

    @property
    def writable(self) -> bool:
        """Neither closed nor failed."""
        return self._writer.writable

    @property
    def failure(self) -> BaseException | None:
        """What made this log refuse appends (a failed write or fsync, a failed
        listener); None while it is writable, closed, or opened read-only."""
        return None if self.read_only else self._writer.failed

    @property
    def written_id(self) -> int:
        """The last event handed to the writer (durable or about to be)."""
        return self._ship.written_id

    def position(self) -> Position:
        """Position just after the last durable record."""
        tail = self._segments[-1]
        return Position(self._writer.durable_id, tail.first_id, tail.size)

    def position_after(self, event_id: int) -> Position:
        """Where the record after durable event `event_id` starts."""
        if event_id >= self._writer.durable_id:
            return self.position()
        self._check_range(event_id + 1)
        seg = self._segments[reader.segment_for(self._segments, event_id + 1)]
        return Position(event_id, seg.first_id, seg.locate(event_id + 1))

    def drop_before(self, event_id: int) -> int:
        """Delete sealed segments holding only events before `event_id`; how many went.

        For log retention: what a snapshot covers need not stay on disk, unless
        the history is wanted for audits and time travel (the default keeps it).
        """
        self._ship.forget()
        return cut.drop_before(self._data, self._segments, event_id)

    def add_listener(self, listener: Listener) -> None:
        """Call `listener` with every durable batch, before its appenders resume."""
        self._writer.listeners.append(listener)

    # ------------------------------------------------------------- appending

    def _check_writable(self) -> None:
        # Appends call this only when a cheap check failed; read-only logs have
        # the writer's `failed` set, so they land here too.
        w = self._writer
        if self.read_only:
            raise LogError("this event log was opened read-only")
        if w.closed:
            raise LogClosedError("the event log is closed")
        if w.failed is not None:
            raise LogFailedError(
                f"the event log failed and refuses appends until it is reopened: {w.failed}"
            )
        if self.term < w.last_term:
            raise StaleTermError(
                f"this node writes in term {self.term} but the log already holds term "
                f"{w.last_term}; a newer primary exists"
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
                if event_type in _SUBMISSIONS
                else self.config.payload_max_bytes,
                "submit_max_bytes" if event_type in _SUBMISSIONS else "payload_max_bytes",
                self.config.json_max_depth,
                VALUE_LEVELS[event_type],
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
        w = self._writer
        if w.closed or w.failed is not None or self.term < w.last_term:
            self._check_writable()
        event, data = self._encode(
            event_type, task_id, step_name, payload, attempt, w.next_id, self._clock()
        )
        await w.durable(w.admit(data, event))
        return event

    async def append_many(self, drafts: Sequence[Draft]) -> list[Event]:
        """Append several events as one unit of validation; return them once durable.

        Either every draft is valid and all are staged together, or none is.
        """
        self._check_writable()
        w = self._writer
        now = self._clock()
        encoded = [self._encode(*d, w.next_id + i, now) for i, d in enumerate(drafts)]
        if not encoded:
            return []
        await w.durable(w.stage(encoded))
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
        w = self._writer
        term_now = self.term
        self.term = w.last_term  # raw records carry their own terms
        try:
            self._check_writable()
        finally:
            self.term = term_now
        where = "<replicated batch>"
        decoded = decode_batch(data, 0, base=0, path=where, expect=w.next_id, term=w.last_term)
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
        self.term = max(self.term, decoded.term)
        events = [e for e, _ in staged]
        if not staged:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return events, done
        batch = w.stage(staged)
        batch.replicated = True
        return events, w.waiter(batch)

    # --------------------------------------------------------------- reading

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
        durable = self._writer.durable_id
        limit = self._ship.written_id if ahead and self._writer.failed is None else durable
        if from_id > limit:
            return RawBatch(from_id, from_id - 1, b"", *(at or (0, 0)))
        cached = self._ship.read(from_id, max_bytes, limit)
        if cached is not None:
            return cached
        if from_id > durable:  # not in memory any more: from disk, once durable
            return RawBatch(from_id, from_id - 1, b"", *(at or (0, 0)))
        seg = self._segments[reader.segment_for(self._segments, from_id)]
        return reader.raw(seg, from_id, max_bytes, at)

    def read(self, from_id: int = 1, to_id: int | None = None) -> Iterator[Event]:
        """Durable events with ids in [from_id, to_id], checked and decoded, in order."""
        # A generator here too: the range is taken when iteration starts, as it always was.
        from_id = max(from_id, self.first_id)
        durable = self._writer.durable_id
        yield from reader.events(
            self._segments, from_id, durable if to_id is None else min(to_id, durable)
        )

    def read_ids(self, ids: Sequence[int]) -> list[Event]:
        """The durable events with these ids (ascending), checked and decoded; ids the
        log no longer keeps (retention) are skipped, as read() skips them.

        Each is found through the sparse index; a small window read there also
        serves the ids just after it, so a task's history costs about one lookup
        per event, not a scan of every event in between.
        """
        return reader.by_ids(self._segments, ids, self._writer.durable_id)

    async def wait_durable(self, after_id: int) -> None:
        """Wait until an event after `after_id` is durable (wrap in asyncio.timeout)."""
        await self._writer.wait_durable(after_id)

    async def wait_written(self, after_id: int) -> None:
        """Wait until an event after `after_id` is handed to the writer, or durable
        (wrap in asyncio.timeout)."""
        await self._ship.wait(after_id, lambda: self._writer.writable)

    # -------------------------------------------------------------- manifest

    def mark_end(self, reason: str) -> None:
        """Record the durable end in the manifest, on the manifest's thread (no wait).

        Called at rotations and now and then by the writer, at snapshots by the store.
        """
        self._writer.manifest.mark(reason)

    async def wait_manifest(self) -> None:
        """Wait until no manifest write is under way (tests, and close)."""
        await self._writer.manifest.wait()

    # ------------------------------------------------------------- lifecycle

    async def flush(self) -> None:
        """Wait for everything staged so far to be durable."""
        await self._writer.flush()

    async def close(self) -> None:
        await self._writer.close()

    def close_sync(self) -> None:
        """Close a log that never started writing (offline tools)."""
        self._writer.close_sync()
