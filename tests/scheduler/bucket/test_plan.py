"""The shipper's decision, pure: a catalog and a log in, a step and its sentence out."""

from __future__ import annotations

import dataclasses

import pytest

from apollo11.scheduler.archiveurl import parse_url
from apollo11.scheduler.bucket import Catalog, ObjectRef, Sealed, SnapshotEntry, View, decide
from apollo11.scheduler.errors import BucketConfigError


def _catalog(*spans: tuple[int, int, int], term: int = 1, cluster_id: str = "c1") -> Catalog:
    c = Catalog.empty(cluster_id, "prod")
    for first, last, last_term in spans:
        ref = ObjectRef(f"{first}.seg", f"segments/{first}", f"sha{first}", 100, 10)
        c = c.with_segment(first=first, last=last, first_term=1, last_term=last_term, ref=ref)
    return c.signed(term=term, writer="n1", now_ms=0)


def _view(catalog: Catalog, *sealed: tuple[int, int, int], **kw: object) -> View:
    segs = tuple(Sealed(*s) for s in sealed)
    open_first = segs[-1].last + 1 if segs else 1
    base = View(
        primary=True,
        node_id="n2",
        cluster_id="c1",
        term=2,
        sealed=segs,
        open_first=open_first,
        durable_id=open_first + 5,
        newest_snapshot=None,
        catalog=catalog,
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_an_empty_bucket_gets_the_oldest_sealed_segment_first() -> None:
    step = decide(_view(_catalog(), (1, 10, 1), (11, 20, 1)))
    assert (step.kind, step.first, step.sentence) == ("segment", 1, "uploading segment 1..10")


def test_the_next_upload_starts_right_after_the_catalog() -> None:
    step = decide(_view(_catalog((1, 10, 1)), (1, 10, 1), (11, 20, 2)))
    assert (step.kind, step.first) == ("segment", 11)


def test_up_to_date_says_what_waits_in_the_open_segment() -> None:
    step = decide(_view(_catalog((1, 10, 1)), (1, 10, 1)))
    assert step.kind == "idle"
    assert step.sentence == "up to date: the bucket holds events through 10; 6 in the open segment"


def test_a_standby_uploads_nothing() -> None:
    step = decide(_view(_catalog(), (1, 10, 1), primary=False))
    assert step.kind == "idle" and step.sentence.startswith("standby: the primary uploads")


def test_another_clusters_catalog_is_left_alone() -> None:
    step = decide(_view(_catalog(cluster_id="other"), (1, 10, 1)))
    assert step.kind == "blocked"
    assert "cluster other's, this node is of cluster c1" in step.sentence


def test_a_catalog_of_a_newer_term_means_another_primary_uploads() -> None:
    step = decide(_view(_catalog((1, 10, 1), term=5), (1, 10, 1), term=3))
    assert step.kind == "blocked"
    assert "written in term 5 by n1, after this node's term 3" in step.sentence


def test_a_deposed_primarys_divergent_tail_is_rewound() -> None:
    # the bucket's 11..20 ends in term 1; this primary's 11..18 ends in its term 2
    c = _catalog((1, 10, 1), (11, 20, 1), term=1)
    step = decide(_view(c, (1, 10, 1), (11, 18, 2), term=2))
    assert (step.kind, step.first) == ("rewind", 11)
    assert "not this primary's history" in step.sentence
    assert c.rewound(11).through == 10


def test_a_tail_past_this_nodes_sealed_history_is_rewound() -> None:
    c = _catalog((1, 10, 1), (11, 20, 1), term=1)
    step = decide(_view(c, (1, 10, 1), term=2))
    assert (step.kind, step.first) == ("rewind", 11)
    assert "goes past this node's sealed history" in step.sentence


def test_a_mismatch_in_the_nodes_own_term_is_damage_not_history() -> None:
    c = _catalog((1, 10, 2), term=2)
    step = decide(_view(c, (1, 12, 2), term=2))
    assert step.kind == "blocked" and "that is damage, not history" in step.sentence


def test_a_hole_is_reported_never_skipped() -> None:
    # the bucket ends at 10; this node's disk starts at 21 (retention took 11..20)
    step = decide(_view(_catalog((1, 10, 1)), (21, 30, 1)))
    assert step.kind == "blocked"
    assert "the bucket ends at event 10 and no segment of this node's log starts at 11" in (
        step.sentence
    )


def _snap(w: int) -> SnapshotEntry:
    ref = ObjectRef(f"s{w}", f"snapshots/{w}", f"sha{w}", 1, 1)
    return SnapshotEntry(w, 1, (w, 1, 0), ref, ())


def test_a_snapshot_goes_up_once_the_last_one_is_restorable() -> None:
    c = _catalog((1, 10, 1))
    assert decide(_view(c, (1, 10, 1), newest_snapshot=14)).kind == "snapshot"
    pending = c.with_snapshot(_snap(14))  # its watermark is past the bucket's end
    assert pending.restorable() is None
    assert decide(_view(pending, (1, 10, 1), newest_snapshot=16)).kind == "idle"
    reached = _catalog((1, 10, 1), (11, 20, 1)).with_snapshot(_snap(14))
    assert reached.restorable() == _snap(14)
    step = decide(_view(reached, (1, 10, 1), (11, 20, 1), newest_snapshot=23))
    assert (step.kind, step.watermark) == ("snapshot", 23)


def test_the_chain_catches_a_swapped_or_dropped_entry() -> None:
    c = _catalog((1, 10, 1), (11, 20, 1), (21, 30, 2))
    assert c.problems() == []
    swapped = dataclasses.replace(
        c, segments=(c.segments[0], dataclasses.replace(c.segments[1], sha256="x"), c.segments[2])
    )
    assert any("chain breaks" in p for p in swapped.problems())
    dropped = dataclasses.replace(c, segments=(c.segments[0], c.segments[2]))
    assert any("hole" in p for p in dropped.problems())


def test_a_catalog_round_trips_and_a_damaged_one_is_refused() -> None:
    from apollo11.scheduler.bucket.catalog import decode
    from apollo11.scheduler.errors import CorruptObjectError

    c = _catalog((1, 10, 1)).with_snapshot(_snap(5))
    raw = c.encode()
    assert decode(raw, name="catalog.json") == c
    with pytest.raises(CorruptObjectError, match="fails its checksum"):
        decode(raw.replace(b'"last":10', b'"last":11'), name="catalog.json")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://bucket/x", "must start with s3://"),
        ("s3://B/x", "no valid S3 bucket name"),
        ("s3://ab/x", "no valid S3 bucket name"),
        ("s3://bucket/a//b/../c", "unusual part"),
    ],
)
def test_a_wrong_archive_url_is_refused_saying_why(url: str, message: str) -> None:
    with pytest.raises(BucketConfigError, match=message):
        parse_url(url)


def test_an_archive_url_names_bucket_and_prefix() -> None:
    t = parse_url("s3://my-bucket/apollo11/prod/")
    assert (t.bucket, t.prefix, t.url) == (
        "my-bucket",
        "apollo11/prod",
        "s3://my-bucket/apollo11/prod",
    )
    assert t.key("catalog.json") == "apollo11/prod/catalog.json"
    assert parse_url("s3://my-bucket").key("x") == "x"
