"""Changing a closed store's files: what a node does to its data directory between
closing its store and opening it again (Node._reopen), and nothing else.

Each change is crash-safe in its order of steps, stated where it is taken: a node
that dies part way opens a store that is either as before or as after, never one
whose snapshot points past the end of its log.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from apollo11.scheduler.log import (
    DataDir,
    NothingInCommonError,
    cut_after,
    fsync_dir,
    remove_manifest,
)
from apollo11.scheduler.state import watermark_of


def cut_divergent_tail(data: DataDir, keep_through: int, reason: str) -> str:
    """A deposed primary rejoining: its events after `keep_through` go to quarantine."""
    name = f"diverged-after-{keep_through}-{int(time.time())}.log"
    qpath = os.path.join(data.root, "quarantine", name)
    # Snapshots that include the divergent events go first: a crash between the two
    # steps must not leave a snapshot pointing past the end of the log.
    drop_snapshots_after(data, keep_through)
    try:
        n = cut_after(data.root, keep_through, qpath)
    except NothingInCommonError:
        wipe(data)
        return "nothing in common with the primary: cleared the log to catch up by snapshot"
    return f"cut a divergent tail of {n} events after {keep_through} into {qpath}: {reason}"


def install_snapshot(data: DataDir, staging: Path, watermark: int) -> str:
    """The primary's snapshot (received into `staging`) replaces the whole store."""
    wipe(data)
    for p in staging.iterdir():
        os.replace(p, os.path.join(data.snapshot_dir, p.name))
    fsync_dir(data.snapshot_dir)
    shutil.rmtree(staging, ignore_errors=True)
    return f"installed snapshot {watermark} from the primary"


def wipe(data: DataDir) -> None:
    # The manifest first: a crash part way must not leave it naming deleted segments.
    remove_manifest(data.log_dir)
    for d in (data.log_dir, data.snapshot_dir):
        for name in os.listdir(d):
            path = os.path.join(d, name)
            if os.path.isdir(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        fsync_dir(d)


def drop_snapshots_after(data: DataDir, keep_through: int) -> None:
    for name in os.listdir(data.snapshot_dir):
        mark = watermark_of(name)
        if mark is not None and mark > keep_through:
            os.unlink(os.path.join(data.snapshot_dir, name))
    fsync_dir(data.snapshot_dir)
