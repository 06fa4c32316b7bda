"""What a segment's bytes hold: its event range and terms, every record checked.

Used on both sides of the bucket: before a sealed segment is uploaded (the
shipper never uploads bytes whose CRCs it has not checked, so a disk's damage
is not archived as history) and after one is downloaded (restore and verify
check every record, not only the object's checksum).
"""

from __future__ import annotations

from dataclasses import dataclass

from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.log import check_record


@dataclass(frozen=True, slots=True)
class Span:
    first: int
    last: int
    first_term: int
    last_term: int


def span_of(raw: bytes, *, first_id: int, where: str) -> Span:
    """The span of a whole segment's bytes; CorruptLogError when a record fails its
    CRC or framing, ids do not run on from `first_id`, a term goes down, or the
    bytes end inside a record. `where` names the file or object in the message."""
    view = memoryview(raw)
    off = 0
    expect = first_id
    first_term = last_term = 0
    while off < len(raw):
        info = check_record(view, off, where)
        if info is None:
            raise CorruptLogError("the segment ends inside a record", path=where, offset=off)
        if info.event_id != expect:
            raise CorruptLogError(
                f"expected event {expect}, found {info.event_id}", path=where, offset=off
            )
        if info.term < last_term:
            raise CorruptLogError(
                f"term goes down from {last_term} to {info.term}", path=where, offset=off
            )
        if expect == first_id:
            first_term = info.term
        last_term = info.term
        expect += 1
        off = info.end
    if expect == first_id:
        raise CorruptLogError("the segment holds no event", path=where, offset=0)
    return Span(first_id, expect - 1, first_term, last_term)
