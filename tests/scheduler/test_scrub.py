"""Issue 15, item 3: a damaged archive chunk is rebuilt from the log."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from scheduler.archive import Chunk
from scheduler.bench.history import etl_history
from scheduler.errors import ArchiveLostError
from scheduler.log import FsyncPolicy, LogConfig
from scheduler.store import Store, StoreConfig

LOG = LogConfig(segment_max_bytes=16 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)


def _store(root: Path, *, keep_all: bool = True) -> Store:
    cfg = StoreConfig(log=LOG, snapshot_interval=50, snapshots_keep=2, keep_all_segments=keep_all)
    return Store.open(root, config=cfg, instance_id="n1")


async def _drive(store: Store, n_tasks: int) -> None:
    it = etl_history(n_tasks, seed=3, concurrency=8)
    while chunk := list(itertools.islice(it, 20)):
        await store.log.append_many(chunk)
        await store.wait_snapshot()


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def _archived_chunk(store: Store) -> tuple[Chunk, str, int]:
    """The oldest chunk, one of its tasks (not in memory), and its entry offset."""
    chunk = store.state.archive.chunks[0]  # type: ignore[union-attr]
    hashes = chunk._load_index()
    for i in range(len(hashes)):
        task_id, _ = chunk._read_entry(chunk._offsets[i])
        if task_id not in store.state.tasks:
            return chunk, task_id, int(chunk._offsets[i])
    raise AssertionError("no archived task")


async def test_a_damaged_chunk_is_rebuilt_from_the_log_and_the_task_read(tmp_path: Path) -> None:
    store = _store(tmp_path / "d")
    await _drive(store, 150)
    chunk, task_id, at = _archived_chunk(store)
    want = store.state.peek(task_id)
    assert want is not None
    _flip(chunk.path, at + 20)
    with pytest.raises(Exception, match="bad entry"):
        store.state.peek(task_id)
    got = await store.lookup(task_id)
    assert got is not None and got.to_dict() == want.to_dict()
    assert store.state.peek(task_id) == got, "the rebuilt chunk is in use"
    for _ in Chunk(chunk.path).verify():
        pass  # the file on disk reads well again
    await store.close()
    again = _store(tmp_path / "d")  # and recovery uses it
    assert again.state.peek(task_id).to_dict() == want.to_dict()  # type: ignore[union-attr]
    await again.close()


async def test_a_damaged_chunk_the_log_no_longer_holds_is_reported_by_name(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path / "d", keep_all=False)
    await _drive(store, 150)
    assert store.log.first_id > 1
    chunk, task_id, at = _archived_chunk(store)
    _flip(chunk.path, at + 20)
    with pytest.raises(ArchiveLostError, match=chunk.name) as e:
        await store.lookup(task_id)
    assert "log starts at event" in str(e.value)
    await store.close()
