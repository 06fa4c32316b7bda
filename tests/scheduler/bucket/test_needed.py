"""What a snapshot's live tasks need of the log (scheduler/bucket/needed.py), from the
snapshot's own files: memory tasks and archive chunks, the purged ones left out."""

from __future__ import annotations

from pathlib import Path

from apollo11.scheduler.bucket.needed import first_needed
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import Archive, TaskStatus
from tests.scheduler.bucket.helpers import open_store, write


async def test_the_first_event_of_the_oldest_task_not_purged(tmp_path: Path) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 40)
    await store.wait_snapshot()
    w = store.snapshots.watermarks()[0]
    _, state = store.snapshots.load(w)
    assert first_needed(state, w) == 0, "nothing purged yet: nothing to drop, nothing read"
    assert isinstance(state.archive, Archive) and len(state.archive) > 0
    state.archive.close()

    tasks = sorted(store.state.iter_tasks(), key=lambda t: t.first_event_id)
    done = [t for t in tasks if t.status is TaskStatus.SUCCEEDED][:10]
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": [t.task_id for t in done]})
    await write(store, 10, seed=3)
    await store.wait_snapshot()
    # one taken now: the interval's after the purge may have been skipped (a task
    # changed while it was written, on a loaded machine), leaving one before it newest
    await store.snapshot_now()
    w = store.snapshots.watermarks()[0]
    _, state = store.snapshots.load(w)
    gone = {t.task_id for t in done}
    alive = [t for t in tasks if t.task_id not in gone]
    assert first_needed(state, w) == min(t.first_event_id for t in alive)
    assert isinstance(state.archive, Archive)
    state.archive.close()

    everything = [t.task_id for t in store.state.iter_tasks() if t.quiescent]
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": everything})
    await store.snapshot_now()
    w = store.snapshots.watermarks()[0]
    _, state = store.snapshots.load(w)
    live = [t.first_event_id for t in store.state.iter_tasks()]
    assert first_needed(state, w) == min(live, default=w + 1)
    assert isinstance(state.archive, Archive)
    state.archive.close()
    await store.close()
