"""The worker process against a fake primary on loopback (tests/scheduler/worker/fake.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest

from apollo11.scheduler.worker import Worker, WorkerRefusedError, default_name
from apollo11.scheduler.workflow import Registry
from tests.scheduler.worker import flows
from tests.scheduler.worker.fake import WAIT_S, FakePrimary, Refusal, assignment, key, serving

FLOWS = "tests.scheduler.worker.flows"


def registry() -> Registry:
    r = Registry()
    r.load_module(FLOWS)
    return r


@contextlib.asynccontextmanager
async def running(worker: Worker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def primary() -> AsyncIterator[FakePrimary]:
    p = FakePrimary()
    async with serving(p):
        yield p


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


async def _until(predicate: Any, what: str) -> None:
    async with asyncio.timeout(WAIT_S):
        while not predicate():
            await asyncio.sleep(0.02)  # polls a state that has no event to await
    assert predicate(), what


async def test_register_carries_workflows_slots_labels(primary: FakePrimary) -> None:
    worker = Worker(primary.address, registry(), name="w1", slots=3, labels={"zone": "a"})
    async with running(worker):
        conn = await primary.next_conn()
    reg = conn.register
    assert reg.name == "w1" and not reg.default_name
    assert reg.slots == 3
    assert dict(reg.labels) == {"zone": "a"}
    assert [(w.name, w.version) for w in reg.workflows] == [("wtest", 1)]
    assert reg.instance == worker.instance and len(reg.instance) == 32
    assert reg.version
    assert list(reg.running) == []


async def test_assign_result_ack_and_the_context_a_step_is_told(primary: FakePrimary) -> None:
    worker = Worker(primary.address, registry(), name="w1", slots=2)
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment(
            "echo",
            11,
            attempt=2,
            input={"x": 1},
            results={"before": [1, 2]},
            last_heartbeat={"done": 3},
        )
        b = assignment("sync_echo", 12)
        await conn.assign(a, b)
        ra, rb = await conn.result(a.token), await conn.result(b.token)
        told = orjson.loads(ra.result_json)
        assert told == {
            "input": {"x": 1},
            "results": {"before": [1, 2]},
            "worker": "w1",
            "node_id": "n1",
            "fencing_token": [3, 2],
            "last_heartbeat": {"done": 3},
            "workflow": ["wtest", 1],
            "pid": os.getpid(),
        }
        assert (ra.task_id, ra.step, ra.attempt) == ("t1", "echo", 2)
        assert ra.seconds >= 0
        sync_told = orjson.loads(rb.result_json)
        assert sync_told["input"] is None and sync_told["results"] == {}
        await conn.ack(a.token)
        await conn.ack(b.token, accepted=False, reason="not the current attempt")
        await _until(lambda: len(worker._outbox) == 0, "both acknowledged")


async def test_a_default_name_says_so_and_the_name_registered_is_the_workers(
    primary: FakePrimary,
) -> None:
    """On a node with authentication a worker left to its default name (HOST-PID) is
    registered beneath its credential's name: it asks for its default as such, and
    calls itself (and tells its steps) what the primary registered."""
    primary.registered_as = "etl/host-1"
    worker = Worker(primary.address, registry())
    async with running(worker):
        conn = await primary.next_conn()
        assert conn.register.default_name
        assert conn.register.name == default_name() == f"{socket.gethostname()}-{os.getpid()}"
        await _until(lambda: worker.name == "etl/host-1", "the registered name taken")
        a = assignment("echo", 13)
        await conn.assign(a)
        assert orjson.loads((await conn.result(a.token)).result_json)["worker"] == "etl/host-1"
        conn.drop()
        again = await primary.next_conn()  # it asks for the same again, a default still
        assert again.register.default_name and again.register.name == conn.register.name


async def test_failures_become_failure_results(primary: FakePrimary) -> None:
    worker = Worker(primary.address, registry(), name="w1", slots=2)
    async with running(worker):
        conn = await primary.next_conn()
        declared = assignment("declared", 1)
        crash = assignment("crash", 2)
        bad = assignment("unencodable", 3)
        missing = assignment("nope", 4)
        other = assignment("echo", 5, workflow="wtest", version=9)
        await conn.assign(declared, crash, bad, missing, other)
        r = await conn.result(declared.token)
        assert r.failure.declared and r.failure.error_type == "StepError"
        assert r.failure.message == "the card was declined"
        assert orjson.loads(r.failure.details_json) == {"code": 7}
        r = await conn.result(crash.token)
        assert (r.failure.error_type, r.failure.declared) == ("KeyError", False)
        r = await conn.result(bad.token)
        assert r.failure.error_type == "TypeError"
        for t in (missing.token, other.token):
            r = await conn.result(t)
            assert r.failure.error_type == "WorkflowNotFound"


THROTTLED_MRO = [
    f"{FLOWS}.Throttled",
    "apollo11.scheduler.workflow.StepError",
    "builtins.ConnectionError",
    "builtins.OSError",
    "builtins.Exception",
    "builtins.BaseException",
]


@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_a_failure_carries_its_classes_names_over_the_wire(
    primary: FakePrimary, isolation: str
) -> None:
    """The primary's retry rules match the exception's MRO: the worker sends the names,
    from the step's own process too."""
    worker = Worker(primary.address, registry(), name="w1", isolation=isolation)
    async with running(worker):
        conn = await primary.next_conn()
        a, b = assignment("throttled", 31), assignment("crash", 32)
        await conn.assign(a, b)
        r = await conn.result(a.token)
        assert list(r.failure.mro) == THROTTLED_MRO
        assert r.failure.error_type == "Throttled" and r.failure.declared
        assert orjson.loads(r.failure.details_json) == {"retry_after": 2.5}
        r = await conn.result(b.token)
        assert list(r.failure.mro) == [
            "builtins.KeyError",
            "builtins.LookupError",
            "builtins.Exception",
            "builtins.BaseException",
        ]


async def test_a_result_is_resent_after_a_reconnect_until_acknowledged(
    primary: FakePrimary,
) -> None:
    worker = Worker(primary.address, registry(), name="w1")
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment("echo", 21)
        await conn.assign(a)
        first = await conn.result(a.token)
        conn.drop()  # before the ack
        conn = await primary.next_conn()
        again = await conn.next()  # right after the Register
        assert again.WhichOneof("body") == "results"
        assert [key(r.token) for r in again.results.results] == [key(a.token)]
        assert again.results.results[0].result_json == first.result_json
        await conn.ack(a.token)
        await _until(lambda: len(worker._outbox) == 0, "acknowledged")
        conn.drop()
        conn = await primary.next_conn()
        assert (await conn.next()).WhichOneof("body") == "heartbeat"  # nothing resent


async def test_running_attempts_survive_a_lost_stream_and_are_reported(
    primary: FakePrimary, tmp_path: Path
) -> None:
    worker = Worker(primary.address, registry(), name="w1")
    release = tmp_path / "release"
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment(
            "wait_async", 31, input={"release": str(release), "cancelled": str(tmp_path / "c")}
        )
        await conn.assign(a)
        beat = await conn.heartbeat_with(a.token)
        assert orjson.loads(beat.heartbeat_json) == {"pid": os.getpid(), "progress": 0.5}
        conn.drop()
        conn = await primary.next_conn()
        [reported] = conn.register.running
        assert key(reported.token) == key(a.token)
        assert (reported.task_id, reported.step, reported.attempt) == ("t1", "wait_async", 1)
        assert orjson.loads(reported.heartbeat_json)["progress"] == 0.5
        release.touch()
        r = await conn.result(a.token)
        assert orjson.loads(r.result_json) == "released"


async def test_cancel_of_a_coroutine_step(primary: FakePrimary, tmp_path: Path) -> None:
    worker = Worker(primary.address, registry(), name="w1")
    async with running(worker):
        conn = await primary.next_conn()
        marker = tmp_path / "cancelled"
        a = assignment(
            "wait_async", 41, input={"release": str(tmp_path / "r"), "cancelled": str(marker)}
        )
        await conn.assign(a)
        await conn.heartbeat_with(a.token)
        await conn.cancel(a.token, "operator")
        r = await conn.result(a.token)
        assert r.WhichOneof("outcome") == "cancelled" and r.cancelled
        assert marker.read_text() == "cancelled"
        assert worker.running == []


async def test_cancel_of_a_thread_step_waits_for_it(primary: FakePrimary, tmp_path: Path) -> None:
    worker = Worker(primary.address, registry(), name="w1")
    release = tmp_path / "r"
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment("wait_sync", 42, input={"release": str(release)})
        await conn.assign(a)
        await conn.heartbeat_with(a.token)
        await conn.cancel(a.token)
        # still running: a thread cannot be interrupted, and no result is sent before it ends
        beat = await conn.next("heartbeat")
        assert [key(r.token) for r in beat.heartbeat.running] == [key(a.token)]
        release.touch()
        r = await conn.result(a.token)
        assert r.cancelled


async def test_cancel_of_a_process_isolated_step_kills_the_child(
    primary: FakePrimary, tmp_path: Path
) -> None:
    worker = Worker(primary.address, registry(), name="w1", isolation="process")
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment("wait_sync", 51, input={"release": str(tmp_path / "never")})
        await conn.assign(a)
        beat = await conn.heartbeat_with(a.token)
        pid = orjson.loads(beat.heartbeat_json)["pid"]
        assert pid != os.getpid() and _alive(pid)
        await conn.cancel(a.token)
        r = await conn.result(a.token)
        assert r.cancelled
        assert not _alive(pid)


async def test_a_child_that_dies_fails_its_attempt_and_the_worker_goes_on(
    primary: FakePrimary,
) -> None:
    worker = Worker(primary.address, registry(), name="w1", isolation="process")
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment("die", 61)
        await conn.assign(a)
        r = await conn.result(a.token)
        assert r.failure.error_type == "ChildProcessDied"
        assert "exit code 9" in r.failure.message
        b = assignment("echo", 62, input={"after": "death"})
        await conn.assign(b)
        r = await conn.result(b.token)
        told = orjson.loads(r.result_json)
        assert told["input"] == {"after": "death"} and told["pid"] != os.getpid()


async def test_a_process_isolated_step_reports_like_one_in_process(primary: FakePrimary) -> None:
    worker = Worker(primary.address, registry(), name="w1", isolation="process")
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment("declared", 71)
        await conn.assign(a)
        r = await conn.result(a.token)
        assert r.failure.declared and orjson.loads(r.failure.details_json) == {"code": 7}


async def test_a_standby_redirect_is_followed_to_the_named_primary(primary: FakePrimary) -> None:
    standby = FakePrimary(node_id="n2")
    async with serving(standby):
        standby.refuse = Refusal(
            grpc.StatusCode.FAILED_PRECONDITION, "not the primary", leader=primary.address
        )
        worker = Worker(standby.address, registry(), name="w1")
        async with running(worker):
            conn = await primary.next_conn()
            assert conn.register.name == "w1"
            assert standby.refused >= 1
            await _until(lambda: worker.connected is not None, "registered")
            assert worker.connected is not None and worker.connected.node_id == "n1"


async def test_stale_attempts_are_stopped_and_forgotten(
    primary: FakePrimary, tmp_path: Path
) -> None:
    worker = Worker(primary.address, registry(), name="w1")
    marker = tmp_path / "cancelled"
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment(
            "wait_async", 81, input={"release": str(tmp_path / "r"), "cancelled": str(marker)}
        )
        await conn.assign(a)
        await conn.heartbeat_with(a.token)
        primary.stale = [a.token]
        conn.drop()
        conn = await primary.next_conn()
        assert [key(r.token) for r in conn.register.running] == [key(a.token)]
        await _until(marker.exists, "the stale attempt was cancelled")
        await _until(lambda: worker.running == [], "and forgotten")
        # nothing is reported for it: the next messages are heartbeats with nothing running
        for _ in range(2):
            m = await conn.next()
            assert m.WhichOneof("body") == "heartbeat", m
            assert list(m.heartbeat.running) == []


async def test_a_configuration_error_ends_the_worker(primary: FakePrimary) -> None:
    primary.refuse = Refusal(grpc.StatusCode.PERMISSION_DENIED, "the token has no worker role")
    worker = Worker(primary.address, registry(), name="w1")
    with pytest.raises(WorkerRefusedError, match="no worker role"):
        async with asyncio.timeout(WAIT_S):
            await worker.run()


async def test_stop_hands_back_running_attempts(primary: FakePrimary, tmp_path: Path) -> None:
    worker = Worker(primary.address, registry(), name="w1")
    task = asyncio.create_task(worker.run())
    conn = await primary.next_conn()
    a = assignment(
        "wait_async", 91, input={"release": str(tmp_path / "r"), "cancelled": str(tmp_path / "c")}
    )
    await conn.assign(a)
    await conn.heartbeat_with(a.token)
    stopping = asyncio.create_task(worker.stop(grace_s=0.1))
    r = await conn.result(a.token)
    assert r.cancelled
    await conn.ack(a.token)
    async with asyncio.timeout(WAIT_S):
        await stopping
        await task
    assert task.done() and task.exception() is None
    assert flows.wf.name == "wtest"


async def test_the_timeout_is_enforced_here_when_the_primary_does_not(
    primary: FakePrimary, tmp_path: Path
) -> None:
    worker = Worker(primary.address, registry(), name="w1", timeout_grace_s=0.1)
    marker = tmp_path / "cancelled"
    async with running(worker):
        conn = await primary.next_conn()
        a = assignment(
            "wait_async",
            95,
            timeout_s=0.2,
            input={"release": str(tmp_path / "r"), "cancelled": str(marker)},
        )
        await conn.assign(a)
        r = await conn.result(a.token)
        assert r.failure.error_type == "TimeoutError"
        assert r.failure.mro[0] == "builtins.TimeoutError", "the rules' TimeoutError"
        assert "timeout of 0.2 s" in r.failure.message
        assert marker.exists()


async def test_a_duplicate_name_is_retried_until_the_other_is_gone(
    primary: FakePrimary,
) -> None:
    primary.refuse = Refusal(grpc.StatusCode.ALREADY_EXISTS, "w1 is connected from another")
    worker = Worker(primary.address, registry(), name="w1")
    async with running(worker):
        await _until(lambda: primary.refused >= 1, "refused once")
        primary.refuse = None  # the ghost timed out
        conn = await primary.next_conn()
        assert conn.register.name == "w1"
        assert primary.refused == 1  # slowly: not a second time within the delay


async def test_an_endpoint_that_is_down_is_passed_over(primary: FakePrimary) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    worker = Worker([dead, primary.address], registry(), name="w1")
    async with running(worker):
        conn = await primary.next_conn()
        assert conn.register.name == "w1"


@contextlib.asynccontextmanager
async def _frozen_primary_and_standbys() -> AsyncIterator[tuple[FakePrimary, ...]]:
    """A primary that pings (then freezes, as a SIGSTOPped process) and two standbys."""
    a = FakePrimary(node_id="n1", pings=True, interval_s=0.1)
    b, c = FakePrimary(node_id="n2"), FakePrimary(node_id="n3")
    async with serving(a), serving(b), serving(c):
        yield a, b, c


async def test_a_frozen_primary_is_not_tried_while_an_election_is_under_way() -> None:
    """The worker hears nothing from its primary and goes to the standbys, which say
    an election is under way for longer than the frozen one's passes: it is not
    tried again (a try waits for an answer that never comes), and the worker is with
    the new primary as soon as there is one."""
    async with _frozen_primary_and_standbys() as (a, b, c):
        no_primary = Refusal(grpc.StatusCode.UNAVAILABLE, "no primary is known", election=True)
        worker = Worker([a.address, b.address, c.address], registry(), name="w1")
        async with running(worker):
            await a.next_conn()
            b.refuse = c.refuse = no_primary
            a.frozen = True
            await _until(lambda: b.refused + c.refused >= 12, "the standbys asked, often")
            b.refuse = None
            conn = await b.next_conn()
    assert conn.register.name == "w1"
    assert a.frozen_streams == 0


async def test_a_frozen_primary_tried_again_costs_the_worker_little() -> None:
    """The standbys still name the frozen primary (its lease has not lapsed): after
    its passes the worker tries it again, and gives up on it soon, not after its
    connect timeout (60 s here), so it reaches the new primary within the time that
    one waits for its workers."""
    async with _frozen_primary_and_standbys() as (a, b, c):
        worker = Worker(
            [a.address, b.address, c.address], registry(), name="w1", connect_timeout_s=60.0
        )
        async with running(worker):
            await a.next_conn()
            b.refuse = c.refuse = Refusal(
                grpc.StatusCode.FAILED_PRECONDITION, "not the primary", leader=a.address
            )
            a.frozen = True
            await _until(lambda: a.frozen_streams >= 1, "the frozen one tried again")
            c.refuse = Refusal(
                grpc.StatusCode.FAILED_PRECONDITION, "not the primary", leader=b.address
            )
            b.refuse = None
            conn = await b.next_conn()
    assert conn.register.name == "w1"
