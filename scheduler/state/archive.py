"""The task archive: finished tasks, out of memory and out of the snapshots.

A snapshot every 1000 events cannot rewrite the state of every task that
ever ran, and recovery cannot be "flat as history grows" if it reloads
them. So a snapshot writes only what changed: the tasks that went quiet
since the previous snapshot go into a new immutable chunk file, and the
snapshot lists the chunks it includes. Chunks are merged in runs of
MERGE_FANOUT of the same level (a size-tiered LSM), so a history of n
snapshots is held in O(log n) files.

Newer wins: a task can be in several chunks (an operator retried it after
it was archived); lookups go newest first, and merges keep the newest.

Chunk file::

    b"A11ARC04"
    entries    u32 crc32(rest) | u32 len(rest) | rest = u16 len(task_id) | task_id | json
    summaries  u32 crc32(rest) | u32 len(rest) | rest = json [task_id, workflow, status,
               submitted_ms, updated_ms, steps done, steps total, idempotency key],
               ascending task id
    index      count x u32 crc32(task_id), ascending | count x u64 entry offset, same
               order | count x u64 summary offset, ascending task id | keys x u32
               crc32(idempotency key), ascending | keys x u64 entry offset, same order
    footer     u64 index_offset | u32 count | u32 crc32(index) | u32 level | u32 keys |
               b"A11ARCND"

The index is fixed-width so that loading it is a copy, not a parse: a
lookup costs a binary search and one entry read, whatever the history.
Hash collisions are resolved by comparing the entry's task id.

The summaries are what a listing reads. Task ids sort by submission time, so
a page of "newest first, before X" is a binary search and a read of the
next few summaries in each chunk: listing never decodes a whole task, and
its cost does not grow with the history (decoding every archived task on
the first listing stalled the event loop for 1.8 s at 100k tasks).

The idempotency keys of archived tasks are found here too, by the same kind
of index: the snapshot holds only the keys of tasks still in memory. (It held
every key ever submitted, and every client submission carries one: the
snapshot grew by ~55 bytes a task, forever, and was rewritten every 1000
events.)

Chunks of format 02 (no summaries, no key index) are still read: what they
lack is decoded once from their entries, and a merge rewrites them as 04.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import os
import zlib
from array import array
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from struct import Struct
from typing import Any

import orjson

from apollo11.scheduler import jsondepth
from apollo11.scheduler.errors import SnapshotError
from apollo11.scheduler.log import fsync_dir, temp_beside
from apollo11.scheduler.state.fold import hide_data
from apollo11.scheduler.state.index import Summary, TaskStore, summarize
from apollo11.scheduler.state.model import TaskState, TaskStatus

MAGIC = b"A11ARC04"
MAGIC_V2 = b"A11ARC02"  # entries only, no summaries, no key index
END_MAGIC = b"A11ARCND"
ENTRY = Struct("<II")
ID_LEN = Struct("<H")
FOOTER = Struct("<QIIII8s")
FOOTER_V2 = Struct("<QIII8s")
MERGE_FANOUT = 8
SUFFIX = ".arc"
VERIFY_STEP = 64 * 1024  # Chunk.verify reports progress about this often


def chunk_name(watermark: int, level: int) -> str:
    return f"{watermark:020d}-{level}{SUFFIX}"


def chunk_watermark(name: str) -> int:
    """The watermark a chunk's name carries: it holds the tasks archived as of that
    event (those that went quiet after the chunk before it)."""
    return int(os.path.basename(name).split("-", 1)[0])


def purged_chunk_name(name: str, level: int, at: int) -> str:
    """The name of chunk `name` rewritten without the tasks retention purged, by the
    snapshot at event `at`: `<watermark>-<level>.p<at>.arc`. The watermark stays (what
    the chunk archived is unchanged); `at` says to what event a rebuild from the log
    must replay so that the purges are in it too (`chunk_as_of`)."""
    return f"{chunk_watermark(name):020d}-{level}.p{at:020d}{SUFFIX}"


def chunk_as_of(name: str) -> int:
    """The event a chunk's tasks are as of: its watermark, or for a chunk rewritten
    after purges, the snapshot that rewrote it."""
    stem = os.path.basename(name).removesuffix(SUFFIX)
    _, sep, at = stem.partition(".p")
    return int(at) if sep else chunk_watermark(name)


class ChunkDamaged(SnapshotError):
    """A chunk's bytes fail their checksum: `path` names the file (the log can rebuild it)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


# (task_id, framed entry, framed summary, idempotency key or ""): a task in a chunk
Record = tuple[str, bytes, bytes, str]


def encode_entry(task: TaskState) -> Record:
    tid = task.task_id.encode()
    rest = ID_LEN.pack(len(tid)) + tid + jsondepth.dumps(task.to_dict())
    return (
        task.task_id,
        ENTRY.pack(zlib.crc32(rest), len(rest)) + rest,
        encode_summary(task),
        task.idempotency_key or "",
    )


def encode_summary(task: TaskState) -> bytes:
    s = summarize(task)
    rest = orjson.dumps([s.task_id, s.workflow, s.status.value, *s[3:], task.idempotency_key or ""])
    return ENTRY.pack(zlib.crc32(rest), len(rest)) + rest


def _hash(task_id: str) -> int:
    return zlib.crc32(task_id.encode())


def write_chunk(path: str, records: Iterable[Record], level: int) -> int:
    """Write a chunk durably (temp, fsync, rename, dir fsync); return its entry count."""
    tmp = temp_beside(path)
    try:
        return _write_chunk(tmp, path, records, level)
    except BaseException:
        # a full disk must not keep the half (nothing else deletes it until a restart)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _write_chunk(tmp: str, path: str, records: Iterable[Record], level: int) -> int:
    keyed: list[tuple[int, int]] = []
    by_key: list[tuple[int, int]] = []
    summaries: list[tuple[str, bytes]] = []
    with open(tmp, "wb") as f:
        f.write(MAGIC)
        off = len(MAGIC)
        for task_id, entry, summary, key in records:
            keyed.append((_hash(task_id), off))
            if key:
                by_key.append((_hash(key), off))
            summaries.append((task_id, summary))
            f.write(entry)
            off += len(entry)
        keyed.sort()
        by_key.sort()
        summaries.sort()
        at = array("Q")
        for _, summary in summaries:
            at.append(off)
            f.write(summary)
            off += len(summary)
        index = (
            array("I", (h for h, _ in keyed)).tobytes()
            + array("Q", (o for _, o in keyed)).tobytes()
            + at.tobytes()
            + array("I", (h for h, _ in by_key)).tobytes()
            + array("Q", (o for _, o in by_key)).tobytes()
        )
        f.write(index)
        f.write(FOOTER.pack(off, len(keyed), zlib.crc32(index), level, len(by_key), END_MAGIC))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))
    return len(keyed)


def redacted_chunk(chunk: Chunk, redactions: Mapping[str, int], out: str) -> bool:
    """Write `chunk` to `out` with the tasks `redactions` names (task id -> its
    TASK_REDACTED) holding no data (`hide_data`, as the fold does); False, and nothing
    written, when it holds none of them or holds them hidden already. ChunkDamaged when
    its bytes fail their checks: damage is reported, never rewritten."""
    if not any(task_id in chunk for task_id in redactions):
        return False
    records = []
    changed = False
    for record in chunk.records():
        rid = redactions.get(record[0])
        if rid is not None:
            task = _decode(record[1])
            before = encode_entry(task)
            hide_data(task, rid)
            after = encode_entry(task)
            if after[1] != before[1]:
                record, changed = after, True
        records.append(record)
    if changed:
        write_chunk(out, records, chunk.level)
    return changed


class Chunk:
    """A read-only chunk file. Its index is loaded on first use, not at open."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        self._fd = -1
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise SnapshotError(f"archive chunk {path} is missing: {e}") from e
        size = os.fstat(self._fd).st_size
        magic = os.pread(self._fd, len(MAGIC), 0)
        footer = FOOTER if magic == MAGIC else FOOTER_V2
        tail = os.pread(self._fd, footer.size, size - footer.size) if size >= footer.size else b""
        if len(tail) != footer.size or magic not in (MAGIC, MAGIC_V2):
            self.close()
            raise ChunkDamaged(f"archive chunk {path} is truncated or not a chunk", path=path)
        self.has_summaries = magic == MAGIC
        if self.has_summaries:
            self._index_off, self.count, self._index_crc, self.level, self.keys, end = (
                FOOTER.unpack(tail)
            )
        else:
            self._index_off, self.count, self._index_crc, self.level, end = FOOTER_V2.unpack(tail)
            self.keys = 0
        if end != END_MAGIC or self._index_off + self._index_size() + footer.size != size:
            self.close()
            raise ChunkDamaged(f"archive chunk {path} has a bad footer", path=path)
        self._hashes: array[int] | None = None
        self._offsets: array[int] = array("Q")
        self._summary_at: array[int] = array("Q")  # ascending task id
        self._key_hashes: array[int] = array("I")  # ascending
        self._key_offsets: array[int] = array("Q")  # entry offsets, same order
        self._v2_summaries: list[Summary] | None = None  # format 02 only, ascending id
        self._v2_keys: dict[str, list[int]] | None = None  # format 02 only: key -> offsets

    def _index_size(self) -> int:
        n, k = int(self.count), int(self.keys)
        return 20 * n + 12 * k if self.has_summaries else 12 * n

    def __del__(self) -> None:
        self.close()

    def _load_index(self) -> array[int]:
        if self._hashes is None:
            raw = os.pread(self._fd, self._index_size(), self._index_off)
            if zlib.crc32(raw) != self._index_crc:
                raise ChunkDamaged(
                    f"archive chunk {self.path}: index checksum mismatch at offset "
                    f"{self._index_off}",
                    path=self.path,
                )
            n, k = self.count, self.keys
            hashes, offsets, summary_at = array("I"), array("Q"), array("Q")
            key_hashes, key_offsets = array("I"), array("Q")
            hashes.frombytes(raw[: 4 * n])
            offsets.frombytes(raw[4 * n : 12 * n])
            summary_at.frombytes(raw[12 * n : 20 * n])
            key_hashes.frombytes(raw[20 * n : 20 * n + 4 * k])
            key_offsets.frombytes(raw[20 * n + 4 * k :])
            # Whole arrays only, `_hashes` last: the snapshot writer thread (merges)
            # and the event loop may both load a chunk's index.
            self._offsets, self._summary_at = offsets, summary_at
            self._key_hashes, self._key_offsets = key_hashes, key_offsets
            self._hashes = hashes
        return self._hashes

    def _entries_end(self) -> int:
        if not self.has_summaries or not self.count:
            return int(self._index_off)
        self._load_index()
        return int(self._summary_at[0])

    def _read_entry(self, off: int) -> tuple[str, bytes]:
        """(task_id, whole entry) at `off`, checked."""
        head = os.pread(self._fd, ENTRY.size, off)
        if len(head) != ENTRY.size:
            raise ChunkDamaged(
                f"archive chunk {self.path}: bad entry at offset {off}", path=self.path
            )
        crc, length = ENTRY.unpack(head)
        rest = os.pread(self._fd, length, off + ENTRY.size)
        if len(rest) != length or zlib.crc32(rest) != crc:
            raise ChunkDamaged(
                f"archive chunk {self.path}: bad entry at offset {off}", path=self.path
            )
        (id_len,) = ID_LEN.unpack_from(rest)
        return rest[2 : 2 + id_len].decode(), head + rest

    def raw(self, task_id: str) -> bytes | None:
        """The entry for `task_id` with its framing, checked."""
        hashes = self._load_index()
        h = _hash(task_id)
        i = bisect.bisect_left(hashes, h)
        while i < len(hashes) and hashes[i] == h:
            found, entry = self._read_entry(self._offsets[i])
            if found == task_id:
                return entry
            i += 1
        return None

    def __contains__(self, task_id: str) -> bool:
        return self.raw(task_id) is not None

    def __len__(self) -> int:
        return int(self.count)

    def get(self, task_id: str) -> TaskState | None:
        raw = self.raw(task_id)
        return None if raw is None else _decode(raw)

    def entries(self) -> Iterator[tuple[str, bytes]]:
        """Every (task_id, entry) in file order."""
        off, end = len(MAGIC), self._entries_end()
        while off < end:
            task_id, entry = self._read_entry(off)
            yield task_id, entry
            off += len(entry)

    def task_ids(self) -> Iterator[str]:
        return (t for t, _ in self.entries())

    def records(self) -> Iterator[Record]:
        """Every (task_id, entry, summary, key), for a merge."""
        if self.has_summaries:
            framed = {row[0]: (f, row[7]) for row, f in self._summary_run(0, self.count)}
            for task_id, entry in self.entries():
                summary, key = framed[task_id]
                yield task_id, entry, summary, key
        else:
            for task_id, entry in self.entries():
                task = _decode(entry)
                yield task_id, entry, encode_summary(task), task.idempotency_key or ""

    def verify(self) -> Iterator[int]:
        """Check every checksum of the file (index, entries, summaries), yielding the
        bytes read so far now and then so that a caller can pace itself; raises
        ChunkDamaged at the first bad one. For the scrub (scheduler/state/scrub.py)."""
        self._load_index()
        done = 0
        for _, entry in self.entries():
            done += len(entry)
            if done >= VERIFY_STEP:
                yield done
                done = 0
        if self.has_summaries:
            for lo in range(0, self.count, 256):
                for _, framed in self._summary_run(lo, min(self.count, lo + 256)):
                    done += len(framed)
                yield done
                done = 0
        yield done

    def tasks_for_key(self, key: str) -> list[TaskState]:
        """The tasks in this chunk submitted with idempotency key `key`."""
        if not self.has_summaries:
            if self._v2_keys is None:
                found: dict[str, list[int]] = {}
                off = len(MAGIC)
                for _, entry in self.entries():
                    k = _decode(entry).idempotency_key
                    if k:
                        found.setdefault(k, []).append(off)
                    off += len(entry)
                self._v2_keys = found
            offsets: Iterable[int] = self._v2_keys.get(key, ())
        else:
            self._load_index()
            hashes = self._key_hashes
            h = _hash(key)
            i = bisect.bisect_left(hashes, h)
            j = bisect.bisect_right(hashes, h, lo=i)
            offsets = self._key_offsets[i:j]
        tasks = [_decode(self._read_entry(off)[1]) for off in offsets]
        return [t for t in tasks if t.idempotency_key == key]

    def summaries_before(self, before: str | None, batch: int = 64) -> Iterator[Summary]:
        """This chunk's summaries, newest task id first, from the one below `before`."""
        if not self.has_summaries:
            rows = self._v2()
            i = len(rows) if before is None else bisect.bisect_left(rows, (before,))
            yield from reversed(rows[:i])
            return
        i = self.count if before is None else self._bisect(before)
        while i > 0:
            lo = max(0, i - batch)
            run = [_summary(row) for row, _ in self._summary_run(lo, i)]
            yield from reversed(run)
            i = lo

    def _bisect(self, task_id: str) -> int:
        """Index of the first summary whose task id is not below `task_id`."""
        lo, hi = 0, self.count
        while lo < hi:
            mid = (lo + hi) // 2
            ((row, _),) = self._summary_run(mid, mid + 1)
            if row[0] < task_id:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _summary_run(self, lo: int, hi: int) -> Iterator[tuple[list[Any], bytes]]:
        """(decoded, framed) summaries [lo, hi), read with one pread, checked."""
        if lo >= hi:
            return
        self._load_index()
        at = self._summary_at
        start = at[lo]
        end = at[hi] if hi < self.count else self._index_off
        buf = os.pread(self._fd, end - start, start)
        off = 0
        for _ in range(hi - lo):
            if off + ENTRY.size > len(buf):
                raise ChunkDamaged(
                    f"archive chunk {self.path}: bad summary at {start + off}",
                    path=self.path,
                )
            crc, length = ENTRY.unpack_from(buf, off)
            rest = buf[off + ENTRY.size : off + ENTRY.size + length]
            if len(rest) != length or zlib.crc32(rest) != crc:
                raise ChunkDamaged(
                    f"archive chunk {self.path}: bad summary at {start + off}",
                    path=self.path,
                )
            yield orjson.loads(rest), buf[off : off + ENTRY.size + length]
            off += ENTRY.size + length

    def _v2(self) -> list[Summary]:
        """A format-02 chunk's summaries, decoded once (chunks never change)."""
        if self._v2_summaries is None:
            self._v2_summaries = sorted(summarize(_decode(e)) for _, e in self.entries())
        return self._v2_summaries

    def replaced(self) -> bool:
        """Is the file at `path` another than the one this chunk reads (rewritten in
        place since it was opened: a redaction), or gone?"""
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return True
        held = os.fstat(self._fd)
        return (on_disk.st_dev, on_disk.st_ino) != (held.st_dev, held.st_ino)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _summary(row: list[Any]) -> Summary:
    tid, wf, status, submitted, updated, done, total, _ = row
    return Summary(tid, wf, TaskStatus(status), submitted, updated, done, total)


def _decode(raw: bytes) -> TaskState:
    (id_len,) = ID_LEN.unpack_from(raw, ENTRY.size)
    data: dict[str, Any] = orjson.loads(raw[ENTRY.size + 2 + id_len :])
    return TaskState.from_dict(data)


class Archive(TaskStore):
    """The chunks a snapshot includes, oldest first; lookups newest first."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.chunks = list(chunks)

    @classmethod
    def open(cls, directory: str, names: Sequence[str]) -> Archive:
        opened: list[Chunk] = []
        try:
            for name in names:
                opened.append(Chunk(os.path.join(directory, name)))
        except SnapshotError:
            for c in opened:
                c.close()
            raise
        return cls(opened)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.chunks]

    def get(self, task_id: str) -> TaskState | None:
        for chunk in reversed(self.chunks):
            t = chunk.get(task_id)
            if t is not None:
                return t
        return None

    def __contains__(self, task_id: str) -> bool:
        return any(task_id in c for c in self.chunks)

    def summaries_before(self, before: str | None) -> Iterator[tuple[str, int, Summary]]:
        """(task_id, -rank, summary) newest task id first, every chunk's copy, the
        newest chunk's first (rank 1 is the newest chunk): for State to merge with
        what is in memory (rank 0)."""
        n = len(self.chunks)
        return heapq.merge(
            *(_ranked(chunk, before, k - n) for k, chunk in enumerate(self.chunks)),
            key=lambda row: (row[0], row[1]),
            reverse=True,
        )

    def task_for_key(self, key: str) -> TaskState | None:
        """The newest submission archived with idempotency key `key` (a key is reused
        once its TTL has passed, and an old task can be archived again later, so
        every chunk is asked)."""
        found = [t for chunk in reversed(self.chunks) for t in chunk.tasks_for_key(key)]
        return max(found, key=lambda t: t.first_event_id, default=None)

    def iter_tasks(self) -> Iterator[TaskState]:
        seen: set[str] = set()
        for chunk in reversed(self.chunks):
            for task_id, entry in chunk.entries():
                if task_id not in seen:
                    seen.add(task_id)
                    yield _decode(entry)

    def first_event_ids(self, skip: Container[str]) -> Iterator[int]:
        """The first event id of each archived task not in `skip` (a task in several
        chunks comes once a copy: its first event never changes). Only that field is
        read from each entry, no task built: the bucket's retention asks this of every
        archived task (scheduler/bucket/needed.py)."""
        for chunk in self.chunks:
            for task_id, entry in chunk.entries():
                if task_id not in skip:
                    (id_len,) = ID_LEN.unpack_from(entry, ENTRY.size)
                    data = orjson.loads(entry[ENTRY.size + 2 + id_len :])
                    yield int(data.get("first_event_id") or 0)

    def __len__(self) -> int:
        seen: set[str] = set()
        for chunk in self.chunks:
            seen.update(chunk.task_ids())
        return len(seen)

    def close(self) -> None:
        for c in self.chunks:
            c.close()


def _ranked(chunk: Chunk, before: str | None, rank: int) -> Iterator[tuple[str, int, Summary]]:
    return ((s.task_id, rank, s) for s in chunk.summaries_before(before))


def merge_plan(levels: Sequence[int]) -> tuple[int, int] | None:
    """The run [start, end) at the newest end to merge next, if any."""
    if len(levels) < MERGE_FANOUT:
        return None
    tail = levels[-MERGE_FANOUT:]
    if all(level == tail[0] for level in tail):
        return len(levels) - MERGE_FANOUT, len(levels)
    return None


def merge_files(directory: str, names: Sequence[str], name: str) -> int:
    """`merge_chunks` by file names: what the merge process runs. Returns the id of
    the process that merged."""
    chunks = [Chunk(os.path.join(directory, n)) for n in names]
    try:
        merge_chunks(directory, chunks, name).close()
    finally:
        for c in chunks:
            c.close()
    return os.getpid()


def merge_chunks(directory: str, chunks: Sequence[Chunk], name: str) -> Chunk:
    """Merge a run of chunks (oldest first) into one of the next level; newest entry wins."""
    level = chunks[0].level + 1
    latest: dict[str, Record] = {}
    for chunk in chunks:  # oldest first, so later entries overwrite earlier ones
        for record in chunk.records():
            latest[record[0]] = record
    path = os.path.join(directory, name)
    write_chunk(path, latest.values(), level)
    return Chunk(path)
