"""The shipper and restore in process, on an in-memory bucket (the fast tier; the same
paths against SeaweedFS: test_archive_s3.py)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from pathlib import Path

import pytest

from apollo11.scheduler.bucket import (
    CATALOG,
    MemoryObjects,
    Shipper,
    build_data_dir,
    load_catalog,
)
from apollo11.scheduler.bucket.shipper import ARCHIVE_NICE
from apollo11.scheduler.errors import ApolloError, BucketError
from apollo11.scheduler.state import Store, state_at
from tests.scheduler.bucket.helpers import CONFIG, Host, open_store, ship_all, shipper, write


async def test_a_second_pass_and_a_new_primary_upload_nothing_twice(tmp_path: Path) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 40)
    await store.wait_snapshot()  # else one landing meanwhile is new, and goes up
    objects = MemoryObjects()
    await ship_all(shipper(Host(store), objects))
    puts = objects.puts
    assert (await ship_all(shipper(Host(store), objects, node_id="n2")))[-1].kind == "idle"
    assert objects.puts == puts, "content-addressed: nothing is uploaded twice"
    await store.close()


async def test_local_retention_keeps_every_segment_the_bucket_does_not_hold(
    tmp_path: Path,
) -> None:
    cfg = dataclasses.replace(CONFIG, keep_all_segments=False, snapshots_keep=1)
    store = Store.open(tmp_path / "n1", config=cfg, instance_id="n1")
    objects = MemoryObjects()
    s = shipper(Host(store), objects)
    store.retention_floor = s.retention_floor
    objects.down = True
    await write(store, 60)
    with pytest.raises(BucketError):
        await s.cycle()
    await store.wait_snapshot()
    assert store.log.first_id == 1, "the bucket holds nothing: every segment stays"
    objects.down = False
    await ship_all(s)
    through = load_catalog(objects).through
    await write(store, 20, seed=2)  # the next snapshots may drop what is in the bucket
    await store.wait_snapshot()
    assert 1 < store.log.first_id <= through + 1
    await store.close()


async def test_restore_from_memory_matches_the_node_and_refuses_a_full_directory(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    await store.wait_snapshot()
    objects = MemoryObjects()
    s = shipper(Host(store), objects)
    await ship_all(s)
    await write(store, 20, seed=4)
    await store.wait_snapshot()
    await ship_all(s)
    await store.close()
    catalog = load_catalog(objects)
    assert len(catalog.snapshots) >= 2
    chunk_puts = [n for n in objects.put_names if n.startswith("chunks/")]
    assert len(chunk_puts) == len(set(chunk_puts)), "a chunk goes up once, whatever refers to it"
    said = await asyncio.to_thread(build_data_dir, objects, tmp_path / "r")
    assert said.startswith(f"restored {tmp_path / 'r'} from memory://: snapshot ")
    expected = state_at(tmp_path / "n1", until=catalog.through).to_dict()
    assert state_at(tmp_path / "r").to_dict() == expected
    with pytest.raises(ApolloError, match="is not empty: restore builds a new data directory"):
        await asyncio.to_thread(build_data_dir, objects, tmp_path / "r")


async def test_a_node_on_a_restored_directory_does_not_replay_what_the_restore_did(
    tmp_path: Path,
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    await store.wait_snapshot()
    objects = MemoryObjects()
    await ship_all(shipper(Host(store), objects))
    await store.close()
    catalog = load_catalog(objects)
    # the worst case: a bucket without a snapshot, every event replayed by the restore
    bare = MemoryObjects()
    for seg in catalog.segments:
        bare.put(seg.key, objects.get(seg.key) or b"")
    bare.put(CATALOG, dataclasses.replace(catalog, snapshots=()).encode())
    said = await asyncio.to_thread(build_data_dir, bare, tmp_path / "r")
    assert f"full replay + {catalog.through} events" in said
    restored = open_store(tmp_path / "r")
    assert (restored.recovery.snapshot, restored.recovery.replayed) == (catalog.through, 0)
    await restored.close()
    expected = state_at(tmp_path / "n1", until=catalog.through).to_dict()
    assert state_at(tmp_path / "r").to_dict() == expected


async def test_an_empty_bucket_has_nothing_to_restore(tmp_path: Path) -> None:
    with pytest.raises(BucketError, match="no catalog at memory://"):
        await asyncio.to_thread(build_data_dir, MemoryObjects(), tmp_path / "r")


def test_a_conditional_put_is_refused_when_the_object_changed_or_appeared() -> None:
    """The in-memory store keeps S3's conditional PUT: If-Match on the ETag read,
    If-None-Match: * for an object that must not exist yet."""
    from apollo11.scheduler.errors import BucketConflictError

    objects = MemoryObjects()
    objects.put_if("catalog.json", b"first", etag=None)
    with pytest.raises(BucketConflictError):
        objects.put_if("catalog.json", b"again", etag=None)
    tagged = objects.get_tagged("catalog.json")
    assert tagged is not None and tagged[0] == b"first"
    objects.put("catalog.json", b"someone else")
    with pytest.raises(BucketConflictError):
        objects.put_if("catalog.json", b"mine", etag=tagged[1])
    assert objects.get("catalog.json") == b"someone else"
    now = objects.get_tagged("catalog.json")
    assert now is not None
    objects.put_if("catalog.json", b"mine", etag=now[1])
    assert objects.get("catalog.json") == b"mine"


async def test_a_demoted_primary_no_longer_counts_redactions_held_back(tmp_path: Path) -> None:
    from apollo11.scheduler import metrics

    store = open_store(tmp_path / "n1")
    await write(store, 10)
    host = Host(store)
    s = shipper(host, MemoryObjects())
    await ship_all(s)
    s._held["t"] = (5, 1e18)  # a redaction a damaged object held back, as said
    metrics.ARCHIVE_REDACTIONS_PENDING.set(1)
    host.role = "standby"
    await s.cycle()
    assert metrics.ARCHIVE_REDACTIONS_PENDING._value.get() == 0  # the primary's to say
    await store.close()


async def test_the_shippers_work_runs_below_the_nodes_threads() -> None:
    """A segment's compression and upload take their CPU from the shipper's share,
    not from the loop that appends (the append p99 with the archive on)."""
    s = Shipper(Host(None), MemoryObjects(), node_id="n1", cluster="test")

    def nice_here() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    mine = nice_here()
    assert await s._call(nice_here) == min(19, mine + ARCHIVE_NICE)
    assert nice_here() == mine  # the loop's own thread untouched
    assert ARCHIVE_NICE >= 10
