"""The catalog: the bucket's manifest, the one object that says what the archive is.

Objects are named by their content (packing.py), so a listing of the bucket
says what was *uploaded*, not what the history *is*: a killed upload's object,
a deposed primary's divergent segment, an old snapshot are all there too. The
catalog (`catalog.json` under the prefix) is the history: the segments in
order, each with its event range, first and last term, sizes, SHA-256 and key;
the snapshots that may start a restore; who wrote it, in which term. Only the
primary writes it, after the objects it names are in the bucket: an object
without a catalog entry is an upload not finished (harmless, reused by the
next attempt: same key), never a catalog entry without its object.

The checksum chain: each segment entry carries
`chain = sha256(previous chain | first | last | last term | sha256)`, from
`chain_base` ("" for an archive that starts at event 1). Segments are checked
one by one by their own SHA-256 and record CRCs; the chain ties them into one
history, so a segment swapped for another one's, an entry dropped from the
middle or two entries reordered are caught by anyone holding the newest chain
value, not only by a missing event id.

Made to grow (issue 34's later items):
- retention drops the oldest entries and moves `chain_base` to the chain
  value of the last one dropped: the rest still verifies (expiry.py);
- redaction rewrites a segment (payloads removed, record CRCs recomputed) to a
  new object; its entry's `sha256` and `key` become the new object's, and
  `origin` keeps the SHA-256 the chain was made over (a redaction record says
  why, in the log itself);
- export reads the segments named here, in order;
- `redacted_through`: the redactions already carried to the objects, so that a
  new primary does not check each one again.

The file is JSON (a person can read it with `aws s3 cp - | jq`), with the
SHA-256 of its canonical body beside the body: a damaged catalog is refused,
never half read.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

from apollo11.scheduler.errors import CorruptObjectError

FORMAT = "apollo11-archive-catalog"
VERSION = 1
SNAPSHOTS_KEPT = 4  # catalog entries: the newest few are all a restore ever starts from


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """A file in the bucket: its name on a node's disk, its key, its raw SHA-256,
    its raw size and its stored (compressed) size."""

    name: str
    key: str
    sha256: str
    size: int
    stored: int


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    first: int
    last: int
    first_term: int
    last_term: int
    key: str
    sha256: str
    size: int
    stored: int
    chain: str
    origin: str = ""  # redaction: the SHA-256 the chain was made over (see above)

    @property
    def chained(self) -> str:
        return self.origin or self.sha256


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    watermark: int
    term: int
    position: tuple[int, int, int]  # the log position after the watermark
    file: ObjectRef
    chunks: tuple[ObjectRef, ...]
    # The first event id a task alive in this snapshot has (its watermark + 1 when
    # none is); 0: not known (an older catalog, or nothing ever purged). Every segment
    # ending before it holds only purged tasks' events: retention may drop it
    # (expiry.py). Older catalogs have no such field, and read as 0.
    keep_from: int = 0


def link(prev: str, first: int, last: int, last_term: int, sha256: str) -> str:
    return hashlib.sha256(f"{prev}|{first}|{last}|{last_term}|{sha256}".encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Catalog:
    cluster_id: str
    cluster: str
    term: int  # the term of the primary that wrote it last
    writer: str  # that primary's node id
    written_ms: int
    chain_base: str
    segments: tuple[SegmentEntry, ...]
    snapshots: tuple[SnapshotEntry, ...]
    # Every redaction whose TASK_REDACTED id is at most this one has been carried to
    # the bucket's objects: a new primary checks only those after it (each pass reads
    # the archive's snapshots). 0 in a catalog written before it existed.
    redacted_through: int = 0

    @classmethod
    def empty(cls, cluster_id: str, cluster: str) -> Catalog:
        return cls(cluster_id, cluster, 0, "", 0, "", (), ())

    @property
    def through(self) -> int:
        """The last event id the bucket holds (0: none)."""
        return self.segments[-1].last if self.segments else 0

    @property
    def chain(self) -> str:
        return self.segments[-1].chain if self.segments else self.chain_base

    def signed(self, *, term: int, writer: str, now_ms: int) -> Catalog:
        return dataclasses.replace(self, term=term, writer=writer, written_ms=now_ms)

    def with_segment(
        self, *, first: int, last: int, first_term: int, last_term: int, ref: ObjectRef
    ) -> Catalog:
        if self.segments and first != self.through + 1:
            raise ValueError(f"segment {first} does not follow the catalog's end {self.through}")
        entry = SegmentEntry(
            first,
            last,
            first_term,
            last_term,
            ref.key,
            ref.sha256,
            ref.size,
            ref.stored,
            link(self.chain, first, last, last_term, ref.sha256),
        )
        return dataclasses.replace(self, segments=(*self.segments, entry))

    def with_snapshot(self, entry: SnapshotEntry) -> Catalog:
        kept = [s for s in self.snapshots if s.watermark != entry.watermark]
        kept.append(entry)
        kept.sort(key=lambda s: s.watermark)
        return dataclasses.replace(self, snapshots=tuple(kept[-SNAPSHOTS_KEPT:]))

    def rewound(self, first: int) -> Catalog:
        """Without the segments from `first` on, nor the snapshots past what is left."""
        segments = tuple(s for s in self.segments if s.first < first)
        end = segments[-1].last if segments else first - 1
        snapshots = tuple(s for s in self.snapshots if s.watermark <= end)
        # a redaction past the new end was a deposed primary's: its id may be another
        # event's in the history that replaces it
        redacted = min(self.redacted_through, end)
        return dataclasses.replace(
            self, segments=segments, snapshots=snapshots, redacted_through=redacted
        )

    def chunk(self, name: str, sha256: str) -> ObjectRef | None:
        """A chunk already in the bucket with this name and content (uploaded with an
        earlier snapshot): not uploaded again."""
        for s in self.snapshots:
            for c in s.chunks:
                if c.name == name and c.sha256 == sha256:
                    return c
        return None

    def restorable(self) -> SnapshotEntry | None:
        """The newest snapshot a restore can start from: one the segments reach
        (a snapshot past the last segment's end describes events not in the bucket)."""
        start = self.segments[0].first if self.segments else 1
        for s in reversed(self.snapshots):
            if start - 1 <= s.watermark <= self.through:
                return s
        return None

    def problems(self) -> list[str]:
        """What is wrong with the catalog's own structure: ids that do not run on,
        terms going down, a chain value that does not follow. [] when sound."""
        found: list[str] = []
        prev = self.chain_base
        prev_last: int | None = None
        prev_term = 0
        for s in self.segments:
            if prev_last is not None and s.first != prev_last + 1:
                found.append(f"segment {s.first} does not follow {prev_last}: a hole or overlap")
            if s.last < s.first or s.first_term > s.last_term or s.first_term < prev_term:
                found.append(f"segment {s.first}..{s.last}: impossible range or terms")
            want = link(prev, s.first, s.last, s.last_term, s.chained)
            if s.chain != want:
                found.append(f"segment {s.first}..{s.last}: the checksum chain breaks here")
            prev, prev_last, prev_term = s.chain, s.last, s.last_term
        return found

    # ------------------------------------------------------------- encoding

    def encode(self) -> bytes:
        body = orjson.dumps(dataclasses.asdict(self), option=orjson.OPT_SORT_KEYS)
        sha = hashlib.sha256(body).hexdigest()
        return b'{"format":"%s","version":%d,"sha256":"%s","body":%s}\n' % (
            FORMAT.encode(),
            VERSION,
            sha.encode(),
            body,
        )


def decode(raw: bytes, *, name: str) -> Catalog:
    """A catalog from its bytes; CorruptObjectError when it fails its checksum or
    cannot be read (never a partial catalog)."""
    try:
        doc = orjson.loads(raw)
        if doc.get("format") != FORMAT:
            raise CorruptObjectError(f"not an Apollo-11 catalog ({doc.get('format')!r})", key=name)
        if doc.get("version") != VERSION:
            raise CorruptObjectError(
                f"catalog version {doc.get('version')}; this build reads version {VERSION}: "
                f"use a matching release",
                key=name,
            )
        body = doc["body"]
        canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        if hashlib.sha256(canonical).hexdigest() != doc["sha256"]:
            raise CorruptObjectError("the catalog fails its checksum", key=name)
        return _catalog(body)
    except CorruptObjectError:
        raise
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CorruptObjectError(f"the catalog is unreadable: {e!r}", key=name) from e


def _ref(d: dict[str, Any]) -> ObjectRef:
    return ObjectRef(
        str(d["name"]), str(d["key"]), str(d["sha256"]), int(d["size"]), int(d["stored"])
    )


def _catalog(b: dict[str, Any]) -> Catalog:
    return Catalog(
        cluster_id=str(b["cluster_id"]),
        cluster=str(b["cluster"]),
        term=int(b["term"]),
        writer=str(b["writer"]),
        written_ms=int(b["written_ms"]),
        chain_base=str(b["chain_base"]),
        segments=tuple(
            SegmentEntry(
                int(s["first"]),
                int(s["last"]),
                int(s["first_term"]),
                int(s["last_term"]),
                str(s["key"]),
                str(s["sha256"]),
                int(s["size"]),
                int(s["stored"]),
                str(s["chain"]),
                str(s.get("origin", "")),
            )
            for s in b["segments"]
        ),
        snapshots=tuple(
            SnapshotEntry(
                int(s["watermark"]),
                int(s["term"]),
                (int(s["position"][0]), int(s["position"][1]), int(s["position"][2])),
                _ref(s["file"]),
                tuple(_ref(c) for c in s["chunks"]),
                int(s.get("keep_from", 0)),
            )
            for s in b["snapshots"]
        ),
        redacted_through=int(b.get("redacted_through", 0)),
    )
