"""Which worker takes an attempt: a pure function of what is connected."""

from __future__ import annotations

from apollo11.scheduler.dispatch.choose import Offer, choose, why_none

ETL = frozenset({("etl", 1)})


def test_the_freest_worker_with_the_version_takes_it() -> None:
    offers = [Offer("a", 1, ETL, {}), Offer("b", 3, ETL, {}), Offer("c", 9, frozenset(), {})]
    assert choose(offers, "etl", 1, {}) == "b"
    assert choose(offers, "etl", 2, {}) is None
    assert why_none(offers, "etl", 2, {}) == "no connected worker (a, b, c) registered etl v2"


def test_ties_go_to_the_name_and_full_workers_are_skipped() -> None:
    offers = [Offer("b", 2, ETL, {}), Offer("a", 2, ETL, {}), Offer("z", 0, ETL, {})]
    assert choose(offers, "etl", 1, {}) == "a"
    full = [Offer("z", 0, ETL, {})]
    assert choose(full, "etl", 1, {}) is None
    assert why_none(full, "etl", 1, {}) is None, "busy is back-pressure, not a problem"
    assert why_none([], "etl", 1, {}) == "no worker is connected"


def test_a_step_that_requires_labels_goes_to_a_worker_that_has_them() -> None:
    gpu = {"gpu": "a100", "zone": "eu"}
    offers = [Offer("cpu", 8, ETL, {"zone": "eu"}), Offer("big", 1, ETL, gpu)]
    assert choose(offers, "etl", 1, {"gpu": "a100"}) == "big"
    assert choose(offers, "etl", 1, {"zone": "eu"}) == "cpu"
    assert choose(offers, "etl", 1, {"gpu": "h100"}) is None
    assert why_none(offers, "etl", 1, {"gpu": "h100"}) == (
        "no worker with etl v1 has the labels gpu=h100"
    )
