"""`apollo11 replay --until N` from the bucket (scheduler/bucket/travel.py) starts at the
newest bucket snapshot at or before N, reads no segment that snapshot already covers,
and answers exactly what replaying the bucket from event 1 answers: N before the first
snapshot, at one, inside a redacted task's history (a snapshot older than the
redaction still holds its data), after a purge. Against a real SeaweedFS."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from apollo11.scheduler.bucket import (
    BucketHistory,
    Catalog,
    ObjectStore,
    load_catalog,
    open_bucket,
    packing,
    start_for,
    state_from_bucket,
)
from apollo11.scheduler.errors import CorruptObjectError
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import Store, TaskStatus
from tests.nodes import APOLLO11, ROOT
from tests.scheduler.bucket.helpers import CONFIG, Host, ship_all, shipper, write

pytestmark = pytest.mark.timeout(300)


class _Spy:
    """The bucket, with the keys read from it written down."""

    def __init__(self, real: ObjectStore) -> None:
        self.real = real
        self.read: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self.real, name)

    def get(self, name: str) -> bytes | None:
        self.read.append(name)
        return self.real.get(name)


def _segments_read(spy: _Spy, catalog: Catalog) -> list[tuple[int, int]]:
    keys = set(spy.read)
    return [(s.first, s.last) for s in catalog.segments if s.key in keys]


def _finished_before(store: Store, before: int, skip: str = "") -> str:
    return next(
        t.task_id
        for t in sorted(store.state.iter_tasks(), key=lambda t: t.first_event_id)
        if t.status is TaskStatus.SUCCEEDED and t.last_event_id < before and t.task_id != skip
    )


async def _history(root: Path, url: str) -> tuple[int, int, int, int]:
    """A node's history in the bucket at `url`, with a task redacted and one purged
    after snapshots the bucket keeps, and local retention past all of it. The ids
    of the purge, of the redaction, of the snapshot uploaded just before it, and of
    the log's last event."""
    cfg = dataclasses.replace(CONFIG, keep_all_segments=False, snapshots_keep=1)
    store = Store.open(root, config=cfg, instance_id="n1")
    s = shipper(Host(store), open_bucket(url))
    store.retention_floor = s.retention_floor
    for seed in (1, 2):
        await write(store, 30, seed=seed)
        await store.wait_snapshot()
        await ship_all(s)
    before = load_catalog(open_bucket(url)).snapshots[-1].watermark
    purged = _finished_before(store, before)
    purge_id = (
        await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": [purged]})
    ).event_id
    redacted = _finished_before(store, before, skip=purged)
    redact_id = (
        await store.log.append(
            EventType.TASK_REDACTED, redacted, payload={"operator": "ana", "reason": "gdpr"}
        )
    ).event_id
    await store.redactions_written()
    for seed in (3, 4):
        await write(store, 30, seed=seed)
        await store.wait_snapshot()
        await ship_all(s)
        await ship_all(s)
    assert store.log.first_id > redact_id, "the disk no longer reaches back to the redaction"
    end = store.log.durable_id
    await store.close()
    return purge_id, redact_id, before, end


async def test_replay_until_starts_at_the_newest_bucket_snapshot_and_agrees_with_event_one(
    tmp_path: Path, archive_url: str
) -> None:
    data = tmp_path / "n1"
    purge_id, redact_id, before, end = await _history(data, archive_url)
    catalog = load_catalog(open_bucket(archive_url))
    marks = [s.watermark for s in catalog.snapshots]
    assert before in marks, "the snapshot older than the redaction is still listed"
    cases = {
        "at a snapshot": before,
        "before the first snapshot": marks[0] - 3,
        "a redacted task's data in the snapshot": redact_id - 1,
        "right after the purge": purge_id,
        "at the redaction": redact_id,
        "the bucket's last event": catalog.through,
        "past the bucket's end, on the disk": end,
    }
    for what, n in cases.items():
        spy = _Spy(open_bucket(archive_url))
        got = state_from_bucket(BucketHistory(spy), data, n)
        snap = start_for(catalog, n)
        k = snap.watermark if snap is not None else 0
        # what makes it fast: nothing the snapshot holds is read again
        assert [r for r in _segments_read(spy, catalog) if r[1] <= k] == [], what
        assert got.snapshot == k, what
        whole = state_from_bucket(
            BucketHistory(open_bucket(archive_url)), data, n, from_snapshot=False
        )
        assert whole.snapshot == 0
        assert got.state.last_event_id == whole.state.last_event_id == n, what
        assert got.state.to_dict() == whole.state.to_dict(), what
    # without a local snapshot past N to name the later redactions, the records after
    # N are scanned (the bucket's, then the disk's): the same answer
    bare = tmp_path / "bare"
    shutil.copytree(data, bare)
    for f in (bare / "snapshots").iterdir():
        f.unlink()
    n = redact_id - 1
    scanned = state_from_bucket(BucketHistory(open_bucket(archive_url)), bare, n)
    whole = state_from_bucket(BucketHistory(open_bucket(archive_url)), data, n, from_snapshot=False)
    assert scanned.state.to_dict() == whole.state.to_dict()
    assert start_for(catalog, marks[0] - 3) is None, "before the first: from event 1"
    assert start_for(catalog, before) is not None and start_for(catalog, before).watermark == before  # type: ignore[union-attr]

    # the command says where it started
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    run = subprocess.run(
        [*APOLLO11, "replay", "--data-dir", str(data), "--until", str(redact_id - 1), "--json",
         "--archive-url", archive_url],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env={**os.environ, **env},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert (
        f"from the bucket snapshot at event {start_for(catalog, redact_id - 1).watermark}"
        in run.stderr
    )  # type: ignore[union-attr]
    assert json.loads(run.stdout)["last_event_id"] == redact_id - 1


async def test_a_corrupt_snapshot_or_segment_stops_the_replay_naming_its_key(
    tmp_path: Path, archive_url: str
) -> None:
    data = tmp_path / "n1"
    _, redact_id, _, _ = await _history(data, archive_url)
    objects = open_bucket(archive_url)
    catalog = load_catalog(objects)
    snap = start_for(catalog, redact_id)
    assert snap is not None
    after = next(s for s in catalog.segments if s.last > snap.watermark)
    good = objects.get(after.key)
    assert good is not None
    objects.put(after.key, packing.pack(b"not the segment the catalog names"))
    with pytest.raises(CorruptObjectError, match=after.key):
        state_from_bucket(BucketHistory(objects), data, redact_id)
    objects.put(after.key, good)
    objects.put(snap.file.key, good)  # a snapshot's key holding other bytes
    with pytest.raises(CorruptObjectError, match=snap.file.key):
        state_from_bucket(BucketHistory(objects), data, redact_id)


async def test_a_redaction_after_n_of_a_task_purged_since_is_still_hidden(
    tmp_path: Path, archive_url: str
) -> None:
    """Review finding: the later redactions were read from the newest local snapshot's
    `redacted`, which a TASK_PURGED's `forget` list empties: a task redacted after N,
    then purged and forgotten, showed its data from a bucket snapshot older than the
    redaction, where the replay from event 1 hid it."""
    root = tmp_path / "n1"
    cfg = dataclasses.replace(CONFIG, keep_all_segments=False, snapshots_keep=1)
    store = Store.open(root, config=cfg, instance_id="n1")
    s = shipper(Host(store), open_bucket(archive_url))
    store.retention_floor = s.retention_floor
    for seed in (1, 2):
        await write(store, 30, seed=seed)
        await store.wait_snapshot()
        await ship_all(s)
    before = load_catalog(open_bucket(archive_url)).snapshots[-1].watermark
    x = _finished_before(store, before)
    payload = {"operator": "ana", "reason": "gdpr"}
    redact_id = (await store.log.append(EventType.TASK_REDACTED, x, payload=payload)).event_id
    await store.redactions_written()
    seed = 10
    while not s.redacted(x, redact_id):  # the bucket rewritten for it
        assert seed < 20, "the shipper never rewrote the bucket for the redaction"
        await write(store, 30, seed=seed)
        seed += 1
        await store.wait_snapshot()
        await ship_all(s)
        await ship_all(s)
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": [x], "forget": [x]})
    assert x not in store.state.redacted
    for seed in (3, 4):  # newer local snapshots, which no longer name the redaction
        await write(store, 30, seed=seed)
        await store.wait_snapshot()
        await ship_all(s)
        await ship_all(s)
    await store.close()
    n = redact_id - 1
    got = state_from_bucket(BucketHistory(open_bucket(archive_url)), root, n)
    whole = state_from_bucket(BucketHistory(open_bucket(archive_url)), root, n, from_snapshot=False)
    assert got.snapshot > 0, "started from a bucket snapshot"
    shown, yardstick = got.state.task(x), whole.state.task(x)
    assert shown is not None and yardstick is not None
    assert yardstick.to_dict()["input"] == {"$redacted": redact_id}
    assert shown.to_dict() == yardstick.to_dict()
