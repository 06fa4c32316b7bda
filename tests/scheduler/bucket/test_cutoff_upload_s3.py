"""An upload cut off between its objects and its catalog (the node killed there), on a
real SeaweedFS: the objects it never names (a newer snapshot went up instead; a
segment rewritten on disk by a redaction meanwhile, whose old object still holds the
task's data) are found by the next primary's listing and deleted; never an object a
catalog names, nor one an upload still in flight will name."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import load_catalog, open_bucket, packing, verify_archive
from apollo11.scheduler.bucket.catalog import Catalog
from apollo11.scheduler.bucket.expiry import keys_of
from apollo11.scheduler.bucket.objects import S3Objects
from apollo11.scheduler.errors import BucketError
from tests.scheduler.bucket.helpers import Host, open_store, ship_all, shipper, write
from tests.scheduler.bucket.test_damage_s3 import _damage, _redact
from tests.scheduler.bucket.test_redaction_snapshots_s3 import _objects_holding, _secret_task

pytestmark = pytest.mark.timeout(300)


class _KilledBeforeCatalog(S3Objects):
    """The real bucket; while `armed`, the catalog write after a put under `under`
    fails: the node killed between its objects and its catalog."""

    armed = False
    under = packing.SNAPSHOTS

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.put_keys: list[str] = []

    def put(self, name: str, data: bytes) -> None:
        super().put(name, data)
        self.put_keys.append(name)

    def put_if(self, name: str, data: bytes, *, etag: str | None) -> None:
        if self.armed and any(k.startswith(self.under) for k in self.put_keys):
            self.armed = False
            raise BucketError("catalog write: the node was killed")
        super().put_if(name, data, etag=etag)


def _listed(objects: S3Objects) -> set[str]:
    return {
        k for u in (packing.SEGMENTS, packing.SNAPSHOTS, packing.CHUNKS) for k in objects.list(u)
    }


async def test_a_snapshot_upload_cut_off_before_its_catalog_leaves_nothing_behind(
    tmp_path: Path, archive_url: str
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    await store.wait_snapshot()
    cut = _KilledBeforeCatalog(open_bucket(archive_url).target)
    await ship_all(shipper(Host(store), cut))
    await write(store, 60, seed=3)
    await store.wait_snapshot()
    cut.put_keys.clear()
    cut.armed = True
    with pytest.raises(BucketError, match="killed"):
        await ship_all(shipper(Host(store), cut))
    named = keys_of(load_catalog(cut))
    left = [k for k in cut.put_keys if k not in named]
    assert any(k.startswith(packing.SNAPSHOTS) for k in left), cut.put_keys

    # the next primary: by then a newer snapshot is the one to upload
    await write(store, 60, seed=5)
    await store.wait_snapshot()
    steps = await ship_all(shipper(Host(store), cut, "n2"))
    catalog = load_catalog(cut)
    assert _listed(cut) == set(keys_of(catalog)), "only what the catalog names is left"
    assert any("cut-off uploads" in st.sentence for st in steps), steps
    assert verify_archive(cut).ok
    await store.close()


async def test_a_segment_object_a_cut_off_upload_left_with_redacted_data_is_deleted(
    tmp_path: Path, archive_url: str
) -> None:
    store = open_store(tmp_path / "n1")
    await write(store, 10)
    await _secret_task(store, "secret-a", "zq-cutoff-a-3d81")
    await write(store, 60, seed=3)
    cut = _KilledBeforeCatalog(open_bucket(archive_url).target)
    cut.under, cut.armed = packing.SEGMENTS, True  # the first segment's upload: cut
    with pytest.raises(BucketError, match="killed"):
        await ship_all(shipper(Host(store), cut))
    assert _objects_holding(cut, b"zq-cutoff-a-3d81"), "the test means something"
    # meanwhile the task is redacted: this node's segment is rewritten, so the upload,
    # resumed, goes up under another key and never names the first object
    await _redact(store, "secret-a")
    await write(store, 30, seed=7)
    steps = await ship_all(shipper(Host(store), cut, "n2"))
    assert _objects_holding(cut, b"zq-cutoff-a-3d81") == []
    assert _listed(cut) == set(keys_of(load_catalog(cut)))
    assert any("cut-off uploads" in st.sentence for st in steps), steps
    assert verify_archive(cut).ok
    await store.close()


async def test_the_sweep_never_deletes_what_a_deposed_primarys_upload_will_name(
    tmp_path: Path, archive_url: str
) -> None:
    """n2's listing runs between n1's puts of a newer snapshot and n1's catalog write:
    n1's fresh chunks are no catalog's yet, so n2 deletes them, but only after writing
    the catalog again, so n1's conditional write fails instead of naming them."""
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    await store.wait_snapshot()
    objects = open_bucket(archive_url)
    a = shipper(Host(store), objects, "n1")
    await ship_all(a)
    await write(store, 60, seed=3)
    await store.wait_snapshot()
    a.catalog = load_catalog(objects)
    view_a = await a._view(store, True, a.catalog)
    b = shipper(Host(store), objects, "n2")
    b.catalog = load_catalog(objects)
    view_b = await b._view(store, True, b.catalog)
    real = a._write_catalog
    swept: list[str] = []

    def late(old: Catalog, new: Catalog, term: int) -> Catalog:
        swept.append(b._sweep(view_b.catalog, view_b.term)[1])
        return real(old, new, term)

    a._write_catalog = late  # type: ignore[method-assign]
    with pytest.raises(BucketError, match="changed under this node"):
        a._upload_snapshot(store, view_a, False)
    assert swept and "cut-off uploads" in swept[0], swept
    catalog = load_catalog(objects)
    assert [k for k in keys_of(catalog) if k not in _listed(objects)] == []
    assert verify_archive(objects).ok
    await ship_all(shipper(Host(store), objects, "n2"))  # and the upload is done anew
    assert verify_archive(objects).ok
    await store.close()


async def test_a_damaged_object_a_cut_off_upload_left_is_put_again_not_reused(
    tmp_path: Path, archive_url: str
) -> None:
    """A resumed upload reuses an object already at its key: only when it holds the
    bytes (checked), never because it has the size."""
    store = open_store(tmp_path / "n1")
    await write(store, 60)
    cut = _KilledBeforeCatalog(open_bucket(archive_url).target)
    cut.under, cut.armed = packing.SEGMENTS, True
    with pytest.raises(BucketError, match="killed"):
        await ship_all(shipper(Host(store), cut))
    key = next(k for k in cut.put_keys if k.startswith(packing.SEGMENTS))
    _damage(cut, key, "flipped")  # the same size, other bytes
    corrupt = metrics.ARCHIVE_CORRUPT._value.get()
    await ship_all(shipper(Host(store), cut, "n2"))
    assert key in keys_of(load_catalog(cut))
    assert verify_archive(cut).ok
    assert metrics.ARCHIVE_CORRUPT._value.get() > corrupt
    await store.close()
