"""The shipper: the primary's background task that puts its history in the bucket.

One cycle: read the world (the catalog, once, then as written; this node's
sealed segments and newest snapshot) into a `plan.View`, decide (plan.py),
carry the step out, say its sentence. Every call to the bucket, every read of a
file, every compression and checksum runs on the shipper's own thread: the
event loop only copies the segment list, and the append path never knows the
bucket exists. Nothing here is per event.

Reset on error (Litestream's `Replica.syncOnce`): any failure drops the cached
catalog, waits (capped backoff, errors logged at most every
`ERROR_LOG_EVERY_S`), and reads the bucket again. An unreachable or read-only
bucket therefore costs the node nothing but a log line and the lag metric:
uploads resume where the catalog ends when it answers again, and what was not
uploaded is kept on disk meanwhile (`retention_floor`: local retention never
deletes a segment the bucket does not hold).

When it has nothing to upload, the primary carries retention to the bucket
(expiry.py decides: the oldest segments only purged tasks' events fill, which no
restore needs): the catalog without them first, then the deletes; a listing once
per primary (and after a failure) deletes what a cut-off drop, upload or rewrite
left (expiry.py: `garbage`, `strays`). A damaged object a redaction pass reads is
mended from this node's copy (mending.py), or the redaction is reported as not
carried and tried again, while the rest goes on.

Standbys run the same task and upload nothing: they read the catalog every
`watch_s`, for their retention floor and for the moment one of them is
promoted (its first cycle reads the catalog afresh).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import packing
from apollo11.scheduler.bucket.catalog import Catalog, ObjectRef, SnapshotEntry, decode
from apollo11.scheduler.bucket.expiry import (
    Expiry,
    expired,
    garbage,
    keys_of,
    strays,
    unreferenced,
)
from apollo11.scheduler.bucket.mending import Mender
from apollo11.scheduler.bucket.needed import snapshot_keep_from
from apollo11.scheduler.bucket.objects import ObjectStore
from apollo11.scheduler.bucket.plan import Sealed, Step, View, decide
from apollo11.scheduler.bucket.redaction import rewrite_snapshots, rewrite_task, unnamed_files
from apollo11.scheduler.bucket.span import span_of
from apollo11.scheduler.errors import (
    BucketConflictError,
    BucketError,
    CorruptLogError,
    CorruptObjectError,
)
from apollo11.scheduler.log import Segment, check_record
from apollo11.scheduler.state import Store
from apollo11.scheduler.threadnice import lower_this_thread

log = logging.getLogger(__name__)

POLL_S = 1.0  # between cycles with nothing to do: a sealed segment waits this long at most
WATCH_S = 30.0  # a standby reads the catalog this often
BACKOFF_MAX_S = 10.0
ERROR_LOG_EVERY_S = 30.0
REDACTION_RETRY_S = 300.0  # a redaction a damaged object held back is tried again
# How much lower than the node's own threads the shipper's run (their nice value). A
# segment's compression, checksums and upload come in bursts of tens of milliseconds
# of CPU; on a core the event loop wanted, the loop's appends waited for them (append
# p99 at 10,000 events/s ~6 → ~9 ms with the archive on, docs/benchmarks.md). Ten
# lower, the kernel gives the loop the core first; the uploads take what is left.
ARCHIVE_NICE = 10

T = TypeVar("T")


class Host(Protocol):
    """What the shipper reads of its node (scheduler/node/node.py)."""

    @property
    def store(self) -> Store | None: ...
    @property
    def role(self) -> str: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def reshaping(self) -> bool: ...

    def notice(self, text: str) -> None: ...


class Shipper:
    def __init__(
        self,
        host: Host,
        objects: ObjectStore,
        *,
        node_id: str,
        cluster: str,
        poll_s: float = POLL_S,
        watch_s: float = WATCH_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        redaction_retry_s: float = REDACTION_RETRY_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.host = host
        self.objects = objects
        self.node_id = node_id
        self.cluster = cluster
        self.poll_s = poll_s
        self.watch_s = watch_s
        self.backoff_max_s = backoff_max_s
        self.redaction_retry_s = redaction_retry_s
        self._clock = clock
        self.catalog: Catalog | None = None  # as last read or written; None: read it
        self._read_at = 0.0
        self.sentence = ""  # the last step's, for status and tests
        self.failures = 0  # in a row
        self._logged_error_at = -1e9
        self._terms: dict[tuple[int, int], int] = {}  # (first id, size) -> last term
        self._hashes: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256
        self._was_primary = False
        self._known_through = 0  # the bucket's end as last read: the lag while it fails
        # redactions whose segments this primary has rewritten in the bucket: task -> id
        self._redacted: dict[str, int] = {}
        # redactions a damaged object (no copy here) held back: task -> (id, retry at)
        self._held: dict[str, tuple[int, float]] = {}
        # has this primary listed the bucket for what a cut-off deletion left (expiry.py)?
        self._swept = False
        self.expired = 0  # segments this node dropped from the bucket (retention)

    # ------------------------------------------------------------ for the node

    def redacted(self, task_id: str, rid: int) -> bool:
        """Has this primary rewritten the bucket's records of redacted task `task_id`
        (its TASK_REDACTED `rid`)? What the retention sweep asks before the state
        forgets a purged task's redaction (Store.redaction_settled)."""
        return self._redacted.get(task_id) == rid

    def retention_floor(self) -> int:
        """The first event id local retention must keep: the bucket does not hold it
        (1, everything, until the catalog has been read)."""
        return 1 if self.catalog is None else self.catalog.through + 1

    async def run(self) -> None:
        """Cycle until cancelled; a failed cycle waits and starts over from the bucket."""
        while True:
            try:
                step = await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the bucket, a file, anything: never the node
                await asyncio.sleep(self._failed(e))
                continue
            if step.kind in ("idle", "blocked"):
                await asyncio.sleep(self.poll_s)

    async def cycle(self) -> Step:
        """Read, decide, act: one step (tests call this directly)."""
        h = self.host
        store = h.store
        if store is None or h.reshaping:
            return Step("idle", "waiting for the store to open")
        primary = h.role == "primary"
        # a standby's copy is up to watch_s old: read afresh when it is promoted
        changed, self._was_primary = primary != self._was_primary, primary
        promoted = primary and changed
        if changed:  # what a primary held back is the next primary's to find and say
            self._held.clear()
            metrics.ARCHIVE_REDACTIONS_PENDING.set(0)
        if promoted:
            self._swept = False
        stale = not primary and self._clock() - self._read_at >= self.watch_s
        if self.catalog is None or stale or promoted:
            self.catalog = await self._call(self._read_catalog)
        view = await self._view(store, primary, self.catalog)
        step = decide(view)
        self._gauges(view, step)
        self._say(step)
        if step.kind == "segment":
            seg = next(s for s in store.log.segments[:-1] if s.first_id == step.first)
            frozen = Segment(seg.first_id, seg.path, seg.size, seg.last_id)
            self.catalog = await self._call(self._upload_segment, frozen, view)
        elif step.kind == "snapshot":
            # nothing ever purged: no segment can expire, and the archive is not read
            purging = bool(store.state.purged or store.state.tombstones)
            self.catalog = await self._call(self._upload_snapshot, store, view, purging)
        elif step.kind == "rewind":
            self.catalog = await self._call(
                self._write_catalog, view.catalog, view.catalog.rewound(step.first), view.term
            )
        elif step.kind == "idle" and primary:
            due = self._redaction_due(store, view.catalog)
            if due is not None:
                task_id, rid, ids = due
                step = Step(
                    "redact",
                    f"rewriting the bucket's segments, snapshots and chunks of redacted "
                    f"task {task_id}",
                )
                self._say(step)
                mender = Mender(
                    self.objects,
                    [
                        Segment(s.first_id, s.path, s.size, s.last_id)
                        for s in store.log.segments[:-1]
                    ],
                    store.snapshots.directory,
                    settled=all(store.redactor.rewritten(t) for t in store.state.redacted),
                )
                through = self._carried_through(store, view.catalog, task_id)
                self.catalog, damaged = await self._call(
                    self._redact, view, task_id, ids, rid, mender, through
                )
                step = self._redacted_or_held(task_id, rid, damaged) or step
            else:
                step = await self._expire(view, step)
        self.failures = 0
        return step

    def _redacted_or_held(
        self, task_id: str, rid: int, damaged: list[CorruptObjectError]
    ) -> Step | None:
        """Done, or held back by objects damaged with no copy here: said (the log, the
        node's notice, a gauge), never skipped, and tried again after
        `redaction_retry_s` while the other work goes on."""
        if not damaged:
            self._redacted[task_id] = rid
            was_held = self._held.pop(task_id, None) is not None
            metrics.ARCHIVE_REDACTIONS_PENDING.set(len(self._held))
            if was_held:  # the notice said it was not: say that it is now
                sentence = f"the redaction of task {task_id} is now carried to the bucket"
                log.warning("archive: %s", sentence)
                self.host.notice(f"archive: {sentence}")
            return None
        self._held[task_id] = (rid, self._clock() + self.redaction_retry_s)
        metrics.ARCHIVE_REDACTIONS_PENDING.set(len(self._held))
        step = Step(
            "redact",
            f"the redaction of task {task_id} is not carried to the bucket: "
            + "; ".join(str(e) for e in damaged)
            + f"; the rest of it is, and it is tried again in {self.redaction_retry_s:.0f} s "
            "(`apollo11 archive verify --repair-from DATA_DIR` puts the object back from "
            "a node that holds it)",
        )
        self.sentence = step.sentence
        log.error("archive: %s", step.sentence)
        self.host.notice(f"archive: {step.sentence}")
        return step

    async def _expire(self, view: View, idle: Step) -> Step:
        """Retention in the bucket (expiry.py): the oldest segments no live task and no
        restore needs leave the catalog, then the bucket; and, once per primary (and
        after a failure), what a cut-off deletion left is found by a listing."""
        drop = expired(view.catalog)
        if drop is not None:
            step = Step("expire", drop.sentence)
            self._say(step)
            self.catalog = await self._call(self._drop, view, drop)
            self.expired += drop.segments
            return step
        if not self._swept:
            self.catalog, said = await self._call(self._sweep, view.catalog, view.term)
            self._swept = True
            if said:
                step = Step("expire", f"retention: deleted {said}")
                self._say(step)
                return step
        return idle

    def _drop(self, view: View, drop: Expiry) -> Catalog:
        # the catalog first: an object it names is never gone; a cut before the
        # deletes leaves objects no one names (`_sweep` finds them)
        written = self._write_catalog(view.catalog, drop.catalog, view.term)
        sizes = keys_of(view.catalog)
        for key in drop.keys:
            self.objects.delete(key)
            metrics.ARCHIVE_DELETED.labels("expired").inc()
            metrics.ARCHIVE_DELETED_BYTES.inc(sizes.get(key, 0))
        return written

    def _sweep(self, catalog: Catalog, term: int) -> tuple[Catalog, str]:
        """Delete what cut-off drops, uploads and rewrites left (expiry.py); the
        catalog as it now is, and what was deleted ("" for nothing)."""
        listed = [
            *self.objects.list(packing.SEGMENTS),
            *self.objects.list(packing.SNAPSHOTS),
            *self.objects.list(packing.CHUNKS),
        ]
        left = garbage(catalog, listed)
        below = set(left)
        stray = [k for k in strays(catalog, listed) if k not in below]
        written = catalog
        if stray:
            # listed before this write: a deposed primary's upload whose objects are
            # among them read an older catalog, so its conditional write now fails
            written = self._write_catalog(catalog, catalog, term)
        for key in left:
            self.objects.delete(key)
            metrics.ARCHIVE_DELETED.labels("garbage").inc()
        for i, key in enumerate(stray):
            # a stray is one no catalog names *yet*: were this node deposed meanwhile, a
            # new primary could reuse it for an upload and name it. Each delete after
            # a look that the catalog is still this fence's.
            if not self._still(written):
                log.warning(
                    "archive: the catalog changed during the sweep: %d of its objects "
                    "left for the next one",
                    len(stray) - i,
                )
                stray = stray[:i]
                break
            self.objects.delete(key)
            metrics.ARCHIVE_DELETED.labels("garbage").inc()
        said = []
        if left:
            said.append(f"{len(left)} objects a cut-off drop left")
        if stray:
            said.append(f"{len(stray)} objects cut-off uploads or rewrites left")
            log.info("archive: deleted objects no catalog names: %s", ", ".join(stray))
        return written, "; ".join(said)

    def _still(self, catalog: Catalog) -> bool:
        """Is the bucket's catalog still `catalog`?"""
        now = self.objects.get_tagged(packing.CATALOG)
        return now is not None and decode(now[0], name=packing.CATALOG) == catalog

    def _redaction_due(self, store: Store, catalog: Catalog) -> tuple[str, int, list[int]] | None:
        """The oldest redaction the bucket holds (its event is in it, so every record of
        the task is too) that this primary has not carried to the bucket yet."""
        redacted = store.state.redacted
        if len(self._redacted) > len(redacted):  # the state forgot some: so does this
            self._redacted = {t: r for t, r in self._redacted.items() if t in redacted}
        if any(t not in redacted for t in self._held):
            self._held = {t: h for t, h in self._held.items() if t in redacted}
            metrics.ARCHIVE_REDACTIONS_PENDING.set(len(self._held))
        now = self._clock()
        for task_id, rid in sorted(redacted.items(), key=lambda kv: kv[1]):
            if rid <= catalog.redacted_through:  # carried by this primary or one before
                self._redacted[task_id] = rid
                continue
            if rid > catalog.through or self._redacted.get(task_id) == rid:
                continue
            held = self._held.get(task_id)
            if held is not None and held[0] == rid and now < held[1]:
                continue  # damaged, no copy here: reported; the others go on meanwhile
            if not store.snapshots_redacted(task_id, rid):
                continue  # the files a snapshot upload reads still hold the data
            ids = store.state.redacted_records.get(task_id)  # the task may be purged
            if ids is None:
                self._redacted[task_id] = rid  # not indexed: see docs/archive.md
                continue
            return task_id, rid, ids
        return None

    def _carried_through(self, store: Store, catalog: Catalog, task_id: str) -> int:
        """The catalog's `redacted_through` once `task_id`'s redaction is carried: the
        highest id up to which every redaction the state holds is (those the state
        forgot, their tasks purged, no longer matter)."""
        through = catalog.redacted_through
        for t, r in sorted(store.state.redacted.items(), key=lambda kv: kv[1]):
            if r <= through:
                continue
            if t != task_id and self._redacted.get(t) != r:
                break
            through = r
        return through

    def _redact(
        self,
        view: View,
        task_id: str,
        ids: list[int],
        rid: int,
        mender: Mender | None = None,
        through: int = 0,
    ) -> tuple[Catalog, list[CorruptObjectError]]:
        """The pass (redaction.py); reads through `mender` (this node's copies), or
        straight from the bucket; what it could not read is returned, not raised.
        `through`: the catalog's `redacted_through` if the pass is whole."""
        if mender is None:
            mender = Mender(self.objects, [], "")
        new, stale, damaged = rewrite_task(
            self.objects, view.catalog, ids, rid, self._put, mender.segment
        )
        new, stale_files, damaged_files = rewrite_snapshots(
            self.objects, new, {task_id: rid}, self._put, mender.file
        )
        damaged += damaged_files
        if not damaged and through > new.redacted_through:
            new = dataclasses.replace(new, redacted_through=through)
        written = view.catalog
        if new != view.catalog:  # the catalog first, then the deletes
            written = self._write_catalog(view.catalog, new, view.term)
        for key in stale:
            self.objects.delete(key)
        sizes = keys_of(view.catalog)
        for key in stale_files:
            self.objects.delete(key)
            metrics.ARCHIVE_DELETED.labels("redacted").inc()
            metrics.ARCHIVE_DELETED_BYTES.inc(sizes.get(key, 0))
        # and what an earlier pass cut off before its deletes left (a new primary checks
        # every redaction once): found by a listing, as `leftovers` finds old segments
        listed = self.objects.list(packing.SNAPSHOTS) + self.objects.list(packing.CHUNKS)
        for key in unnamed_files(keys_of(written), listed):
            self.objects.delete(key)
            metrics.ARCHIVE_DELETED.labels("garbage").inc()
        return written, damaged

    # -------------------------------------------------------------- the world

    async def _view(self, store: Store, primary: bool, catalog: Catalog) -> View:
        segments = store.log.segments
        sealed = [s for s in segments[:-1] if not s.empty]
        missing = [s for s in sealed if (s.first_id, s.size) not in self._terms]
        if missing:
            frozen = [Segment(s.first_id, s.path, s.size, s.last_id) for s in missing]
            await self._call(self._learn_terms, frozen)
        marks = store.snapshots.watermarks()
        return View(
            primary=primary,
            node_id=self.node_id,
            cluster_id=self.host.cluster_id,
            term=store.log.last_term,
            sealed=tuple(
                Sealed(s.first_id, s.last_id, self._terms[(s.first_id, s.size)]) for s in sealed
            ),
            open_first=segments[-1].first_id,
            durable_id=store.log.durable_id,
            newest_snapshot=marks[0] if marks else None,
            catalog=catalog,
        )

    def _learn_terms(self, segments: list[Segment]) -> None:
        """The last record's term of each sealed segment (CRC-checked), once each."""
        for seg in segments:
            off = seg.locate(seg.last_id)
            data = seg.read(off, seg.size - off)
            info = check_record(data, 0, seg.path, base=off)
            if info is None or info.event_id != seg.last_id:
                raise CorruptLogError(
                    f"the last record is not event {seg.last_id}", path=seg.path, offset=off
                )
            self._terms[(seg.first_id, seg.size)] = info.term

    def _gauges(self, v: View, step: Step) -> None:
        self._known_through = v.catalog.through
        metrics.ARCHIVE_THROUGH.set(v.catalog.through)
        metrics.ARCHIVE_BLOCKED.set(1 if step.kind == "blocked" else 0)
        self._lag(v.primary, v.durable_id, [s.first for s in v.sealed])

    def _lag(self, primary: bool, durable_id: int, sealed_firsts: list[int]) -> None:
        through = self._known_through
        if primary:
            metrics.ARCHIVE_LAG_EVENTS.set(max(0, durable_id - through))
            metrics.ARCHIVE_PENDING_SEGMENTS.set(sum(1 for f in sealed_firsts if f > through))
        else:
            metrics.ARCHIVE_LAG_EVENTS.set(0)
            metrics.ARCHIVE_PENDING_SEGMENTS.set(0)

    def _lag_meanwhile(self) -> None:
        """While the bucket fails, the lag still grows: from what it last held."""
        store = self.host.store
        if store is not None and not self.host.reshaping:
            firsts = [s.first_id for s in store.log.segments[:-1] if not s.empty]
            self._lag(self.host.role == "primary", store.log.durable_id, firsts)

    def _say(self, step: Step) -> None:
        if step.sentence == self.sentence:
            return
        self.sentence = step.sentence
        if step.kind == "blocked":
            self.host.notice(f"archive: {step.sentence}")
        elif step.kind in ("rewind", "segment", "snapshot", "expire"):
            log.info("archive: %s", step.sentence)
        else:
            log.debug("archive: %s", step.sentence)

    def _failed(self, e: Exception) -> float:
        """Reset on error: the catalog is read again; how long to wait."""
        self.catalog = None
        self._swept = False  # a deletion may have been cut off: list the bucket again
        self.failures += 1
        self._lag_meanwhile()
        metrics.ARCHIVE_FAILURES.inc()
        if isinstance(e, CorruptObjectError):
            metrics.ARCHIVE_CORRUPT.inc()
        now = time.monotonic()
        if now - self._logged_error_at >= ERROR_LOG_EVERY_S:
            self._logged_error_at = now
            what = str(e) if isinstance(e, BucketError | CorruptLogError) else repr(e)
            log.error(
                "archive: %s (%d failed in a row; the node goes on, uploads wait and resume)",
                what,
                self.failures,
            )
            self.sentence = f"failing: {what}"
        return float(min(self.backoff_max_s, 0.25 * 2 ** min(self.failures, 8)))

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on a daemon thread of its own. Not an executor: its threads are
        joined at exit, and a PUT hanging on a black-holed bucket would hold the
        node's stop for the client's timeouts. A thread cut off at exit is a kill -9
        mid-upload, which the catalog makes harmless."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()

        def settle(result: T | None, error: BaseException | None) -> None:
            if fut.done():
                return  # cancelled meanwhile
            if error is not None:
                fut.set_exception(error)
            else:
                fut.set_result(result)  # type: ignore[arg-type]

        def work() -> None:
            lower_this_thread(ARCHIVE_NICE)
            try:
                result, error = fn(*args), None
            except BaseException as e:
                result, error = None, e
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, result, error)

        threading.Thread(target=work, name="apollo11-archive", daemon=True).start()
        return await fut

    # ------------------------------------------------- on the shipper's thread

    def _read_catalog(self) -> Catalog:
        raw = self.objects.get(packing.CATALOG)
        self._read_at = self._clock()
        if raw is None:
            return Catalog.empty(self.host.cluster_id, self.cluster)
        return decode(raw, name=packing.CATALOG)

    def _write_catalog(self, old: Catalog, new: Catalog, term: int) -> Catalog:
        """Put `new`, if the bucket still holds `old`: a second writer (a deposed
        primary still finishing an upload) is noticed, not overwritten blindly. The
        check and the write are one conditional PUT at the server (If-Match on the
        ETag read here): a writer that came between them makes it fail."""
        now = self.objects.get_tagged(packing.CATALOG)
        current = None if now is None else decode(now[0], name=packing.CATALOG)
        if current is not None and current != old:
            raise BucketError(
                f"the catalog changed under this node (written by {current.writer} in term "
                f"{current.term}): reading it again"
            )
        signed = new.signed(term=term, writer=self.node_id, now_ms=int(self._clock() * 1000))
        if not signed.cluster_id and self.host.cluster_id:
            signed = dataclasses.replace(
                signed, cluster_id=self.host.cluster_id, cluster=self.cluster
            )
        try:
            self.objects.put_if(
                packing.CATALOG, signed.encode(), etag=None if now is None else now[1]
            )
        except BucketConflictError as e:
            raise BucketError(
                "the catalog changed under this node between its check and its write: "
                "reading it again"
            ) from e
        metrics.ARCHIVE_UPLOADS.labels("catalog").inc()
        metrics.ARCHIVE_LAST_UPLOAD.set(self._clock())
        self._read_at = self._clock()
        return signed

    def _put(self, name: str, raw: bytes, kind: str) -> int:
        """Put `raw`, compressed, at `name` unless the same is there; its stored size.

        Same key, same content (packing.py): an object already there of the size
        this build compresses to is a finished upload whose catalog entry was cut
        off (a kill -9, a lost connection), reused as is once read back and found to
        hold `raw` (rare: only a resumed upload finds one); a damaged one is said and
        put again from `raw`, this node's copy."""
        packed = packing.pack(raw)
        if self.objects.size(name) == len(packed):
            there = self.objects.get(name)
            if there == packed or (there is not None and _holds(there, raw, name)):
                return len(packed)
            metrics.ARCHIVE_CORRUPT.inc()
            metrics.ARCHIVE_REPAIRED.inc()
            log.error(
                "archive: damaged in the bucket: %s does not hold the bytes its key names "
                "(a cut-off upload's object): put again from this node's copy",
                name,
            )
        self.objects.put(name, packed)
        metrics.ARCHIVE_UPLOADS.labels(kind).inc()
        metrics.ARCHIVE_BYTES.labels("raw").inc(len(raw))
        metrics.ARCHIVE_BYTES.labels("stored").inc(len(packed))
        return len(packed)

    def _upload_segment(self, seg: Segment, view: View) -> Catalog:
        raw = seg.read(0, seg.size)
        # checked before it leaves: a disk's damage is not archived as history
        span = span_of(raw, first_id=seg.first_id, where=seg.path)
        if span.last != seg.last_id:
            raise CorruptLogError(
                f"the segment holds events through {span.last}, the log says {seg.last_id}",
                path=seg.path,
                offset=len(raw),
            )
        sha = packing.digest(raw)
        name = packing.segment_object(seg.first_id, sha)
        stored = self._put(name, raw, "segment")
        ref = ObjectRef(os.path.basename(seg.path), name, sha, len(raw), stored)
        new = view.catalog.with_segment(
            first=span.first,
            last=span.last,
            first_term=span.first_term,
            last_term=span.last_term,
            ref=ref,
        )
        return self._write_catalog(view.catalog, new, view.term)

    def _upload_snapshot(self, store: Store, view: View, purging: bool) -> Catalog:
        snaps = store.snapshots
        info = snaps.newest_pinned()  # retention keeps it and its chunks until unpinned
        if info is None:
            return view.catalog
        try:
            keep_from = snapshot_keep_from(store, info.watermark) if purging else 0
            chunks = []
            for chunk in info.chunks:
                path = os.path.join(snaps.directory, chunk)
                # a chunk is immutable and goes up once: the catalog's entry is reused
                # without reading the file again (merged chunks hold all of history)
                known = self._known_chunk(view.catalog, path, chunk)
                if known is None:
                    raw, sha = self._read_hashed(path)
                    name = packing.chunk_object(chunk, sha)
                    known = ObjectRef(chunk, name, sha, len(raw), self._put(name, raw, "chunk"))
                    del raw
                chunks.append(known)
            raw, sha = self._read_hashed(info.path)
            name = packing.snapshot_object(info.watermark, sha)
            file = ObjectRef(
                os.path.basename(info.path), name, sha, len(raw), self._put(name, raw, "snapshot")
            )
            entry = SnapshotEntry(
                info.watermark,
                info.term,
                (info.position.event_id, info.position.segment_id, info.position.offset),
                file,
                tuple(chunks),
                keep_from,
            )
            new = view.catalog.with_snapshot(entry)
            written = self._write_catalog(view.catalog, new, view.term)
        finally:
            snaps.unpin(info.watermark)
        # the snapshot the catalog no longer keeps (SNAPSHOTS_KEPT), and its chunks no
        # newer one shares: deleted after the catalog that stopped naming them
        sizes = keys_of(view.catalog)
        for key in unreferenced(view.catalog, written):
            self.objects.delete(key)
            metrics.ARCHIVE_DELETED.labels("superseded").inc()
            metrics.ARCHIVE_DELETED_BYTES.inc(sizes.get(key, 0))
        return written

    def _known_chunk(self, catalog: Catalog, path: str, name: str) -> ObjectRef | None:
        st = os.stat(path)
        sha = self._hashes.get((path, st.st_size, st.st_mtime_ns))
        return None if sha is None else catalog.chunk(name, sha)

    def _read_hashed(self, path: str) -> tuple[bytes, str]:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            raw = f.read()
        key = (path, st.st_size, st.st_mtime_ns)
        sha = self._hashes.get(key)
        if sha is None:
            sha = self._hashes[key] = packing.digest(raw)
        return raw, sha


def _holds(data: bytes, raw: bytes, name: str) -> bool:
    """Does object `data` decompress to `raw`? (Another compressor may have packed it.)"""
    try:
        return packing.unpack(data, name=name, sha256=packing.digest(raw)) == raw
    except CorruptObjectError:
        return False
