"""Workers for real: etcd, three node processes in remote mode, `apollo11 worker`
processes, SIGKILL / SIGSTOP of workers and of the primary.

The etl example's ledger says what ran, how often and where: each execution
appends `task step attempt node term:attempt worker` before it works.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from apollo11.scheduler.client import SyncClient, TaskView
from apollo11.scheduler.wire import LEADER_METADATA
from apollo11.v1 import worker_pb2 as wpb
from apollo11.v1 import worker_pb2_grpc as wpbg
from tests.cluster import Cluster
from tests.cluster_tests.conftest import Secured
from tests.workerprocs import (
    HEARTBEAT_TIMEOUT,
    WorkerProc,
    _connected,
    _events,
    _lines,
    _until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


def test_a_killed_worker_loses_its_attempt_at_once_and_another_runs_it(
    remote: Cluster, workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    primary = remote.primary()
    w1 = workers("w1", "--slots", "1")
    _until("w1", _connected(primary, "w1"))
    w2 = workers("w2", "--slots", "1")
    _until("w2", _connected(primary, "w2"))
    ledger = tmp_path / "ledger"
    with SyncClient(remote.endpoints) as client:
        task_id = client.submit("etl", {"step_seconds": 2, "ledger": str(ledger)}).task_id
        _until("the first attempt", lambda: len(_lines(ledger)) >= 1)
        first = _lines(ledger)[0]
        victim, other = (w1, w2) if first[5] == "w1" else (w2, w1)
        killed_at = time.time()
        victim.signal(signal.SIGKILL)
        _until("the second attempt", lambda: len(_lines(ledger)) >= 2)
        task = client.wait(task_id)
    assert task.state == "SUCCEEDED"
    events = _events(remote, task_id)
    lost = [e for e in events if e.event_type == "STEP_FAILED"]  # type: ignore[attr-defined]
    assert len(lost) == 1 and lost[0].payload["lost"] is True  # type: ignore[attr-defined]
    # found by the closed socket, not by the heartbeat timeout
    assert lost[0].timestamp_ms / 1000 - killed_at < HEARTBEAT_TIMEOUT  # type: ignore[attr-defined]
    ran = _lines(ledger)
    assert [(r[1], r[2], r[5]) for r in ran[:2]] == [
        ("collect", "1", victim.name),
        ("collect", "2", other.name),
    ]
    assert all(r[5] == other.name for r in ran[1:])


def test_a_stopped_worker_is_cut_off_and_its_late_result_is_refused(
    remote: Cluster, workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    primary = remote.primary()
    w1 = workers("w1", "--slots", "1")
    _until("w1", _connected(primary, "w1"))
    ledger = tmp_path / "ledger"
    with SyncClient(remote.endpoints) as client:
        task_id = client.submit("etl", {"step_seconds": 1.5, "ledger": str(ledger)}).task_id
        _until("the first attempt", lambda: len(_lines(ledger)) >= 1)
        w1.signal(signal.SIGSTOP)
        workers("w2", "--slots", "1")
        _until("w2", _connected(primary, "w2"))
        _until("the second attempt", lambda: len(_lines(ledger)) >= 2)
        w1.signal(signal.SIGCONT)  # it finishes attempt 1 and reports it: too late
        _until(
            "the late result refused",
            lambda: "refused a late result from worker w1" in primary.log_text(),
        )
        task = client.wait(task_id)
    assert task.state == "SUCCEEDED"
    events = _events(remote, task_id)
    succeeded = Counter(
        e.step_name  # type: ignore[attr-defined]
        for e in events
        if e.event_type == "STEP_SUCCEEDED"  # type: ignore[attr-defined]
    )
    assert set(succeeded.values()) == {1}, succeeded
    failed = [e for e in events if e.event_type == "STEP_FAILED"]  # type: ignore[attr-defined]
    assert "silent" in failed[0].payload["error"]  # type: ignore[attr-defined]
    ran = _lines(ledger)
    assert (ran[0][1], ran[0][2], ran[0][5]) == ("collect", "1", "w1")
    assert (ran[1][1], ran[1][2], ran[1][5]) == ("collect", "2", "w2")


def _running_etl(client: SyncClient, ledger: Path, n: int, *, step_seconds: float) -> list[str]:
    """Submit `n` etl tasks and return their ids once each has a step running."""
    ids = [
        client.submit("etl", {"step_seconds": step_seconds, "ledger": str(ledger)}).task_id
        for _ in range(n)
    ]
    _until(f"{n} steps running", lambda: len(_lines(ledger)) >= n)
    return ids


def _each_step_ran_once(tasks: list[TaskView], ledger: Path) -> None:
    """Every task succeeded, and the ledger holds each of their five steps exactly once."""
    assert {t.state for t in tasks} == {"SUCCEEDED"}
    ran = Counter((r[0], r[1]) for r in _lines(ledger))
    assert len(ran) == len(tasks) * 5
    assert set(ran.values()) == {1}, [k for k, n in ran.items() if n > 1]


def test_a_killed_primary_costs_no_step_a_second_run(
    remote: Cluster, workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    primary = remote.primary()
    for name in ("w1", "w2"):
        workers(name, "--slots", "10")
        _until(name, _connected(primary, name))
    ledger = tmp_path / "ledger"
    with SyncClient(remote.endpoints) as client:
        ids = _running_etl(client, ledger, 20, step_seconds=3)
        primary.signal(signal.SIGKILL)
        new = remote.primary(exclude=primary.node_id)
        tasks = [client.wait(t) for t in ids]
    _each_step_ran_once(tasks, ledger)
    assert "adopting it from worker" in new.log_text()
    for t in ids:
        assert not any(
            e.event_type == "STEP_FAILED"  # type: ignore[attr-defined]
            for e in _events(remote, t)
        )


def test_a_frozen_primary_costs_no_step_a_second_run(
    remote: Cluster, workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    """SIGSTOP of the primary: its sockets stay open, so the kernel tells the workers
    nothing. The primary pings its streams and a worker that hears nothing for four
    intervals goes to find the new primary, before the heartbeat timeout there runs
    out: the running steps are adopted, not lost and run again."""
    primary = remote.primary()
    w = workers("w1", "--slots", "8")
    _until("w1", _connected(primary, "w1"))
    ledger = tmp_path / "ledger"
    with SyncClient(remote.endpoints) as client:
        ids = _running_etl(client, ledger, 4, step_seconds=6)
        primary.signal(signal.SIGSTOP)
        try:
            new = remote.primary(exclude=primary.node_id)
            tasks = [client.wait(t, timeout=120) for t in ids]
        finally:
            primary.signal(signal.SIGCONT)
    _each_step_ran_once(tasks, ledger)
    assert "adopting it from worker" in new.log_text()
    assert f"the primary {primary.node_id} said nothing for" in w.log_text()


def test_a_worker_given_a_standby_finds_the_primary(
    remote: Cluster, workers: Callable[..., WorkerProc]
) -> None:
    primary = remote.primary()
    standby = next(m for m in remote.members if m is not primary)
    workers("w1", servers=standby.address)
    _until("the redirect", _connected(primary, "w1"))
    assert "worker w1 connected" not in standby.log_text()


def test_a_standby_answers_every_registration_with_the_primarys_address(
    remote: Cluster,
) -> None:
    """Found against a cluster: about one registration in ten sent to a standby was
    answered INTERNAL ("Internal error from Core"), not FAILED_PRECONDITION naming
    the primary: the standby refused as the stream opened, and grpc.aio's client
    reports INTERNAL for a write (the Register) that meets the stream's end
    (grpc/grpc#36066). Each try is a new connection, as a worker's first is."""
    primary = remote.primary()
    standby = next(m for m in remote.members if m is not primary)
    _until("the standby knows the primary", lambda: "standby: following" in standby.log_text())
    answers = asyncio.run(_registrations(standby.address, 100))
    assert answers == Counter({("FAILED_PRECONDITION", primary.address): 100})


async def _registrations(address: str, n: int) -> Counter[tuple[str, str | None]]:
    """Register `n` times at `address`, each on a new channel: (status, leader) counted."""
    answers: Counter[tuple[str, str | None]] = Counter()
    for i in range(n):
        async with grpc.aio.insecure_channel(address) as channel:
            call = wpbg.WorkersStub(channel).Connect()
            register = wpb.Register(
                name=f"w{i}",
                instance=f"i{i}",
                slots=1,
                workflows=[wpb.WorkflowRef(name="etl", version=1)],
            )
            try:
                await call.write(wpb.WorkerMessage(register=register))
                await asyncio.wait_for(call.read(), 10)
            except grpc.aio.AioRpcError as e:
                leader = dict(e.trailing_metadata() or ()).get(LEADER_METADATA)
                answers[(e.code().name, None if leader is None else str(leader))] += 1
            else:
                answers[("registered", None)] += 1
    return answers


def test_a_forged_worker_name_after_a_failover_is_refused_and_its_result_not_applied(
    secure_remote: Secured, tmp_path: Path
) -> None:
    """Found from outside against a secure cluster: a worker's name was self-declared.
    After a failover, a holder of any worker token (mallory's) who registered first
    under w1's name, reporting w1's running attempt by its token (which any reader
    reads in GetEvents), was adopted in w1's place and its result applied. w1 is
    stopped over the failover, so that the forger is first."""
    c, pki = secure_remote.cluster, secure_remote.pki
    primary = c.primary()
    token_file = tmp_path / "w1.token"
    token_file.write_text(secure_remote.workers["w1"])
    ca = str(pki.dir / "ca.pem")
    w1 = WorkerProc(
        tmp_path, "w1", c.endpoints, "--slots", "1", "--ca", ca, "--token-file", str(token_file)
    )
    try:
        _until("w1", _connected(primary, "w1"))
        ledger = tmp_path / "ledger"
        with SyncClient(c.endpoints) as client:
            task_id = client.submit("etl", {"step_seconds": 3, "ledger": str(ledger)}).task_id
            _until("collect running on w1", lambda: len(_lines(ledger)) >= 1)
        with SyncClient(c.endpoints, token=pki.tokens["reader"]) as reader:
            [started] = [
                e for e in reader.events(task_id=task_id)[0] if e.event_type == "STEP_STARTED"
            ]
        w1.signal(signal.SIGSTOP)
        primary.signal(signal.SIGKILL)
        others = [m.address for m in c.members if m is not primary]
        creds = grpc.ssl_channel_credentials(pki.pem("ca.pem"))
        answer = asyncio.run(_forge(others, creds, secure_remote.workers["mallory"], started))
        w1.signal(signal.SIGCONT)
        with SyncClient(c.endpoints) as client:
            task = client.wait(task_id, timeout=120)
    finally:
        w1.stop()
    code, details = answer
    assert code == "PERMISSION_DENIED", answer
    assert "'w1'" in details and "'mallory'" in details, details
    assert task.state == "SUCCEEDED"
    assert [s.result for s in task.steps if "forged" in str(s.result)] == []


async def _forge(
    endpoints: list[str], creds: grpc.ChannelCredentials, token: str, started: Any
) -> tuple[str, str]:
    """Register as w1 with mallory's token wherever a primary takes it, reporting the
    attempt `started` running, and send a forged result for it: (status, details) of
    the registration's refusal, or ("registered", what the ack said)."""
    attempt = wpb.RunningAttempt(
        token=wpb.AttemptToken(term=started.term, event_id=started.event_id),
        task_id=started.task_id,
        step=started.step_name,
        attempt=started.attempt,
    )
    register = wpb.Register(
        name="w1",
        instance="forger",
        slots=1,
        workflows=[wpb.WorkflowRef(name="etl", version=1)],
        running=[attempt],
    )
    metadata = (("authorization", f"Bearer {token}"),)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for address in endpoints:
            async with grpc.aio.secure_channel(address, creds) as channel:
                call = wpbg.WorkersStub(channel).Connect(metadata=metadata)
                try:
                    await call.write(wpb.WorkerMessage(register=register))
                    await asyncio.wait_for(call.read(), 5)
                    forged = wpb.StepResult(
                        token=attempt.token,
                        task_id=attempt.task_id,
                        step=attempt.step,
                        attempt=attempt.attempt,
                        result_json=b'{"forged": true}',
                    )
                    await call.write(wpb.WorkerMessage(results=wpb.Results(results=[forged])))
                    return ("registered", await _ack(call))
                except grpc.aio.AioRpcError as e:
                    if e.code() is grpc.StatusCode.PERMISSION_DENIED:
                        return (e.code().name, e.details() or "")
                except TimeoutError:
                    pass
        await asyncio.sleep(0.02)
    raise AssertionError("no node took or refused the forged registration")


async def _ack(call: Any) -> str:
    """The next acknowledgement on `call` (the primary's pings are empty Acks)."""
    while True:
        m = await asyncio.wait_for(call.read(), 5)
        if m.WhichOneof("body") == "acks" and (m.acks.acks or m.acks.accepted_event_ids):
            return str(m.acks)


def test_cancel_kills_a_step_in_its_child_process(
    remote: Cluster, workers: Callable[..., WorkerProc], tmp_path: Path
) -> None:
    primary = remote.primary()
    w = workers("w1", "--isolation", "process", "--slots", "1")
    _until("w1", _connected(primary, "w1"))
    ledger = tmp_path / "ledger"
    with SyncClient(remote.endpoints) as client:
        task_id = client.submit("etl", {"step_seconds": 600, "ledger": str(ledger)}).task_id
        _until("the step running", lambda: len(_lines(ledger)) >= 1)
        # forkserver: the worker's children are the server (and a resource tracker);
        # the attempts are the server's children
        children = _grandchildren(w.proc.pid)
        assert children, "the step runs in a child process"
        client.cancel(task_id, reason="test")
        task = client.wait(task_id, check=False)
    assert task.state == "CANCELLED"
    _until("the child killed", lambda: not set(children) & set(_grandchildren(w.proc.pid)), 30)
    assert w.proc.poll() is None, "the worker itself goes on"
    assert len(_lines(ledger)) == 1


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry))
    return out


def _grandchildren(pid: int) -> list[int]:
    return [g for c in _children(pid) for g in _children(c)]
