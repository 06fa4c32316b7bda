"""The archive against a real S3-compatible server (SeaweedFS from its wheel): what
lands in the bucket, a cut-off upload resumed, the bucket away and back, a
corrupt object, and a data directory restored from it."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import (
    MemoryObjects,
    ObjectStore,
    build_data_dir,
    load_catalog,
    open_bucket,
    repair,
    verify_archive,
)
from apollo11.scheduler.errors import BucketConfigError, BucketError, CorruptObjectError
from apollo11.scheduler.state import state_at
from apollo11.scheduler.testing.seaweed import BUCKET, READER, LocalSeaweed
from tests.scheduler.bucket.helpers import Host, open_store, ship_all, shipper, write

pytestmark = pytest.mark.timeout(180)


def _objects(client, prefix: str) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """key -> size of every object under the prefix, listed by the server itself."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return {o["Key"][len(prefix) + 1 :]: o["Size"] for p in pages for o in p.get("Contents", ())}


def _prefix(url: str) -> str:
    return url.split("/", 3)[3]


async def test_segments_and_snapshots_land_compressed_under_the_catalog(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    await store.wait_snapshot()
    objects = open_bucket(archive_url)
    s = shipper(Host(store), objects)
    steps = await ship_all(s)
    kinds = [st.kind for st in steps]
    assert "segment" in kinds and "snapshot" in kinds, steps
    assert steps[-1].sentence.startswith("up to date: the bucket holds events through")

    catalog = load_catalog(objects)
    sealed = [seg for seg in store.log.segments[:-1]]
    assert [(e.first, e.last) for e in catalog.segments] == [
        (seg.first_id, seg.last_id) for seg in sealed
    ]
    assert catalog.problems() == []
    assert catalog.cluster_id == "c0ffee" and catalog.writer == "n1"
    listed = _objects(s3_server.client(), _prefix(archive_url))
    for e in catalog.segments:
        assert listed[e.key] == e.stored < e.size  # compressed, and the size it says
    assert catalog.snapshots, "a snapshot went up"
    snap = catalog.snapshots[-1]
    assert listed[snap.file.key] == snap.file.stored
    report = verify_archive(objects)
    assert report.ok, report
    ratio = report.raw_bytes / report.stored_bytes
    assert ratio > 2, f"compression ratio {ratio:.2f}"
    await store.close()


async def test_an_upload_cut_off_before_its_catalog_entry_resumes_without_duplicate_or_hole(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    real = open_bucket(archive_url)

    class CutAfterSecondSegment:
        """The real bucket; the process "dies" after putting the second segment's
        object, before the catalog names it (as a kill -9 between the two PUTs)."""

        def __init__(self, inner: ObjectStore) -> None:
            self.inner = inner
            self.segments = 0

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        @property
        def describe(self) -> str:
            return self.inner.describe

        def put(self, name: str, data: bytes) -> None:
            self.inner.put(name, data)
            if name.startswith("segments/"):
                self.segments += 1
                if self.segments == 2:
                    raise SystemExit("killed between the object and the catalog")

    first = shipper(Host(store), CutAfterSecondSegment(real))  # type: ignore[arg-type]
    await first.cycle()
    with pytest.raises(SystemExit):
        await first.cycle()
    assert load_catalog(real).through == store.log.segments[0].last_id

    # the next primary (another node id, a later term: its log says so)
    successor = shipper(Host(store), real, node_id="n2")
    await ship_all(successor)
    catalog = load_catalog(real)
    assert catalog.problems() == []
    assert catalog.through == store.log.segments[-2].last_id
    listed = [k for k in _objects(s3_server.client(), _prefix(archive_url)) if "segments/" in k]
    assert sorted(listed) == sorted(e.key for e in catalog.segments), "no duplicate, no stray"
    ids = [(e.first, e.last) for e in catalog.segments]
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(ids)), "no hole"
    await store.close()


async def test_the_bucket_down_under_load_then_back_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = LocalSeaweed(tmp_path / "s3").start()
    try:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        objects = open_bucket(f"s3://{BUCKET}/outage")
        store = open_store(tmp_path / "n1")
        s = shipper(Host(store), objects)
        running = asyncio.create_task(s.run())
        await write(store, 20, seed=1)
        await _until(lambda: s.catalog is not None and s.catalog.through > 0)
        failures = metrics.ARCHIVE_FAILURES._value.get()
        server.stop()  # down: connections refused
        before = store.log.durable_id
        end = await write(store, 80, seed=2)  # the node goes on writing meanwhile
        assert end > before
        await _until(lambda: metrics.ARCHIVE_FAILURES._value.get() > failures)
        assert store.log.writable
        known = int(metrics.ARCHIVE_THROUGH._value.get())  # the bucket's end, last read
        pending = [seg for seg in store.log.segments[:-1] if seg.first_id > known]
        assert pending, "segments sealed while the bucket was down wait on disk"
        await _until(lambda: metrics.ARCHIVE_PENDING_SEGMENTS._value.get() == len(pending))
        assert metrics.ARCHIVE_LAG_EVENTS._value.get() >= store.log.durable_id - known > 0
        server.start()  # back, same ports and data
        sealed_end = store.log.segments[-2].last_id
        await _until(lambda: s.catalog is not None and s.catalog.through >= sealed_end, 60)
        running.cancel()
        catalog = load_catalog(objects)
        assert catalog.problems() == []
        assert [(e.first, e.last) for e in catalog.segments] == [
            (seg.first_id, seg.last_id) for seg in store.log.segments[:-1]
        ]
        assert verify_archive(objects).ok
        await store.close()
    finally:
        server.stop()


async def _until(cond, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_read_only_bucket_keeps_the_node_working_and_uploads_wait(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 40)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", READER[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", READER[1])
    reader = open_bucket(archive_url)
    s = shipper(Host(store), reader)
    with pytest.raises(BucketError, match="AccessDenied"):
        await s.cycle()
    assert s.retention_floor() == 1, "nothing may leave the disk: the bucket holds nothing"
    assert store.log.writable
    await write(store, 10, seed=3)
    # writable again (an operator fixed the policy): the same history goes up, whole
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.env()["AWS_ACCESS_KEY_ID"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.env()["AWS_SECRET_ACCESS_KEY"])
    await ship_all(shipper(Host(store), open_bucket(archive_url)))
    assert load_catalog(reader).through == store.log.segments[-2].last_id
    await store.close()


async def test_a_corrupt_object_is_reported_by_verify_and_refused_by_restore(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 40)
    objects = open_bucket(archive_url)
    await ship_all(shipper(Host(store), objects))
    await store.close()
    catalog = load_catalog(objects)
    victim = catalog.segments[-1].key  # the last: every restore reads it
    client = s3_server.client()
    key = f"{_prefix(archive_url)}/{victim}"
    good = client.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(bad))

    report = verify_archive(objects)
    assert not report.ok
    assert len(report.problems) == 1 and victim in report.problems[0], report
    with pytest.raises(CorruptObjectError, match=victim):
        await asyncio.to_thread(build_data_dir, objects, tmp_path / "restored")
    assert not (tmp_path / "restored").exists(), "no half-built directory is left"
    assert not (tmp_path / "restored.restoring").exists()
    # a node still holds that segment: the object is put back from its bytes
    assert repair(objects, report, tmp_path / "n1") == [
        f"{victim}: repaired from {tmp_path / 'n1' / 'log' / catalog.segments[-1].key[9:29]}.seg"
    ]
    assert verify_archive(objects).ok


async def test_a_wiped_node_is_restored_from_the_bucket_with_its_history(
    tmp_path: Path, archive_url: str
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 80)
    await store.wait_snapshot()
    objects = open_bucket(archive_url)
    s = shipper(Host(store), objects)
    await ship_all(s)
    await write(store, 30, seed=7)  # seals more segments: a snapshot becomes restorable
    await store.wait_snapshot()
    await ship_all(s)
    await store.close()
    catalog = load_catalog(objects)
    assert catalog.restorable() is not None

    said = await asyncio.to_thread(build_data_dir, objects, tmp_path / "restored")
    assert f"through event {catalog.through}" in said
    expected = state_at(tmp_path / "n1", until=catalog.through).to_dict()
    restored = open_store(tmp_path / "restored")
    assert catalog.restorable().watermark < catalog.through  # type: ignore[union-attr]
    # the restore's replay of the tail kept as a snapshot: the node replays nothing again
    assert (restored.recovery.snapshot, restored.recovery.replayed) == (catalog.through, 0)
    assert restored.state.to_dict() == expected
    # it goes on where the cluster rotated: the next event in a segment of its own
    assert restored.log.segments[-1].first_id == catalog.through + 1
    await restored.close()


def test_missing_credentials_and_a_wrong_bucket_are_refused_naming_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, s3_server: LocalSeaweed, tmp_path: Path
) -> None:
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(BucketConfigError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        open_bucket(f"s3://{BUCKET}/x")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "someone")
    with pytest.raises(BucketConfigError, match="incomplete S3 credentials"):
        open_bucket(f"s3://{BUCKET}/x")
    for k, v in s3_server.env().items():
        monkeypatch.setenv(k, v)
    with pytest.raises(BucketConfigError, match="'no-such-bucket' does not exist"):
        open_bucket("s3://no-such-bucket/x").probe()
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(BucketConfigError, match="credentials were refused"):
        open_bucket(f"s3://{BUCKET}/x").probe()


def test_memory_objects_stand_in_for_the_fast_tests() -> None:
    m = MemoryObjects()
    m.put("a/b", b"x")
    assert m.get("a/b") == b"x" and m.size("a/b") == 1 and m.list("a/") == ["a/b"]


async def test_a_deposed_primary_loses_the_race_for_the_catalog(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    """The catalog's check and its write are one conditional PUT (If-Match on the ETag
    read, If-None-Match for the first): a deposed primary whose check passed, then the
    new primary wrote, has its write refused by the server and the new primary's
    catalog stays (with compare-then-put it was overwritten)."""
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    real = open_bucket(archive_url)
    successor = shipper(Host(store), real, node_id="n2")

    class NewPrimaryWritesBetween:
        """The real bucket; right after the deposed primary reads the catalog to check
        it before its write (its second read: a shipper's first cycle reads the
        catalog afresh), the new primary (n2, a later term) writes one."""

        def __init__(self, inner: ObjectStore) -> None:
            self.inner = inner
            self.reads = 2

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

        @property
        def describe(self) -> str:
            return self.inner.describe

        def _intrude(self, name: str) -> None:
            if self.reads and name == "catalog.json":
                self.reads -= 1
                if self.reads:
                    return
                newer = load_catalog(self.inner).signed(term=99, writer="n2", now_ms=1)
                self.inner.put("catalog.json", newer.encode())

        def get(self, name: str) -> bytes | None:
            data = self.inner.get(name)
            self._intrude(name)
            return data

        def get_tagged(self, name: str) -> tuple[bytes, str] | None:
            tagged: tuple[bytes, str] | None = self.inner.get_tagged(name)
            self._intrude(name)
            return tagged

    await successor.cycle()  # the first segment, and a catalog, up
    racing = NewPrimaryWritesBetween(real)
    deposed = shipper(Host(store), racing)  # type: ignore[arg-type]
    with pytest.raises(BucketError, match="catalog changed under this node"):
        await deposed.cycle()
    assert racing.reads == 0, "the new primary wrote between the check and the write"
    catalog = load_catalog(real)
    assert (catalog.writer, catalog.term) == ("n2", 99), "the stale write won the race"
    await store.close()
