"""A segment's span (bucket/span.py): what the shipper checks before an upload and a
restore after a download; every kind of damage refused, naming where."""

from __future__ import annotations

from pathlib import Path

import pytest

from apollo11.scheduler.bucket.span import Span, span_of
from apollo11.scheduler.errors import CorruptLogError
from tests.scheduler.bucket.helpers import open_store, write


async def _segment(tmp_path: Path) -> tuple[bytes, int, int]:
    store = open_store(tmp_path / "n1")
    await write(store, 30)
    seg = store.log.segments[0]
    raw = seg.read(0, seg.size)
    out = (raw, seg.first_id, seg.last_id)
    await store.close()
    return out


async def test_a_sound_segment_spans_its_ids_and_terms(tmp_path: Path) -> None:
    raw, first, last = await _segment(tmp_path)
    assert span_of(raw, first_id=first, where="s") == Span(first, last, 0, 0)


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda raw: raw[:100] + bytes([raw[100] ^ 1]) + raw[101:], "record checksum mismatch"),
        (lambda raw: raw[:-3], "the segment ends inside a record"),
        (lambda raw: b"", "the segment holds no event"),
        (lambda raw: raw[:4] + b"\xff\xff\xff\x7f" + raw[8:], "impossible record length"),
    ],
)
async def test_damage_is_refused_naming_the_object(
    tmp_path: Path, damage: object, says: str
) -> None:
    raw, first, _ = await _segment(tmp_path)
    with pytest.raises(CorruptLogError, match=says) as e:
        span_of(damage(raw), first_id=first, where="segments/x.seg.zst")  # type: ignore[operator]
    assert "segments/x.seg.zst" in str(e.value)


async def test_ids_that_do_not_run_on_are_refused(tmp_path: Path) -> None:
    raw, first, _ = await _segment(tmp_path)
    with pytest.raises(CorruptLogError, match=f"expected event {first + 1}, found {first}"):
        span_of(raw, first_id=first + 1, where="s")
