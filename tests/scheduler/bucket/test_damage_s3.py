"""A damaged object in the bucket (a flipped byte, a truncated object, one gone while
the catalog names it), on a real SeaweedFS: the shipper's redaction pass detects it,
says so naming the key, puts it back from this node's own copy when it holds one, and
goes on; without a copy the redaction is reported as not carried to the bucket and
retried, while later redactions and the other passes go on."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import (
    ObjectStore,
    Shipper,
    load_catalog,
    open_bucket,
    verify_archive,
)
from apollo11.scheduler.bucket.catalog import Catalog
from apollo11.scheduler.log import EventType
from apollo11.scheduler.state import Store
from tests.scheduler.bucket.helpers import Host, open_store, ship_all, shipper, write
from tests.scheduler.bucket.test_redaction_snapshots_s3 import (
    _objects_holding,
    _secret_task,
    _until,
)

pytestmark = pytest.mark.timeout(300)


async def _redact(store: Store, task_id: str) -> int:
    red = await store.log.append(
        EventType.TASK_REDACTED, task_id, payload={"operator": "ana", "reason": "erasure"}
    )
    await _until(
        "the node's files are rewritten", lambda: store.snapshots_redacted(task_id, red.event_id)
    )
    store.redactor.drain()
    return red.event_id


def _holding(catalog: Catalog, event_id: int) -> str:
    return next(e.key for e in catalog.segments if e.first <= event_id <= e.last)


def _damage(objects: ObjectStore, key: str, how: str) -> bytes:
    """Damage object `key` in the bucket; its bytes before."""
    data = objects.get(key)
    assert data is not None
    if how == "flipped":
        i = len(data) // 2
        objects.put(key, data[:i] + bytes([data[i] ^ 0x40]) + data[i + 1 :])
    elif how == "truncated":
        objects.put(key, data[: len(data) // 2])
    else:
        objects.delete(key)
    return data


@pytest.mark.parametrize("how", ["flipped", "truncated", "missing"])
async def test_a_damaged_segment_is_put_back_from_this_nodes_copy_and_the_redaction_done(
    tmp_path: Path, archive_url: str, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 10)
    await _secret_task(store, "secret-a", "zq-damage-a-51c2")
    first = store.log.durable_id - 2  # the task's submit
    await write(store, 60, seed=3)
    await store.wait_snapshot()
    objects = open_bucket(archive_url)
    s = shipper(Host(store), objects)
    await ship_all(s)
    key = _holding(load_catalog(objects), first)
    _damage(objects, key, how)
    corrupt = metrics.ARCHIVE_CORRUPT._value.get()
    repaired = metrics.ARCHIVE_REPAIRED._value.get()

    rid = await _redact(store, "secret-a")
    await write(store, 30, seed=7)  # the redaction's segment sealed and uploaded
    with caplog.at_level(logging.INFO, logger="apollo11.scheduler.bucket.shipper"):
        steps = await ship_all(s)
    assert any(st.kind == "redact" for st in steps), steps
    assert s.redacted("secret-a", rid)
    assert _objects_holding(objects, b"zq-damage-a-51c2") == []
    assert verify_archive(objects).ok
    assert metrics.ARCHIVE_CORRUPT._value.get() > corrupt
    assert metrics.ARCHIVE_REPAIRED._value.get() > repaired
    said = [r.getMessage() for r in caplog.records if key in r.getMessage()]
    assert any("this node's copy" in m for m in said), said
    await store.close()


async def test_without_a_copy_the_redaction_is_reported_retried_and_others_go_on(
    tmp_path: Path, archive_url: str
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 10)
    await _secret_task(store, "secret-a", "zq-damage-a-51c2")
    first = store.log.durable_id - 2
    await write(store, 60, seed=3)
    await _secret_task(store, "secret-b", "zq-damage-b-9e07")
    await write(store, 30, seed=5)
    await store.wait_snapshot()
    objects = open_bucket(archive_url)
    skew = [0.0]
    host = Host(store)
    s = Shipper(
        host,
        objects,
        node_id="n1",
        cluster="test",
        poll_s=0.05,
        backoff_max_s=0.2,
        clock=lambda: time.time() + skew[0],
    )
    await ship_all(s)
    catalog = load_catalog(objects)
    key = _holding(catalog, first)
    assert store.log.drop_before(catalog.through + 1) > 0  # local retention: no copy here
    assert not any(seg.first_id <= first <= seg.last_id for seg in store.log.segments)
    before = _damage(objects, key, "flipped")

    rid_a = await _redact(store, "secret-a")
    rid_b = await _redact(store, "secret-b")
    await write(store, 30, seed=7)
    steps = await ship_all(s)
    # the later redaction, and the passes after it, are not held up by the damage
    assert s.redacted("secret-b", rid_b)
    objects.put(key, before)  # (to read every object; damaged again below)
    assert _objects_holding(objects, b"zq-damage-b-9e07") == []
    _damage(objects, key, "flipped")
    # the one it cannot carry is said, never skipped
    assert not s.redacted("secret-a", rid_a)
    said = [st.sentence for st in steps if key in st.sentence]
    assert any("not carried to the bucket" in m and "no copy" in m for m in said), steps
    assert any(key in n for n in host.notices), host.notices
    assert metrics.ARCHIVE_REDACTIONS_PENDING._value.get() == 1
    assert steps[-1].kind == "idle"

    # put back (as `archive verify --repair-from` would from another node): the retry
    # carries it
    objects.put(key, before)
    skew[0] += 3600
    await ship_all(s)
    assert s.redacted("secret-a", rid_a)
    assert _objects_holding(objects, b"zq-damage-a-51c2") == []
    assert metrics.ARCHIVE_REDACTIONS_PENDING._value.get() == 0
    # and the node's notice no longer says it is not carried
    assert "secret-a" in host.notices[-1] and "now carried" in host.notices[-1], host.notices
    assert verify_archive(objects).ok
    await store.close()
