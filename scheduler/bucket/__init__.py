"""The archive: the cluster's history in an S3-compatible bucket (docs/archive.md).

objects.py  the object store as a port of blocking calls; S3 through boto3
packing.py  zstd, content-addressed names, checksums
span.py     a segment's event range and terms, every record checked
catalog.py  the bucket's manifest: segments, snapshots, terms, the checksum chain
plan.py     the shipper's pure decision: what to upload next, in a sentence
expiry.py   the pure decision of retention in the bucket: which old segments go
needed.py   what a snapshot's live tasks need of the log (a snapshot entry's keep_from)
shipper.py  the primary's background task (a thread for every blocking call)
verify.py   reading the bucket back, every byte checked
restore.py  a node's data directory built from the bucket
history.py  old history read back on demand: events a node's disk no longer holds
travel.py   a past state from the bucket: its newest snapshot before it, then segments

The URL's syntax is checked by scheduler/archiveurl.py (the settings read it too).
Import from here, not from the modules inside.
"""

from apollo11.scheduler.archiveurl import Target, parse_url
from apollo11.scheduler.bucket.catalog import Catalog, ObjectRef, SegmentEntry, SnapshotEntry
from apollo11.scheduler.bucket.history import BucketHistory, Cover, covering
from apollo11.scheduler.bucket.objects import MemoryObjects, ObjectStore, S3Objects, open_bucket
from apollo11.scheduler.bucket.packing import CATALOG
from apollo11.scheduler.bucket.plan import Sealed, Step, View, decide
from apollo11.scheduler.bucket.restore import build_data_dir
from apollo11.scheduler.bucket.shipper import Shipper
from apollo11.scheduler.bucket.travel import Travelled, start_for, state_from_bucket
from apollo11.scheduler.bucket.verify import Report, load_catalog, repair, verify_archive

__all__ = [
    "CATALOG",
    "BucketHistory",
    "Catalog",
    "Cover",
    "MemoryObjects",
    "ObjectRef",
    "ObjectStore",
    "Report",
    "S3Objects",
    "Sealed",
    "SegmentEntry",
    "Shipper",
    "SnapshotEntry",
    "Step",
    "Target",
    "Travelled",
    "View",
    "build_data_dir",
    "covering",
    "decide",
    "load_catalog",
    "open_bucket",
    "parse_url",
    "repair",
    "start_for",
    "state_from_bucket",
    "verify_archive",
]
