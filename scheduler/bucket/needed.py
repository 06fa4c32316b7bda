"""What a snapshot's live tasks still need of the log: the first event id of any of
them (a snapshot entry's `keep_from`, catalog.py; what expiry.py drops by).

Computed by the shipper as it uploads a snapshot, on its thread, from the snapshot's
files on this node's disk (pinned while it reads them): the tasks in the snapshot
file, and every task of its archive chunks but the purged ones (`tombstones`: purged,
still in a chunk until the next rewrite; `purged`: the last ones purged). One pass over
the archive, reading only each entry's `first_event_id`, once per uploaded snapshot
(about once per sealed segment); skipped (0: nothing dropped) while the state has
never purged a task, so an archive without retention pays nothing.
"""

from __future__ import annotations

import logging

from apollo11.scheduler.errors import SnapshotError
from apollo11.scheduler.state import Archive, State, Store

log = logging.getLogger(__name__)


def first_needed(state: State, watermark: int) -> int:
    """The first event id a task alive in `state` (a snapshot at `watermark`, loaded)
    has; watermark + 1 when there is none; 0 when nothing was ever purged."""
    gone = state.tombstones | state.purged.keys()
    if not gone:
        return 0
    low = watermark + 1
    for task in state.tasks.values():
        low = min(low, task.first_event_id)
    archive = state.archive
    if isinstance(archive, Archive):
        for first in archive.first_event_ids(gone):
            low = min(low, first)
    elif archive is not None:  # another TaskStore (tests): every task, built
        for task in archive.iter_tasks():
            if task.task_id not in gone:
                low = min(low, task.first_event_id)
    return low


def snapshot_keep_from(store: Store, watermark: int) -> int:
    """`first_needed` of the store's snapshot at `watermark` (pinned by the caller),
    read from its files; 0 (nothing dropped on its account) when they cannot be read:
    its upload goes on, and a node that opens it reports what is wrong with it."""
    try:
        _, state = store.snapshots.load(watermark)
        try:
            return first_needed(state, watermark)
        finally:
            if isinstance(state.archive, Archive):
                state.archive.close()
    except SnapshotError as e:  # a damaged chunk too (ChunkDamaged)
        log.warning("archive: snapshot %d not read for retention: %s", watermark, e)
        return 0
