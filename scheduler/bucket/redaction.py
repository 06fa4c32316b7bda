"""A redaction reaches the bucket: the segment objects holding a redacted task's
records are rewritten (docs/archive.md, "Redaction").

Each segment object the task's events fall in is read and checked (its SHA-256, every
record), its records of the task rewritten by the same function the members use on
their disks (`log.expunged`: the same length, the same skeleton, new CRCs), so the
new object is byte for byte the members' rewritten segment. It goes up under its own
SHA-256 and key; the catalog entry then names it (`sha256`, `key`, `stored`) while
`origin` keeps the SHA-256 the checksum chain was made over, so the chain, and
`apollo11 archive verify`, still hold. Objects first, then the catalog, then the old
objects are deleted: a cut at any point leaves a catalog that names whole objects,
and the next pass (the primary's, or a new primary's: each redaction is checked once
per primary) finds what is left to do. A segment already rewritten comes back the
same and is left alone.

Then the snapshots and archive chunks the catalog names: each is read and checked
(its SHA-256), and the ones holding the task's data (a snapshot taken before the
redaction, a chunk archived before it) are rewritten by the functions the members
apply to their own files (`redacted_snapshot`, `redacted_chunk`), under their new
SHA-256 and key; the catalog then names the new objects (a chunk shared by several
snapshots, in each of them), and the old ones are deleted. The same order, the same
idempotence: a file already rewritten comes back the same.

Objects are read through `read_segment` and `read_file` (by default straight from
the bucket, checked): the shipper's mend a damaged object from the node's own copy
(mending.py). One that cannot be read is left as it is, the rest rewritten, and it
is returned among the damaged (the redaction is then not carried to the bucket).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence

from apollo11.scheduler.bucket import packing
from apollo11.scheduler.bucket.catalog import Catalog, ObjectRef, SegmentEntry
from apollo11.scheduler.bucket.mending import Read
from apollo11.scheduler.bucket.objects import ObjectStore
from apollo11.scheduler.bucket.verify import fetch, fetch_segment
from apollo11.scheduler.errors import CorruptObjectError
from apollo11.scheduler.log import expunged
from apollo11.scheduler.state import Chunk, redacted_chunk, redacted_snapshot


def holding(catalog: Catalog, ids: Sequence[int]) -> list[int]:
    """Indexes of the catalog's segments that hold any of `ids` (ascending)."""
    out = []
    for i, e in enumerate(catalog.segments):
        k = bisect.bisect_left(ids, e.first)
        if k < len(ids) and ids[k] <= e.last:
            out.append(i)
    return out


def rewrite_task(
    objects: ObjectStore,
    catalog: Catalog,
    ids: Sequence[int],
    redaction_id: int,
    put: Callable[[str, bytes, str], int],
    read_segment: Callable[[SegmentEntry], Read] | None = None,
) -> tuple[Catalog, list[str], list[CorruptObjectError]]:
    """The catalog naming the rewritten objects (uploaded through `put`), the keys
    of the objects they replace (to delete once that catalog is written): this pass's
    and any an earlier pass left (`leftovers`); and the objects it could not read."""
    if read_segment is None:
        read_segment = lambda e: Read(fetch_segment(objects, e), e.sha256)  # noqa: E731
    entries: list[SegmentEntry] = list(catalog.segments)
    stale: list[str] = []
    damaged: list[CorruptObjectError] = []
    for i in holding(catalog, ids):
        e = entries[i]
        stale += leftovers(objects, e)
        try:
            got = read_segment(e)
        except CorruptObjectError as err:
            damaged.append(err)
            continue
        raw = got.raw
        new = expunged(raw, ids, redaction_id, e.key)
        if new == raw and got.sha256 == e.sha256:
            continue
        # (the same bytes under another SHA-256: a copy that replaces a damaged object)
        sha = got.sha256 if new == raw else packing.digest(new)
        name = packing.segment_object(e.first, sha)
        stored = put(name, new, "segment")
        entries[i] = dataclasses.replace(
            e, key=name, sha256=sha, stored=stored, origin=e.origin or e.sha256
        )
        stale.append(e.key)
    # never one the new catalog names: an object a failed pass put up before its
    # catalog write failed is a leftover then, and this pass's rewrite now
    named = {e.key for e in entries}
    stale = [k for k in dict.fromkeys(stale) if k not in named]
    return dataclasses.replace(catalog, segments=tuple(entries)), stale, damaged


def leftovers(objects: ObjectStore, entry: SegmentEntry) -> list[str]:
    """A rewritten segment's former objects still in the bucket: a delete that failed,
    or a node stopped between the catalog and the deletes, left them. Found from the
    catalog itself (`origin` set: the segment was rewritten), so any later pass, of
    this primary or the next, finishes the job: every object of the segment's first id
    but the one the catalog names (the original and, after two redactions, the one
    between)."""
    if not entry.origin or entry.origin == entry.sha256:
        return []
    prefix = packing.segment_object(entry.first, "").partition("-")[0] + "-"
    return [k for k in objects.list(prefix) if k != entry.key]


def rewrite_snapshots(
    objects: ObjectStore,
    catalog: Catalog,
    redactions: Mapping[str, int],
    put: Callable[[str, bytes, str], int],
    read_file: Callable[[ObjectRef], Read] | None = None,
) -> tuple[Catalog, list[str], list[CorruptObjectError]]:
    """The catalog naming the snapshot and chunk objects rewritten without the data of
    the tasks `redactions` names (task id -> its TASK_REDACTED), uploaded through `put`;
    the keys of the objects they replace (to delete once that catalog is written); and
    the objects it could not read. Every object is checked by its SHA-256 as it is
    read: damage is reported naming its key, never skipped."""
    if read_file is None:
        read_file = lambda r: Read(fetch(objects, r), r.sha256)  # noqa: E731
    new_refs: dict[str, ObjectRef] = {}  # old key -> its replacement (or itself)
    damaged: dict[str, CorruptObjectError] = {}
    snapshots = []
    for s in catalog.snapshots:
        chunks = []
        for ref in s.chunks:
            if ref.key not in new_refs:
                try:
                    new_refs[ref.key] = _rewritten_chunk(read_file, ref, redactions, put)
                except CorruptObjectError as err:
                    damaged[ref.key] = err
                    new_refs[ref.key] = ref
            chunks.append(new_refs[ref.key])
        file = s.file
        try:
            got = read_file(file)
        except CorruptObjectError as err:
            damaged[file.key] = err
            snapshots.append(dataclasses.replace(s, chunks=tuple(chunks)))
            continue
        raw = got.raw
        new = redacted_snapshot(raw, redactions, where=file.key)
        if new != raw or got.sha256 != file.sha256:
            sha = got.sha256 if new == raw else packing.digest(new)
            name = packing.snapshot_object(s.watermark, sha)
            file = ObjectRef(file.name, name, sha, len(new), put(name, new, "snapshot"))
        snapshots.append(dataclasses.replace(s, file=file, chunks=tuple(chunks)))
    rewritten = dataclasses.replace(catalog, snapshots=tuple(snapshots))
    named = {r.key for s in snapshots for r in (s.file, *s.chunks)}
    stale = [r.key for s in catalog.snapshots for r in (s.file, *s.chunks) if r.key not in named]
    return rewritten, list(dict.fromkeys(stale)), list(damaged.values())


def unnamed_files(named: Iterable[str], listed: Iterable[str]) -> list[str]:
    """Former versions of the snapshot and chunk objects the catalog names (`named`),
    among those `listed` under `snapshots/` and `chunks/`: the same file (the key
    before its `-<sha256>`) under another key, which a redaction pass cut off between
    its catalog and its deletes left (they may hold the data).

    Only those: an object of a file the catalog does not name at all may be a
    deposed primary's snapshot upload whose catalog write is still to come (its
    conditional write passes when no one wrote the catalog meanwhile); deleting it
    would leave that catalog naming objects that are gone."""
    keep = set(named)
    files = {_file_of(k) for k in keep}
    return [k for k in listed if k not in keep and _file_of(k) in files]


def _file_of(key: str) -> str:
    """`chunks/<name>-<sha256>.zst` -> `chunks/<name>` (a SHA-256 has no `-`)."""
    return key.rsplit("-", 1)[0]


def _rewritten_chunk(
    read_file: Callable[[ObjectRef], Read],
    ref: ObjectRef,
    redactions: Mapping[str, int],
    put: Callable[[str, bytes, str], int],
) -> ObjectRef:
    """`ref`, or the object of its chunk rewritten without the redacted tasks' data. A
    chunk is read through its file format (an index, then the entries): here, through a
    temporary file."""
    got = read_file(ref)
    raw, got_sha = got.raw, got.sha256
    del got
    with tempfile.TemporaryDirectory(prefix="apollo11-redact-") as tmp:
        path = os.path.join(tmp, ref.name)
        with open(path, "wb") as f:
            f.write(raw)
        del raw
        chunk = Chunk(path)
        try:
            out = path + ".new"
            changed = redacted_chunk(chunk, redactions, out)
        finally:
            chunk.close()
        if not changed and got_sha == ref.sha256:
            return ref
        with open(out if changed else path, "rb") as f:
            new = f.read()
    sha = packing.digest(new) if changed else got_sha
    name = packing.chunk_object(ref.name, sha)
    return ObjectRef(ref.name, name, sha, len(new), put(name, new, "chunk"))
