"""The cluster for real: etcd, three node processes, SIGKILL / SIGSTOP / etcd down."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.log import EventLog, EventType
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg
from tests.cluster import RESIGN_TTL, TTL, Cluster, segment_digest, segment_files, stubborn_client
from tests.nodes import cli

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


@pytest.fixture
def cluster(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name)
    c.start()
    c.wait_formed()  # the takeover's log holds every event from the first
    yield c
    c.stop()


class Submitter:
    """Submits etl tasks continuously; remembers exactly which were acknowledged."""

    def __init__(self, endpoints: str, ledger: Path, step_seconds: float = 0.1) -> None:
        self.endpoints = endpoints
        self.ledger = ledger
        self.step_seconds = step_seconds
        self.acked: list[str] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with SyncClient(self.endpoints, retries=1, timeout_s=3) as c:
            i = 0
            while not self._stop.is_set():
                i += 1
                try:
                    sub = c.submit(
                        "etl", {"step_seconds": self.step_seconds, "ledger": str(self.ledger)}
                    )
                    self.acked.append(sub.task_id)
                except Exception:
                    self.errors += 1
                time.sleep(0.05)

    def __enter__(self) -> Submitter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _final_log(data_dir: Path) -> list:  # type: ignore[type-arg]
    log = EventLog.open(data_dir, read_only=True)
    events = list(log.read())
    log.close_sync()
    return events


def _fenced_runs(
    ledger: Path,
) -> tuple[dict[tuple[str, str], list[tuple[int, str]]], list[str]]:
    """The ledger read as an external system that checks fencing tokens would take it:
    a line whose (term, attempt) is below the highest already seen for its step is
    refused. A node checks its lease right before an attempt begins, but the check
    and the beginning are not atomic: a primary paused between the two begins late,
    after its successor's attempt, and only such a system can refuse it (docs/workflows.md,
    "Step processes and fencing"). Returns (accepted runs per step, refused lines)."""
    runs: dict[tuple[str, str], list[tuple[int, str]]] = defaultdict(list)
    highest: dict[tuple[str, str], tuple[int, int]] = {}
    refused: list[str] = []
    for line in ledger.read_text().splitlines():
        task_id, step, attempt, node, token, _where = line.split()
        term, n = (int(x) for x in token.split(":"))
        assert n == int(attempt), line
        key = (task_id, step)
        if (term, n) < highest.get(key, (0, 0)):
            refused.append(line)
            continue
        highest[key] = (term, n)
        runs[key].append((int(attempt), node))
    return runs, refused


def _check_ledger_and_log(
    ledger: Path,
    events: list,  # type: ignore[type-arg]
    acked: list[str],
    deposed: str | None = None,
) -> None:
    submitted = {e.task_id for e in events if e.event_type is EventType.TASK_SUBMITTED}
    missing = [t for t in acked if t not in submitted]
    assert not missing, f"acknowledged submissions lost: {missing[:5]}"
    succeeded: dict[tuple[str, str], int] = {}
    failed: set[tuple[str, str, int]] = set()
    for e in events:
        if e.event_type is EventType.STEP_SUCCEEDED:
            assert (e.task_id, e.step_name) not in succeeded
            succeeded[(e.task_id, e.step_name)] = e.attempt
        elif e.event_type is EventType.STEP_FAILED:
            failed.add((e.task_id, e.step_name, e.attempt))
    runs, refused = _fenced_runs(ledger)
    # Only a deposed primary's late beginning can be refused, and one at most per pause:
    # the pause must fall in the microseconds between one attempt's lease check and its
    # start, and every attempt after it checks the lease again (and refuses).
    assert all(line.split()[3] == deposed for line in refused), refused
    assert len(refused) <= (1 if deposed else 0), refused
    for key, attempts in runs.items():
        numbers = [a for a, _ in attempts]
        assert numbers == sorted(set(numbers)), f"{key}: one attempt ran twice: {attempts}"
        ok = succeeded.get(key)
        if ok is not None:
            assert numbers[-1] == ok, (
                f"{key} ran again after it SUCCEEDED (attempt {ok}): {attempts}"
            )
        for a in numbers[:-1]:
            assert (*key, a) in failed, f"{key} attempt {a} ran again without a recorded failure"


def _wait_all_done(endpoints: str, task_ids: list[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    with SyncClient(endpoints, timeout_s=5) as c:
        for t in task_ids:
            while True:
                assert time.monotonic() < deadline, f"task {t} did not finish"
                try:
                    view = c.task(t)
                    if view.finished:
                        assert view.state == "SUCCEEDED", (
                            t,
                            view.state,
                            [(s.name, s.state, s.error) for s in view.steps],
                        )
                        break
                except Exception:
                    pass
                time.sleep(0.1)


def test_kill_the_primary_ten_times(cluster: Cluster, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    first = cluster.primary()
    failovers: list[float] = []
    with Submitter(cluster.endpoints, ledger) as sub:
        time.sleep(1.0)
        for _ in range(10):
            old = cluster.primary()
            old.signal(signal.SIGKILL)
            t0 = time.monotonic()
            new = cluster.primary(exclude=old.node_id, timeout=TTL + 10)
            failovers.append(time.monotonic() - t0)
            assert new.node_id != old.node_id
            old.start()  # it comes back and rejoins as a standby
            # ...before the next kill: with one member down and the primary killed, no
            # quorum of positions remains (test_quorum.py), and a loaded machine
            # restarts a node slowly
            deadline = time.monotonic() + 60
            while (cluster.status(old) or {}).get("role") != "standby":
                assert time.monotonic() < deadline, cluster.tail_logs()
                time.sleep(0.1)
            time.sleep(0.8)
    assert first is not None
    assert max(failovers) < TTL + 5, failovers  # generous; the benchmark measures it properly
    assert len(sub.acked) > 20, "writes kept being acknowledged through the failovers"
    _wait_all_done(cluster.endpoints, sub.acked)
    last = cluster.wait_converged()
    digests = {segment_digest(m.data_dir, last) for m in cluster.members}
    assert len(digests) == 1, "every member holds the same records"
    primary = cluster.primary()
    _check_ledger_and_log(ledger, _final_log(primary.data_dir), sub.acked)


def test_a_paused_primary_acknowledges_nothing_and_rejoins(
    cluster: Cluster, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    old = cluster.primary()
    acks_from_old: list[str] = []
    with Submitter(cluster.endpoints, ledger) as sub:
        time.sleep(1.0)
        old.signal(signal.SIGSTOP)
        # Meanwhile, a client stubbornly talks to the paused primary only.
        stop = threading.Event()
        t = stubborn_client(old.address, acks_from_old, stop)
        new = cluster.primary(exclude=old.node_id, timeout=TTL + 10)
        time.sleep(TTL)  # well past the old lease
        old.signal(signal.SIGCONT)
        time.sleep(TTL + 1)
        stop.set()
        t.join(30)
    s = cluster.status(old)
    assert s is not None and s["role"] == "standby", (s, cluster.tail_logs())
    assert s["leader"] and s["leader"]["node_id"] == new.node_id, (s, cluster.tail_logs(40))  # type: ignore[index]
    _wait_all_done(cluster.endpoints, sub.acked)
    last = cluster.wait_converged()
    events = _final_log(new.data_dir)
    submitted = {e.task_id for e in events if e.event_type is EventType.TASK_SUBMITTED}
    assert all(t in submitted for t in acks_from_old), (
        "the paused primary acknowledged a lost write"
    )
    _check_ledger_and_log(ledger, events, sub.acked, deposed=old.node_id)
    assert len({segment_digest(m.data_dir, last) for m in cluster.members}) == 1
    files = [segment_files(m.data_dir) for m in cluster.members]
    assert files[0] == files[1] == files[2], "segment files are byte-identical"
    assert "demoted self because" in old.log_text()


def test_a_write_to_a_standby_names_the_primary(cluster: Cluster) -> None:
    primary = cluster.primary()
    cluster.wait_converged()
    standby = next(m for m in cluster.members if m.node_id != primary.node_id)
    time.sleep(0.5)
    with grpc.insecure_channel(standby.address) as ch, pytest.raises(grpc.RpcError) as exc:
        pbg.SchedulerStub(ch).SubmitTask(pb.SubmitTaskRequest(workflow="etl"), timeout=5)
    err = exc.value
    assert err.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert dict(err.trailing_metadata())["apollo11-leader"] == primary.address  # type: ignore[arg-type]
    # The client follows it; reads on a standby come from its live state.
    with SyncClient(standby.address) as c:
        sub = c.submit("etl", {"step_seconds": 0})
        assert c.wait(sub.task_id).state == "SUCCEEDED"
    cluster.wait_applied(standby, cluster.wait_converged())
    with SyncClient(standby.address) as c:
        view = c.task(sub.task_id)
    assert view.state == "SUCCEEDED"


@pytest.fixture
def slow_lease(tmp_path: Path, etcd_server: LocalEtcd, cluster_name: str) -> Iterator[Cluster]:
    c = Cluster.create(tmp_path, etcd_server.url, cluster_name, ttl=RESIGN_TTL)
    c.start()
    c.wait_formed()
    yield c
    c.stop()


def test_sigterm_on_the_primary_hands_over_at_once(slow_lease: Cluster) -> None:
    cluster = slow_lease
    old = cluster.primary()
    cluster.wait_converged()
    t0 = time.monotonic()
    assert old.stop() == 0
    cluster.primary(exclude=old.node_id, timeout=RESIGN_TTL + 5)
    took = time.monotonic() - t0
    assert took < RESIGN_TTL, (
        f"a resigned lease is taken over without waiting for the TTL ({took:.1f}s)"
    )
    # The history (issue 19): the two leaders in order, each from its TERM_STARTED,
    # and status counts them beside the fencing term.
    new = cluster.primary(exclude=old.node_id)
    res = cli("history", "--json", server=new.address)
    assert res.returncode == 0, res.stderr
    terms = json.loads(res.stdout)
    assert [t["node_id"] for t in terms] == [old.node_id, new.node_id], terms
    assert terms[0]["term"] < terms[1]["term"]
    assert terms[0]["first_event_id"] < terms[1]["first_event_id"]
    assert all(t["started_ms"] > 0 and t["address"] for t in terms)
    # how each began: the cluster's first leader, then the one that took over
    assert [(t["began"], t["previous"]) for t in terms] == [
        ("bootstrap", ""),
        ("failover", old.node_id),
    ], terms
    plain = cli("history", server=new.address).stdout.splitlines()
    assert plain[0].split()[:3] == ["#", "term", "leader"]
    assert plain[0].split()[-1] == "how"
    assert plain[2].split()[:3] == ["2", str(terms[1]["term"]), new.node_id]
    assert plain[2].endswith(f"failover from {old.node_id}"), plain
    status = cli("status", server=new.address).stdout
    assert f"term {terms[1]['term']} (2nd leader in the log)" in status, status
