"""What a segment's bytes hold: its event range and terms, every record checked.

Used on both sides of the bucket: before a sealed segment is uploaded (the
shipper never uploads bytes whose CRCs it has not checked, so a disk's damage
is not archived as history) and after one is downloaded (restore and verify
check every record, not only the object's checksum).
"""

from __future__ import annotations

from dataclasses import dataclass

from apollo11.scheduler.errors import CorruptLogError
from apollo11.scheduler.log import check_records


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
    last, first_term, last_term = check_records(raw, first_id, where)
    if last < first_id:
        raise CorruptLogError("the segment holds no event", path=where, offset=0)
    return Span(first_id, last, first_term, last_term)
