"""Issue 15, item 3: a segment the scrub finds damaged on a live node is mended
from another member's copy, on a standby and on the primary alike, sealed or
being written.

Before: the scrub reported it (metric, log line, status) and nothing else; the
damaged range stayed unreadable on that node until someone restored the file.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import SMALL, Cluster, Member, submit_and_wait

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

ENV = {**SMALL, "APOLLO11_SCRUB_INTERVAL": "1", "APOLLO11_SCRUB_MB_PER_S": "50"}


@pytest.fixture
def scrubbing(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, env=ENV)
    c.start()
    yield c
    c.stop()


def _quiet(c: Cluster, timeout: float = 30) -> None:
    """Until every member holds the same last event id twice, half a second apart: a
    moment's agreement may come just before the primary writes a task's last events
    (it flipped a segment the other members did not hold yet, once in a full run)."""
    deadline = time.monotonic() + timeout
    last = c.wait_converged()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = c.wait_converged()
        if now == last:
            return
        last = now
    raise AssertionError(f"the cluster kept writing for {timeout:g}s\n" + c.tail_logs())


def _flip(m: Member, index: int) -> tuple[Path, bytes]:
    """Flip a byte in the middle of a segment of a live node; its path, and its bytes
    before. (Another member's segments may be cut elsewhere: one that caught up from a
    snapshot starts its files where that snapshot ended; the mend fetches the records by
    event id, so the test compares the file with itself, not with another's.)"""
    seg = sorted((m.data_dir / "log").glob("*.seg"))[index]
    before = seg.read_bytes()
    data = bytearray(before)
    data[len(data) // 2] ^= 0xFF
    seg.write_bytes(bytes(data))
    return seg, before


@pytest.mark.parametrize(
    ("who", "index"), [("standby", 1), ("primary", 1), ("primary", -1), ("standby", -1)]
)
def test_a_damaged_segment_is_mended_from_another_member(
    scrubbing: Cluster, who: str, index: int
) -> None:
    """index 1: a sealed segment; -1: the one being written (its durable part)."""
    c = scrubbing
    submit_and_wait(c, 30)
    primary = c.primary()
    _quiet(c)
    damaged = primary if who == "primary" else next(m for m in c.members if m is not primary)
    assert len(list((damaged.data_dir / "log").glob("*.seg"))) > 4
    seg, before = _flip(damaged, index)
    name = seg.name
    assert seg.read_bytes() != before

    deadline = time.monotonic() + 60
    while "mended it with" not in damaged.log_text():
        assert time.monotonic() < deadline, "not mended within 60s\n" + c.tail_logs(30)
        time.sleep(0.2)
    text = damaged.log_text()
    assert f"log segment {damaged.data_dir / 'log' / name} is damaged" in text
    # the records it held, byte for byte (the segment being written may have grown)
    assert seg.read_bytes()[: len(before)] == before
    status = c.status(damaged)
    assert status is not None and "mended it with" in str(status["notice"])
    # No failover was needed: the mend itself never demotes a node (a loaded machine
    # may still move the lease, for reasons of its own; the log says which).
    assert "demoted self" not in text or "lease was not renewed" in text
    # Every record readable again there, the mended segment's among them: each event
    # from the first the node holds to the cluster's last, none missing. (A standby that
    # joined late caught up from a snapshot: its log begins where that ended, not at 1.)
    last = c.wait_converged()
    with SyncClient(damaged.address) as client:
        ids: list[int] = []
        start = 1
        while start:
            page, start = client.events(from_id=start, limit=500)
            ids += [e.event_id for e in page]
    assert ids and ids == list(range(ids[0], last + 1)), (ids[:3], ids[-3:], last)
    assert ids[0] <= int(name.removesuffix(".seg")), "the mended segment's events are served"
    assert len(ids) > 100
