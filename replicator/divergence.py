"""Where two logs stop agreeing, from their term histories.

Every term starts with a TERM_STARTED record, and only one primary writes in
a term, so two logs that hold the same term starting at the same event id
hold the same records for as long as both stay in that term (the log
matching property Raft relies on). The common prefix therefore ends, in
the newest term both know, where the shorter of the two stops.
"""

from __future__ import annotations

from collections.abc import Sequence

Terms = Sequence[tuple[int, int]]  # (term, first event id), ascending


def _end_of(terms: Terms, i: int, last: int) -> int:
    """Last event id of the i-th term of a log whose last event is `last`."""
    return terms[i + 1][1] - 1 if i + 1 < len(terms) else last


def common_prefix(
    primary_terms: Terms, primary_last: int, standby_terms: Terms, standby_last: int
) -> int:
    """The last event id the two logs agree on (0: nothing in common)."""
    primary_index = {t: (i, first) for i, (t, first) in enumerate(primary_terms)}
    for j in range(len(standby_terms) - 1, -1, -1):
        term, first = standby_terms[j]
        hit = primary_index.get(term)
        if hit is None or hit[1] != first:
            continue
        i = hit[0]
        return min(_end_of(standby_terms, j, standby_last), _end_of(primary_terms, i, primary_last))
    # No term in common: only what comes before both histories can be shared,
    # and every log starts with a TERM_STARTED, so nothing is.
    return 0
