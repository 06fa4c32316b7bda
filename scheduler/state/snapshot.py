"""Snapshots: the replayed state at a watermark, so recovery replays only the tail.

Snapshot file `snapshot-<watermark>.snap`::

    b"A11SNAP1" | u32 crc32(body) | u64 len(body) | body

The body is a JSON document, then (format 2) the active tasks, one JSON object
a line: `{...}\n{task}\n{task}...`. The document holds the watermark event id
and its term, the log position just after it, the in-memory part of the state
but its tasks, and the list of archive chunks holding every task that went
quiet before it (see `apollo11.scheduler.state.archive`). A task a line is loaded one
at a time: parsing one document of 100,000 tasks first left a recovered node at
twice the memory its state needs (docs/benchmarks.md, bench durable). Format 1
(the tasks inside the document) is still read. Files are written atomically (temp file, fsync,
rename, directory fsync); the newest `keep` are kept, and an unreadable one
falls back to the one before it, then to a full replay.

Taking a snapshot has two halves. `capture` runs on the event loop and
serializes only what changed since the previous snapshot plus the active
tasks, so its cost does not grow with history; `write` runs on a thread
and does all the I/O, so appends never wait for it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from struct import Struct
from typing import Any

import orjson

from apollo11.scheduler import defaults, jsondepth, metrics
from apollo11.scheduler.errors import SnapshotError
from apollo11.scheduler.log import Position, write_atomic
from apollo11.scheduler.state import merger
from apollo11.scheduler.state.archive import SUFFIX as CHUNK_SUFFIX
from apollo11.scheduler.state.archive import (
    Archive,
    Chunk,
    Record,
    chunk_name,
    encode_entry,
    merge_plan,
    purged_chunk_name,
    redacted_chunk,
    write_chunk,
)
from apollo11.scheduler.state.fold import hide_data
from apollo11.scheduler.state.index import State, reindex
from apollo11.scheduler.state.model import DURATION_HISTORY, TaskState
from apollo11.scheduler.state.tasktable import TaskTable

log = logging.getLogger(__name__)

MAGIC = b"A11SNAP1"
HEADER = Struct("<8sIQ")
PREFIX = "snapshot-"
SUFFIX = ".snap"
SNAPSHOT_FORMAT = 2  # 1: the tasks inside the document (still read)
READABLE_FORMATS = (1, 2)
DEFAULT_INTERVAL = defaults.SNAPSHOT_INTERVAL
DEFAULT_KEEP = 3
ENCODE_SLICE = 64  # quiet tasks encoded between the writer's pauses (see `_encode_paced`)
ENCODE_PAUSES_MAX_S = 0.5  # the pauses of one snapshot add up to this at most
# up to this many redactions a snapshot file is searched for their ids first (one scan
# each); more (the pass after a start) go over its task lines once
FEW_REDACTIONS = 8
TASK_LINE = b'{"task_id":"'  # how a task's line starts (TaskState.to_dict's first key)


def snapshot_name(watermark: int) -> str:
    return f"{PREFIX}{watermark:020d}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    watermark: int
    term: int
    position: Position
    chunks: tuple[str, ...]
    path: str


@dataclass(frozen=True, slots=True)
class Capture:
    """Everything a snapshot needs, serialized on the loop at one instant."""

    watermark: int
    term: int
    position: Position
    state_json: bytes  # the in-memory part of the state, but its tasks
    tasks_json: list[bytes]  # the active tasks, each one JSON object
    # Quiet tasks to archive now, encoded by the writer thread: a quiet task changes
    # only by an operator's action, which the writer detects (see Snapshots.write).
    quiet: list[TaskState]
    chunks: tuple[Chunk, ...]  # the archive as of the capture
    # purged tasks (retention) to drop from the chunks that hold them
    tombstones: frozenset[str] = frozenset()
    # redacted tasks (task id -> TASK_REDACTED) whose data the files already in the
    # directory may still hold: rewritten without it first (`Snapshots.redact`)
    redactions: Mapping[str, int] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Written:
    info: SnapshotInfo
    chunks: tuple[Chunk, ...]
    archived: tuple[str, ...]  # task ids now in the archive
    purged: frozenset[str] = frozenset()  # purged task ids no chunk holds any more
    # the capture's redactions, when no file in the directory holds their data now
    redacted: Mapping[str, int] = dataclasses.field(default_factory=dict)


def _state_meta(state: State) -> dict[str, Any]:
    return {
        "last_event_id": state.last_event_id,
        "term": state.term,
        "terms": state.terms,
        "idempotency": state.idempotency,
        "durations": {
            wf: {st: h[-DURATION_HISTORY:] for st, h in per.items()}
            for wf, per in state.durations.items()
        },
        "anomalies": state.anomalies,
        **state.events_dict(),  # only when there are events: older snapshots stay alike
        **state.schedules_dict(),  # likewise
        **state.occupancy.to_dict(),  # likewise
        **state.redacted_dict(),  # likewise
        **state.retention_dict(),  # likewise
    }


class SnapshotRaced(SnapshotError):
    """A quiet task changed while its snapshot was written: none was written."""


class _TaskJsonCache:
    """Serialized active tasks, reused while a task has not changed.

    A snapshot holds every active task; with thousands of long-running
    tasks, re-serializing each one every 1000 events dominated the stall.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[int, bytes]] = {}

    def get(self, task: TaskState) -> bytes:
        hit = self._by_id.get(task.task_id)
        if hit is not None and hit[0] == task.last_event_id:
            return hit[1]
        data = jsondepth.dumps(task.to_dict())
        self._by_id[task.task_id] = (task.last_event_id, data)
        return data

    def keep_only(self, ids: set[str]) -> None:
        for task_id in [t for t in self._by_id if t not in ids]:
            del self._by_id[task_id]


def capture(
    state: State,
    position: Position,
    cache: _TaskJsonCache | None = None,
    redactions: Mapping[str, int] | None = None,
) -> Capture:
    """Serialize the state at this instant (call on the loop, between batches)."""
    if position.event_id != state.last_event_id:
        raise SnapshotError(
            f"state is at event {state.last_event_id} but the log position is "
            f"{position.event_id}; a snapshot must be taken between batches"
        )
    active: list[bytes] = []
    active_ids: set[str] = set()
    quiet: list[TaskState] = []
    for task in state.tasks.values():
        if task.quiescent:
            quiet.append(task)
        elif cache is not None:
            active.append(cache.get(task))
            active_ids.add(task.task_id)
        else:
            active.append(jsondepth.dumps(task.to_dict()))
    if cache is not None:
        cache.keep_only(active_ids)
    archive = state.archive
    chunks = tuple(archive.chunks) if isinstance(archive, Archive) else ()
    return Capture(
        state.last_event_id,
        state.term,
        position,
        jsondepth.dumps(_state_meta(state)),
        active,
        quiet,
        chunks,
        frozenset(state.tombstones),
        dict(redactions or {}),
    )


def _body_parts(cap: Capture, names: tuple[str, ...]) -> tuple[bytes, ...]:
    """The body, `{"format": .., .., "state": <the captured state>}` and a task a line,
    in parts around the state's bytes: with 50,000 tasks in memory the state is ~90
    MB, and dumping it into a body and then the body into the file's bytes made two
    copies (RSS peaks 270 MB above a flooded node's level, `bench overload`). orjson
    writes no raw newline (one in a string is escaped): a line is one task."""
    head = orjson.dumps(
        {
            "format": SNAPSHOT_FORMAT,
            "watermark": cap.watermark,
            "term": cap.term,
            "position": list(cap.position),
            "chunks": names,
        }
    )
    return head[:-1] + b',"state":', cap.state_json, b"}", *_lines(cap.tasks_json)


def _lines(tasks: list[bytes]) -> tuple[bytes, ...]:
    return (b"\n" + b"\n".join(tasks),) if tasks else ()


def _framed(parts: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """The file: MAGIC | crc32(body) | len(body) | body, the body given in parts."""
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    return (HEADER.pack(MAGIC, crc, sum(len(p) for p in parts)), *parts)


def _without(chunk: Chunk, purged: frozenset[str], watermark: int) -> Chunk:
    """`chunk`, or a new one of its tasks but the purged ones when it holds any (the old
    file stays for the older snapshots that name it, and goes with them)."""
    if not any(task_id in chunk for task_id in purged):
        return chunk
    name = purged_chunk_name(chunk.name, chunk.level, watermark)
    path = os.path.join(os.path.dirname(chunk.path), name)
    write_chunk(path, [r for r in chunk.records() if r[0] not in purged], chunk.level)
    return Chunk(path)


def _upgraded(chunk: Chunk) -> Chunk:
    """A format-02 chunk rewritten in place as 04, with the same tasks (here, on the
    writer thread: read on the event loop, it would be decoded whole on the first
    listing or key lookup). The file is replaced atomically; open readers keep the
    old one, and older snapshots naming it find the same tasks."""
    write_chunk(chunk.path, list(chunk.records()), chunk.level)
    return Chunk(chunk.path)


def redacted_snapshot(raw: bytes, redactions: Mapping[str, int], *, where: str) -> bytes:
    """A snapshot file's bytes with the tasks `redactions` names (task id -> its
    TASK_REDACTED) holding no data (`hide_data`, as the fold does); `raw` itself when
    none of its tasks in memory is one of them, or each is hidden already. The same
    function for a node's files and the bucket's objects. SnapshotError when `raw`
    fails its checks: damage is reported, never rewritten."""
    if len(raw) < HEADER.size:
        raise SnapshotError(f"snapshot {where} is truncated")
    magic, crc, length = HEADER.unpack_from(raw)
    body = raw[HEADER.size :]
    if magic != MAGIC or len(body) != length or zlib.crc32(body) != crc:
        raise SnapshotError(f"snapshot {where} fails its checks")
    if len(redactions) <= FEW_REDACTIONS and not any(t.encode() in body for t in redactions):
        return raw  # the common case: not a byte of the tasks here
    end = body.find(b"\n")
    head, lines = (body, b"") if end < 0 else (body[:end], body[end + 1 :])
    changed = False
    if lines:
        out = []
        for line in lines.split(b"\n"):
            hit = _line_task_id(line) in redactions
            hidden = _hidden(orjson.loads(line), redactions) if hit else None
            if hidden is not None:
                line, changed = hidden, True
            out.append(line)
        lines = b"\n".join(out)
    doc = orjson.loads(head)
    tasks = doc.get("state", {}).get("tasks")
    if isinstance(tasks, list):  # format 1: the tasks inside the document
        for i, d in enumerate(tasks):
            hidden = _hidden(d, redactions) if d.get("task_id") in redactions else None
            if hidden is not None:
                tasks[i], changed = orjson.loads(hidden), True
        if changed:
            head = orjson.dumps(doc)
    if not changed:
        return raw
    return b"".join(_framed((head, b"\n", lines) if lines else (head,)))


def _line_task_id(line: bytes) -> str:
    """The id of the task a snapshot's line holds, without parsing the line: the first
    key TaskState.to_dict writes (a line of another shape, or an id with an escape in
    it, is parsed)."""
    if line.startswith(TASK_LINE):
        end = line.find(b'"', len(TASK_LINE))
        if end > 0 and b"\\" not in line[len(TASK_LINE) : end]:
            return line[len(TASK_LINE) : end].decode()
    return str(orjson.loads(line).get("task_id", ""))


def _hidden(d: dict[str, Any], redactions: Mapping[str, int]) -> bytes | None:
    """A task's JSON with its data hidden, when `redactions` names it and it still
    holds some; None otherwise (the line is then left byte for byte as it was)."""
    task = TaskState.from_dict(d)
    rid = redactions.get(task.task_id)
    if rid is None:
        return None
    before = jsondepth.dumps(task.to_dict())
    hide_data(task, rid)
    after = jsondepth.dumps(task.to_dict())
    return None if after == before else after


def watermark_of(name: str) -> int | None:
    """The watermark a snapshot file's name says (None: not a snapshot file's name)."""
    if name.startswith(PREFIX) and name.endswith(SUFFIX):
        stem = name[len(PREFIX) : -len(SUFFIX)]
        if stem.isdigit():
            return int(stem)
    return None


class Snapshots:
    """The snapshot files (and archive chunks) of one data directory."""

    def __init__(self, directory: str, *, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError(f"snapshots to keep must be at least 1, got {keep}")
        self.directory = directory
        self.keep = keep
        # Chunk lists of snapshots this process wrote or read: retention needs
        # them after every write, and re-reading big snapshots to learn them
        # was the most expensive part of a write.
        self._chunks_of: dict[int, tuple[str, ...]] = {}
        self.task_json = _TaskJsonCache()
        self._pinned: dict[int, int] = {}  # watermark -> readers (a standby being sent it)

    def watermarks(self) -> list[int]:
        """Watermarks of the snapshot files present, newest first."""
        found: list[int] = []
        if not os.path.isdir(self.directory):
            return found
        for name in os.listdir(self.directory):
            mark = watermark_of(name)
            if mark is not None:
                found.append(mark)
        return sorted(found, reverse=True)

    # ------------------------------------------------------------- reading

    def _read_body(self, watermark: int) -> tuple[str, dict[str, Any], bytes]:
        """The snapshot's path, its document, and its task lines (format 2; b"": none)."""
        path = os.path.join(self.directory, snapshot_name(watermark))
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise SnapshotError(f"cannot read snapshot {path}: {e}") from e
        if len(raw) < HEADER.size:
            raise SnapshotError(f"snapshot {path} is truncated")
        magic, crc, length = HEADER.unpack_from(raw)
        body = raw[HEADER.size :]
        if magic != MAGIC:
            raise SnapshotError(f"{path} is not an Apollo-11 snapshot")
        if len(body) != length:
            raise SnapshotError(f"snapshot {path} is truncated ({len(body)} of {length} bytes)")
        if zlib.crc32(body) != crc:
            raise SnapshotError(f"snapshot {path} fails its checksum")
        del raw  # the body is a view of it: one copy less while tasks are built
        end = body.find(b"\n")
        doc_bytes, lines = (body, b"") if end < 0 else (body[:end], body[end + 1 :])
        del body
        try:
            doc: dict[str, Any] = orjson.loads(doc_bytes)
        except orjson.JSONDecodeError as e:
            raise SnapshotError(f"snapshot {path} is undecodable: {e}") from e
        if doc.get("format") not in READABLE_FORMATS or doc.get("watermark") != watermark:
            raise SnapshotError(f"snapshot {path} has an unknown format or wrong watermark")
        return path, doc, lines

    def load(self, watermark: int) -> tuple[SnapshotInfo, State]:
        """Load one snapshot with its archive; SnapshotError if anything is wrong."""
        path, doc, lines = self._read_body(watermark)
        try:
            pos = Position(*doc["position"])
            chunks = tuple(doc["chunks"])
            s = doc["state"]
            tasks = _tasks_of(s["tasks"]) if doc["format"] == 1 else _tasks_in(lines)
            del lines
            active_ids = {t.task_id for t in tasks}
            state = State(
                tasks=TaskTable((t.task_id, t) for t in tasks),
                last_event_id=s["last_event_id"],
                term=s["term"],
                terms=[(a, b) for a, b in s["terms"]],
                # only the keys of tasks in memory: the archive indexes the others (a
                # snapshot written as its quiet tasks were archived still lists theirs)
                idempotency={k: tid for k, tid in s["idempotency"].items() if tid in active_ids},
                durations={
                    wf: {st: list(h) for st, h in per.items()} for wf, per in s["durations"].items()
                },
                anomalies=list(s["anomalies"]),
            )
            state.load_events(s.get("events"))
            state.load_schedules(s.get("schedules"))
            state.occupancy.load(s.get("flow"))
            state.load_retention(s)
            reindex(state)
        except (KeyError, TypeError, ValueError) as e:
            raise SnapshotError(f"snapshot {path} is malformed: {e!r}") from e
        state.archive = Archive.open(self.directory, chunks)
        try:
            state.load_redacted(s)  # after the archive: an older snapshot's from its tasks
        except (TypeError, ValueError) as e:
            raise SnapshotError(f"snapshot {path} is malformed: {e!r}") from e
        info = SnapshotInfo(watermark, doc["term"], pos, chunks, path)
        self._chunks_of[watermark] = chunks
        return info, state

    def candidates(self, max_watermark: int | None = None) -> Iterator[tuple[SnapshotInfo, State]]:
        """Loadable snapshots, newest first, skipping (and reporting) broken ones."""
        for w in self.watermarks():
            if max_watermark is not None and w > max_watermark:
                continue
            try:
                yield self.load(w)
            except SnapshotError as e:
                metrics.SNAPSHOT_FALLBACKS.inc()
                log.error("snapshot %d unusable, falling back to an older one: %s", w, e)

    def newest_pinned(self) -> SnapshotInfo | None:
        """The newest readable snapshot, pinned: retention keeps it (and its chunks)
        until `unpin`. For sending it to a standby while new snapshots are taken."""
        for w in self.watermarks():
            try:
                path, doc, _ = self._read_body(w)
                chunks = tuple(doc["chunks"])
                info = SnapshotInfo(w, doc["term"], Position(*doc["position"]), chunks, path)
            except (SnapshotError, KeyError, TypeError, ValueError):
                continue
            self._pinned[w] = self._pinned.get(w, 0) + 1
            self._chunks_of[w] = chunks
            return info
        return None

    def unpin(self, watermark: int) -> None:
        n = self._pinned.get(watermark, 0) - 1
        if n <= 0:
            self._pinned.pop(watermark, None)
        else:
            self._pinned[watermark] = n

    # ------------------------------------------------------------- writing

    def write(self, cap: Capture) -> Written:
        """Write a captured snapshot (on a thread): chunk, merges, file, retention."""
        entries = _encode_paced(cap.quiet)
        # Encoded here, off the loop (it was most of a capture's 10-20 ms stall), from
        # the live objects: any event applied to one of them since the capture set its
        # last_event_id first, so this tells whether an encoding may be torn.
        changed = [t.task_id for t in cap.quiet if t.last_event_id > cap.watermark]
        if changed:
            raise SnapshotRaced(
                f"task {changed[0]} changed while snapshot {cap.watermark} was being written "
                f"({len(changed)} in all); the next snapshot will include it"
            )
        chunks = list(cap.chunks)
        redacted: Mapping[str, int] = {}
        if cap.redactions:
            # before anything reads the chunks: a merge or an upgrade of an old copy
            # would carry the data into a new file
            rewritten, whole = self.redact(cap.redactions)
            # ...and any rewritten by an earlier pass whose write then failed: the
            # archive still reads the old file, which holds the data a merge would copy
            chunks = [Chunk(c.path) if c.path in rewritten or c.replaced() else c for c in chunks]
            redacted = cap.redactions if whole else {}
        chunks = [c if c.has_summaries else _upgraded(c) for c in chunks]
        if cap.tombstones:
            chunks = [_without(c, cap.tombstones, cap.watermark) for c in chunks]
            entries = [e for e in entries if e[0] not in cap.tombstones]
        if entries:
            name = chunk_name(cap.watermark, 0)
            path = os.path.join(self.directory, name)
            write_chunk(path, entries, 0)
            chunks.append(Chunk(path))
        while (run := merge_plan([c.level for c in chunks])) is not None:
            start, end = run
            merged = merger.merge(
                self.directory,
                chunks[start:end],
                chunk_name(cap.watermark, chunks[start].level + 1),
            )
            chunks[start:end] = [merged]
        names = tuple(c.name for c in chunks)
        path = os.path.join(self.directory, snapshot_name(cap.watermark))
        write_atomic(path, *_framed(_body_parts(cap, names)))
        self._chunks_of[cap.watermark] = names
        self._retain(set(names))
        info = SnapshotInfo(cap.watermark, cap.term, cap.position, names, path)
        archived = tuple(t.task_id for t in cap.quiet)
        return Written(info, tuple(chunks), archived, cap.tombstones, redacted)

    def redact(self, redactions: Mapping[str, int]) -> tuple[set[str], bool]:
        """Rewrite every snapshot file and archive chunk in the directory that holds one
        of the redacted tasks' data (task id -> its TASK_REDACTED) without it, each in
        place (atomically, under its own name: the snapshots naming a chunk stay whole,
        and each still loads, replays and seeds a standby as before, only without the
        data). The paths of the chunks rewritten, and whether every file was read: a
        damaged one is reported (the scrub mends it from the log or a peer) and the
        redaction is not counted as carried out. Call on the writer thread."""
        rewritten: set[str] = set()
        whole = True
        names = sorted(os.listdir(self.directory)) if os.path.isdir(self.directory) else []
        for name in names:
            path = os.path.join(self.directory, name)
            try:
                if name.endswith(CHUNK_SUFFIX):
                    chunk = Chunk(path)
                    try:
                        if redacted_chunk(chunk, redactions, path):
                            rewritten.add(path)
                    finally:
                        chunk.close()
                elif watermark_of(name) is not None:
                    with open(path, "rb") as f:
                        raw = f.read()
                    new = redacted_snapshot(raw, redactions, where=path)
                    if new != raw:
                        write_atomic(path, new)
            except FileNotFoundError:
                continue  # retention took it meanwhile
            except (SnapshotError, OSError) as e:
                whole = False
                log.error("redaction: %s still holds a redacted task's data: %s", path, e)
        return rewritten, whole

    def _retain(self, live_chunks: set[str]) -> None:
        """Keep the newest `keep` snapshots and every chunk one of them needs."""
        marks = self.watermarks()
        needed = set(live_chunks)
        pinned = set(self._pinned.copy())  # the loop pins and unpins while this runs
        kept = set(marks[: self.keep]) | pinned
        for w in kept:
            known = self._chunks_of.get(w)
            if known is None:
                try:
                    known = self._chunks_of[w] = tuple(self._read_body(w)[1]["chunks"])
                except SnapshotError:
                    continue
            needed.update(known)
        for w in marks[self.keep :]:
            if w in pinned:
                continue
            _unlink(os.path.join(self.directory, snapshot_name(w)))
            self._chunks_of.pop(w, None)
        for name in os.listdir(self.directory):
            # (not a `.tmp`: a chunk being rebuilt or redacted beside this write)
            if name.endswith(CHUNK_SUFFIX) and name not in needed:
                _unlink(os.path.join(self.directory, name))

    def discard_leftovers(self) -> None:
        """Delete the temp files a crash left half written (the directory's owner, as
        it opens it: nothing of this process is writing one yet)."""
        if not os.path.isdir(self.directory):
            return
        for name in os.listdir(self.directory):
            if name.endswith(".tmp"):
                _unlink(os.path.join(self.directory, name))


def _encode_paced(tasks: list[TaskState]) -> list[Record]:
    """Encode tasks for the archive, pausing after each slice as long as it took.

    Encoding holds the GIL: at 10k events/s, ~900 tasks a second, all at once,
    on every node at the same moment (their snapshots keep in step). Half a CPU
    at most leaves the event loop its turns and the machine its other nodes:
    replication ack p99 at 10k events/s went from a median of 6.9 to 5.3 ms
    (with the paced eviction in `Store`; 8 clusters each, alternating).
    """
    entries: list[Record] = []
    budget = ENCODE_PAUSES_MAX_S  # a big first snapshot (after a long replay) goes on
    for i in range(0, len(tasks), ENCODE_SLICE):
        t0 = time.perf_counter()
        entries.extend(encode_entry(t) for t in tasks[i : i + ENCODE_SLICE])
        pause = min(time.perf_counter() - t0, budget)
        budget -= pause
        time.sleep(pause)
    return entries


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _tasks_of(docs: list[Any]) -> list[TaskState]:
    """The tasks of a snapshot's document, each dict let go as soon as its task is
    built: the next task is built in the memory it held, so a node holding 100k
    waiting tasks does not keep the document's footprint besides its own
    (docs/benchmarks.md, bench durable: 4.9 -> 2.x KB a task)."""
    out = []
    for i, d in enumerate(docs):
        out.append(TaskState.from_dict(d))
        docs[i] = None
    return out


def _tasks_in(lines: bytes) -> list[TaskState]:
    """The tasks of a format-2 body, a line each, parsed one at a time: each task's
    dict is let go before the next is read, so the node keeps its state and not
    the document's footprint beside it."""
    out = []
    view = memoryview(lines)
    start, size = 0, len(lines)
    while start < size:
        end = lines.find(b"\n", start)
        if end < 0:
            end = size
        out.append(TaskState.from_dict(orjson.loads(view[start:end])))
        start = end + 1
    return out
