"""Two writers of one chunk path (a merge and a redaction rewriting the same chunk, a
snapshot's write beside either) each write a temp file of their own: whichever renames
last wins whole, and neither tears the other's file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.scheduler.log.datadir import write_atomic
from apollo11.scheduler.state import replay
from apollo11.scheduler.state.archive import Chunk, Record, chunk_name, encode_entry, write_chunk
from apollo11.scheduler.testing.history import etl_history
from tests.scheduler.state.test_fold import events


def _records(n: int, seed: int) -> list[Record]:
    tasks = list(replay(events(etl_history(n, seed=seed))).tasks.values())
    return [encode_entry(t) for t in tasks]


def test_a_chunk_written_while_another_write_of_it_is_half_done_stays_whole(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / chunk_name(1, 0))
    first, second = _records(20, 1), _records(30, 2)

    def interleaved() -> Iterator[Record]:
        yield from first[:10]
        # the other writer, start to end, while this one is half way through
        assert write_chunk(path, second, 0) == len(second)
        yield from first[10:]

    assert write_chunk(path, interleaved(), 0) == len(first)
    chunk = Chunk(path)
    for _ in chunk.verify():  # raises ChunkDamaged at a damaged entry
        pass
    assert sorted(chunk.task_ids()) == sorted(r[0] for r in first)  # the last rename's
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_a_file_written_while_another_write_of_it_is_half_done_stays_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "f")
    fsync = os.fsync
    calls: list[int] = []

    def other_writer_first(fd: int) -> None:
        # the first fsync is the first writer's, its temp file written: the other
        # writer goes then, start to end
        calls.append(fd)
        if len(calls) == 1:
            write_atomic(path, b"b" * 50)
        fsync(fd)

    monkeypatch.setattr(os, "fsync", other_writer_first)
    write_atomic(path, b"a" * 10, b"a" * 10)
    assert Path(path).read_bytes() == b"a" * 20
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
