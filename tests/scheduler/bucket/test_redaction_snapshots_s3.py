"""A redaction leaves no copy of the task's data anywhere (issue 34, part 6), on a
real S3-compatible server (SeaweedFS from its wheel): not in the node's segments,
nor in its snapshots and archive chunks written before the redaction, nor in any
object of the bucket (segments, snapshots, chunks; read decompressed). The bucket
still verifies, and a restore from it still gives every task."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import zstandard

from apollo11.scheduler.bucket import (
    ObjectStore,
    build_data_dir,
    load_catalog,
    open_bucket,
    packing,
    verify_archive,
)
from apollo11.scheduler.log import Draft, EventType
from apollo11.scheduler.state import Store
from apollo11.scheduler.testing.seaweed import LocalSeaweed
from tests.scheduler.bucket.helpers import Host, open_store, ship_all, shipper, write

pytestmark = pytest.mark.timeout(240)

MARKER = "zq-redact-me-7f3a91"  # in the task's input and in a step's result
WAIT_S = 120.0  # generous: a loaded 2-core machine


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [
        os.path.join(d, n)
        for d, _, names in os.walk(root)
        for n in names
        if needle in Path(d, n).read_bytes()
    ]


def _objects_holding(objects: ObjectStore, needle: bytes) -> list[str]:
    found = []
    for under in (packing.SEGMENTS, packing.SNAPSHOTS, packing.CHUNKS):
        for key in objects.list(under):
            data = objects.get(key)
            assert data is not None
            raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 30)
            if needle in raw:
                found.append(key)
    return found


async def _secret_task(store: Store, task_id: str = "secret-task", marker: str = MARKER) -> str:
    """A finished task whose input and result hold `marker`."""
    await store.log.append_many(
        [
            Draft(
                EventType.TASK_SUBMITTED,
                task_id,
                payload={
                    "workflow": "etl",
                    "version": 1,
                    "input": {"who": marker},
                    "steps": {"collect": []},
                },
            ),
            Draft(EventType.STEP_STARTED, task_id, "collect", attempt=1),
            Draft(
                EventType.STEP_SUCCEEDED,
                task_id,
                "collect",
                {"result": {"note": marker}},
                attempt=1,
            ),
        ]
    )
    return task_id


async def _until(what: str, check) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {WAIT_S:.0f} s: {what}")
        await asyncio.sleep(0.05)


async def test_no_snapshot_chunk_or_object_keeps_a_redacted_tasks_data(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    needle = MARKER.encode()
    store = open_store(tmp_path / "n1")
    await write(store, 10)
    task_id = await _secret_task(store)
    await write(store, 60, seed=3)  # snapshots (every 150 events) archive it in chunks
    await store.wait_snapshot()
    objects = open_bucket(archive_url)
    s = shipper(Host(store), objects)
    await ship_all(s)
    catalog = load_catalog(objects)
    assert catalog.snapshots, "snapshots went up"
    # the test means something: the data is in snapshots, chunks and objects first
    snaps = str(tmp_path / "n1" / "snapshots")
    held = _files_holding(tmp_path / "n1", needle)
    assert any(p.startswith(snaps) and p.endswith(".arc") for p in held), held
    old_chunks = [k for k in _objects_holding(objects, needle) if k.startswith(packing.CHUNKS)]
    assert old_chunks
    old_bytes = objects.get(old_chunks[0])

    red = await store.log.append(
        EventType.TASK_REDACTED, task_id, payload={"operator": "ana", "reason": "erasure"}
    )
    await _until(
        "the node's snapshots and chunks are rewritten",
        lambda: store.snapshots_redacted(task_id, red.event_id),
    )
    store.redactor.drain()
    assert _files_holding(tmp_path / "n1", needle) == []

    await write(store, 30, seed=7)  # the redaction's segment sealed and uploaded
    steps = await ship_all(s)
    assert any(st.kind == "redact" and task_id in st.sentence for st in steps), steps
    assert _objects_holding(objects, needle) == []
    assert _files_holding(tmp_path / "n1", needle) == []
    report = verify_archive(objects)
    assert report.ok, report
    # as if killed between the catalog write and the deletes: an old object is back,
    # and the next primary deletes it (its sweep: no catalog names it; the redaction
    # itself is not checked again, the catalog says it was carried)
    assert old_bytes is not None and objects.get(old_chunks[0]) is None
    objects.put(old_chunks[0], old_bytes)
    steps = await ship_all(shipper(Host(store), objects, node_id="n2"))
    assert not any(st.kind == "redact" for st in steps), steps
    assert _objects_holding(objects, needle) == []

    through = load_catalog(objects).through  # the bucket holds the sealed segments
    every = sorted(t.task_id for t in store.state.iter_tasks() if t.first_event_id <= through)
    assert task_id in every and len(every) > 70
    await store.close()
    await asyncio.to_thread(build_data_dir, objects, tmp_path / "restored")
    restored = open_store(tmp_path / "restored")
    assert sorted(t.task_id for t in restored.state.iter_tasks()) == every
    shown = restored.state.peek(task_id)
    assert shown is not None and shown.input == {"$redacted": red.event_id}
    assert shown.steps["collect"].result == {"$redacted": red.event_id}
    await restored.close()
    assert _files_holding(tmp_path / "restored", needle) == []
