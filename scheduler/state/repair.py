"""A damaged data directory set aside and refilled from the primary.

Alone, a node whose log cannot be opened must refuse to start: a record that
fails its CRC where recovery reads, a tail shorter than the manifest recorded
as durable, an unreadable snapshot. Starting on what is left would run finished
steps again (issue 15). In a cluster the primary holds the same history, so
the node sets its files aside instead: the log and the snapshots (with the
archive) move to `quarantine/damaged-<stamp>/`, kept for audit and never
deleted, and the node starts empty and catches up by snapshot + tail like a
new standby.

Until it again holds every event it held before and has caught up with a
primary, the node is *repairing*: it publishes that role, no election counts
it a candidate and it never campaigns itself, so a node missing events that
were acknowledged is never the one that leads. The `REPAIR` marker file says
so across restarts; it names the end the node must reach (`needs_through`:
the highest of what the manifest recorded as durable, the newest snapshot's
watermark and the first id of the newest segment file, minus one).

Why not cut at the damaged record and fetch only what follows: recovery starts
from a snapshot, and a snapshot past the cut, an archive chunk holding events
past it, a segment index pointing into the cut part would each need its own
surgery; a fresh catch-up is one path the cluster tests already run. The cost
is the transfer of one snapshot and the tail.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import orjson

from apollo11.scheduler.errors import ApolloError, CorruptLogError
from apollo11.scheduler.log import (
    DataDir,
    fsync_dir,
    load_manifest,
    parse_segment_name,
    write_atomic,
)
from apollo11.scheduler.state.snapshot import watermark_of

MARKER = "REPAIR"
REPAIRING = "repairing"  # the role a node publishes while it is repaired


@dataclass(frozen=True, slots=True)
class Repair:
    needs_through: int  # the node is repaired once its log holds this event again
    reason: str  # the damage found
    quarantine: str  # where the damaged files are
    at_ms: int

    def describe(self) -> str:
        return (
            f"its data directory was damaged ({self.reason}); the damaged files are in "
            f"{self.quarantine}; repairing from the primary: needs events through "
            f"{self.needs_through} before it may lead"
        )


def set_aside(data_dir: str | os.PathLike[str], reason: str) -> Repair:
    """Move a damaged log and its snapshots to quarantine and leave an empty data
    directory with the REPAIR marker. Crash-safe in this order: the marker first
    (a node that restarts part way is still repairing), then each directory by one
    rename."""
    data = DataDir.open_existing(data_dir)
    previous = load(data.root)
    needs = max(_known_end(data), previous.needs_through if previous else 0)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    qdir = os.path.join(data.root, "quarantine", f"damaged-{stamp}-{os.getpid()}")
    repair = Repair(needs, reason, qdir, int(time.time() * 1000))
    write_atomic(os.path.join(data.root, MARKER), _encode(repair))
    os.makedirs(qdir)
    for d in (data.log_dir, data.snapshot_dir):
        if os.path.isdir(d):
            os.rename(d, os.path.join(qdir, os.path.basename(d)))
    fsync_dir(qdir)
    fsync_dir(data.root)
    DataDir.open(data.root)  # the empty log and snapshot directories again
    return repair


def load(data_dir: str | os.PathLike[str]) -> Repair | None:
    path = os.path.join(os.fspath(data_dir), MARKER)
    try:
        with open(path, "rb") as f:
            raw = orjson.loads(f.read())
        return Repair(
            int(raw["needs_through"]), str(raw["reason"]), str(raw["quarantine"]), int(raw["at_ms"])
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        # Unreadable: the node may be missing events, so it must not lead. Refuse.
        raise ApolloError(
            f"{path} is unreadable ({e}): this node was being repaired from the primary; "
            f"delete the file only if its log is known to be complete"
        ) from e


def done(data_dir: str | os.PathLike[str]) -> None:
    root = os.fspath(data_dir)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(root, MARKER))
    fsync_dir(root)


def _encode(r: Repair) -> bytes:
    return orjson.dumps(
        {
            "needs_through": r.needs_through,
            "reason": r.reason,
            "quarantine": r.quarantine,
            "at_ms": r.at_ms,
        }
    )


def _known_end(data: DataDir) -> int:
    """The highest event id this directory is known to have held (a lower bound)."""
    end = 0
    with contextlib.suppress(CorruptLogError, OSError, ValueError):
        m = load_manifest(data.log_dir)
        if m is not None:
            end = m.event_id
    with contextlib.suppress(OSError):
        for name in os.listdir(data.log_dir):
            first = parse_segment_name(name)
            if first is not None:
                end = max(end, first - 1)
    with contextlib.suppress(OSError):
        for name in os.listdir(data.snapshot_dir):
            mark = watermark_of(name)
            if mark is not None:
                end = max(end, mark)
    return end
