"""A standby's disk lost, restored from the bucket, follows its primary; then the whole
cluster lost (three disks and etcd's keys), rebuilt from the bucket: every acknowledged
task is there, and the new cluster goes on archiving where the old one stopped."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.bucket import load_catalog, open_bucket
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import parse_segment_name
from apollo11.scheduler.testing.seaweed import LocalSeaweed
from tests.cluster import SMALL, Cluster, submit_and_wait
from tests.nodes import cli

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.timeout(300)]


def _sealed_end(data: Path) -> int:
    firsts = sorted(f for p in (data / "log").iterdir() if (f := parse_segment_name(p.name)))
    return firsts[-1] - 1 if len(firsts) > 1 else 0


def _through(objects) -> int:  # type: ignore[no-untyped-def]
    try:
        return int(load_catalog(objects).through)
    except Exception:
        return 0


def _until(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_three_nodes_wiped_are_restored_from_the_bucket(
    tmp_path: Path,
    etcd_server: LocalEtcd,
    cluster_name: str,
    archive_url: str,
    s3_server: LocalSeaweed,
) -> None:
    env = {**SMALL, **s3_server.env()}
    objects = open_bucket(archive_url)
    c = Cluster.create(
        tmp_path, etcd_server.url, cluster_name, 3, "--archive-url", archive_url, env=env
    )
    c.start()
    try:
        primary = c.wait_formed()
        acked = submit_and_wait(c, 20)
        need = c.wait_converged()
        while _sealed_end(primary.data_dir) < need:  # the RPO: sealed segments only
            submit_and_wait(c, 3)
        _until(lambda: _through(objects) >= need, 60, "the acknowledged events in the bucket")

        # one standby's disk lost: restored from the bucket, it follows its primary
        standby = next(m for m in c.members if m is not primary)
        standby.signal(signal.SIGKILL)
        shutil.rmtree(standby.data_dir)
        done = cli("restore", "--archive-url", archive_url, "--data-dir", str(standby.data_dir))
        assert done.returncode == 0, done.stdout + done.stderr
        standby.start()
        acked += submit_and_wait(c, 5)
        assert c.wait_formed() is primary
        need = c.wait_converged()
        status = c.status(standby) or {}
        assert status.get("role") == "standby", status
        # those 5 too in the bucket before every disk is lost: the RPO is the last
        # sealed segment, and a kill right after the acks lost the open one's (a CI run)
        while _sealed_end(primary.data_dir) < need:
            submit_and_wait(c, 3)
        _until(lambda: _through(objects) >= need, 60, "the last acknowledged events in the bucket")
    finally:
        for m in c.members:  # every machine at once
            if m.alive():
                m.signal(signal.SIGKILL)
    for m in c.members:
        shutil.rmtree(m.data_dir)
    before = load_catalog(objects)

    # etcd's keys for it are gone too: a new cluster name, the same node ids and dirs
    c2 = Cluster.create(
        tmp_path, etcd_server.url, cluster_name + "-new", 3, "--archive-url", archive_url, env=env
    )
    for m in c2.members:
        done = cli("restore", "--archive-url", archive_url, "--data-dir", str(m.data_dir))
        assert done.returncode == 0, done.stdout + done.stderr
    c2.start()
    try:
        c2.wait_formed()
        with SyncClient(c2.endpoints) as client:
            for task_id in acked:
                assert client.task(task_id).state == "SUCCEEDED", task_id
            status = client.status().to_json()
            assert int(status["term"]) > before.segments[-1].last_term  # type: ignore[call-overload]
        # and it archives on, after what the old cluster left
        end = c2.wait_converged()
        p2 = c2.primary()
        while _sealed_end(p2.data_dir) <= end:
            submit_and_wait(c2, 3)
        _until(lambda: _through(objects) > before.through, 60, "the new cluster's uploads")
        after = load_catalog(objects)
        assert after.problems() == [] and after.segments[: len(before.segments)] == before.segments
    finally:
        c2.stop()
