"""Retention in the bucket's catalog (scheduler/bucket/expiry.py): which segments go,
decided from the catalog alone."""

from __future__ import annotations

import dataclasses
import hashlib

import orjson

from apollo11.scheduler.bucket import Catalog, ObjectRef, Shipper, SnapshotEntry
from apollo11.scheduler.bucket.catalog import decode
from apollo11.scheduler.bucket.expiry import expired, garbage, strays, unreferenced
from apollo11.scheduler.bucket.objects import MemoryObjects
from apollo11.scheduler.bucket.packing import (
    CATALOG,
    segment_first,
    segment_object,
    snapshot_object,
    snapshot_watermark,
)
from tests.scheduler.bucket.helpers import Host


def _ref(name: str, key: str) -> ObjectRef:
    return ObjectRef(name, key, f"{abs(hash(key)):064x}"[:64], 100, 10)


def _catalog(*ranges: tuple[int, int]) -> Catalog:
    c = Catalog.empty("c", "test")
    for first, last in ranges:
        ref = ObjectRef(f"{first}.seg", segment_object(first, f"{first:064x}"), "a" * 64, 100, 10)
        c = c.with_segment(first=first, last=last, first_term=1, last_term=1, ref=ref)
    return c


def _snap(watermark: int, keep_from: int, chunks: tuple[str, ...] = ()) -> SnapshotEntry:
    return SnapshotEntry(
        watermark,
        1,
        (watermark, 0, 0),
        _ref(f"s{watermark}", f"snapshots/{watermark}"),
        tuple(_ref(c, f"chunks/{c}") for c in chunks),
        keep_from,
    )


SEGS = ((1, 10), (11, 20), (21, 30), (31, 40))


def test_segments_before_the_first_live_task_and_the_snapshot_go() -> None:
    c = _catalog(*SEGS).with_snapshot(_snap(35, keep_from=21))
    drop = expired(c)
    assert drop is not None
    assert [s.first for s in drop.catalog.segments] == [21, 31]
    assert drop.catalog.chain_base == c.segments[1].chain
    assert drop.catalog.problems() == [], "what is left still verifies"
    assert drop.catalog.chain == c.chain
    assert drop.keys == (c.segments[0].key, c.segments[1].key)
    assert (drop.segments, drop.events, drop.stored) == (2, 20, 20)
    assert "dropping 2 segments 1..20" in drop.sentence
    assert drop.catalog.restorable() == c.restorable(), "a restore starts where it did"
    assert expired(drop.catalog) is None, "once: the same catalog drops nothing more"


def test_a_live_task_in_the_first_segment_keeps_everything() -> None:
    assert expired(_catalog(*SEGS).with_snapshot(_snap(35, keep_from=5))) is None
    assert expired(_catalog(*SEGS).with_snapshot(_snap(35, keep_from=10))) is None
    assert expired(_catalog(*SEGS).with_snapshot(_snap(35, keep_from=11))) is not None


def test_nothing_goes_without_what_the_snapshot_knew() -> None:
    assert expired(_catalog(*SEGS)) is None, "no snapshot: a restore needs every segment"
    assert expired(_catalog(*SEGS).with_snapshot(_snap(35, keep_from=0))) is None
    # a snapshot past the segments is not restorable: the one before it counts
    c = _catalog(*SEGS).with_snapshot(_snap(15, keep_from=16)).with_snapshot(_snap(50, 51))
    drop = expired(c)
    assert drop is not None and [s.first for s in drop.catalog.segments] == [11, 21, 31]


def test_never_past_the_newest_restorable_snapshot_nor_the_last_segment() -> None:
    # every task purged (keep_from is the watermark + 1): the segments after the
    # snapshot stay, a restore replays them
    drop = expired(_catalog(*SEGS).with_snapshot(_snap(25, keep_from=26)))
    assert drop is not None and [s.first for s in drop.catalog.segments] == [21, 31]
    # a snapshot at the very end: the last segment stays all the same
    drop = expired(_catalog(*SEGS).with_snapshot(_snap(40, keep_from=41)))
    assert drop is not None and [s.first for s in drop.catalog.segments] == [31]
    assert drop.catalog.restorable() is not None


def test_snapshots_that_can_no_longer_start_a_restore_leave_with_their_objects() -> None:
    c = (
        _catalog(*SEGS)
        .with_snapshot(_snap(8, keep_from=0, chunks=("a", "b")))
        .with_snapshot(_snap(25, keep_from=0, chunks=("a", "c")))
        .with_snapshot(_snap(35, keep_from=31, chunks=("a", "c", "d")))
    )
    drop = expired(c)
    assert drop is not None
    assert [s.first for s in drop.catalog.segments] == [31]
    assert [s.watermark for s in drop.catalog.snapshots] == [35]
    gone = set(drop.keys)
    assert {"snapshots/8", "snapshots/25", "chunks/b"} <= gone
    assert not gone & {"chunks/a", "chunks/c", "chunks/d", "snapshots/35"}, "still named"


def test_the_catalog_reads_back_with_keep_from_and_an_old_one_without() -> None:
    c = _catalog(*SEGS).with_snapshot(_snap(35, keep_from=21))
    assert decode(c.encode(), name="catalog.json") == c
    old = c.encode().replace(b',"keep_from":21', b"")
    # the body's checksum covers the field: an older catalog is one written without it
    doc = orjson.loads(old)
    body = orjson.dumps(doc["body"], option=orjson.OPT_SORT_KEYS)
    doc["sha256"] = hashlib.sha256(body).hexdigest()
    back = decode(orjson.dumps(doc), name="catalog.json")
    assert back.snapshots[0].keep_from == 0 and expired(back) is None


def test_unreferenced_names_what_the_new_catalog_stopped_naming() -> None:
    old = _catalog(*SEGS).with_snapshot(_snap(35, keep_from=0, chunks=("a",)))
    assert unreferenced(old, old) == ()
    new = old.rewound(31)
    assert unreferenced(old, new) == (old.segments[-1].key, "chunks/a", "snapshots/35")


def test_garbage_is_the_segment_objects_below_the_catalogs_first() -> None:
    c = _catalog(*SEGS[2:])
    listed = [
        segment_object(1, "f" * 64),
        segment_object(11, "e" * 64),
        *(s.key for s in c.segments),
    ]
    listed.append("segments/not-ours")
    assert garbage(c, listed) == listed[:2]
    assert garbage(_catalog(*SEGS), listed) == []
    assert garbage(Catalog.empty("c", "t"), listed) == []
    assert segment_first(segment_object(42, "0" * 64)) == 42
    assert segment_first("chunks/x") is None


def test_strays_are_what_no_upload_from_this_catalog_on_can_name() -> None:
    c = _catalog((11, 20), (21, 30)).with_snapshot(_snap(25, keep_from=0, chunks=("a",)))
    named = [e.key for e in c.segments] + ["snapshots/25", "chunks/a"]
    old_snap = snapshot_object(20, "b" * 64)
    listed = [
        *named,
        segment_object(21, "c" * 64),  # another version of a named segment: a stray
        segment_object(5, "d" * 64),  # below the first segment: garbage's, not a stray
        segment_object(31, "e" * 64),  # after the end: the next upload may name it
        old_snap,  # an older snapshot no catalog named
        snapshot_object(25, "f" * 64),  # the newest's watermark, another version
        snapshot_object(40, "f" * 64),  # newer: an upload in flight may name it
        "chunks/b-" + "a" * 64 + ".zst",  # a chunk no entry names
    ]
    assert strays(c, listed) == [
        segment_object(21, "c" * 64),
        old_snap,
        snapshot_object(25, "f" * 64),
        "chunks/b-" + "a" * 64 + ".zst",
    ]
    assert strays(Catalog.empty("c", "test"), listed) == []
    assert snapshot_watermark(old_snap) == 20 and snapshot_watermark("chunks/x") is None


class _NewPrimaryMidSweep(MemoryObjects):
    """After the sweep's first delete, another primary writes the catalog (this node
    was deposed meanwhile): it may name a stray the sweep listed."""

    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[str] = []

    def delete(self, name: str) -> None:
        super().delete(name)
        self.deleted.append(name)
        if len(self.deleted) == 1:
            now = decode(self.objects[CATALOG], name=CATALOG)
            self.objects[CATALOG] = dataclasses.replace(now, term=now.term + 1).encode()


def test_a_sweep_stops_deleting_strays_once_another_primary_writes_the_catalog() -> None:
    objects = _NewPrimaryMidSweep()
    c = _catalog((11, 20), (21, 30))
    objects.objects[CATALOG] = c.encode()
    stray = [segment_object(21, ch * 64) for ch in "bcd"]
    for key in [*(e.key for e in c.segments), *stray]:
        objects.objects[key] = b"x"
    s = Shipper(Host(None), objects, node_id="n1", cluster="test")
    _, said = s._sweep(c, term=1)
    assert objects.deleted == [stray[0]], "one delete, then the catalog is another's"
    assert all(k in objects.objects for k in stray[1:])
    assert "1 objects" in said
