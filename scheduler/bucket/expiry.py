"""Retention reaches the bucket: which objects the archive no longer needs.

`expired(catalog) -> Expiry | None` is pure (no I/O, no clock): the shipper carries it
out (shipper.py) and logs its sentence. It decides from the catalog alone, because the
catalog carries what the state said when each snapshot went up: a snapshot entry's
`keep_from`, the first event id of any task still alive in that snapshot (not purged by
retention), computed by the shipper from the snapshot's own files as it uploads them
(needed.py).

A segment may go when both hold:

- **no live task has an event in it**: it ends before the newest restorable
  snapshot's `keep_from`. Every task with an event there was submitted at or before
  it, so was not alive at that snapshot: purged by retention (the one way a task
  leaves the state). Events of no task (term starts, the purges themselves, schedule
  fires, external events) are in the snapshot's state already. Tasks purged after the
  snapshot still count as alive: the next snapshot moves `keep_from` on.
- **no restore needs it**: a restore is the newest restorable snapshot plus the
  segments after its watermark, and `keep_from` is at most that watermark + 1. The
  catalog's last segment always stays (a restore needs the segments to reach the
  snapshot).

Only a prefix goes: the oldest segments, while each qualifies. The catalog's
`chain_base` moves to the chain value of the last one dropped, so the entries left
still verify from it (`Catalog.problems`, `apollo11 archive verify`). A segment
further on whose tasks are all purged, behind one that still holds a live task, stays
(the chain runs through it; a task kept for ever, or under a legal hold, keeps every
segment from its first event on): see docs/archive.md, "Retention in the bucket".
Snapshot entries that can no longer start a restore (their watermark before the new
first segment) leave the catalog with them.

Objects first named, then not: the catalog that no longer names the objects is written
first, then they are deleted (`unreferenced`). A cut between the two (kill -9, a failed
delete) leaves objects no catalog names, never a catalog naming an object gone; the
segment objects among them are below the catalog's first segment, and `garbage` finds
them the next time the bucket is listed (a new primary's first idle cycle, or this
one's after a failure).

An upload cut off between its objects and its catalog (kill -9) leaves objects no
catalog names too. Most are named again when the upload resumes (the same content,
the same key); those it never names (a newer snapshot went up instead, a segment
rewritten on disk meanwhile) are `strays`: found by the same listing, and deleted
after the shipper has written the catalog again (a fence: an upload still in flight
elsewhere, whose objects may be among them, can no longer write its catalog).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from apollo11.scheduler.bucket import packing
from apollo11.scheduler.bucket.catalog import Catalog


@dataclass(frozen=True, slots=True)
class Expiry:
    catalog: Catalog  # without the segments (and snapshots) that go
    keys: tuple[str, ...]  # objects to delete once that catalog is written
    segments: int  # segments dropped
    events: int  # events they held
    stored: int  # bytes they took in the bucket (compressed)
    sentence: str


def expired(catalog: Catalog) -> Expiry | None:
    """The catalog without the oldest segments no live task and no restore needs,
    and what to delete; None when nothing goes."""
    snap = catalog.restorable()
    if snap is None or snap.keep_from <= 0:
        return None
    limit = min(snap.keep_from, snap.watermark + 1)  # never past what a restore needs
    segments = catalog.segments
    n = 0
    while n < len(segments) - 1 and segments[n].last < limit:
        n += 1
    if n == 0:
        return None
    gone, kept = segments[:n], segments[n:]
    start = kept[0].first
    new = dataclasses.replace(
        catalog,
        chain_base=gone[-1].chain,
        segments=kept,
        snapshots=tuple(s for s in catalog.snapshots if s.watermark >= start - 1),
    )
    stored = sum(s.stored for s in gone)
    events = gone[-1].last - gone[0].first + 1
    return Expiry(
        new,
        unreferenced(catalog, new),
        n,
        events,
        stored,
        f"retention: dropping {n} segments {gone[0].first}..{gone[-1].last} from the bucket "
        f"({stored} bytes): every task with events in them is purged (snapshot "
        f"{snap.watermark} keeps from event {snap.keep_from})",
    )


def keys_of(catalog: Catalog) -> dict[str, int]:
    """Every object the catalog names (segments, snapshot files, chunks), in order,
    with its stored size."""
    keys = {s.key: s.stored for s in catalog.segments}
    for snap in catalog.snapshots:
        for ref in (*snap.chunks, snap.file):
            keys[ref.key] = ref.stored
    return keys


def unreferenced(old: Catalog, new: Catalog) -> tuple[str, ...]:
    """Objects `old` names that `new` does not: to delete once `new` is written."""
    named = keys_of(new)
    return tuple(k for k in keys_of(old) if k not in named)


def garbage(catalog: Catalog, listed: Iterable[str]) -> list[str]:
    """Segment objects below the catalog's first segment (of those `listed` under
    `segments/`): what a drop cut off between its catalog and its deletes left. No
    upload ever goes there (the next one starts after the catalog's end), so they are
    no one's history."""
    if not catalog.segments:
        return []
    start = catalog.segments[0].first
    out = []
    for key in listed:
        first = packing.segment_first(key)
        if first is not None and first < start:
            out.append(key)
    return out


def strays(catalog: Catalog, listed: Iterable[str]) -> list[str]:
    """Objects (of those `listed` under `segments/`, `snapshots/` and `chunks/`) that no
    upload from this catalog on can name: a segment object within the catalog's range
    it does not name (uploads add segments after its end), a snapshot object at or
    before its newest snapshot it does not name (uploads add newer ones), a chunk
    object it does not name (a snapshot upload puts its chunks again if missing).
    What uploads and rewrites cut off before their catalog left; never the segments
    `garbage` finds. An empty catalog's listing is left alone."""
    named = keys_of(catalog)
    newest = catalog.snapshots[-1].watermark if catalog.snapshots else None
    start = catalog.segments[0].first if catalog.segments else None
    out = []
    for key in listed:
        if key in named:
            continue
        first = packing.segment_first(key)
        if first is not None:
            if start is not None and start <= first <= catalog.through:
                out.append(key)
        elif newest is None:
            continue
        elif key.startswith(packing.SNAPSHOTS):
            mark = packing.snapshot_watermark(key)
            if mark is not None and mark <= newest:
                out.append(key)
        elif key.startswith(packing.CHUNKS):
            out.append(key)
    return out
