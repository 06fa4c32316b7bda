"""Reading the bucket back, every byte checked: the verify pass, and restore's reads.

An object is checked three ways before anything uses it: the zstd frame's
checksum, the SHA-256 of its raw bytes against the catalog (and its key), and,
for a segment, every record's CRC, its ids running on from the catalog's first
to its last, and its terms. A failure is a `CorruptObjectError` naming the key:
restore stops on it; the verify pass reports every one it finds and goes on.
Nothing is ever skipped silently.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import packing
from apollo11.scheduler.bucket.catalog import Catalog, ObjectRef, SegmentEntry, decode
from apollo11.scheduler.bucket.objects import ObjectStore
from apollo11.scheduler.bucket.span import span_of
from apollo11.scheduler.errors import BucketError, CorruptLogError, CorruptObjectError


def load_catalog(objects: ObjectStore) -> Catalog:
    raw = objects.get(packing.CATALOG)
    if raw is None:
        raise BucketError(
            f"no catalog at {objects.describe}: nothing has been archived there (yet); is "
            f"--archive-url the one the nodes use?"
        )
    return decode(raw, name=packing.CATALOG)


def fetch(objects: ObjectStore, ref: ObjectRef) -> bytes:
    """An object's raw bytes, checked against its SHA-256."""
    data = objects.get(ref.key)
    if data is None:
        raise CorruptObjectError(
            "missing: the catalog names it, the bucket has no such object", key=ref.key
        )
    return packing.unpack(data, name=ref.key, sha256=ref.sha256)


def fetch_segment(objects: ObjectStore, entry: SegmentEntry) -> bytes:
    """A segment's raw bytes, checked against its SHA-256 and record by record."""
    data = objects.get(entry.key)
    if data is None:
        raise CorruptObjectError(
            "missing: the catalog names it, the bucket has no such object", key=entry.key
        )
    raw = packing.unpack(data, name=entry.key, sha256=entry.sha256)
    try:
        span = span_of(raw, first_id=entry.first, where=entry.key)
    except CorruptLogError as e:
        raise CorruptObjectError(
            f"a record fails its check: {e.reason} at byte {e.offset}", key=entry.key
        ) from e
    found = (span.last, span.first_term, span.last_term)
    if found != (entry.last, entry.first_term, entry.last_term):
        raise CorruptObjectError(
            f"holds events {span.first}..{span.last} (terms {span.first_term}..{span.last_term}); "
            f"the catalog says {entry.first}..{entry.last} "
            f"(terms {entry.first_term}..{entry.last_term})",
            key=entry.key,
        )
    return raw


@dataclass(frozen=True, slots=True)
class Report:
    catalog: Catalog
    objects: int  # checked
    raw_bytes: int
    stored_bytes: int
    problems: tuple[str, ...]
    # what failed, as (key, where a node keeps it: "log/<name>" or "snapshots/<name>",
    # its raw SHA-256): what `repair` can put back from a data directory
    corrupt: tuple[tuple[str, str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        c = self.catalog
        ratio = self.raw_bytes / self.stored_bytes if self.stored_bytes else 0.0
        head = (
            f"{self.objects} objects checked: {len(c.segments)} segments (events "
            f"{c.segments[0].first if c.segments else 0}..{c.through}), {len(c.snapshots)} "
            f"snapshots; {self.raw_bytes} bytes raw, {self.stored_bytes} stored "
            f"({ratio:.1f}x)"
        )
        if self.ok:
            return f"{head}; all sound"
        return f"{head}; {len(self.problems)} problems:\n  " + "\n  ".join(self.problems)


def verify_archive(objects: ObjectStore, say: Callable[[str], None] = lambda _: None) -> Report:
    """Check the catalog and every object it names; report all that is wrong."""
    catalog = load_catalog(objects)
    problems = [f"catalog: {p}" for p in catalog.problems()]
    corrupt: list[tuple[str, str, str]] = []
    n = raw_bytes = stored = 0

    def check(what: Callable[[], bytes], size: int, stored_size: int, local: str) -> None:
        nonlocal n, raw_bytes, stored
        n += 1
        try:
            what()
        except CorruptObjectError as e:
            metrics.ARCHIVE_CORRUPT.inc()
            problems.append(str(e))
            corrupt.append((e.key, local, _sha_of(catalog, e.key)))
            say(f"corrupt: {e}")
            return
        raw_bytes += size
        stored += stored_size

    for s in catalog.segments:
        local = f"log/{s.first:020d}.seg"
        check(lambda s=s: fetch_segment(objects, s), s.size, s.stored, local)  # type: ignore[misc]
    seen: set[str] = set()
    for snap in catalog.snapshots:
        for ref in (*snap.chunks, snap.file):
            if ref.key in seen:
                continue
            seen.add(ref.key)
            local = f"snapshots/{ref.name}"
            check(lambda ref=ref: fetch(objects, ref), ref.size, ref.stored, local)  # type: ignore[misc]
    return Report(catalog, n, raw_bytes, stored, tuple(problems), tuple(corrupt))


def _sha_of(catalog: Catalog, key: str) -> str:
    for s in catalog.segments:
        if s.key == key:
            return s.sha256
    for snap in catalog.snapshots:
        for ref in (*snap.chunks, snap.file):
            if ref.key == key:
                return ref.sha256
    return ""


def repair(objects: ObjectStore, report: Report, data_dir: str | os.PathLike[str]) -> list[str]:
    """Put back each corrupt object from a node's data directory that holds the same
    bytes (its SHA-256 is the catalog's): a sentence for each, repaired or not. The
    catalog is unchanged: the key is the content's, so the repaired object is the one
    it always named."""
    said = []
    for key, local, sha in report.corrupt:
        path = os.path.join(os.fspath(data_dir), local)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            said.append(f"{key}: not repaired: {path}: {e.strerror}")
            continue
        if not sha or packing.digest(raw) != sha:
            said.append(f"{key}: not repaired: {path} holds other bytes than the catalog names")
            continue
        objects.put(key, packing.pack(raw))
        said.append(f"{key}: repaired from {path}")
    return said
