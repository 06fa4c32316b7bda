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

    b"A11ARC02"
    entries   u32 crc32(rest) | u32 len(rest) | rest = u16 len(task_id) | task_id | json
    index     count x u32 crc32(task_id), ascending | count x u64 entry offset, same order
    footer    u64 index_offset | u32 count | u32 crc32(index) | u32 level | b"A11ARCND"

The index is fixed-width so that loading it is a copy, not a parse: a
lookup costs a binary search and one entry read, whatever the history.
Hash collisions are resolved by comparing the entry's task id.
"""

from __future__ import annotations

import bisect
import os
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from struct import Struct
from typing import Any

import orjson

from scheduler.errors import SnapshotError
from scheduler.log.datadir import fsync_dir
from scheduler.replay import Summary, TaskState, TaskStore, summarize

MAGIC = b"A11ARC02"
END_MAGIC = b"A11ARCND"
ENTRY = Struct("<II")
ID_LEN = Struct("<H")
FOOTER = Struct("<QIII8s")
MERGE_FANOUT = 8
SUFFIX = ".arc"


def chunk_name(watermark: int, level: int) -> str:
    return f"{watermark:020d}-{level}{SUFFIX}"


def encode_entry(task: TaskState) -> tuple[str, bytes]:
    tid = task.task_id.encode()
    rest = ID_LEN.pack(len(tid)) + tid + orjson.dumps(task.to_dict())
    return task.task_id, ENTRY.pack(zlib.crc32(rest), len(rest)) + rest


def _hash(task_id: str) -> int:
    return zlib.crc32(task_id.encode())


def write_chunk(path: str, entries: Iterable[tuple[str, bytes]], level: int) -> int:
    """Write a chunk durably (temp, fsync, rename, dir fsync); return its entry count."""
    keyed: list[tuple[int, int]] = []
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(MAGIC)
        off = len(MAGIC)
        for task_id, entry in entries:
            keyed.append((_hash(task_id), off))
            f.write(entry)
            off += len(entry)
        keyed.sort()
        index = (
            array("I", (h for h, _ in keyed)).tobytes()
            + array("Q", (o for _, o in keyed)).tobytes()
        )
        f.write(index)
        f.write(FOOTER.pack(off, len(keyed), zlib.crc32(index), level, END_MAGIC))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))
    return len(keyed)


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
        tail = os.pread(self._fd, FOOTER.size, size - FOOTER.size) if size >= FOOTER.size else b""
        if len(tail) != FOOTER.size or os.pread(self._fd, len(MAGIC), 0) != MAGIC:
            self.close()
            raise SnapshotError(f"archive chunk {path} is truncated or not a chunk")
        self._index_off, self.count, self._index_crc, self.level, end = FOOTER.unpack(tail)
        if end != END_MAGIC or self._index_off + 12 * self.count + FOOTER.size != size:
            self.close()
            raise SnapshotError(f"archive chunk {path} has a bad footer")
        self._hashes: array[int] | None = None
        self._offsets: array[int] = array("Q")
        self._summaries: list[Summary] | None = None

    def __del__(self) -> None:
        self.close()

    def _load_index(self) -> array[int]:
        if self._hashes is None:
            raw = os.pread(self._fd, 12 * self.count, self._index_off)
            if zlib.crc32(raw) != self._index_crc:
                raise SnapshotError(
                    f"archive chunk {self.path}: index checksum mismatch at offset "
                    f"{self._index_off}"
                )
            hashes = array("I")
            hashes.frombytes(raw[: 4 * self.count])
            self._offsets = array("Q")
            self._offsets.frombytes(raw[4 * self.count :])
            self._hashes = hashes
        return self._hashes

    def _read_entry(self, off: int) -> tuple[str, bytes]:
        """(task_id, whole entry) at `off`, checked."""
        head = os.pread(self._fd, ENTRY.size, off)
        crc, length = ENTRY.unpack(head)
        rest = os.pread(self._fd, length, off + ENTRY.size)
        if len(rest) != length or zlib.crc32(rest) != crc:
            raise SnapshotError(f"archive chunk {self.path}: bad entry at offset {off}")
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
        off = len(MAGIC)
        while off < self._index_off:
            task_id, entry = self._read_entry(off)
            yield task_id, entry
            off += len(entry)

    def task_ids(self) -> Iterator[str]:
        return (t for t, _ in self.entries())

    def summaries(self) -> list[Summary]:
        """One line per task, for listings; decoded once per chunk (chunks never change)."""
        if self._summaries is None:
            self._summaries = [summarize(_decode(entry)) for _, entry in self.entries()]
        return self._summaries

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


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

    def iter_summaries(self) -> Iterator[Summary]:
        seen: set[str] = set()
        for chunk in reversed(self.chunks):
            for s in chunk.summaries():
                if s.task_id not in seen:
                    seen.add(s.task_id)
                    yield s

    def iter_tasks(self) -> Iterator[TaskState]:
        seen: set[str] = set()
        for chunk in reversed(self.chunks):
            for task_id, entry in chunk.entries():
                if task_id not in seen:
                    seen.add(task_id)
                    yield _decode(entry)

    def __len__(self) -> int:
        seen: set[str] = set()
        for chunk in self.chunks:
            seen.update(chunk.task_ids())
        return len(seen)

    def close(self) -> None:
        for c in self.chunks:
            c.close()


def merge_plan(levels: Sequence[int]) -> tuple[int, int] | None:
    """The run [start, end) at the newest end to merge next, if any."""
    if len(levels) < MERGE_FANOUT:
        return None
    tail = levels[-MERGE_FANOUT:]
    if all(level == tail[0] for level in tail):
        return len(levels) - MERGE_FANOUT, len(levels)
    return None


def merge_chunks(directory: str, chunks: Sequence[Chunk], name: str) -> Chunk:
    """Merge a run of chunks (oldest first) into one of the next level; newest entry wins."""
    level = chunks[0].level + 1
    latest: dict[str, bytes] = {}
    for chunk in chunks:  # oldest first, so later entries overwrite earlier ones
        for task_id, entry in chunk.entries():
            latest[task_id] = entry
    path = os.path.join(directory, name)
    write_chunk(path, latest.items(), level)
    return Chunk(path)
