"""Issue 15 (4a): a step's processes die with their node, before the next attempt."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from tests.cluster import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, 3, "--allow-shell")
    c.start()
    yield c
    c.stop()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"  # a zombie has ended


def _ledger(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_a_shell_step_dies_with_its_sigkilled_node(cluster: Cluster, tmp_path: Path) -> None:
    ledger, marker = tmp_path / "ledger", tmp_path / "marker"
    # Each attempt appends "run ATTEMPT PID TOKEN" (the shell's pid, and the sleep's as
    # a second line), the compensation "undo ATTEMPT". Attempt 1's marker must never
    # appear: its node is killed 1 s into its 15 s. Attempt 2 has nothing to outlive.
    run = (
        f'echo "run $APOLLO11_ATTEMPT $$ $APOLLO11_FENCING_TOKEN" >> {ledger}; '
        f"sleep $((APOLLO11_ATTEMPT == 1 ? 15 : 0)) & "
        f'echo "sleep $APOLLO11_ATTEMPT $!" >> {ledger}; wait $!; '
        f"touch {marker}.$APOLLO11_ATTEMPT"
    )
    doc = {
        "name": "zombie",
        "steps": [
            {
                "name": "long",
                "run": run,
                "idempotency": "not_idempotent",
                "compensate": f'echo "undo $APOLLO11_ATTEMPT" >> {ledger}',
                "retry": {"attempts": 2, "backoff_s": 0},
            }
        ],
    }
    primary = cluster.primary()
    cluster.wait_converged()
    with SyncClient(cluster.endpoints) as c:
        task_id = c.submit_shell(doc).task_id
    deadline = time.monotonic() + 20
    while len(_ledger(ledger)) < 2:
        assert time.monotonic() < deadline, cluster.tail_logs()
        time.sleep(0.05)
    (_, a1, sh1, *token1), (_, _, sleep1) = _ledger(ledger)[:2]
    assert a1 == "1" and _alive(int(sh1)) and _alive(int(sleep1))
    time.sleep(1.0)
    primary.signal(signal.SIGKILL)
    killed_at = time.monotonic()

    # Attempt 2 begins only once every process of attempt 1 is gone, and only after
    # attempt 1 was compensated. Watched until both are true: once attempt 1's shell
    # is gone, nothing is left that could write its marker.
    seen_run2 = False
    while not (seen_run2 and not _alive(int(sh1)) and not _alive(int(sleep1))):
        lines = _ledger(ledger)
        if not seen_run2 and any(line[:2] == ["run", "2"] for line in lines):
            seen_run2 = True
            assert not _alive(int(sh1)) and not _alive(int(sleep1)), (
                "attempt 2 began while attempt 1's processes still ran"
            )
        if time.monotonic() - killed_at > 5:
            assert not _alive(int(sh1)), "attempt 1's shell outlived its node by 5 s"
        assert not Path(f"{marker}.1").exists(), "attempt 1 finished after its node died"
        assert time.monotonic() - killed_at < 30, ("no attempt 2", lines, cluster.tail_logs())
        time.sleep(0.05)
    lines = _ledger(ledger)
    kinds = [line[0] + line[1] for line in lines if line[0] in ("run", "undo")]
    assert kinds == ["run1", "undo1", "run2"], lines
    token2 = next(line[3:] for line in lines if line[:2] == ["run", "2"])
    (term1, n1), (term2, n2) = (map(int, t[0].split(":")) for t in (token1, token2))
    assert (n1, n2) == (1, 2) and term2 > term1, "APOLLO11_FENCING_TOKEN is term:attempt"
    with SyncClient(cluster.endpoints, timeout_s=5) as c:
        deadline = time.monotonic() + 30
        while not (view := c.task(task_id)).finished:
            assert time.monotonic() < deadline, cluster.tail_logs()
            time.sleep(0.2)
    assert view.state == "SUCCEEDED", [(s.name, s.state, s.error) for s in view.steps]
    assert Path(f"{marker}.2").exists() and not Path(f"{marker}.1").exists()
