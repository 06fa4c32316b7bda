"""Old history read back from the bucket (scheduler/bucket/history.py): which objects
cover a set of ids (pure), and the events read back against the node's own, on an
in-memory bucket (the same through a node on SeaweedFS: test_history_s3.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import (
    BucketHistory,
    Catalog,
    MemoryObjects,
    ObjectRef,
    covering,
    load_catalog,
    state_from_bucket,
)
from apollo11.scheduler.bucket.history import covering_range
from apollo11.scheduler.errors import CorruptObjectError, HistoryGoneError
from apollo11.scheduler.nodeview import read_events
from apollo11.scheduler.state import Store, state_at
from tests.scheduler.bucket.helpers import CONFIG, Host, open_store, ship_all, shipper, write


def _catalog(*ranges: tuple[int, int]) -> Catalog:
    c = Catalog.empty("c", "test")
    for first, last in ranges:
        ref = ObjectRef(f"{first}.seg", f"segments/{first}", f"{first:064x}", 10, 5)
        c = c.with_segment(first=first, last=last, first_term=1, last_term=1, ref=ref)
    return c


def test_covering_groups_ids_by_the_segment_that_holds_them() -> None:
    c = _catalog((1, 10), (11, 20), (21, 30))
    cover = covering(c, [2, 9, 11, 25, 30])
    assert [(s.first, ids) for s, ids in cover.reads] == [(1, (2, 9)), (11, (11,)), (21, (25, 30))]
    assert cover.missing == ()


def test_covering_names_the_ids_no_segment_holds() -> None:
    c = _catalog((1, 10), (11, 20))
    cover = covering(c, [5, 21, 40])
    assert [(s.first, ids) for s, ids in cover.reads] == [(1, (5,))]
    assert cover.missing == (21, 40)
    assert covering(Catalog.empty("c", "t"), [1]).missing == (1,)


def test_covering_a_range_takes_every_segment_it_touches() -> None:
    c = _catalog((1, 10), (11, 20), (21, 30))
    assert [s.first for s in covering_range(c, 10, 11)] == [1, 11]
    assert [s.first for s in covering_range(c, 12, 19)] == [11]
    assert covering_range(c, 31, 40) == ()


async def _archived(tmp_path: Path) -> tuple[Store, MemoryObjects, int]:
    store = open_store(tmp_path / "n1")
    await write(store, 40)
    await store.wait_snapshot()
    objects = MemoryObjects()
    await ship_all(shipper(Host(store), objects))
    return store, objects, BucketHistory(objects).catalog().through


async def test_events_read_back_are_the_nodes_own(tmp_path: Path) -> None:
    store, objects, through = await _archived(tmp_path)
    assert through > 100
    local = {e.event_id: e for e in store.log.read(1, through)}
    history = BucketHistory(objects)
    ids = [1, 2, 50, through // 2, through]
    got, missing = history.read_ids(ids)
    assert got == [local[i] for i in ids]
    assert missing == ()
    assert history.read_range(1, through) == [local[i] for i in range(1, through + 1)]
    assert history.read_range(3, through, limit=7) == [local[i] for i in range(3, 10)]
    _, missing = history.read_ids([through + 1])
    assert missing == (through + 1,), "past the bucket's end: named, not invented"
    await store.close()


async def test_the_cache_keeps_a_few_segments_and_no_more(tmp_path: Path) -> None:
    store, objects, _ = await _archived(tmp_path)
    history = BucketHistory(objects, cache_segments=2)
    segments = history.catalog().segments
    assert len(segments) >= 3
    reads = metrics.ARCHIVE_HISTORY_READS
    bucket, cache = reads.labels("bucket")._value.get(), reads.labels("cache")._value.get()
    history.read_ids([segments[0].first])
    history.read_ids([segments[0].first + 1])
    assert history.fetched == 1, "a second read of the same segment is served from memory"
    history.read_ids([segments[1].first])
    history.read_ids([segments[2].first])
    history.read_ids([segments[0].first])
    assert history.fetched == 4, "the oldest went when a third came: fetched again"
    # what an operator sees of it: four round trips to the bucket, one read from memory
    assert reads.labels("bucket")._value.get() - bucket == 4
    assert reads.labels("cache")._value.get() - cache == 1
    await store.close()


async def test_a_corrupt_object_is_reported_with_its_key(tmp_path: Path) -> None:
    store, objects, _ = await _archived(tmp_path)
    history = BucketHistory(objects)
    first = history.catalog().segments[0]
    objects.objects[first.key] = objects.objects[first.key][:-9] + b"corrupted"
    counted = metrics.ARCHIVE_CORRUPT._value.get()
    with pytest.raises(CorruptObjectError, match=first.key):
        history.read_ids([first.first])
    assert metrics.ARCHIVE_CORRUPT._value.get() == counted + 1, "counted: the alert fires"
    del objects.objects[first.key]
    with pytest.raises(CorruptObjectError, match="missing: the catalog names it"):
        history.read_range(first.first, first.first)
    await store.close()


UNTIL = 120  # a state of the past, before what local retention keeps


async def _dropped(
    tmp_path: Path,
) -> tuple[Store, MemoryObjects, dict[str, list[object]], dict[str, object]]:
    """A store whose log retention dropped segments the bucket holds; every task's
    events as they were before, and the state as of UNTIL."""
    cfg = dataclasses.replace(CONFIG, keep_all_segments=False, snapshots_keep=1)
    store = Store.open(tmp_path / "n1", config=cfg, instance_id="n1")
    objects = MemoryObjects()
    s = shipper(Host(store), objects)
    store.retention_floor = s.retention_floor
    await write(store, 60)
    await store.wait_snapshot()
    expected = state_at(tmp_path / "n1", until=UNTIL).to_dict()
    before: dict[str, list[object]] = {}
    for e in store.log.read():
        if e.task_id:
            before.setdefault(e.task_id, []).append(e)
    await ship_all(s)
    await write(store, 30, seed=2)  # the next snapshots drop what the bucket holds
    await store.wait_snapshot()
    await ship_all(s)
    assert store.log.first_id > 1, "retention dropped the oldest segments"
    return store, objects, before, expected


async def test_a_task_retention_dropped_is_read_from_the_bucket(tmp_path: Path) -> None:
    store, objects, before, _ = await _dropped(tmp_path)
    first = store.log.first_id
    oldest = next(t for t, evs in before.items() if evs[0].event_id < first)  # type: ignore[attr-defined]
    task = store.state.peek(oldest)
    assert task is not None

    page = await read_events(store, task, 0, 0, 1000)
    assert page.gone_before == first and page.bucket_before == 0
    assert page.note == (
        f"events before {first} are no longer on this node's disk and no --archive-url is set"
    )
    assert len(page.events) < len(before[oldest])

    store.older = BucketHistory(objects)
    page = await read_events(store, task, 0, 0, 1000)
    assert page.events == before[oldest]
    assert page.note == f"events before {first} read from the bucket"
    two = await read_events(store, task, 0, 0, 2)
    assert two.events == before[oldest][:2] and two.next_id == before[oldest][2].event_id  # type: ignore[attr-defined]

    whole = await read_events(store, None, 1, 0, first + 5)
    assert [e.event_id for e in whole.events] == list(range(1, first + 6))
    assert whole.bucket_before == first
    await store.close()


async def test_replay_until_reads_the_bucket_when_the_disk_no_longer_reaches(
    tmp_path: Path,
) -> None:
    store, objects, _, expected = await _dropped(tmp_path)
    first = store.log.first_id
    assert first > UNTIL
    await store.close()
    with pytest.raises(HistoryGoneError, match=f"events before {first} are not kept"):
        state_at(tmp_path / "n1", until=UNTIL)
    past = state_from_bucket(BucketHistory(objects), tmp_path / "n1", UNTIL)
    assert past.state.to_dict() == expected
    assert past.below == UNTIL + 1
    whole = state_from_bucket(BucketHistory(objects), tmp_path / "n1", None)
    assert whole.state.to_dict() == state_at(tmp_path / "n1").to_dict(), "the bucket, then the disk"


async def test_a_segment_rewritten_since_the_catalog_was_read_is_read_anew(
    tmp_path: Path,
) -> None:
    # a redaction puts a segment under a new key and deletes the old object: a reader
    # holding the older catalog reads the new object, not a "missing" error
    store, objects, _ = await _archived(tmp_path)
    history = BucketHistory(objects)
    old = history.catalog().segments[0]
    key = old.key.replace(old.sha256[:8], "00000000")
    objects.objects[key] = objects.objects.pop(old.key)
    catalog = load_catalog(objects)
    moved = dataclasses.replace(catalog.segments[0], key=key)
    catalog = dataclasses.replace(catalog, segments=(moved, *catalog.segments[1:]))
    objects.objects["catalog.json"] = catalog.encode()
    counted = metrics.ARCHIVE_CORRUPT._value.get()
    got, _ = history.read_ids([old.first])
    assert [e.event_id for e in got] == [old.first]
    assert metrics.ARCHIVE_CORRUPT._value.get() == counted, "not damage: no alert"
    await store.close()
