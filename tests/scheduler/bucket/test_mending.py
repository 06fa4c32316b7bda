"""Mending a damaged bucket object from this node's copy (scheduler/bucket/mending.py)
takes only a copy it can check: a snapshot file or chunk of the very bytes the catalog
names, never one that differs (a damaged copy went up under a valid checksum of its
own; a truncated one raised past the pass and stalled the shipper); a segment that
differs only once every redaction is rewritten on this node's log."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler.bucket import packing
from apollo11.scheduler.bucket.catalog import ObjectRef
from apollo11.scheduler.bucket.mending import Mender
from apollo11.scheduler.bucket.objects import MemoryObjects
from apollo11.scheduler.errors import CorruptObjectError

RAW = b"A11ARC04" + bytes(range(256)) * 8


def _bucket_with_damaged(tmp_path: Path, local: bytes | None) -> tuple[Mender, ObjectRef]:
    objects = MemoryObjects()
    sha = packing.digest(RAW)
    ref = ObjectRef("00000000000000000040-0.arc", "chunks/x", sha, len(RAW), 0)
    objects.put(ref.key, packing.pack(RAW)[:-9])  # damaged in the bucket
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir()
    if local is not None:
        (snapshots / ref.name).write_bytes(local)
    return Mender(objects, [], str(snapshots)), ref


def test_a_copy_of_the_same_bytes_is_put_back_at_the_same_key(tmp_path: Path) -> None:
    mender, ref = _bucket_with_damaged(tmp_path, RAW)
    assert mender.file(ref).raw == RAW
    stored = mender.objects.get(ref.key)
    assert stored is not None and packing.unpack(stored, name=ref.key, sha256=ref.sha256) == RAW


@pytest.mark.parametrize(
    "copy",
    [
        RAW[:100] + bytes([RAW[100] ^ 1]) + RAW[101:],  # a flipped bit
        RAW[: len(RAW) // 2],  # truncated
        RAW + b"another node's file of the same name",
    ],
    ids=["flipped", "truncated", "another"],
)
def test_a_copy_that_differs_is_not_used(tmp_path: Path, copy: bytes) -> None:
    mender, ref = _bucket_with_damaged(tmp_path, copy)
    with pytest.raises(CorruptObjectError, match="is not the same file") as e:
        mender.file(ref)
    assert e.value.key == ref.key
    assert mender.objects.put_names[-1] == ref.key  # only the damage this test made


def test_no_copy_says_so(tmp_path: Path) -> None:
    mender, ref = _bucket_with_damaged(tmp_path, None)
    with pytest.raises(CorruptObjectError, match="holds no copy"):
        mender.file(ref)
