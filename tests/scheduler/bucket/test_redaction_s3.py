"""A redaction reaches the bucket (issue 34, part 6), on a real S3-compatible server
(SeaweedFS from its wheel): the segment objects holding the task's records are
rewritten, byte for byte as the node rewrote its own segments; the catalog names the
new objects with `origin` keeping the SHA-256 its chain was made over, so verify
still passes; the old objects are gone; a restore brings no data back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from apollo11.scheduler.bucket import build_data_dir, load_catalog, open_bucket, verify_archive
from apollo11.scheduler.bucket.verify import fetch_segment
from apollo11.scheduler.log import EventType
from apollo11.scheduler.log.record import decode_batch
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.testing.seaweed import LocalSeaweed
from tests.scheduler.bucket.helpers import Host, open_store, ship_all, shipper, write

pytestmark = pytest.mark.timeout(180)


def _task_events(raw: bytes, first: int, task_id: str) -> list[dict[str, object]]:
    got = decode_batch(raw, 0, base=0, path="object", expect=first, term=0)
    assert got.error is None
    return [dict(e.payload) for e in got.events if e.task_id == task_id]


async def test_a_redaction_rewrites_the_buckets_segments_and_verify_still_passes(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    objects = open_bucket(archive_url)
    s = shipper(Host(store), objects)
    await ship_all(s)
    before = load_catalog(objects)
    task = next(
        t
        for t in store.state.iter_tasks()
        if t.status is TaskStatus.SUCCEEDED and t.last_event_id < before.through
    )
    red = await store.log.append(
        EventType.TASK_REDACTED, task.task_id, payload={"operator": "ana", "reason": "r"}
    )
    await store.redactions_written()
    await write(store, 30, seed=7)  # the redaction's segment sealed and uploaded
    steps = await ship_all(s)
    assert any(st.kind == "redact" and task.task_id in st.sentence for st in steps), steps

    after = load_catalog(objects)
    assert after.problems() == []  # the chain holds, through `origin`
    report = verify_archive(objects)
    assert report.ok, report
    ids = task.event_ids or []
    changed = [
        (old, new)
        for old, new in zip(before.segments, after.segments, strict=False)
        if old.key != new.key
    ]
    assert changed, "the segments holding the task were rewritten"
    local = {seg.first_id: seg for seg in store.log.segments}
    for old, new in changed:
        assert new.origin == old.sha256 and new.sha256 != old.sha256 and new.size == old.size
        assert objects.get(old.key) is None, "the old object is deleted"
        raw = fetch_segment(objects, new)
        assert raw == local[new.first].read(0, new.size), "the members' bytes, exactly"
        for payload in _task_events(raw, new.first, task.task_id):
            assert payload.get("input") in (None, 0, {"$redacted": red.event_id})
            assert payload.get("result") in (None, 0, {"$redacted": red.event_id})
    assert any(e.first <= ids[0] <= e.last for _, e in changed)
    steps = await ship_all(s)
    assert not [st for st in steps if st.kind == "redact"], "done once"
    assert load_catalog(objects).redacted_through == red.event_id
    # a new primary (a failover): the catalog says the redaction is carried, and no
    # pass reads the archive's snapshots again to find nothing to rewrite
    again = await ship_all(shipper(Host(store), objects, node_id="n2"))
    assert not [st for st in again if st.kind == "redact"], "not checked again"
    await store.close()

    await asyncio.to_thread(build_data_dir, objects, tmp_path / "restored", all_segments=True)
    restored = open_store(tmp_path / "restored")
    shown = restored.state.peek(task.task_id)
    assert shown is not None and shown.input == {"$redacted": red.event_id}
    await restored.close()
