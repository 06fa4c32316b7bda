"""The store: the event log and the state it implies, kept in step.

Recovery = newest valid snapshot + replay of the events after its
watermark. After that every durable batch is applied to the state before
its appenders resume, so whoever awaited an append sees its effect, and a
snapshot is taken every `snapshot_interval` events without stalling appends.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import gc
import itertools
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from apollo11.scheduler import metrics
from apollo11.scheduler.errors import (
    ArchiveLostError,
    HistoryGoneError,
    LogError,
    SnapshotError,
    SnapshotMismatchError,
)
from apollo11.scheduler.log import DataDir, Event, EventLog, EventType, LogConfig, redact_payload
from apollo11.scheduler.state.archive import (
    Archive,
    Chunk,
    ChunkDamaged,
    chunk_as_of,
    chunk_watermark,
    encode_entry,
    write_chunk,
)
from apollo11.scheduler.state.fold import apply_all, hide_data, redactions_after
from apollo11.scheduler.state.index import State
from apollo11.scheduler.state.model import TaskState
from apollo11.scheduler.state.redactor import Redactor
from apollo11.scheduler.state.snapshot import (
    DEFAULT_INTERVAL,
    DEFAULT_KEEP,
    Capture,
    SnapshotRaced,
    Snapshots,
    Written,
    capture,
)

log = logging.getLogger(__name__)

REBUILD_BATCH = 4096  # events replayed between two yields of the GIL (a chunk rebuild)
EVICT_SLICE = 128  # archived tasks dropped from memory at a time...
EVICT_PAUSE_S = 0.002  # ...with this much of the event loop's time between two...
EVICT_PAUSES_MAX_S = 0.1  # ...or less, so that the pauses of one eviction add up to this


@dataclass(frozen=True, slots=True)
class StoreConfig:
    log: LogConfig = field(default_factory=LogConfig)
    snapshot_interval: int = DEFAULT_INTERVAL
    # and not more often than this: at 12k events/s, a snapshot every 1000 events
    # (each serializing the active tasks that changed) took 15% of the primary's loop
    snapshot_min_interval_s: float = 0.0
    snapshots_keep: int = DEFAULT_KEEP
    # False: delete log segments that the oldest kept snapshot covers (a standby that
    # falls further behind is then sent a snapshot). True keeps the full history.
    keep_all_segments: bool = True

    def __post_init__(self) -> None:
        if self.snapshot_interval < 1:
            raise ValueError(
                f"snapshot_interval must be at least 1 event, got {self.snapshot_interval}"
            )
        if self.snapshot_min_interval_s < 0:
            raise ValueError(
                f"snapshot_min_interval_s must not be negative, got {self.snapshot_min_interval_s}"
            )
        if self.snapshots_keep < 1:
            raise ValueError(f"snapshots_keep must be at least 1, got {self.snapshots_keep}")


@dataclass(frozen=True, slots=True)
class Recovery:
    """How the store came up, for logs and metrics."""

    snapshot: int | None  # watermark used, None for a full replay
    replayed: int  # events applied after it
    seconds: float

    def __str__(self) -> str:
        base = f"snapshot {self.snapshot}" if self.snapshot is not None else "full replay"
        return f"recovered from {base} + {self.replayed} events in {self.seconds * 1000:.1f} ms"


class Store:
    """An EventLog plus its replayed State and its snapshots."""

    def __init__(
        self,
        log_: EventLog,
        state: State,
        snapshots: Snapshots,
        config: StoreConfig,
        recovery: Recovery,
    ) -> None:
        self.log = log_
        self.state = state
        self.snapshots = snapshots
        self.config = config
        self.recovery = recovery
        self._since_snapshot = 0
        self._snapshot_at = -1e9  # monotonic time of the last capture
        self._snapshot_soon = False
        self._closing = False
        self._snapshot_task: asyncio.Future[Written] | None = None
        # (task ids the last snapshot archived, how many were looked at, its watermark)
        self._evicting: tuple[Sequence[str], int, int] | None = None
        self._evict_next: asyncio.Handle | None = None
        self._snap_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="apollo11-snap")
        # chunk rebuilds asked for by reads, one at a time, off the loop
        self._repair_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="apollo11-repair")
        self._repairs: dict[str, asyncio.Future[str]] = {}
        self._observers: list[Callable[[Sequence[Event]], None]] = []
        self.last_snapshot_stall_s = 0.0
        # The first event local retention must keep whatever the snapshots cover: with
        # an archive, the first one its bucket does not hold yet (scheduler/bucket/).
        self.retention_floor: Callable[[], int] | None = None
        # With an archive: has the bucket's copy of a redacted task's records been
        # rewritten (task id, its TASK_REDACTED)? None: there is no bucket.
        self.bucket_redacted: Callable[[str, int], bool] | None = None
        # Where events retention dropped from the disk are read (the archive's bucket);
        # None: nowhere, and the answers say they are gone.
        self.older: OlderHistory | None = None
        log_.add_listener(self._on_durable)
        # a redacted task's records rewritten on this member's disk (state/redactor.py)
        self.redactor = Redactor(log_, state)
        self._observers.append(self.redactor.observe)
        # Redactions no snapshot file or archive chunk here holds the data of any more
        # (task id -> its TASK_REDACTED): each snapshot's write rewrites the older files
        # for the others first (Snapshots.redact), and a redaction asks for one at once.
        # Empty at start: the first snapshot looks again at every redaction the state
        # knows (a crash part way, a directory seeded or restored).
        self._files_redacted: dict[str, int] = {}
        self._redaction_snapshot = bool(state.redacted)

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike[str],
        *,
        config: StoreConfig | None = None,
        instance_id: str = "node",
        clock: Callable[[], int] | None = None,
    ) -> Store:
        with paused_gc():
            store = cls._open(data_dir, config or StoreConfig(), instance_id, clock)
        # Everything recovered lives as long as the node: keep the collector off it.
        gc.freeze()
        store.redactor.catch_up()
        return store

    @classmethod
    def _open(
        cls,
        data_dir: str | os.PathLike[str],
        cfg: StoreConfig,
        instance_id: str,
        clock: Callable[[], int] | None,
    ) -> Store:
        started = time.perf_counter()
        data = DataDir.open(data_dir)
        snapshots = Snapshots(data.snapshot_dir, keep=cfg.snapshots_keep)
        snapshots.discard_leftovers()
        # A standby seeded from a snapshot has no log yet: it starts after the watermark.
        fresh_log = not any(n.endswith(".seg") for n in os.listdir(data.log_dir))
        for info, state in snapshots.candidates():
            counter = _Counter(state)
            try:
                event_log = EventLog.open(
                    data.root,
                    config=cfg.log,
                    instance_id=instance_id,
                    replay_from=info.watermark + 1,
                    hint=info.position,
                    hint_term=info.term,
                    on_events=counter,
                    clock=clock,
                    base_id=info.watermark + 1 if fresh_log else 1,
                )
            except SnapshotMismatchError as e:
                if isinstance(state.archive, Archive):
                    state.archive.close()
                metrics.SNAPSHOT_FALLBACKS.inc()
                log.error(
                    "snapshot %d does not fit the log (%s); trying an older one", info.watermark, e
                )
                continue
            rec = Recovery(info.watermark, counter.n, time.perf_counter() - started)
            log.info("%s", rec)
            return cls(event_log, state, snapshots, cfg, rec)
        state = State()
        counter = _Counter(state)
        event_log = EventLog.open(
            data.root, config=cfg.log, instance_id=instance_id, on_events=counter, clock=clock
        )
        # A log that no longer starts at event 1 (retention cut it behind a snapshot, a
        # standby was seeded from one, a restore) holds only the tail of history:
        # replayed alone it would be a state without the tasks before it, with no error.
        if event_log.first_id > 1 and event_log.durable_id >= event_log.first_id:
            event_log.close_sync()
            raise SnapshotError(
                f"the log starts at event {event_log.first_id} and no snapshot covers the "
                f"events before it"
            )
        rec = Recovery(None, counter.n, time.perf_counter() - started)
        log.info("%s", rec)
        return cls(event_log, state, snapshots, cfg, rec)

    # ------------------------------------------------------------ applying

    def add_observer(self, fn: Callable[[Sequence[Event]], None]) -> None:
        """Called with each durable batch after the state has applied it."""
        self._observers.append(fn)

    def _on_durable(self, events: Sequence[Event]) -> None:
        apply_all(self.state, events)
        for fn in self._observers:
            fn(events)
        self._since_snapshot += len(events)
        if self.redactor.arrived:
            self.redactor.arrived = False
            self._redaction_snapshot = True
        if self._snapshot_task is None and not self._snapshot_soon and self._redaction_snapshot:
            # A redaction is rare, and the files before it hold the data: a snapshot
            # now, whatever the interval, rewrites them (the eviction is cut short)
            self._snapshot_soon = True
            asyncio.get_running_loop().call_soon(self._snapshot_between_batches)
        elif (
            self._since_snapshot >= self.config.snapshot_interval
            and self._snapshot_task is None
            and self._evicting is None  # else the capture evicts the rest at once
            and not self._snapshot_soon
            and time.monotonic() - self._snapshot_at >= self.config.snapshot_min_interval_s
        ):
            # Not here: this runs before the batch's appenders are answered, and a
            # capture takes loop time a standby's ack would wait for (the replication
            # p99). Next turn of the loop, between batches.
            self._snapshot_soon = True
            asyncio.get_running_loop().call_soon(self._snapshot_between_batches)

    def _snapshot_between_batches(self) -> None:
        self._snapshot_soon = False
        if not self._closing and self._snapshot_task is None:
            self.snapshot_now()

    def task_events(
        self, task: TaskState, from_id: int = 0, to_id: int | None = None, limit: int = 0
    ) -> tuple[list[Event], int]:
        """The task's durable events with ids in [from_id, to_id] that this node's disk
        holds, oldest first, at most `limit` (0: all); and the id the next page starts
        at (0: no more). Events retention dropped are left out: `task_page` names them."""
        page = self.task_page(task, from_id, to_id, limit)
        return page.events, page.next_id

    def task_page(
        self, task: TaskState, from_id: int = 0, to_id: int | None = None, limit: int = 0
    ) -> TaskPage:
        """A page of the task's durable events with ids in [from_id, to_id], at most
        `limit` (0: all): those on this node's disk, read, and those retention dropped
        from it, named (`gone`, `gone_span`) for the caller to read elsewhere (the
        bucket, off the loop: nodeview/listing.py)."""
        end = self.log.durable_id if to_id is None else min(to_id, self.log.durable_id)
        start = max(from_id, task.first_event_id)
        first = self.log.first_id
        if task.event_ids is None:  # from an older snapshot: scan its span of the log
            stop = min(end, task.last_event_id)
            span = self.log.read(max(start, first), stop)
            mine = (e for e in span if e.task_id == task.task_id)
            events = self.shown(list(itertools.islice(mine, limit + 1 if limit else None)))
            gone_span = (start, min(stop, first - 1)) if start < first and start <= stop else None
            if limit and len(events) > limit:
                return TaskPage(events[:limit], events[limit].event_id, (), gone_span)
            return TaskPage(events, 0, (), gone_span)
        ids = task.event_ids
        ids = ids[bisect.bisect_left(ids, start) : bisect.bisect_right(ids, end)]
        nxt = 0
        if limit and len(ids) > limit:
            ids, nxt = ids[:limit], ids[limit]
        cut = bisect.bisect_left(ids, first)  # those before it, retention dropped
        return TaskPage(self.shown(self.log.read_ids(ids[cut:])), nxt, tuple(ids[:cut]))

    def shown(self, events: list[Event]) -> list[Event]:
        """`events` as every answer shows them: those of a redacted task, from before
        its TASK_REDACTED, without its input and outputs (scheduler/log/redact.py),
        whether or not the bytes on disk still hold them."""
        redacted = self.state.redacted
        if not redacted:
            return events
        out = []
        for e in events:
            rid = redacted.get(e.task_id)
            if rid is not None and e.event_id < rid:
                e = e._replace(payload=redact_payload(e.payload, rid))
            out.append(e)
        return out

    def snapshots_redacted(self, task_id: str, rid: int) -> bool:
        """Does no snapshot file or archive chunk on this member's disk hold redacted
        task `task_id`'s data (its TASK_REDACTED `rid`) any more?"""
        return self._files_redacted.get(task_id) == rid

    def redaction_settled(self, task_id: str, rid: int) -> bool:
        """Are redacted task `task_id`'s records (TASK_REDACTED `rid`) rewritten here and
        in the bucket, and its snapshots here too: nothing but its state entry still
        knows the data was there."""
        if not self.redactor.rewritten(task_id) or not self.snapshots_redacted(task_id, rid):
            return False
        return self.bucket_redacted is None or self.bucket_redacted(task_id, rid)

    def hide_since(self, past: TaskState | None, at: int) -> TaskState | None:
        """A task's past state (as of event `at`) rebuilt by a full replay, without the
        data a redaction since removed: a snapshot from before the redaction still
        holds it (the fast path, `task_at`, reads the events through `shown`)."""
        rid = None if past is None else self.state.redacted.get(past.task_id)
        if past is not None and rid is not None and rid > at:
            hide_data(past, rid)
        return past

    def task_at(self, task_id: str, at: int) -> TaskState | None:
        """Time travel for one task: its state as of event `at`, from its own events
        up to there, replayed alone (a task's state depends on its events only).
        A few reads, whatever the history; NeedsFullReplay when its events are not
        all at hand (a task from an older snapshot, or events dropped by retention).
        """
        now = self.state.peek(task_id)
        if now is None:
            return None
        if now.event_ids is None:
            raise NeedsFullReplay(f"task {task_id} has no event index")
        if now.event_ids[0] < self.log.first_id:
            raise NeedsFullReplay(f"events of task {task_id} are no longer kept")
        events, _ = self.task_events(now, to_id=at)
        if not events:
            return None  # submitted after `at`
        return apply_all(State(), events).peek(task_id)

    # ------------------------------------------------------ archive repair

    async def lookup(self, task_id: str) -> TaskState | None:
        """The task (memory, then archive), without bringing it back into memory. A
        damaged archive chunk is rebuilt from the log first (off the loop) and the
        read answered from it; ArchiveLostError if the log no longer holds it."""
        try:
            return self.state.peek(task_id)
        except ChunkDamaged as e:
            log.error("reading task %s: %s; rebuilding the chunk from the log", task_id, e)
            await self.repair_chunk(e.path)
        return self.state.peek(task_id)

    async def repair_chunk(self, path: str) -> str:
        """Rebuild the chunk at `path` from the log and put it in the archive."""
        fut = self._repairs.get(path)
        if fut is None:
            loop = asyncio.get_running_loop()
            fut = asyncio.ensure_future(self._repair(loop, path))
            self._repairs[path] = fut
            fut.add_done_callback(lambda _f: self._repairs.pop(path, None))
        return await asyncio.shield(fut)

    async def _repair(self, loop: asyncio.AbstractEventLoop, path: str) -> str:
        chunk, sentence = await loop.run_in_executor(self._repair_io, self.rebuild_chunk, path)
        self.install_chunk(chunk)
        log.warning("%s", sentence)
        return sentence

    def rebuild_chunk(
        self, path: str, pause: Callable[[], bool] = lambda: True
    ) -> tuple[Chunk, str]:
        """Write the chunk at `path` again from the log's events (call off the loop).

        Its tasks are those quiet as of its watermark whose last event came after the
        chunk before it (what a snapshot archives), plus any still readable in the
        damaged file. Newer wins in the archive, so a task's state as of the
        watermark is never wrong here: anything later is in memory or a newer chunk.
        `pause` is called between batches of events (the scrub paces itself there);
        False stops. A file that reads well now (rebuilt meanwhile) is only reopened.
        """
        name = os.path.basename(path)
        archive = self.state.archive
        chunks = list(archive.chunks) if isinstance(archive, Archive) else []
        at = next((i for i, c in enumerate(chunks) if c.name == name), None)
        if at is None:
            raise ArchiveLostError(f"archive chunk {path} is no longer in the archive")
        with contextlib.suppress(ChunkDamaged):
            fresh = Chunk(path)
            try:
                for _ in fresh.verify():
                    pass
                return fresh, f"archive chunk {name} reads well: reopened"
            except ChunkDamaged:
                fresh.close()
        watermark = chunk_watermark(name)
        as_of = chunk_as_of(name)
        if self.log.first_id > 1:
            raise ArchiveLostError(
                f"archive chunk {path} is damaged and cannot be rebuilt: the log starts at "
                f"event {self.log.first_id} (log_retention, or a standby seeded from a "
                f"snapshot), and the chunk holds tasks as of "
                f"event {watermark}; copy the chunk from a replica's snapshots/ directory"
            )
        before = chunk_watermark(chunks[at - 1].name) if at else 0
        readable: set[str] = set()
        with contextlib.suppress(ChunkDamaged):
            for task_id, _ in chunks[at].entries():
                readable.add(task_id)
        state = State()
        batch: list[Event] = []
        try:
            for event in self.log.read(1, as_of):
                batch.append(event)
                if len(batch) >= REBUILD_BATCH:
                    apply_all(state, batch)
                    batch = []
                    if not pause():
                        raise ArchiveLostError(f"rebuilding archive chunk {path}: stopped")
            apply_all(state, batch)
        except LogError as e:
            raise ArchiveLostError(
                f"archive chunk {path} is damaged and cannot be rebuilt: reading the log "
                f"up to event {as_of} failed: {e}"
            ) from e
        # A chunk rewritten after purges is rebuilt as of its rewrite (`as_of`): the
        # purges are replayed too; what it archived is what went quiet up to its watermark.
        tasks = [
            t
            for t in state.tasks.values()
            if t.task_id in readable or (t.quiescent and before < t.last_event_id <= watermark)
        ]
        write_chunk(path, [encode_entry(t) for t in tasks], chunks[at].level)
        metrics.ARCHIVE_CHUNKS_REBUILT.inc()
        return Chunk(path), (
            f"rebuilt archive chunk {name} from events 1..{as_of} of the log ({len(tasks)} tasks)"
        )

    def install_chunk(self, chunk: Chunk) -> None:
        """Use a rebuilt chunk from now on (on the loop). The damaged one is not closed:
        a snapshot being written may still read it; it closes once unreferenced."""
        archive = self.state.archive
        if isinstance(archive, Archive):
            archive.chunks = [chunk if c.path == chunk.path else c for c in archive.chunks]

    # ----------------------------------------------------------- snapshots

    def snapshot_now(self) -> asyncio.Future[Written]:
        """Capture the state now and write it in the background."""
        if self._snapshot_task is not None:
            return self._snapshot_task
        # The last snapshot's tasks leave memory first, or this one would archive
        # them a second time.
        self._evict_rest()
        t0 = time.perf_counter()
        self._snapshot_at = time.monotonic()
        redacted = self.state.redacted
        done = {t: r for t, r in self._files_redacted.items() if redacted.get(t) == r}
        self._files_redacted = done  # a forgotten task's entry goes with it
        todo = {t: r for t, r in redacted.items() if done.get(t) != r}
        self._redaction_snapshot = False
        cap = capture(self.state, self.log.position(), self.snapshots.task_json, todo)
        self.last_snapshot_stall_s = time.perf_counter() - t0
        metrics.SNAPSHOT_STALL_SECONDS.observe(self.last_snapshot_stall_s)
        self._since_snapshot = 0
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._snap_io, self._write, cap)
        self._snapshot_task = fut
        fut.add_done_callback(self._snapshot_done)
        return fut

    def _write(self, cap: Capture) -> Written:
        t0 = time.perf_counter()
        written = self.snapshots.write(cap)
        metrics.SNAPSHOT_SECONDS.observe(time.perf_counter() - t0)
        metrics.SNAPSHOTS.inc()
        return written

    def _snapshot_done(self, fut: asyncio.Future[Written]) -> None:
        self._snapshot_task = None
        if fut.cancelled():
            return
        exc = fut.exception()
        if isinstance(exc, SnapshotRaced):
            log.info("snapshot skipped: %s", exc)
            self._since_snapshot = self.config.snapshot_interval  # again at the next chance
            if any(self._files_redacted.get(t) != r for t, r in self.state.redacted.items()):
                # again at once, not at the next batch: none may come (a quiet cluster)
                self._redaction_snapshot = True
                if not self._closing:
                    self._snapshot_soon = True
                    asyncio.get_running_loop().call_soon(self._snapshot_between_batches)
            return
        if exc is not None:
            log.error("snapshot failed (the log is unaffected; will retry): %s", exc)
            return
        if self._redaction_snapshot and not self._closing:  # one came during the write
            self._snapshot_soon = True
            asyncio.get_running_loop().call_soon(self._snapshot_between_batches)
        written = fut.result()
        self._files_redacted.update(written.redacted)
        if written.redacted:
            log.info(
                "redaction: no snapshot or archive chunk here holds the data of %s any more",
                ", ".join(sorted(written.redacted)),
            )
        self.log.mark_end("snapshot")
        watermark = written.info.watermark
        # A task this snapshot archived that a purge took while it was written: the fold
        # hid it only if there was an archive then (not before the first snapshot)
        purged = self.state.purged
        late = [t for t in written.archived if purged.get(t, 0) > watermark]
        self.state.archive = Archive(written.chunks)
        # no chunk holds these purged tasks now: nothing left to hide
        self.state.tombstones -= written.purged
        self.state.tombstones.update(late)
        if not self.config.keep_all_segments:
            marks = self.snapshots.watermarks()
            if len(marks) >= self.config.snapshots_keep:
                keep_from = marks[-1] + 1
                if self.retention_floor is not None:
                    keep_from = min(keep_from, self.retention_floor())
                self.log.drop_before(keep_from)
        # Evicted a slice at a time, EVICT_PAUSE_S apart: all at once, in one callback
        # or one slice per turn back to back, every batch in that window waited (the
        # replication p99; docs/benchmarks.md, "Figures behind the knobs").
        self._evicting = (written.archived, 0, watermark)
        self._evict_next = asyncio.get_running_loop().call_soon(self._evict_slice)

    def _evict_slice(self, limit: int = EVICT_SLICE) -> None:
        """Drop from memory up to `limit` tasks the last snapshot archived."""
        self._evict_next = None
        if self._evicting is None:
            return
        archived, start, watermark = self._evicting
        stop = min(len(archived), start + limit)
        tasks = self.state.tasks
        idempotency = self.state.idempotency
        try:
            for task_id in archived[start:stop]:
                t = tasks.get(task_id)
                # Evict only what is unchanged since the capture.
                if t is not None and t.last_event_id <= watermark and t.quiescent:
                    del tasks[task_id]
                    # its key is found in the archive now; the snapshot keeps only live keys
                    key = t.idempotency_key
                    if key and idempotency.get(key) == task_id:
                        del idempotency[key]
        except Exception:
            # Never left half done: automatic snapshots wait for the eviction to end.
            self._evicting = None
            log.exception("evicting archived tasks failed; the rest stay in memory")
            return
        if stop < len(archived):
            self._evicting = (archived, stop, watermark)
            pause = min(EVICT_PAUSE_S, EVICT_PAUSES_MAX_S * limit / len(archived))
            loop = asyncio.get_running_loop()
            self._evict_next = loop.call_later(pause, self._evict_slice, limit)
        else:
            self._evicting = None

    def _evict_rest(self) -> None:
        if self._evict_next is not None:
            self._evict_next.cancel()
        self._evict_slice(limit=sys.maxsize)

    async def redactions_written(self) -> None:
        """Wait for what the redactions applied so far asked of this member's disk: its
        records rewritten (the Redactor) and the snapshot that rewrites the older
        snapshot files and chunks (`snapshots_redacted` says whether it carried each
        one: a failed write is logged, and the next snapshot tries again)."""
        while self._snapshot_soon or self._snapshot_task is not None:
            if self._snapshot_task is not None:
                with contextlib.suppress(Exception):
                    await self._snapshot_task
            # An await of a future already done does not yield: its done callback
            # (which clears _snapshot_task) would never run, and this loop would spin
            # for ever (found as a test that hung one run in four).
            await asyncio.sleep(0)
        self.redactor.drain()

    async def wait_snapshot(self) -> None:
        if self._snapshot_task is not None:
            with contextlib.suppress(Exception):
                await self._snapshot_task
        self._evict_rest()

    async def close(self) -> None:
        self._closing = True
        await self.log.close()
        await self.wait_snapshot()
        self._snap_io.shutdown(wait=True)
        self._repair_io.shutdown(wait=True)
        self.redactor.close()


@dataclass(frozen=True, slots=True)
class TaskPage:
    """A page of a task's events as this node's disk holds them."""

    events: list[Event]  # read from the disk, as answers show them
    next_id: int  # where the next page starts; 0: none after this one
    gone: tuple[int, ...] = ()  # ids of the page retention dropped from the disk
    # a task without an event index (an older snapshot): the part of its span dropped
    gone_span: tuple[int, int] | None = None

    @property
    def complete(self) -> bool:
        return not self.gone and self.gone_span is None


class OlderHistory(Protocol):
    """Where a node reads events its disk no longer holds (scheduler/bucket/history.py).
    Every call blocks: run it on a thread."""

    @property
    def describe(self) -> str: ...

    def read_ids(self, ids: Sequence[int]) -> tuple[list[Event], tuple[int, ...]]:
        """The events with these ids (ascending); and the ids it does not hold."""
        ...

    def read_range(self, first: int, last: int, limit: int = 0) -> list[Event]:
        """The events first..last it holds, in order, at most `limit` (0: all)."""
        ...


class NeedsFullReplay(Exception):
    """Store.task_at cannot answer from the task's own events."""


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic GC while building a big state.

    Replay allocates millions of long-lived objects and no cycles; every
    generation-2 pass would walk all of them again (measured: replay at
    94k events/s with the collector on, 175k with it off).
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Counter:
    """Apply recovered events to a state, counting them."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.n = 0

    def __call__(self, events: Sequence[Event]) -> None:
        apply_all(self.state, events)
        self.n += len(events)


def state_at(
    data_dir: str | os.PathLike[str], until: int | None = None, *, hide_later: bool = True
) -> State:
    """Reconstruct the state as of event `until` (default: the end), offline and read-only.

    Uses the newest snapshot at or before `until` and replays from there;
    with none, replays from the first event. A past state hides what a redaction
    since removed, as every read does: the snapshot it starts from may predate the
    redaction and still hold the data (the records after it are rewritten already).
    That costs a scan of the records after `until`; a running node, which knows its
    redactions, applies them itself instead (`hide_later=False`, Store.hide_since).
    """
    data = DataDir.open_existing(data_dir)
    state = _rebuilt(data, until)
    if until is not None and hide_later:
        for task_id, rid in _redactions_since(data, state).items():
            task = state.task(task_id)  # into memory: an archived one is changed too
            if task is not None:
                hide_data(task, rid)
    return state


def _redactions_since(data: DataDir, past: State) -> dict[str, int]:
    """The redactions the log holds after the past state (`redactions_after`): a scan
    of the records past it, keeping only the two types that decide them."""
    kinds = (EventType.TASK_REDACTED, EventType.TASK_HELD)
    found: list[Event] = []

    def keep(events: Sequence[Event]) -> None:
        found.extend(e for e in events if e.event_type in kinds)

    EventLog.open(
        data.root, read_only=True, replay_from=past.last_event_id + 1, on_events=keep
    ).close_sync()
    return redactions_after(found, past.holds)


def _rebuilt(data: DataDir, until: int | None) -> State:
    """The state as of `until` as the snapshots and the log rebuild it."""
    snapshots = Snapshots(data.snapshot_dir)
    with paused_gc():
        for info, state in snapshots.candidates(max_watermark=until):
            try:
                EventLog.open(
                    data.root,
                    read_only=True,
                    replay_from=info.watermark + 1,
                    hint=info.position,
                    hint_term=info.term,
                    on_events=lambda evs, s=state: apply_all(s, evs),  # type: ignore[misc]
                    until=until,
                ).close_sync()
            except SnapshotMismatchError as e:
                log.warning("snapshot %d unusable for time travel: %s", info.watermark, e)
                continue
            return state
        state = State()
        first = EventLog.open(
            data.root,
            read_only=True,
            on_events=lambda evs: apply_all(state, evs),
            until=until,
        )
        first.close_sync()
        if first.first_id > 1:
            raise HistoryGoneError(
                f"events before {first.first_id} are not kept in {data.root} and no snapshot "
                f"covers them",
                first=first.first_id,
            )
        if until is not None and state.last_event_id < until:
            raise LogError(f"the log ends at event {state.last_event_id}, before {until}")
        return state
