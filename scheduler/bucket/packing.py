"""How a file goes into the bucket: zstd-compressed, named by its content.

Hot data stays raw on the nodes' disks (the append path never compresses);
what goes cold is compressed once, on the shipper's thread. An object's name
carries the SHA-256 of the *raw* bytes, so:

- an upload is idempotent: the same file always goes to the same key, and a
  second PUT (a retry, a new primary resuming a killed one's upload) replaces
  an object with itself: no duplicate is possible;
- a file rewritten with other bytes (a divergent tail's segment, an archive
  chunk upgraded in place) goes to another key, never over the old one;
- every reader checks what it got: the zstd frame's own checksum catches a
  damaged object, the SHA-256 of the decompressed bytes a wrong one.

Level 3 (zstd's default): event logs are repetitive JSON, and level 3 takes
most of what higher levels would (docs/archive.md has the measured ratio) at
a small part of their CPU, on a 2-core machine that also runs the node.
"""

from __future__ import annotations

import hashlib

import zstandard

from apollo11.scheduler.errors import CorruptObjectError

LEVEL = 3
SEGMENTS = "segments/"
SNAPSHOTS = "snapshots/"
CHUNKS = "chunks/"
CATALOG = "catalog.json"
MAX_UNPACKED = 4 * 1024 * 1024 * 1024  # a sanity bound on what one object may claim


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def pack(raw: bytes) -> bytes:
    """zstd, with the frame's content checksum and size."""
    return zstandard.ZstdCompressor(
        level=LEVEL, write_checksum=True, write_content_size=True
    ).compress(raw)


def unpack(data: bytes, *, name: str, sha256: str) -> bytes:
    """The raw bytes of an object, checked against the SHA-256 its name (and the
    catalog) give; CorruptObjectError otherwise, naming the object."""
    try:
        raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=MAX_UNPACKED)
    except zstandard.ZstdError as e:
        raise CorruptObjectError(f"does not decompress: {e}", key=name) from e
    got = digest(raw)
    if got != sha256:
        raise CorruptObjectError(
            f"content checksum mismatch: sha256 {got[:16]}..., the catalog says {sha256[:16]}...",
            key=name,
        )
    return raw


def segment_object(first_id: int, sha256: str) -> str:
    return f"{SEGMENTS}{first_id:020d}-{sha256}.seg.zst"


def segment_first(key: str) -> int | None:
    """The first event id of a segment object's key; None for another key."""
    if not key.startswith(SEGMENTS):
        return None
    stem = key[len(SEGMENTS) :].partition("-")[0]
    return int(stem) if stem.isdigit() else None


def snapshot_object(watermark: int, sha256: str) -> str:
    return f"{SNAPSHOTS}{watermark:020d}-{sha256}.snap.zst"


def snapshot_watermark(key: str) -> int | None:
    """The watermark of a snapshot object's key; None for another key."""
    if not key.startswith(SNAPSHOTS):
        return None
    stem = key[len(SNAPSHOTS) :].partition("-")[0]
    return int(stem) if stem.isdigit() else None


def chunk_object(name: str, sha256: str) -> str:
    return f"{CHUNKS}{name}-{sha256}.zst"
