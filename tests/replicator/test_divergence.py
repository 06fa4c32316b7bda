from __future__ import annotations

from apollo11.replicator.divergence import common_prefix


def test_a_standby_that_is_behind_shares_all_it_has() -> None:
    assert common_prefix([(3, 1), (7, 50)], 80, [(3, 1), (7, 50)], 60) == 60
    assert common_prefix([(3, 1), (7, 50)], 80, [(3, 1)], 40) == 40


def test_a_deposed_primary_keeps_only_what_its_term_shares() -> None:
    # Old primary wrote 41..55 in term 3 that nobody got; the new primary (term 7)
    # started at 41 after the standby had 40.
    assert common_prefix([(3, 1), (7, 41)], 90, [(3, 1)], 55) == 40


def test_a_term_the_primary_never_saw_is_cut_entirely() -> None:
    # The deposed node started term 5 at 30 (its TERM_STARTED never shipped).
    assert common_prefix([(3, 1), (7, 30)], 70, [(3, 1), (5, 30)], 44) == 29


def test_same_term_number_different_start_is_not_shared() -> None:
    assert common_prefix([(2, 1), (4, 10)], 20, [(2, 1), (4, 12)], 20) == 9


def test_empty_logs() -> None:
    assert common_prefix([(1, 1)], 10, [], 0) == 0
    assert common_prefix([], 0, [(1, 1)], 5) == 0
