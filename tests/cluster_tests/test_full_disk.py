"""A full disk, for real: a node's data directory on a small tmpfs, filled up under load.

Issue 15: the primary stopped acknowledging with ENOSPC (and lost nothing) but kept
the lease with two healthy standbys, and refused appends until restarted even
after space was freed. Now it steps down at once, a standby takes over, and the
node reopens its log and rejoins once writes work again; a standalone node (no
one to hand over to) keeps refusing writes with the reason, and recovers by itself.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import RESIGN_TTL, Cluster, segment_digest
from tests.cluster_tests.test_failover import (
    Submitter,
    _check_ledger_and_log,
    _final_log,
    _wait_all_done,
)
from tests.nodes import start_node

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

DISK_MB = 48


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of DISK_MB MiB (the tests run as root); always unmounted."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path) -> Path:
    """Write a filler file until the file system is full; returns its path."""
    path = mnt / "filler"
    chunk = b"\0" * (1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
        for size in (4096, 512, 1):  # the last pages too
            while True:
                try:
                    os.write(fd, chunk[:size])
                except OSError:
                    break
    finally:
        os.close(fd)
    return path


def _on_disk(c: Cluster, node_id: str, mnt: Path) -> None:
    m = c.member(node_id)
    m.data_dir = mnt / node_id
    m.args[m.args.index("--data-dir") + 1] = str(m.data_dir)


def _wait_status(c: Cluster, node_id: str, ok: object, timeout: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    s: dict[str, object] | None = None
    while time.monotonic() < deadline:
        s = c.status(c.member(node_id))
        if s is not None and ok(s):  # type: ignore[operator]
            return s
        time.sleep(0.1)
    raise AssertionError(f"{node_id} status never matched: {s}\n{c.tail_logs(40)}")


@pytest.mark.etcd
def test_a_primary_whose_disk_fills_hands_over_and_rejoins_once_space_is_freed(
    tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str, small_disk: Path
) -> None:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, ttl=RESIGN_TTL)
    _on_disk(c, "n1", small_disk)
    n1 = c.member("n1")
    try:
        n1.start()  # first and alone, so that the node on the small disk leads
        assert c.primary().node_id == "n1"
        for m in c.members[1:]:
            m.start()
        ledger = tmp_path / "ledger"
        with Submitter(c.endpoints, ledger, step_seconds=0.02) as sub:
            _wait_status(c, "n1", lambda s: len(sub.acked) > 20, timeout=60)
            filler = fill(small_disk)
            t0 = time.monotonic()
            new = c.primary(exclude="n1", timeout=RESIGN_TTL + 10)
            took = time.monotonic() - t0
            print(f"takeover after the disk filled: {took:.2f}s (TTL {RESIGN_TTL:g}s)")
            # stepped down: the lease given up, not left to expire
            assert took < RESIGN_TTL, f"a standby took over {took:.2f}s after the disk filled"
            s = _wait_status(c, "n1", lambda s: s["role"] != "primary", timeout=5)
            assert "No space left on device" in str(s["notice"]), s
            acked_before = len(sub.acked)
            _wait_status(c, new.node_id, lambda s: len(sub.acked) > acked_before + 20, 60)
            assert n1.alive()
            filler.unlink()
            freed = time.monotonic()
            s = _wait_status(
                c,
                "n1",
                lambda s: (
                    s["role"] == "standby"
                    and s["leader"] is not None
                    and s["leader"]["node_id"] == new.node_id  # type: ignore[index]
                ),
                timeout=30,
            )
            print(f"rejoined as a standby {time.monotonic() - freed:.2f}s after space was freed")
            assert "reopened" in str(s["notice"]), s
            time.sleep(1.0)
        assert sub.acked, "writes were acknowledged"
        _wait_all_done(c.endpoints, sub.acked)
        last = c.wait_converged()
        assert len({segment_digest(m.data_dir, last) for m in c.members}) == 1
        _check_ledger_and_log(ledger, _final_log(new.data_dir), sub.acked)
        assert n1.alive(), "the node was never restarted"
    finally:
        c.stop()


def test_a_standalone_node_refuses_writes_on_a_full_disk_and_recovers_without_a_restart(
    small_disk: Path,
) -> None:
    node = start_node(small_disk / "solo")
    # Nobody reads its stdout otherwise: a full pipe would block the node.
    drain = threading.Thread(target=lambda: [None for _ in node.proc.stdout or ()], daemon=True)
    drain.start()
    try:
        with SyncClient(node.address, retries=0, timeout_s=5) as client:
            for _ in range(5):
                client.submit("etl", {"step_seconds": 0})
            filler = fill(small_disk)
            refused = ""
            deadline = time.monotonic() + 30
            while not refused and time.monotonic() < deadline:
                try:
                    client.submit("etl", {"step_seconds": 0})
                except Exception as e:
                    refused = str(e)
            assert "No space left on device" in refused, refused
            deadline = time.monotonic() + 2  # the node notices within LOG_WATCH_S
            while "No space left" not in (status := client.status()).notice:
                assert time.monotonic() < deadline, status
                time.sleep(0.05)
            assert status.role == "failed", status
            # Still refusing, with the reason, while the disk is full.
            time.sleep(2.5)
            with pytest.raises(Exception, match="No space left on device"):
                client.submit("etl", {"step_seconds": 0})
            filler.unlink()
            deadline = time.monotonic() + 15
            while True:
                try:
                    sub = client.submit("etl", {"step_seconds": 0})
                    break
                except Exception:
                    assert time.monotonic() < deadline, "no recovery after space was freed"
                    time.sleep(0.2)
            assert client.wait(sub.task_id).state == "SUCCEEDED"
            status = client.status()
            assert status.role == "primary", status
            assert "reopened" in status.notice, status
        assert node.alive(), "recovered without a restart"
    finally:
        node.stop()
