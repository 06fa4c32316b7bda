"""Retention reaches the bucket, on a real SeaweedFS: once every task of the oldest
segments is purged (the real sweep, over a fake clock), their objects leave the bucket
and the catalog; a restore afterwards still has every task not purged; a reader that
held the older catalog is not told of damage; a drop cut off between its catalog and
its deletes leaves objects a later pass deletes."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import (
    BucketHistory,
    Shipper,
    Step,
    build_data_dir,
    load_catalog,
    open_bucket,
    verify_archive,
)
from apollo11.scheduler.bucket.expiry import keys_of
from apollo11.scheduler.bucket.objects import S3Objects
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.engine import RetentionOptions, RetentionSweep
from apollo11.scheduler.errors import BucketError, NotFoundError
from apollo11.scheduler.nodeview import read_events, task_now
from apollo11.scheduler.retention import parse
from apollo11.scheduler.state import Store
from tests.scheduler.bucket.helpers import CONFIG, Host, open_store, ship_all, shipper, write

pytestmark = pytest.mark.timeout(300)


class _Leading:
    """The primary as the retention sweep sees it, on a fake clock a day ahead."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = FakeClock(time.time() + 86_400)
        self.leading = True

    def check_leading(self) -> None:
        pass

    async def wait_commit(self, event_id: int) -> None:
        pass


def _live(store: Store) -> set[str]:
    return {t.task_id for t in store.state.iter_tasks()}


async def _purge_all_finished(store: Store) -> set[str]:
    """The real sweep with `*=1h` a day later: every finished task goes; their ids."""
    before = _live(store)
    sweep = RetentionSweep(_Leading(store), RetentionOptions(rules=parse("*=1h")))  # type: ignore[arg-type]
    said = await sweep.sweep()
    assert said.startswith("purged "), said
    return before - _live(store)


async def _work_until_expired(store: Store, s: Shipper) -> list[Step]:
    """More work, shipped, until the shipper drops segments: a snapshot taken after the
    purge must go up and become restorable (the segments reach its watermark) first."""
    steps: list[Step] = []
    for seed in range(2, 12):
        await write(store, 30, seed=seed)
        await store.wait_snapshot()
        steps += await ship_all(s)
        if any(st.kind == "expire" for st in steps):
            return steps
    return steps


def _expired_count() -> float:
    return float(metrics.ARCHIVE_DELETED.labels("expired")._value.get())


async def test_segments_of_purged_tasks_leave_the_bucket_and_a_restore_keeps_the_rest(
    tmp_path: Path, archive_url: str
) -> None:
    objects = open_bucket(archive_url)
    # local log retention on too: the disk drops what the bucket holds
    cfg = dataclasses.replace(CONFIG, keep_all_segments=False, snapshots_keep=1)
    store = Store.open(tmp_path / "n1", config=cfg, instance_id="n1")
    s = shipper(Host(store), objects)
    store.retention_floor = s.retention_floor
    await write(store, 60)
    await store.wait_snapshot()
    await ship_all(s)
    before = load_catalog(objects)
    assert before.segments[0].first == 1 and len(before.segments) > 3
    stale = BucketHistory(objects)  # a reader holding the catalog from before the drop
    stale.catalog()

    purged = await _purge_all_finished(store)
    assert purged
    ids_of = {t: list(store.state.purged_records[t]) for t in purged}
    counted = _expired_count()
    steps = await _work_until_expired(store, s)
    assert any(st.kind == "expire" for st in steps), [st.sentence for st in steps]

    after = load_catalog(objects)
    start = after.segments[0].first
    assert start > 1, "the oldest segments left the catalog"
    gone = [e for e in before.segments if e.last < start]
    listed = set(objects.list("segments/"))
    assert gone and not listed & {e.key for e in gone}, "and the bucket"
    assert _expired_count() - counted >= len(gone)
    assert s.expired >= len(gone)
    assert after.chain_base == gone[-1].chain
    assert verify_archive(objects).ok, "the rest still verifies from the new chain base"
    # every event below the new start was a purged task's, or no task's
    dropped_ids = {i for t in purged for i in ids_of[t] if i < start}
    assert dropped_ids

    # reads: the purged answer NOT_FOUND as on the disk, a range says what is gone,
    # and the reader with the older catalog is not told of damage
    victim = next(t for t in purged if ids_of[t][0] < start)
    with pytest.raises(NotFoundError, match="purged by retention"):
        await task_now(store, victim)
    got, missing = stale.read_ids(sorted(dropped_ids))
    assert got == [] and set(missing) == dropped_ids
    span = stale.read_range(1, start + 2)
    assert [e.event_id for e in span] == [start, start + 1, start + 2]
    store.older = stale  # a page of the whole log from event 1: the gap is named
    page = await read_events(store, None, 1, 0, 5)
    gap = min(start, store.log.first_id)
    assert page.gone_before == gap
    assert [e.event_id for e in page.events] == list(range(gap, gap + 5))

    # a restore from the bucket now: every task not purged as of the bucket's end
    kept = {t.task_id for t in store.state.iter_tasks() if t.first_event_id <= after.through}
    await store.close()
    restored_dir = tmp_path / "restored"
    await asyncio.to_thread(build_data_dir, objects, restored_dir)  # it runs its own loop
    restored = Store.open(restored_dir, instance_id="r")
    try:
        have = _live(restored)
        assert have == kept
        assert not have & purged
    finally:
        await restored.close()
    # --all-segments: every segment the bucket still holds, the same tasks
    whole_dir = tmp_path / "whole"
    await asyncio.to_thread(lambda: build_data_dir(objects, whole_dir, all_segments=True))
    whole = Store.open(whole_dir, instance_id="w")
    try:
        assert whole.log.first_id == start
        assert _live(whole) == kept
    finally:
        await whole.close()


class _CutAfter(S3Objects):
    """The real bucket, whose deletes stop working after `allowed` (the primary killed
    in the middle of a drop's deletes)."""

    allowed = 10**9

    def delete(self, name: str) -> None:
        if self.allowed <= 0:
            raise BucketError(f"delete of {name}: the node was killed")
        self.allowed -= 1
        super().delete(name)


async def test_a_drop_cut_off_mid_delete_is_finished_by_the_next_primary(
    tmp_path: Path, archive_url: str
) -> None:
    cut = _CutAfter(open_bucket(archive_url).target)
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    await store.wait_snapshot()
    s = shipper(Host(store), cut)
    await ship_all(s)
    before = load_catalog(cut)
    await _purge_all_finished(store)
    cut.allowed = 1  # one object deleted, then the kill
    with pytest.raises(BucketError, match="killed"):
        await _work_until_expired(store, s)
    after = load_catalog(cut)
    start = after.segments[0].first
    assert start > 1, "the catalog was written first"
    left = [e.key for e in before.segments if e.last < start and e.key in cut.list("segments/")]
    assert left, "objects no catalog names: left behind"
    assert verify_archive(cut).ok, "never a catalog naming an object gone"

    cut.allowed = 10**9
    again = Shipper(Host(store), cut, node_id="n2", cluster="test", poll_s=0.05)
    steps = await ship_all(again)  # a new primary's first idle cycle lists the bucket
    assert any("a cut-off drop left" in st.sentence for st in steps)
    assert not set(left) & set(cut.list("segments/"))
    now = load_catalog(cut)  # the same history (re-signed by n2's sweep: a fence)
    assert (now.chain_base, now.segments, now.snapshots) == (
        after.chain_base,
        after.segments,
        after.snapshots,
    )
    # and the snapshot and chunk objects the drop stopped naming are gone too
    listed = [k for u in ("segments/", "snapshots/", "chunks/") for k in cut.list(u)]
    assert sorted(listed) == sorted(keys_of(now))
    await store.close()
