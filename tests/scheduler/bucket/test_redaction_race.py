"""Found in review: a deposed primary (n1) still finishing a snapshot upload, and the
new primary (n2) checking a redaction once: n2's pass rewrote nothing (n1 already
had), so wrote no catalog, then deleted every snapshot and chunk object the catalog
did not name, n1's fresh uploads among them; n1's conditional catalog write still
matched and named objects that were gone. Only former versions of named files go."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from apollo11.scheduler.bucket import load_catalog, verify_archive
from apollo11.scheduler.bucket.catalog import Catalog
from apollo11.scheduler.bucket.objects import MemoryObjects
from apollo11.scheduler.bucket.packing import CATALOG
from apollo11.scheduler.log import EventType
from tests.scheduler.bucket.helpers import Host, open_store, ship_all, shipper, write
from tests.scheduler.bucket.test_redaction_snapshots_s3 import _secret_task, _until


async def test_listing_delete_races_a_deposed_primarys_upload(tmp_path: Path) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 10)
    task_id = await _secret_task(store)
    await write(store, 60, seed=3)
    await store.wait_snapshot()
    objects = MemoryObjects()
    a = shipper(Host(store), objects, "n1")
    await ship_all(a)
    red = await store.log.append(
        EventType.TASK_REDACTED, task_id, payload={"operator": "ana", "reason": "x"}
    )
    await _until("redacted", lambda: store.snapshots_redacted(task_id, red.event_id))
    await write(store, 30, seed=7)
    steps = await ship_all(a)
    assert any(st.kind == "redact" for st in steps), steps
    # a newer local snapshot: n1 decides to upload it
    await write(store, 60, seed=9)
    await store.wait_snapshot()
    # a catalog from a release before `redacted_through`: the new primary checks
    # each redaction once
    objects.put(CATALOG, dataclasses.replace(load_catalog(objects), redacted_through=0).encode())
    a.catalog = load_catalog(objects)
    view_a = await a._view(store, True, a.catalog)
    b = shipper(Host(store), objects, "n2")  # promoted
    b.catalog = load_catalog(objects)
    view_b = await b._view(store, True, b.catalog)
    due = b._redaction_due(store, b.catalog)
    assert due is not None
    real = a._write_catalog

    def late(old: Catalog, new: Catalog, term: int) -> Catalog:
        # n1's puts are done; n2's pass runs before n1 writes its catalog
        b._redact(view_b, due[0], due[2], due[1])
        return real(old, new, term)

    a._write_catalog = late  # type: ignore[method-assign]
    a._upload_snapshot(store, view_a, False)
    catalog = load_catalog(objects)
    named = [r.key for s in catalog.snapshots for r in (s.file, *s.chunks)]
    missing = [k for k in named if k not in objects.objects]
    await store.close()
    assert missing == [], f"the catalog names deleted objects: {missing}"
    assert verify_archive(objects).ok
