"""A redaction still reaches the disk and the bucket when retention purges the task
(review of issue 34): the records to rewrite are kept with the redaction, not looked
up on the task, which a purge drops from memory."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.bucket import Catalog, MemoryObjects, load_catalog
from apollo11.scheduler.bucket.packing import segment_object
from apollo11.scheduler.bucket.verify import fetch_segment
from apollo11.scheduler.errors import BucketError
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
    await store.redactions_written()
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
    await store.redactions_written()
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
    await store.redactions_written()
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


class _DeleteFailsOnce(MemoryObjects):
    """A bucket whose first delete is refused (a lost connection, a policy missing)."""

    def __init__(self) -> None:
        super().__init__()
        self.refused = 0

    def delete(self, name: str) -> None:
        if not self.refused:
            self.refused += 1
            raise BucketError(f"delete of {name} refused")
        super().delete(name)


async def test_an_old_object_whose_delete_failed_is_deleted_by_a_later_pass(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    objects = _DeleteFailsOnce()
    s = shipper(Host(store), objects)
    await ship_all(s)
    before = load_catalog(objects)
    task_id = _finished(store, before.through)
    await store.log.append(
        EventType.TASK_REDACTED, task_id, payload={"operator": "ana", "reason": "r"}
    )
    await store.redactions_written()
    await write(store, 30, seed=7)
    with pytest.raises(BucketError, match="refused"):
        await ship_all(s)
    s._failed(BucketError("refused"))  # what `run` does: the catalog is read afresh
    await ship_all(s)
    assert objects.refused == 1
    after = load_catalog(objects)
    named = {e.key for e in after.segments}
    rewritten = [e for e in after.segments if e.origin and e.origin != e.sha256]
    assert rewritten
    left = [k for k in objects.objects if k.startswith("segments/") and k not in named]
    assert left == []
    assert _plain(_in_bucket(objects, after), task_id) == []
    await store.close()


async def test_a_node_killed_after_the_catalog_leaves_a_new_primary_to_delete(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    objects = _DeleteFailsOnce()
    objects.refused = 1  # deletes go through
    await ship_all(shipper(Host(store), objects))
    task_id = _finished(store, load_catalog(objects).through)
    await store.log.append(
        EventType.TASK_REDACTED, task_id, payload={"operator": "ana", "reason": "r"}
    )
    await store.redactions_written()
    await write(store, 30, seed=7)
    await ship_all(shipper(Host(store), objects))
    # as if killed between the catalog write and the deletes: an old object put back
    after = load_catalog(objects)
    e = next(e for e in after.segments if e.origin and e.origin != e.sha256)
    old = segment_object(e.first, e.origin or "")
    objects.objects[old] = b"the unredacted bytes"
    await ship_all(shipper(Host(store), objects))  # a new primary's pass
    assert old not in objects.objects
    await store.close()


class _CatalogFailsOnce(MemoryObjects):
    """A bucket whose next catalog write is refused once `armed`."""

    armed = False

    def put_if(self, name: str, data: bytes, *, etag: str | None) -> None:
        if self.armed and name == "catalog.json":
            self.armed = False
            raise BucketError("catalog write refused")
        super().put_if(name, data, etag=etag)


async def test_a_segment_redacted_twice_keeps_its_object_when_a_catalog_write_failed(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    objects = _CatalogFailsOnce()
    s = shipper(Host(store), objects)
    await ship_all(s)
    through = load_catalog(objects).through
    done = [
        t
        for t in store.state.iter_tasks()
        if t.status is TaskStatus.SUCCEEDED and t.last_event_id < through and t.event_ids
    ]
    first, second = done[0], done[1]  # neighbours: their records share segments
    for task in (first, second):
        await store.log.append(
            EventType.TASK_REDACTED, task.task_id, payload={"operator": "a", "reason": "r"}
        )
        await store.redactions_written()
        await write(store, 30, seed=len(task.task_id))
        if task is second:
            shared = [
                e
                for e in load_catalog(objects).segments
                if e.origin and any(e.first <= i <= e.last for i in second.event_ids or ())
            ]
            assert shared  # a segment the first redaction rewrote holds the second's
            redact = s._redact

            def failing(*args: Any, redact: Any = redact) -> Catalog:
                objects.armed = True  # its new objects go up, then the catalog fails
                return redact(*args)  # type: ignore[no-any-return]

            s._redact = failing  # type: ignore[method-assign,assignment]
            with pytest.raises(BucketError, match="refused"):
                await ship_all(s)
            s._redact = redact  # type: ignore[method-assign]
            s._failed(BucketError("refused"))
        await ship_all(s)
    catalog = load_catalog(objects)
    for e in catalog.segments:
        assert e.key in objects.objects, f"the catalog names {e.key}, not in the bucket"
    named = {e.key for e in catalog.segments}
    assert [k for k in objects.objects if k.startswith("segments/") and k not in named] == []
    events = _in_bucket(objects, catalog)
    assert _plain(events, first.task_id) == _plain(events, second.task_id) == []
    await store.close()


async def test_a_forgotten_redaction_is_carried_out_first_and_stays_done(
    tmp_path: Path,
) -> None:
    """The state forgets a purged task's redaction (a TASK_PURGED's "forget") only once
    the bucket's copy is rewritten, as the shipper answers; after that the shipper has
    nothing due for it, and a member folding the redaction, the purge and the forget
    in one batch (a standby catching up) still rewrites its own disk."""
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    objects = MemoryObjects()
    s = shipper(Host(store), objects)
    store.bucket_redacted = s.redacted
    await ship_all(s)
    task_id = _finished(store, load_catalog(objects).through)
    red = await store.log.append(
        EventType.TASK_REDACTED, task_id, payload={"operator": "ana", "reason": "r"}
    )
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": [task_id]})
    await store.redactions_written()
    assert not store.redaction_settled(task_id, red.event_id)  # the bucket holds the data
    await write(store, 30, seed=7)
    # the bucket's pass waits for this member's snapshot files (on their thread: a
    # loaded machine may not have written them by the first ship_all)
    await _until(lambda: store.snapshots_redacted(task_id, red.event_id))
    await ship_all(s)
    await ship_all(s)
    assert _plain(_in_bucket(objects, load_catalog(objects)), task_id) == []
    assert store.redaction_settled(task_id, red.event_id)
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": [], "forget": [task_id]})
    assert task_id not in store.state.redacted
    assert s._redaction_due(store, load_catalog(objects)) is None
    await ship_all(s)  # and the shipper goes on
    await store.close()

    standby = open_store(tmp_path / "n2")
    await write(standby, 30)
    task = next(t for t in standby.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    assert task.event_ids is not None
    ids = list(task.event_ids)
    await standby.log.append_many(
        [
            Draft(EventType.TASK_REDACTED, task.task_id, "", {"operator": "ana", "reason": "r"}),
            Draft(EventType.TASK_PURGED, "", "", {"tasks": [task.task_id]}),
            Draft(EventType.TASK_PURGED, "", "", {"tasks": [], "forget": [task.task_id]}),
        ]
    )
    await standby.redactions_written()
    assert task.task_id not in standby.state.redacted
    assert _plain(standby.log.read_ids(ids), task.task_id) == []
    await standby.close()


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(60):  # generous: the machine is shared
        while not check():
            await store_turn()


async def store_turn() -> None:
    await asyncio.sleep(0.05)  # a state with no event to await
