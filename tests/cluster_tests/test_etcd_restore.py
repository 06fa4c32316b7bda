"""etcd loses its data (restored empty, or from an old backup): its revisions restart,
but the cluster's terms must not. Issue 15, item 1: with the term taken from the leader
key's create revision, every promotion failed with StaleTermError until the revision
climbed past the log's terms (days, for a long-lived cluster) while status said
"primary"."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import time
from pathlib import Path

import aetcd
import pytest

from apollo11.lease.local_etcd import LocalEtcd, etcd_binary
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import EventLog, EventType
from tests.cluster import TTL, Cluster, Member

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]

AGED = 3000  # the revisions and terms a long-lived cluster has behind it


async def _age(etcd: LocalEtcd, revisions: int) -> None:
    """Raise etcd's revision by `revisions` puts (concurrent: etcd batches them)."""
    async with aetcd.Client(host=etcd.host, port=etcd.client_port) as c:
        gate = asyncio.Semaphore(32)

        async def put(i: int) -> None:
            async with gate:
                await c.put(b"/unrelated/filler", str(i).encode())

        await asyncio.gather(*(put(i) for i in range(revisions)))


def _terms(m: Member) -> list[int]:
    """The term of each TERM_STARTED in a member's log, in order."""
    log = EventLog.open(m.data_dir, read_only=True)
    try:
        return [e.term for e in log.read() if e.event_type is EventType.TERM_STARTED]
    finally:
        log.close_sync()


def _submitted(m: Member) -> set[str]:
    log = EventLog.open(m.data_dir, read_only=True)
    try:
        return {e.task_id for e in log.read() if e.event_type is EventType.TASK_SUBMITTED}
    finally:
        log.close_sync()


def _role(status: dict[str, object] | None) -> tuple[str, int]:
    if status is None:
        return ("unreachable", 0)
    return (str(status["role"]), int(status["term"]))  # type: ignore[call-overload]


def _term_of(c: Cluster, m: Member) -> int:
    return _role(c.status(m))[1]


def _write(c: Cluster, n: int = 5) -> list[str]:
    with SyncClient(c.endpoints) as client:
        tasks = [client.submit("etl", {"step_seconds": 0}).task_id for _ in range(n)]
        for t in tasks:
            assert client.wait(t).state == "SUCCEEDED"
    return tasks


def _write_in_a_term_above(
    c: Cluster, old_term: int, since: float, paused: Member | None = None
) -> tuple[str, float]:
    """Until a primary of a term above `old_term` acknowledges a write; fails after
    TTL + 5 s. The old primary may still acknowledge one or two before it notices its
    lease is gone (that is its fence window): those do not count."""
    deadline = since + TTL + 5
    seen: dict[str, tuple[str, int]] = {}
    live = [m for m in c.members if m is not paused]
    with SyncClient(",".join(m.address for m in live), retries=0, timeout_s=2) as client:
        while True:
            assert time.monotonic() < deadline, (
                f"no write in a term above {old_term} within TTL + 5s of etcd coming back; "
                f"statuses: {seen}\n" + c.tail_logs()
            )
            seen = {m.node_id: _role(c.status(m)) for m in live if m.alive()}
            if any(role == "primary" and term > old_term for role, term in seen.values()):
                try:
                    task = client.submit("etl", {"step_seconds": 0}).task_id
                except Exception as e:
                    seen["last error"] = (f"{type(e).__name__}: {e}", 0)
                else:
                    elapsed = time.monotonic() - since
                    assert client.wait(task).state == "SUCCEEDED"
                    return task, elapsed
            time.sleep(0.1)


def _check_the_new_term(c: Cluster, old_term: int, acked: set[str]) -> int:
    new = c.primary()
    status = c.status(new) or {}
    new_term = int(status["term"])  # type: ignore[call-overload]
    assert new_term > old_term, f"term {new_term} after term {old_term}: not a fencing token"
    notice = str(status.get("notice"))
    assert "etcd lost its data" in notice, status
    assert f"leader key recreated at term {new_term} by this node" in notice, status
    assert "etcd lost its data" in new.log_text()
    c.wait_converged()
    for m in c.members:
        if not m.alive():
            continue
        terms = _terms(m)
        assert terms[-1] == new_term, f"{m.node_id} is not in the new term: {terms}"
        assert max(terms[:-1]) < new_term, f"{m.node_id}: {terms}"
        assert "etcd lost its data" in m.log_text(), m.node_id
    assert acked <= _submitted(new), "a write acknowledged before the restore was lost"
    return new_term


@pytest.mark.parametrize("old_primary", ["live", "paused"])
def test_the_cluster_elects_above_its_terms_after_etcd_is_restored_empty(
    tmp_path: Path, old_primary: str
) -> None:
    """Paused: SIGSTOPped through the restore, the old primary first reads etcd after
    another node recreated the leader key at a higher term. It must still say etcd
    lost its data (the CI run of Dec 7: a primary busy demoting never did)."""
    etcd = LocalEtcd(tmp_path / "etcd" / "member").start()
    # A long-lived cluster: thousands of revisions and terms behind it (earlier versions
    # took the term from the revision, this one keeps it in the term key).
    asyncio.run(_age(etcd, AGED))
    etcd.ctl("put", "/apollo11/restored/term", str(AGED))
    (tmp_path / "nodes").mkdir()
    c = Cluster.create(tmp_path / "nodes", etcd.url, "restored")
    c.start()
    try:
        old = c.primary()
        before = _write(c)
        c.wait_converged()
        old_term = _term_of(c, old)
        assert old_term >= AGED

        paused = old if old_primary == "paused" else None
        if paused is not None:
            paused.signal(signal.SIGSTOP)
        # etcd restored empty: same address, a fresh data directory.
        etcd.stop()
        shutil.rmtree(etcd.data_dir)
        etcd.start()
        after, elapsed = _write_in_a_term_above(c, old_term, time.monotonic(), paused)
        if paused is not None:
            paused.signal(signal.SIGCONT)
        new_term = _check_the_new_term(c, old_term, {*before, after})
        print(f"writing {elapsed:.2f}s after etcd came back empty: term {old_term} -> {new_term}")
    finally:
        c.stop()
        etcd.stop()


def test_the_cluster_elects_above_its_terms_after_etcd_is_restored_from_an_old_backup(
    tmp_path: Path,
) -> None:
    """The backup names a primary (and a term) long gone; the leader key it restores
    must not be followed, and the next term is above the one the logs reached since."""
    etcd = LocalEtcd(tmp_path / "etcd" / "member").start()
    (tmp_path / "nodes").mkdir()
    c = Cluster.create(tmp_path / "nodes", etcd.url, "backup")
    c.start()
    try:
        first = c.primary()
        before = _write(c)
        backup = tmp_path / "etcd" / "backup.db"
        etcd.ctl("snapshot", "save", str(backup))
        backup_term = _term_of(c, first)

        first.signal(signal.SIGKILL)
        second = c.primary(timeout=TTL * 5 + 10, exclude=first.node_id)
        before += _write(c)
        c.wait_converged()
        old_term = _term_of(c, second)
        assert old_term > backup_term

        etcd.stop()
        shutil.rmtree(etcd.data_dir)
        peer = f"http://{etcd.host}:{etcd.peer_port}"
        subprocess.run(
            [
                etcd_binary("etcdutl"),
                "snapshot",
                "restore",
                str(backup),
                "--data-dir",
                str(etcd.data_dir),
                "--name",
                "etcd0",
                "--initial-cluster",
                f"etcd0={peer}",
                "--initial-advertise-peer-urls",
                peer,
            ],
            check=True,
            capture_output=True,
        )
        etcd.start()
        after, elapsed = _write_in_a_term_above(c, old_term, time.monotonic())
        new_term = _check_the_new_term(c, old_term, {*before, after})
        primary = c.primary()
        standbys = [m for m in c.members if m.alive() and m is not primary]
        assert any(
            f"the leader key names {first.node_id} at term {backup_term}" in m.log_text()
            for m in standbys
        ), "a standby would follow the primary the backup names\n" + c.tail_logs()
        print(f"writing {elapsed:.2f}s after etcd came back from a backup: term {new_term}")
    finally:
        c.stop()
        etcd.stop()
