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

    b"A11ARC01"
    entries   u32 crc32(json) | u32 len | json (TaskState.to_dict)
    index     orjson {task_id: entry offset}
    footer    u64 index_offset | u32 index_len | u32 crc32(index) | u32 level | b"A11ARCND"
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Iterator, Sequence
from struct import Struct
from typing import Any

import orjson

from scheduler.errors import SnapshotError
from scheduler.log.datadir import fsync_dir
from scheduler.replay import TaskState, TaskStore

MAGIC = b"A11ARC01"
END_MAGIC = b"A11ARCND"
ENTRY = Struct("<II")
FOOTER = Struct("<QIII8s")
MERGE_FANOUT = 8
SUFFIX = ".arc"


def chunk_name(watermark: int, level: int) -> str:
    return f"{watermark:020d}-{level}{SUFFIX}"


def encode_entry(task: TaskState) -> tuple[str, bytes]:
    body = orjson.dumps(task.to_dict())
    return task.task_id, ENTRY.pack(zlib.crc32(body), len(body)) + body


def write_chunk(path: str, entries: Iterable[tuple[str, bytes]], level: int) -> int:
    """Write a chunk durably (temp, fsync, rename, dir fsync); return its entry count."""
    index: dict[str, int] = {}
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(MAGIC)
        off = len(MAGIC)
        for task_id, entry in entries:
            index[task_id] = off
            f.write(entry)
            off += len(entry)
        raw_index = orjson.dumps(index)
        f.write(raw_index)
        f.write(FOOTER.pack(off, len(raw_index), zlib.crc32(raw_index), level, END_MAGIC))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))
    return len(index)


class Chunk:
    """A read-only chunk file. Its index is loaded on first use, not at open."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise SnapshotError(f"archive chunk {path} is missing: {e}") from e
        size = os.fstat(self._fd).st_size
        tail = os.pread(self._fd, FOOTER.size, size - FOOTER.size) if size >= FOOTER.size else b""
        if len(tail) != FOOTER.size or os.pread(self._fd, len(MAGIC), 0) != MAGIC:
            self.close()
            raise SnapshotError(f"archive chunk {path} is truncated or not a chunk")
        self._index_off, self._index_len, self._index_crc, self.level, end = FOOTER.unpack(tail)
        if end != END_MAGIC or self._index_off + self._index_len + FOOTER.size != size:
            self.close()
            raise SnapshotError(f"archive chunk {path} has a bad footer")
        self._index: dict[str, int] | None = None

    def _load_index(self) -> dict[str, int]:
        if self._index is None:
            raw = os.pread(self._fd, self._index_len, self._index_off)
            if zlib.crc32(raw) != self._index_crc:
                raise SnapshotError(
                    f"archive chunk {self.path}: index checksum mismatch at offset "
                    f"{self._index_off}"
                )
            self._index = orjson.loads(raw)
        return self._index

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._load_index()

    def __len__(self) -> int:
        return len(self._load_index())

    def raw(self, task_id: str) -> bytes | None:
        """The entry for `task_id` with its framing, checked."""
        off = self._load_index().get(task_id)
        if off is None:
            return None
        head = os.pread(self._fd, ENTRY.size, off)
        crc, length = ENTRY.unpack(head)
        body = os.pread(self._fd, length, off + ENTRY.size)
        if len(body) != length or zlib.crc32(body) != crc:
            raise SnapshotError(f"archive chunk {self.path}: bad entry at offset {off}")
        return head + body

    def get(self, task_id: str) -> TaskState | None:
        raw = self.raw(task_id)
        return None if raw is None else _decode(raw)

    def task_ids(self) -> Iterator[str]:
        return iter(self._load_index())

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _decode(raw: bytes) -> TaskState:
    data: dict[str, Any] = orjson.loads(raw[ENTRY.size :])
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

    def iter_tasks(self) -> Iterator[TaskState]:
        seen: set[str] = set()
        for chunk in reversed(self.chunks):
            for task_id in chunk.task_ids():
                if task_id not in seen:
                    seen.add(task_id)
                    raw = chunk.raw(task_id)
                    assert raw is not None
                    yield _decode(raw)

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
    latest: dict[str, Chunk] = {}
    for chunk in chunks:
        for task_id in chunk.task_ids():
            latest[task_id] = chunk

    def entries() -> Iterator[tuple[str, bytes]]:
        for task_id, chunk in latest.items():
            raw = chunk.raw(task_id)
            assert raw is not None
            yield task_id, raw

    path = os.path.join(directory, name)
    write_chunk(path, entries(), level)
    return Chunk(path)
