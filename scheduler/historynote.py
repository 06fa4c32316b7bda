"""Where an answer's older events came from, in one sentence both sides say.

A node that read part of a page of events from the archive's bucket (its disk no
longer holding them: log retention) says below which id (`bucket_before`); one
that could not says below which id they are missing (`gone_before`). The node's
pages and the CLI print the same words (docs/archive.md, "Reading old history").
"""

from __future__ import annotations


def history_note(bucket_before: int, gone_before: int) -> str:
    """The sentence for a page; "" when all of it came from the node's disk."""
    if gone_before and bucket_before:
        return (
            f"events before {gone_before} are neither on this node's disk nor in the "
            f"bucket (archived after they were dropped, or cut by the bucket's retention)"
        )
    if gone_before:
        return (
            f"events before {gone_before} are no longer on this node's disk and no "
            f"--archive-url is set"
        )
    if bucket_before:
        return f"events before {bucket_before} read from the bucket"
    return ""
