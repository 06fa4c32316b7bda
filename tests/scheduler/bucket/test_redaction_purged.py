"""A redaction still reaches the disk and the bucket when retention purges the task
(review of issue 34): the records to rewrite are kept with the redaction, not looked
up on the task, which a purge drops from memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from apollo11.scheduler.bucket import Catalog, MemoryObjects, load_catalog
from apollo11.scheduler.bucket.verify import fetch_segment
from apollo11.scheduler.log import Draft, Event, EventType
from apollo11.scheduler.log.record import decode_batch
from apollo11.scheduler.state import State, Store, TaskStatus, apply_all
from tests.scheduler.bucket.helpers import Host, open_store, ship_all, shipper, write


def _plain(events: list[Event], task_id: str) -> list[tuple[int, str]]:
    """The task's data values still there (not the marker, not 0)."""

    def kept(v: Any) -> bool:
        return v not in (None, 0) and not (isinstance(v, dict) and "$redacted" in v)

    return [
        (e.event_id, k)
        for e in events
        if e.task_id == task_id
        for k in ("input", "result", "output")
        if kept(e.payload.get(k))
    ]


def _in_bucket(objects: MemoryObjects, catalog: Catalog) -> list[Event]:
    out: list[Event] = []
    for e in catalog.segments:
        raw = fetch_segment(objects, e)
        out += decode_batch(raw, 0, base=0, path="o", expect=e.first, term=0).events
    return out


def _finished(store: Store, before: int) -> str:
    return next(
        t.task_id
        for t in store.state.iter_tasks()
        if t.status is TaskStatus.SUCCEEDED and t.last_event_id < before
    )


async def test_a_purge_before_the_bucket_rewrite_still_rewrites_the_bucket(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    objects = MemoryObjects()
    s = shipper(Host(store), objects)
    await ship_all(s)
    task_id = _finished(store, load_catalog(objects).through)
    assert _plain(_in_bucket(objects, load_catalog(objects)), task_id)
    await store.log.append(
        EventType.TASK_REDACTED, task_id, payload={"operator": "ana", "reason": "r"}
    )
    # retention purges it before the redaction's segment is sealed and shipped
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": [task_id]})
    store.redactor.drain()
    await write(store, 30, seed=7)
    steps = await ship_all(s)
    steps += await ship_all(s)
    assert any(st.kind == "redact" for st in steps)
    assert _plain(_in_bucket(objects, load_catalog(objects)), task_id) == []
    await store.close()


async def test_a_redaction_and_a_purge_in_one_batch_rewrite_the_disk(tmp_path: Path) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 30)
    task = next(t for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    assert task.event_ids is not None
    ids = list(task.event_ids)
    # one durable batch, as a standby catching up (or a replay at start) folds it
    await store.log.append_many(
        [
            Draft(EventType.TASK_REDACTED, task.task_id, "", {"operator": "ana", "reason": "r"}),
            Draft(EventType.TASK_PURGED, "", "", {"tasks": [task.task_id]}),
        ]
    )
    store.redactor.drain()
    assert _plain(store.log.read_ids(ids), task.task_id) == []
    await store.close()
    # and what the fold keeps survives a snapshot and a restart
    again = open_store(tmp_path / "n1")
    assert again.state.redacted_records[task.task_id] == ids
    await again.close()


async def test_a_purged_task_redacted_is_rewritten_and_every_replay_agrees(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 30)
    task = next(t for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    assert task.event_ids is not None
    ids = list(task.event_ids)
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": [task.task_id]})
    await write(store, 40, seed=5)  # a snapshot or two after the purge
    await store.wait_snapshot()
    await store.log.append(
        EventType.TASK_REDACTED, task.task_id, payload={"operator": "ana", "reason": "r"}
    )
    store.redactor.drain()
    assert store.state.redacted_records[task.task_id] == ids
    assert _plain(store.log.read_ids(ids), task.task_id) == []
    assert _plain(store.shown(store.log.read_ids(ids)), task.task_id) == []
    live = store.state.to_dict()
    await store.close()
    again = open_store(tmp_path / "n1")  # from its snapshot
    fresh = apply_all(State(), again.log.read(1, again.log.durable_id))  # from the first event
    assert again.state.to_dict() == live
    assert fresh.redacted == again.state.redacted
    assert fresh.redacted_records == again.state.redacted_records
    assert fresh.purged_records == again.state.purged_records
    await again.close()
