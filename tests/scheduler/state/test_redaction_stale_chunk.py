"""Found in review: a snapshot write that fails after its redaction pass left the
archive reading the old (unlinked, data-holding) chunk files; the next snapshot's
pass found the directory clean, counted the redaction carried out, and a purge's
rewrite copied the old entries into a new chunk: the data back on disk while
`snapshots_redacted` said it was gone. A chunk whose file was replaced under it is
reopened before anything reads it."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path

import pytest

from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.state import snapshot as snapmod
from apollo11.scheduler.state.store import Store, StoreConfig
from apollo11.scheduler.testing.history import etl_history

LOG = LogConfig(segment_max_bytes=16 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)
WAIT_S = 60.0  # generous: the machine is shared


async def _write(store: Store, n: int, seed: int) -> None:
    it = etl_history(n, seed=seed, concurrency=4, fail_rate=0, cancel_rate=0)
    while chunk := list(itertools.islice(it, 20)):
        await store.log.append_many(chunk)
        await store.wait_snapshot()


def _holding(d: str, needle: bytes) -> list[str]:
    return [n for n in os.listdir(d) if needle in Path(d, n).read_bytes()]


async def test_a_failed_write_after_a_redaction_brings_no_data_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store.open(
        tmp_path, config=StoreConfig(log=LOG, snapshot_interval=50), instance_id="n1"
    )
    await _write(store, 12, seed=1)
    task = next(t for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    await _write(store, 12, seed=2)
    snaps = store.snapshots.directory
    needle = f"s3://bucket/{task.task_id}/".encode()
    assert any(n.endswith(".arc") for n in _holding(snaps, needle))

    real = snapmod.write_atomic
    failed: list[str] = []

    def full_disk_once(path: str, data: bytes, *more: bytes) -> None:
        if more and not failed:  # the new snapshot file (framed: several parts), once
            failed.append(path)
            raise OSError(28, "No space left on device")
        real(path, data, *more)

    monkeypatch.setattr(snapmod, "write_atomic", full_disk_once)
    red = await store.log.append(
        EventType.TASK_REDACTED, task.task_id, payload={"operator": "ana", "reason": "r"}
    )
    async with asyncio.timeout(WAIT_S):
        while not failed:
            await asyncio.sleep(0.02)  # a state with no event to await
    await store.wait_snapshot()
    # purge another task of a chunk the failed write had rewritten: its rewrite
    # (`_without`) copies the entries the archive reads
    chunk = next(c for c in store.state.archive.chunks if c.replaced())
    other = next(t for t, _ in chunk.entries() if t != task.task_id)
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": [other]})
    for seed in range(3, 12):
        await _write(store, 12, seed=seed)
        held = _holding(snaps, needle)
        assert not (held and store.snapshots_redacted(task.task_id, red.event_id)), (
            f"counted redacted, yet {held} hold the data"
        )
    store.redactor.drain()
    assert store.snapshots_redacted(task.task_id, red.event_id)
    held = _holding(snaps, needle)
    await store.close()
    assert held == [], f"counted redacted, yet {held} hold the data"
