"""A redaction reaches the snapshot files and archive chunks written before it (issue
34, part 6): right after the TASK_REDACTED is applied a snapshot rewrites every older
file holding the task's data, in place. Each snapshot still loads and replays to the
state it stood for (only without the data), and a second pass changes nothing."""

from __future__ import annotations

import asyncio
import itertools
import os
from pathlib import Path

from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import (
    Chunk,
    TaskStatus,
    redacted_chunk,
    redacted_snapshot,
    state_at,
    watermark_of,
)
from apollo11.scheduler.state.store import Store, StoreConfig
from apollo11.scheduler.testing.history import etl_history

LOG = LogConfig(segment_max_bytes=16 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)
WAIT_S = 120.0


def _store(root: Path) -> Store:
    return Store.open(root, config=StoreConfig(log=LOG, snapshot_interval=50), instance_id="n1")


async def _write(store: Store, n_tasks: int, seed: int) -> None:
    it = etl_history(n_tasks, seed=seed, concurrency=4, fail_rate=0, cancel_rate=0)
    while chunk := list(itertools.islice(it, 20)):
        await store.log.append_many(chunk)
        await store.wait_snapshot()


def _holding(directory: str, needle: bytes) -> list[str]:
    return [n for n in os.listdir(directory) if needle in Path(directory, n).read_bytes()]


async def test_older_snapshots_and_chunks_are_rewritten_and_still_replay(tmp_path: Path) -> None:
    store = _store(tmp_path)
    await _write(store, 12, seed=1)
    task = next(t for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    await _write(store, 12, seed=2)  # it goes quiet and into a chunk
    snaps = store.snapshots.directory
    needle = f"s3://bucket/{task.task_id}/".encode()  # in each step's result
    assert any(n.endswith(".arc") for n in _holding(snaps, needle))
    marks = store.snapshots.watermarks()
    originals = [
        Path(snaps, n).read_bytes() for n in sorted(os.listdir(snaps)) if n.endswith(".snap")
    ]
    red = await store.log.append(
        EventType.TASK_REDACTED, task.task_id, payload={"operator": "ana", "reason": "r"}
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not store.snapshots_redacted(task.task_id, red.event_id):
        assert loop.time() < deadline, "the files were not rewritten"
        await asyncio.sleep(0.05)
    store.redactor.drain()
    assert _holding(snaps, needle) == []
    await store.close()

    # every older snapshot still stands for its state, the task's data hidden
    older = [w for w in marks if w in _present(snaps)]
    assert older, "snapshots from before the redaction are kept"
    for w in older:
        past = state_at(tmp_path, until=w)
        again = state_at(tmp_path, until=w, hide_later=False)
        assert past.last_event_id == w
        seen = again.peek(task.task_id)
        assert seen is None or seen.input in (None, {"$redacted": red.event_id})
        assert {t.task_id for t in past.iter_tasks()} == {t.task_id for t in again.iter_tasks()}
    # a second pass is a no-op, byte for byte
    redactions = {task.task_id: red.event_id}
    for name in sorted(os.listdir(snaps)):
        path = os.path.join(snaps, name)
        if name.endswith(".arc"):
            chunk = Chunk(path)
            assert not redacted_chunk(chunk, redactions, path + ".again")
            chunk.close()
        elif name.endswith(".snap"):
            raw = Path(path).read_bytes()
            assert redacted_snapshot(raw, redactions, where=path) == raw
    # many redactions at once (the pass after a start) go over the task lines: the same
    many = {**redactions, **{f"task-9-{i:07d}": 1 for i in range(20)}}
    for raw in originals:
        once = redacted_snapshot(raw, redactions, where="original")
        assert needle not in once and redacted_snapshot(raw, many, where="original") == once
    assert any(needle in raw for raw in originals), "a snapshot line held it"
    reopened = _store(tmp_path)
    shown = reopened.state.peek(task.task_id)
    assert shown is not None and shown.input == {"$redacted": red.event_id}
    await reopened.close()


def _present(directory: str) -> set[int]:
    return {w for n in os.listdir(directory) if (w := watermark_of(n)) is not None}
