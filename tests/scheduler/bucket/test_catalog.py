"""The catalog's `redacted_through`: kept through encoding, 0 in a catalog written
before it existed, and never past the end of a rewound history."""

from __future__ import annotations

import dataclasses
import hashlib

import orjson

from apollo11.scheduler.bucket.catalog import Catalog, SegmentEntry, decode, link


def _catalog(n: int) -> Catalog:
    segments, chain = [], ""
    for i in range(n):
        first, last = 10 * i + 1, 10 * i + 10
        chain = link(chain, first, last, 1, f"sha{i}")
        segments.append(SegmentEntry(first, last, 1, 1, f"k{i}", f"sha{i}", 100, 50, chain))
    return dataclasses.replace(Catalog.empty("c", "test"), segments=tuple(segments))


def test_it_is_kept_through_encoding() -> None:
    cat = dataclasses.replace(_catalog(3), redacted_through=17)
    assert decode(cat.encode(), name="catalog.json").redacted_through == 17


def test_a_catalog_from_before_it_reads_as_none_carried() -> None:
    doc = orjson.loads(_catalog(2).encode())
    del doc["body"]["redacted_through"]
    body = orjson.dumps(doc["body"], option=orjson.OPT_SORT_KEYS)
    doc["sha256"] = hashlib.sha256(body).hexdigest()
    old = decode(orjson.dumps(doc), name="catalog.json")
    assert old.redacted_through == 0 and len(old.segments) == 2


def test_a_rewind_takes_it_back_to_the_new_end() -> None:
    cat = dataclasses.replace(_catalog(3), redacted_through=25)
    assert cat.rewound(21).redacted_through == 20  # event 25 was a deposed primary's
    assert cat.rewound(31).redacted_through == 25
