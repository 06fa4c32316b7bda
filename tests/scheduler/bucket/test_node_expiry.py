"""A real node with retention archiving to a real SeaweedFS: once every task of the
oldest segments is purged, their objects leave the bucket and its catalog; a node
restored from the bucket with `apollo11 restore` afterwards has every task kept (held
ones here) and answers the purged ones "purged by retention"."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest

from apollo11.scheduler.bucket import load_catalog, open_bucket, verify_archive
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.errors import NotFoundError
from apollo11.scheduler.testing.seaweed import LocalSeaweed
from tests.nodes import NodeProc, cli, start_node

pytestmark = pytest.mark.timeout(600)

ARGS = (
    "--segment-max-bytes", "4096", "--snapshot-interval", "60",
    "--retention", "SUCCEEDED=3s", "--retention-sweep-interval", "1",
)  # fmt: skip


def _start(data: Path, url: str, env: dict[str, str]) -> NodeProc:
    return start_node(data, "--archive-url", url, *ARGS, env=env).drained()


def _run(c: SyncClient, n: int) -> list[str]:
    ids = [c.submit("etl", {"step_seconds": 0}).task_id for _ in range(n)]
    for task_id in ids:
        assert c.wait(task_id, timeout=60).state == "SUCCEEDED"
    return ids


def _first_in_bucket(objects) -> int:  # type: ignore[no-untyped-def]
    try:
        catalog = load_catalog(objects)
    except Exception:
        return 0
    return catalog.segments[0].first if catalog.segments else 0


def _purged(c: SyncClient, task_id: str) -> bool:
    try:
        c.task(task_id)
    except NotFoundError as e:
        assert "purged by retention" in str(e), str(e)
        return True
    return False


def test_a_node_drops_purged_segments_from_the_bucket_and_a_restore_keeps_the_rest(
    tmp_path: Path, archive_url: str, s3_server: LocalSeaweed
) -> None:
    env = s3_server.env()
    objects = open_bucket(archive_url)
    data = tmp_path / "n1"
    node = _start(data, archive_url, env)
    try:
        with SyncClient(node.address) as c:
            old = _run(c, 8)
            # kept for ever: held while still running (5 steps of 1 s), never purged
            kept = [c.submit("etl", {"step_seconds": 1}).task_id for _ in range(2)]
            for task_id in kept:
                c.hold(task_id, reason="kept for the restore")
            for task_id in kept:
                assert c.wait(task_id, timeout=120).state == "SUCCEEDED"
            # more work until the bucket no longer holds the oldest segments (a snapshot
            # taken after the old tasks' purge must go up and become restorable first);
            # the one with the first held task's first event stays
            deadline = time.monotonic() + 300
            while _first_in_bucket(objects) <= 1:
                assert time.monotonic() < deadline, "the bucket never dropped a segment"
                _run(c, 3)
            assert all(_purged(c, t) for t in old)

        catalog = load_catalog(objects)
        assert catalog.problems() == [] and catalog.chain_base, "the chain starts later"
        with SyncClient(node.address) as c:
            held_from = min(c.events(task_id=t, limit=1)[0][0].event_id for t in kept)
        assert catalog.segments[0].first <= held_from, "a held task's events all stay"

        def tidy() -> bool:  # the drop's deletes follow its catalog write
            named = {e.key for e in load_catalog(objects).segments}
            return set(objects.list("segments/")) == named

        deadline = time.monotonic() + 120
        while not tidy():
            assert time.monotonic() < deadline, "objects the catalog dropped are still there"
            time.sleep(0.2)
        assert verify_archive(objects).ok
        assert any("retention: dropping" in line for line in node.lines)
        assert node.stop() == 0
    finally:
        if node.alive():
            node.stop(signal.SIGKILL)

    # The disk is lost; the node comes back from what the bucket still holds.
    shutil.rmtree(data)
    done = cli("restore", "--archive-url", archive_url, "--data-dir", str(data))
    assert done.returncode == 0, done.stdout + done.stderr
    node = _start(data, archive_url, env)
    try:
        with SyncClient(node.address) as c:
            for task_id in kept:
                view = c.task(task_id)
                assert view.state == "SUCCEEDED" and view.held, task_id
            assert all(_purged(c, t) for t in old)
        assert node.stop() == 0
    finally:
        if node.alive():
            node.stop(signal.SIGKILL)
