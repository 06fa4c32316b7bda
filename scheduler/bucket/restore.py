"""`apollo11 restore`: a node's data directory, built from the bucket.

What it writes is what a node would have had: the newest restorable snapshot
(with its archive chunks) and the sealed segments after its watermark (all of
them with `all_segments`), byte for byte as the primary wrote them, each
checked (verify.py) before it is written; an empty segment after the last one,
so that the node appends where the primary rotated and its segment files stay
byte-identical with the cluster's; the cluster's id (CLUSTER), so that the
node joins its own cluster and no other.

It is built beside the target, in `<dir>.restoring`, opened once as a node
would open it (every record and the snapshot checked again, the state
replayed), and renamed into place: a restore that fails or is killed leaves no
half-built directory where a node could start on it.

The node started on it then follows its primary from the restored end (the
primary streams the rest), or, when the whole cluster was lost, leads a new
cluster with everything the bucket held: up to the last sealed segment (the
RPO: docs/archive.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from apollo11.scheduler import identity
from apollo11.scheduler.bucket import packing
from apollo11.scheduler.bucket.catalog import Catalog
from apollo11.scheduler.bucket.objects import ObjectStore
from apollo11.scheduler.bucket.verify import fetch, fetch_segment, load_catalog
from apollo11.scheduler.errors import ApolloError, BucketError, CorruptObjectError
from apollo11.scheduler.log import DataDir, fsync_dir, segment_name, write_atomic
from apollo11.scheduler.state import Store

STAGING_SUFFIX = ".restoring"


def build_data_dir(
    objects: ObjectStore,
    data_dir: str | os.PathLike[str],
    *,
    all_segments: bool = False,
    say: Callable[[str], None] = lambda _: None,
) -> str:
    """Build `data_dir` (absent or empty) from the bucket; the sentence to print."""
    root = Path(data_dir)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ApolloError(
            f"{root} is not empty: restore builds a new data directory; move it away, or name "
            f"another --data-dir"
        )
    catalog = load_catalog(objects)
    broken = catalog.problems()
    if broken:
        raise CorruptObjectError("; ".join(broken), key=packing.CATALOG)
    if not catalog.segments:
        raise BucketError(
            f"the catalog at {objects.describe} holds no sealed segment yet: nothing to "
            f"restore (the first goes up when the primary seals its first segment)"
        )
    snap = catalog.restorable()
    start = catalog.segments[0].first
    if snap is None and start > 1:
        raise BucketError(
            f"the archive starts at event {start} and holds no snapshot the segments reach: "
            f"nothing to start a node from yet (one goes up with the next sealed segment)"
        )
    from_id = 1 if snap is None or all_segments else snap.watermark + 1
    staging = root.with_name(root.name + STAGING_SUFFIX)
    shutil.rmtree(staging, ignore_errors=True)  # a restore killed before
    try:
        _build(objects, catalog, staging, from_id, snap is not None, say)
        opened = asyncio.run(_open_once(staging))
        if root.exists():
            root.rmdir()  # empty, checked above
        os.rename(staging, root)
        fsync_dir(str(root.parent))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    base = f"snapshot {snap.watermark} + " if snap is not None else ""
    return (
        f"restored {root} from {objects.describe}: {base}segments through event "
        f"{catalog.through} (term {catalog.segments[-1].last_term}); {opened}"
    )


def _build(
    objects: ObjectStore,
    catalog: Catalog,
    staging: Path,
    from_id: int,
    with_snapshot: bool,
    say: Callable[[str], None],
) -> None:
    data = DataDir.open(staging)
    segments = [s for s in catalog.segments if s.last >= from_id]
    for s in segments:
        raw = fetch_segment(objects, s)
        write_atomic(os.path.join(data.log_dir, segment_name(s.first)), raw)
        say(f"segment {s.first}..{s.last}: {s.size} bytes ({s.stored} in the bucket)")
    # where the primary rotated: the next event goes into a segment of its own
    with open(os.path.join(data.log_dir, segment_name(catalog.through + 1)), "wb"):
        pass
    fsync_dir(data.log_dir)
    snap = catalog.restorable() if with_snapshot else None
    if snap is not None:
        for ref in (*snap.chunks, snap.file):
            write_atomic(os.path.join(data.snapshot_dir, ref.name), fetch(objects, ref))
        say(f"snapshot {snap.watermark} with {len(snap.chunks)} archive chunks")
    if catalog.cluster_id:
        identity.write(staging, identity.Identity(catalog.cluster_id, catalog.cluster))


async def _open_once(staging: Path) -> str:
    """Open the restored directory as a node would (every check, the replay), keep
    what the replay built as a snapshot at the restored end, then close it: what it
    recovered, for the sentence.

    The snapshot spares the node started on the directory the same replay again:
    without it a node restored from a bucket without a snapshot replayed all of
    history twice, once here and once at its start (10^7 events: docs/benchmarks.md,
    "Restore from the bucket"). It is the node's own kind of snapshot, derived from
    the checked records, as the node would write at its first snapshot interval."""
    store = Store.open(staging, instance_id="restore")
    try:
        said = str(store.recovery)
        if store.recovery.replayed:
            await store.snapshot_now()
            said += f"; snapshot {store.log.durable_id} written"
        return said
    finally:
        await store.close()
