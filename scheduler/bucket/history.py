"""Old history read back from the bucket: events a node's disk no longer holds.

Local retention (`--log-retention snapshots`) deletes a segment only once the
bucket holds it (the shipper's `retention_floor`), so every event a node dropped
is in a segment object the catalog names. A read of a task's events, of a range
of the log, or of a past state that reaches below the node's first kept event
comes here for the part below it:

- `covering` (pure, over the catalog) says which segment objects hold the ids
  wanted, and which ids no segment holds (before the archive began);
- each object is fetched, checked as a restore checks it (the zstd frame, the
  SHA-256 the catalog names, every record's CRC, ids and terms against the
  catalog's entry) and decompressed: a corrupt object is a CorruptObjectError
  naming its key, never skipped;
- the last few objects fetched are kept in memory, raw, with the offset of each
  record (bounded by count and bytes): a task's events sit in one or two
  segments, and a timeline read a page at a time reads the same ones again.

Every call blocks (the bucket, decompression): callers run it on a thread, never
on the event loop. Slower than the disk by a round trip and a decompression per
segment not in the cache; the answers that use it say so.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket.catalog import Catalog, SegmentEntry
from apollo11.scheduler.bucket.objects import ObjectStore
from apollo11.scheduler.bucket.verify import fetch_segment, load_catalog
from apollo11.scheduler.errors import BucketError, CorruptObjectError
from apollo11.scheduler.log import FRAME, Event, decode_batch

CACHE_SEGMENTS = 4  # objects kept in memory, decompressed...
CACHE_BYTES = 256 * 1024 * 1024  # ...and at most this many raw bytes of them
# reads started over because retention dropped a segment from under them: a drop
# happens at most once per shipper cycle, so more than a few in a row is not that
EXPIRED_RETRIES = 3


class _Expired(Exception):
    """A segment the catalog named when the read began was dropped by retention."""


def _moving() -> BucketError:
    return BucketError(
        f"retention dropped segments from the bucket during each of {EXPIRED_RETRIES} reads "
        f"in a row: try again"
    )


@dataclass(frozen=True, slots=True)
class Cover:
    """Which segment objects hold a set of ids: each with the ids it holds, in order;
    and the ids no segment of the catalog holds."""

    reads: tuple[tuple[SegmentEntry, tuple[int, ...]], ...]
    missing: tuple[int, ...]


def covering(catalog: Catalog, ids: Sequence[int]) -> Cover:
    """The segments of `catalog` that hold `ids` (ascending), each once, in order."""
    segments = catalog.segments
    firsts = [s.first for s in segments]
    reads: list[tuple[SegmentEntry, list[int]]] = []
    missing: list[int] = []
    for eid in ids:
        i = bisect.bisect_right(firsts, eid) - 1
        if i < 0 or eid > segments[i].last:
            missing.append(eid)
        elif reads and reads[-1][0] is segments[i]:
            reads[-1][1].append(eid)
        else:
            reads.append((segments[i], [eid]))
    return Cover(tuple((s, tuple(got)) for s, got in reads), tuple(missing))


def covering_range(catalog: Catalog, first: int, last: int) -> tuple[SegmentEntry, ...]:
    """The segments of `catalog` that hold any id in [first, last], in order."""
    return tuple(s for s in catalog.segments if s.last >= first and s.first <= last)


class _Segment:
    """A segment's raw bytes, checked, with where each record starts."""

    __slots__ = ("entry", "offsets", "raw")

    def __init__(self, entry: SegmentEntry, raw: bytes) -> None:
        self.entry = entry
        self.raw = raw
        offsets = []
        off = 0
        while off < len(raw):  # every record was checked by fetch_segment
            offsets.append(off)
            off += 8 + FRAME.unpack_from(raw, off)[1]
        offsets.append(off)
        self.offsets = offsets

    def events(self, first: int, last: int) -> list[Event]:
        """Events first..last (within this segment), decoded."""
        e = self.entry
        lo = self.offsets[first - e.first]
        hi = self.offsets[last - e.first + 1]
        got = decode_batch(self.raw[lo:hi], 0, base=lo, path=e.key, expect=first, term=0)
        if got.error is not None or len(got.events) != last - first + 1:
            raise CorruptObjectError(
                f"events {first}..{last} do not decode: {got.error}", key=e.key
            )
        return got.events


class BucketHistory:
    """Events read from the archive's segment objects, a few cached (thread-safe:
    each caller's thread fetches, the cache is shared under a lock)."""

    def __init__(
        self,
        objects: ObjectStore,
        *,
        cache_segments: int = CACHE_SEGMENTS,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        self.objects = objects
        self.cache_segments = cache_segments
        self.cache_bytes = cache_bytes
        self._lock = threading.Lock()
        self._catalog: Catalog | None = None
        self._cache: OrderedDict[str, _Segment] = OrderedDict()
        self.fetched = 0  # objects fetched from the bucket (not the cache): for tests

    @property
    def describe(self) -> str:
        return self.objects.describe

    def catalog(self, through: int = 0) -> Catalog:
        """The catalog as last read; read again when it does not reach `through`
        (the bucket grows; what it held once it holds on, bar retention's cut)."""
        with self._lock:
            cat = self._catalog
        if cat is None or cat.through < through:
            cat = load_catalog(self.objects)
            with self._lock:
                self._catalog = cat
        return cat

    def read_ids(self, ids: Sequence[int]) -> tuple[list[Event], tuple[int, ...]]:
        """The events with these ids (ascending), checked and decoded; and the ids
        the bucket does not hold (before its first segment, or past its end)."""
        if not ids:
            return [], ()
        for _ in range(EXPIRED_RETRIES):
            try:
                return self._read_ids(self.catalog(ids[-1]), ids)
            except _Expired:
                continue  # the catalog as it is now (read by `_segment`) says what is left
        raise _moving()

    def _read_ids(
        self, catalog: Catalog, ids: Sequence[int]
    ) -> tuple[list[Event], tuple[int, ...]]:
        cover = covering(catalog, ids)
        out: list[Event] = []
        for entry, wanted in cover.reads:
            seg = self._segment(entry)
            # each record alone: a task's events are spread among other tasks' events
            out.extend(seg.events(i, i)[0] for i in wanted)
        return out, cover.missing

    def read_range(self, first: int, last: int, limit: int = 0) -> list[Event]:
        """Events first..last the bucket holds, in order, at most `limit` (0: all)."""
        for _ in range(EXPIRED_RETRIES):
            try:
                return self._read_range(self.catalog(last), first, last, limit)
            except _Expired:
                continue
        raise _moving()

    def _read_range(self, catalog: Catalog, first: int, last: int, limit: int) -> list[Event]:
        out: list[Event] = []
        for entry in covering_range(catalog, first, last):
            seg = self._segment(entry)
            a, b = max(first, entry.first), min(last, entry.last)
            if limit:
                b = min(b, a + limit - len(out) - 1)
            out.extend(seg.events(a, b))
            if limit and len(out) >= limit:
                break
        return out

    def segment_events(self, entry: SegmentEntry, first: int, last: int) -> list[Event]:
        """Events first..last of one segment object (fetched, or from the cache)."""
        return self._segment(entry).events(first, last)

    def _segment(self, entry: SegmentEntry) -> _Segment:
        try:
            try:
                return self._fetch(entry)
            except CorruptObjectError:
                # A redaction rewrites a segment to a new object and deletes the old one:
                # a catalog read before it names an object gone. The catalog as it is
                # now says whether this one is still the history; damage is reported.
                fresh = load_catalog(self.objects)
                with self._lock:
                    self._catalog = fresh
                now = next((s for s in fresh.segments if s.first == entry.first), None)
                if now is None and fresh.segments and entry.last < fresh.segments[0].first:
                    # retention dropped it (expiry.py) since the catalog was read: not
                    # damage, history purged; the read starts over from the fresh one
                    raise _Expired(entry.key) from None
                if now is None or now.key == entry.key:
                    raise
                return self._fetch(now)
        except CorruptObjectError:
            metrics.ARCHIVE_CORRUPT.inc()
            raise

    def _fetch(self, entry: SegmentEntry) -> _Segment:
        with self._lock:
            seg = self._cache.get(entry.key)
            if seg is not None:
                self._cache.move_to_end(entry.key)
                metrics.ARCHIVE_HISTORY_READS.labels("cache").inc()
                return seg
        seg = _Segment(entry, fetch_segment(self.objects, entry))
        metrics.ARCHIVE_HISTORY_READS.labels("bucket").inc()
        with self._lock:
            self.fetched += 1
            self._cache[entry.key] = seg
            total = sum(len(s.raw) for s in self._cache.values())
            while len(self._cache) > 1 and (
                len(self._cache) > self.cache_segments or total > self.cache_bytes
            ):
                _, gone = self._cache.popitem(last=False)
                total -= len(gone.raw)
        return seg
