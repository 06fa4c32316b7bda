"""The shipper's one decision: given the catalog and this node's log, what next.

`decide(view) -> Step` is pure: no I/O, no clock. The shipper (shipper.py)
reads the world into a `View`, decides, carries the step out, and logs the
step's sentence; tests assert on the sentences.

Ship by position (as standbys follow the primary): the bucket's position is
the catalog's last event; the next upload is the sealed segment that starts
right after it. Nothing is remembered between cycles that the catalog does
not say, so a new primary (or this one after kill -9) resumes where the
catalog ends, and an upload that was cut off is simply made again, to the
same content-addressed key.

Whose history: the primary's log is the cluster's. The catalog's last segment
is checked against it by (first id, last id, last term): two logs that agree
on an event's id and term agree on everything before it (a term's one
primary wrote one history), so checking the last entry checks them all. A
catalog tail that is not in this primary's history (a deposed primary's
divergent segment, never acknowledged in sync mode) is dropped from the
catalog, and this primary's own segment uploaded in its place. A catalog of
a *newer* term is another primary's: this one stops. One of its *own* term
that disagrees with its log is damage, not history: it stops and says so.

Snapshots go up at most once per sealed segment: one uploaded when the
previous one became restorable (the segments reached its watermark). So the
bucket always holds a snapshot a restore can start from within about two
segments of its end, for the cost of one snapshot per segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from apollo11.scheduler.bucket.catalog import Catalog

StepKind = Literal["idle", "blocked", "segment", "snapshot", "rewind", "redact", "expire"]


@dataclass(frozen=True, slots=True)
class Sealed:
    """A sealed segment of this node's log."""

    first: int
    last: int
    last_term: int


@dataclass(frozen=True, slots=True)
class View:
    primary: bool
    node_id: str
    cluster_id: str
    term: int  # the term of this node's log (its own, when primary)
    sealed: tuple[Sealed, ...]  # oldest first
    open_first: int  # first event id of the segment being written
    durable_id: int
    newest_snapshot: int | None  # watermark of the newest snapshot on disk
    catalog: Catalog


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    sentence: str
    first: int = 0  # segment: the one to upload; rewind: drop the catalog from here
    watermark: int = 0  # snapshot: the one to upload


def decide(v: View) -> Step:
    if not v.primary:
        return Step(
            "idle",
            f"standby: the primary uploads; the bucket holds events through {v.catalog.through}",
        )
    c = v.catalog
    if c.cluster_id and v.cluster_id and c.cluster_id != v.cluster_id:
        return Step(
            "blocked",
            f"the bucket's catalog is cluster {c.cluster_id}'s, this node is of cluster "
            f"{v.cluster_id}: uploading nothing; point --archive-url at a prefix of its own",
        )
    if c.term > v.term:
        return Step(
            "blocked",
            f"the catalog was written in term {c.term} by {c.writer}, after this node's term "
            f"{v.term}: another primary uploads; uploading nothing",
        )
    if c.segments:
        checked = _check_tail(v)
        if checked is not None:
            return checked
        nxt = c.through + 1
    else:
        nxt = v.sealed[0].first if v.sealed else v.open_first
    by_first = {s.first: s for s in v.sealed}
    seg = by_first.get(nxt)
    if seg is not None:
        return Step("segment", f"uploading segment {seg.first}..{seg.last}", first=seg.first)
    if nxt != v.open_first:
        held = v.sealed[0].first if v.sealed else v.open_first
        return Step(
            "blocked",
            f"the bucket ends at event {nxt - 1} and no segment of this node's log starts at "
            f"{nxt} (it holds {held}..{v.durable_id}): events are missing from the archive; "
            f"see docs/archive.md, 'A hole in the archive'",
        )
    snap = _snapshot_due(v)
    if snap is not None:
        return snap
    return Step(
        "idle",
        f"up to date: the bucket holds events through {c.through}; "
        f"{max(0, v.durable_id - c.through)} in the open segment",
    )


def _check_tail(v: View) -> Step | None:
    c = v.catalog
    tail = c.segments[-1]
    mine = next((s for s in v.sealed if s.first == tail.first), None)
    theirs = f"segment {tail.first}..{tail.last} (term {tail.last_term})"
    if mine is not None and (mine.last, mine.last_term) == (tail.last, tail.last_term):
        return None
    if mine is None and tail.first < v.open_first:
        # older than what this disk still holds, or boundaries that differ: the
        # next upload (which must start right after it) finds out which
        return None
    if mine is None:
        why = f"the bucket's {theirs} goes past this node's sealed history"
    else:
        why = (
            f"the bucket's {theirs} differs from this node's {mine.first}..{mine.last} "
            f"(term {mine.last_term})"
        )
    if c.term == v.term:
        return Step(
            "blocked",
            f"{why}, in this node's own term {v.term}: that is damage, not history; "
            f"uploading nothing (run `apollo11 archive verify`)",
        )
    return Step(
        "rewind",
        f"{why}: not this primary's history (a deposed primary's tail); dropping it from "
        f"the catalog to upload this node's own",
        first=tail.first,
    )


def _snapshot_due(v: View) -> Step | None:
    w = v.newest_snapshot
    c = v.catalog
    if w is None or w > v.durable_id:
        return None
    last = c.snapshots[-1].watermark if c.snapshots else None
    if last is not None and (w <= last or last > c.through):
        return None  # nothing newer, or the last one is not restorable yet
    return Step("snapshot", f"uploading snapshot {w}", watermark=w)
