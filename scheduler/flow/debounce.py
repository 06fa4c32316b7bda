"""A debounce window: submissions with one key value fold into one task until it starts.

The first submission opens the window: the task may start at `first + quiet`. Each
later submission of the value while the window is open replaces the task's input (the
last one wins) and pushes the start back to `last + quiet`, but never past
`first + max_wait` (the deadline), so a steady trickle cannot postpone the task for
ever. The window is open while the task has not started and its start time has not
come: a submission at or after `not_before_ms` starts a new task instead, even if the
old one still waits (for a concurrency slot, say), because the old one may start at
any moment and its input must not change under it.

All times are log times in milliseconds, passed in; nothing here reads a clock.
"""

from __future__ import annotations


def not_before(first_ms: int, last_ms: int, *, quiet_ms: int, max_wait_ms: int) -> int:
    """When the task may start: `min(last + quiet, first + max_wait)`."""
    return min(last_ms + quiet_ms, first_ms + max_wait_ms)


def deadline(first_ms: int, *, max_wait_ms: int) -> int:
    """The latest the task's start can be pushed to: `first + max_wait`."""
    return first_ms + max_wait_ms


def joins(not_before_ms: int, now_ms: int) -> bool:
    """Whether a submission at `now_ms` joins the window of a task of its value that has
    not started and may start at `not_before_ms` (else it makes a task of its own)."""
    return now_ms < not_before_ms


def extended(deadline_ms: int, now_ms: int, *, quiet_ms: int) -> int:
    """The task's new `not_before_ms` after a submission at `now_ms` joined its window
    (what DEBOUNCED records): `min(now + quiet, deadline)`."""
    return min(now_ms + quiet_ms, deadline_ms)
