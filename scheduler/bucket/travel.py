"""Time travel offline from the bucket (`apollo11 replay --until N --archive-url`):
the state as of event N when the node's disk no longer reaches back to it.

Where to start is a pure decision over the catalog (`start_for`): the newest
snapshot the catalog lists whose watermark is at most N and that its segments
reach (as a restore's); with none, event 1. Replaying a long history from event
1 costs a fetch and a decompression of every segment ever sealed; from a
snapshot, only of those after it (docs/benchmarks.md, "replay --until from the
bucket").

From there: the snapshot's file and archive chunks, each checked against the
SHA-256 the catalog names (verify.fetch), loaded as a node loads its own; the
segment objects after its watermark up to N, each checked as restore checks it
(history.py); then the node's own log past the bucket's end. A corrupt object
stops the replay with an error naming its key: never skipped, and never a quiet
fall back to an older start that would hide it.

The answer is the one replaying from event 1 gives (tests/scheduler/bucket/
test_travel.py compares both). One step makes it so: a snapshot taken before a
redaction still holds the task's data, while the segments it rewrote do not. As
`state_at` does for a local snapshot, the redactions recorded after N (in the
bucket's records past N, then the disk's) are hidden from the past state, on
both starts: from event 1 it also covers a redaction the bucket has not been
rewritten for yet.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket.catalog import Catalog, SnapshotEntry
from apollo11.scheduler.bucket.history import BucketHistory, covering_range
from apollo11.scheduler.bucket.objects import ObjectStore
from apollo11.scheduler.bucket.verify import fetch
from apollo11.scheduler.errors import CorruptObjectError, LogError, SnapshotError
from apollo11.scheduler.log import DataDir, Event, EventLog, EventType, parse_segment_name
from apollo11.scheduler.state import (
    Snapshots,
    State,
    apply_all,
    hide_data,
    paused_gc,
    redactions_after,
)

# the two event types that decide what a later redaction hides (fold.redactions_after)
_DECIDING = (EventType.TASK_REDACTED, EventType.TASK_HELD)


@dataclass(frozen=True, slots=True)
class Travelled:
    """A past state rebuilt from the bucket: the state; the id below which its events
    came from the bucket; the watermark of the bucket snapshot it started from (0:
    replayed from event 1)."""

    state: State
    below: int
    snapshot: int

    @property
    def note(self) -> str:
        """Where the replay started and what it read, in one line for the command."""
        start = (
            f"from the bucket snapshot at event {self.snapshot}"
            if self.snapshot
            else "from event 1"
        )
        return f"(replayed {start}; events before {self.below} read from the bucket)"


def start_for(catalog: Catalog, until: int | None) -> SnapshotEntry | None:
    """The snapshot to start the state as of `until` from (None: the end): the newest
    one at or before it that the catalog's segments reach, or None (event 1)."""
    if not catalog.segments:
        return None
    start = catalog.segments[0].first
    for s in reversed(catalog.snapshots):
        if start - 1 <= s.watermark <= catalog.through and (until is None or s.watermark <= until):
            return s
    return None


def state_from_bucket(
    history: BucketHistory,
    data_dir: str | os.PathLike[str],
    until: int | None,
    *,
    from_snapshot: bool = True,
) -> Travelled:
    """The state as of `until` (None: the end) from the bucket, then the data
    directory's own log from where the bucket ends. `from_snapshot=False` replays
    from event 1 whatever the catalog holds (the benchmark's and the tests' yardstick)."""
    catalog = history.catalog()
    snap = start_for(catalog, until) if from_snapshot else None
    if snap is None:
        _check_starts_at_one(history, catalog)
        state, after = State(), 0
    else:
        state, after = _load_snapshot(history.objects, snap), snap.watermark
    end = catalog.through if until is None else min(until, catalog.through)
    with paused_gc():
        for entry in covering_range(catalog, after + 1, end):
            a = max(after + 1, entry.first)
            apply_all(state, history.segment_events(entry, a, min(end, entry.last)))
        if until is None or until > catalog.through:
            EventLog.open(
                DataDir.open_existing(data_dir).root,
                read_only=True,
                replay_from=max(after, catalog.through) + 1,
                on_events=lambda evs: apply_all(state, evs),
                until=until,
            ).close_sync()
    if until is not None and state.last_event_id < until:
        raise LogError(f"the log ends at event {state.last_event_id}, before {until}")
    if until is not None:
        for task_id, rid in _later_redactions(history, catalog, data_dir, state).items():
            task = state.task(task_id)  # into memory: an archived one is changed too
            if task is not None:
                hide_data(task, rid)
    return Travelled(state, max(after, end) + 1, after)


def _check_starts_at_one(history: BucketHistory, catalog: Catalog) -> None:
    if not catalog.segments or catalog.segments[0].first != 1:
        start = catalog.segments[0].first if catalog.segments else 0
        raise SnapshotError(
            f"the bucket {history.describe} does not start at event 1 "
            f"({'it is empty' if not start else f'it starts at {start}'}) and lists no "
            f"snapshot at or before the event asked: the state then cannot be rebuilt"
        )


def _load_snapshot(objects: ObjectStore, snap: SnapshotEntry) -> State:
    """The snapshot's state, its file and chunks fetched and checked by their SHA-256
    (a corrupt one: CorruptObjectError naming its key)."""
    with tempfile.TemporaryDirectory(prefix="apollo11-replay-") as tmp:
        for ref in (*snap.chunks, snap.file):
            try:
                raw = fetch(objects, ref)
            except CorruptObjectError:
                metrics.ARCHIVE_CORRUPT.inc()
                raise
            with open(os.path.join(tmp, ref.name), "wb") as f:
                f.write(raw)
            del raw
        try:
            _, state = Snapshots(tmp).load(snap.watermark)
        except SnapshotError as e:  # its SHA-256 held: what was uploaded is unreadable
            raise CorruptObjectError(str(e), key=snap.file.key) from e
    # the archive's chunks stay open (a Chunk holds a descriptor from its open):
    # the files are read through those once the directory is gone
    return state


def _later_redactions(
    history: BucketHistory, catalog: Catalog, data_dir: str | os.PathLike[str], past: State
) -> dict[str, int]:
    """The redactions recorded after the past state that the fold takes (by task id,
    the redaction's id), as `fold.redactions_after` judges them: from the records
    after the past state, from the disk where it holds them and from the bucket below
    it (for a past state far back, most of the bucket).

    Never from a newer local snapshot's `redacted`: a TASK_PURGED's `forget` list
    takes a purged task out of it, and the past state still holds that task
    (tests/scheduler/bucket/test_travel.py, a redaction of a task purged since)."""
    data = DataDir.open_existing(data_dir)
    at = past.last_event_id
    names = (parse_segment_name(n) for n in os.listdir(data.log_dir))
    disk_first = min((f for f in names if f is not None), default=catalog.through + 1)
    found: list[Event] = []
    for entry in covering_range(catalog, at + 1, min(catalog.through, disk_first - 1)):
        a, b = max(at + 1, entry.first), min(entry.last, disk_first - 1)
        found.extend(e for e in history.segment_events(entry, a, b) if e.event_type in _DECIDING)
    found.extend(_disk_deciding(data, max(at + 1, disk_first)))
    return redactions_after(found, past.holds)


def _disk_deciding(data: DataDir, start: int) -> list[Event]:
    """The TASK_REDACTED and TASK_HELD of the directory's log from event `start` on."""
    found: list[Event] = []

    def keep(events: Sequence[Event]) -> None:
        found.extend(e for e in events if e.event_type in _DECIDING)

    EventLog.open(data.root, read_only=True, replay_from=start, on_events=keep).close_sync()
    return found
