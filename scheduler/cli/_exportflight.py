"""How many of an export's reads to keep in flight: as many as the node answers
without slowing down (TCP Vegas' rule, applied to calls).

One call at a time keeps a node near by no busier than it must be: its loop is free
while the export writes what it got. A node far away answers one call per round trip,
most of it on the wire, and calls in flight overlap those trips. The export cannot
tell which it talks to, but the calls' times tell it: a call that takes no longer
than the fastest seen (by a margin) found the node free, so one more may go; a
slower one waited behind another call on the node, so one fewer.
"""

from __future__ import annotations

MOST = 8  # calls in flight at most
ROOM = 1.25  # a call up to this many times the fastest one found the node free


def in_flight(current: int, fastest_s: float, took_s: float) -> int:
    """The calls to keep in flight after one that took `took_s` (the fastest so far
    `fastest_s`) with `current` in flight."""
    if took_s <= fastest_s * ROOM:
        return min(MOST, current + 1)
    return max(1, current - 1)
