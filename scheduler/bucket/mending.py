"""Reading the objects a redaction pass rewrites, and mending a damaged one from this
node's own copy (docs/archive.md, "A damaged object in the shipper's passes").

An object fails its check (a flipped byte, a truncated object, one missing while the
catalog names it): the damage is said, naming the key, and counted
(`apollo11_archive_corrupt_objects_total`, which fires `Apollo11ArchiveCorrupt`).
Then this node's copy is looked for: the segment of the same event range in its log
(every record CRC-checked, its ids and terms the catalog's), or the snapshot file or
archive chunk of the same name in its snapshot directory.

- The copy holds the object's very bytes (its SHA-256 is the catalog's): it is put
  back at the same key (the key is the content's, so the catalog is unchanged).
- A segment copy that differs (the node has rewritten it for a redaction, as the
  pass is about to), every record CRC-checked and its range and terms the catalog's:
  its bytes are handed to the pass, which puts them up under their own key and
  replaces the damaged object, as it replaces any object it rewrites. Only once every
  redaction the node knows is rewritten on its disk (`settled`): a copy whose rewrite
  for an earlier redaction failed would put that task's data back in the bucket.
- A snapshot file or chunk that differs: not used. Nothing here could check it
  against the catalog's entry (its SHA-256 is all the entry says; another node's file
  of the same name is another file), and a damaged copy would go up under a valid
  checksum of its own.
- No usable copy: a `CorruptObjectError` saying so; the pass leaves that object as it
  is, does the rest, and the shipper reports the redaction as not carried to the
  bucket.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import packing
from apollo11.scheduler.bucket.catalog import ObjectRef, SegmentEntry
from apollo11.scheduler.bucket.objects import ObjectStore
from apollo11.scheduler.bucket.span import span_of
from apollo11.scheduler.bucket.verify import fetch, fetch_segment
from apollo11.scheduler.errors import CorruptLogError, CorruptObjectError
from apollo11.scheduler.log import Segment

log = logging.getLogger("apollo11.scheduler.bucket.shipper")  # the shipper's lines


@dataclass(frozen=True, slots=True)
class Read:
    raw: bytes
    sha256: str  # of `raw`: the catalog's when they are the object's own bytes


class Mender:
    """The reads of one pass, on the shipper's thread: `segments` are this node's
    sealed segments (copied on the event loop), `snapshots` its snapshot directory."""

    def __init__(
        self,
        objects: ObjectStore,
        segments: Sequence[Segment],
        snapshots: str,
        *,
        settled: bool = False,
    ) -> None:
        self.objects = objects
        self.segments = segments
        self.snapshots = snapshots
        self.settled = settled  # every redaction this node knows, rewritten on its disk

    def segment(self, entry: SegmentEntry) -> Read:
        try:
            return Read(fetch_segment(self.objects, entry), entry.sha256)
        except CorruptObjectError as e:
            damage = e
        self._damaged(damage)
        for seg in self.segments:
            if (seg.first_id, seg.last_id) != (entry.first, entry.last):
                continue
            raw = seg.read(0, seg.size)
            try:
                span = span_of(raw, first_id=entry.first, where=seg.path)
            except CorruptLogError as e:
                raise CorruptObjectError(
                    f"{_reason(damage)}, and this node's copy {seg.path} fails its check too: {e}",
                    key=damage.key,
                ) from damage
            if (span.last, span.first_term, span.last_term) != (
                entry.last,
                entry.first_term,
                entry.last_term,
            ):
                continue
            if packing.digest(raw) != entry.sha256 and not self.settled:
                raise CorruptObjectError(
                    f"{_reason(damage)}, and this node's copy {seg.path} differs from it "
                    f"while a redaction's rewrite of this node's log is unfinished",
                    key=damage.key,
                ) from damage
            return self._mend(damage, raw, seg.path, entry.sha256)
        raise CorruptObjectError(_no_copy(damage), key=damage.key) from damage

    def file(self, ref: ObjectRef) -> Read:
        try:
            return Read(fetch(self.objects, ref), ref.sha256)
        except CorruptObjectError as e:
            damage = e
        self._damaged(damage)
        if not self.snapshots:
            raise CorruptObjectError(_no_copy(damage), key=damage.key) from damage
        path = os.path.join(self.snapshots, ref.name)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise CorruptObjectError(_no_copy(damage), key=damage.key) from damage
        if packing.digest(raw) != ref.sha256:
            raise CorruptObjectError(
                f"{_reason(damage)}, and this node's copy {path} is not the same file",
                key=damage.key,
            ) from damage
        return self._mend(damage, raw, path, ref.sha256)

    def _damaged(self, e: CorruptObjectError) -> None:
        metrics.ARCHIVE_CORRUPT.inc()
        log.error("archive: damaged in the bucket: %s", e)

    def _mend(self, damage: CorruptObjectError, raw: bytes, path: str, sha256: str) -> Read:
        sha = packing.digest(raw)
        metrics.ARCHIVE_REPAIRED.inc()
        if sha == sha256:
            self.objects.put(damage.key, packing.pack(raw))
            log.warning("archive: %s put back from this node's copy %s", damage.key, path)
        else:
            log.warning(
                "archive: %s replaced from this node's copy %s (rewritten by a redaction: "
                "it goes up under its own key)",
                damage.key,
                path,
            )
        return Read(raw, sha)


def _reason(e: CorruptObjectError) -> str:
    return str(e).removesuffix(f" (object {e.key})")


def _no_copy(e: CorruptObjectError) -> str:
    return f"{_reason(e)}, and this node holds no copy of it"
