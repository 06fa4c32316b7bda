"""Steps held to their limits on a real `apollo11 worker` process (issue 32, part 3):
a step past its memory or CPU seconds fails with its cause, while another step on the
same worker finishes, and the worker lives on."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from apollo11.scheduler.cause import mro_names
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.steplimits import CpuLimitExceeded, MemoryLimitExceeded
from apollo11.v1 import worker_pb2 as pb
from tests.nodes import APOLLO11, start_node
from tests.scheduler.worker.fake import WAIT_S, Conn, FakePrimary, assignment, serving

ROOT = Path(__file__).resolve().parents[3]
FLOWS = "tests.scheduler.worker.limit_flows"
MEMORY_MRO = [
    "apollo11.MemoryLimitExceeded",
    "apollo11.StepLimitExceeded",
    "builtins.MemoryError",
    "builtins.Exception",
    "builtins.BaseException",
]
CPU_MRO = [
    "apollo11.CpuLimitExceeded",
    "apollo11.StepLimitExceeded",
    "builtins.Exception",
    "builtins.BaseException",
]


class WorkerUnderTest:
    def __init__(self, proc: asyncio.subprocess.Process, conn: Conn) -> None:
        self.proc = proc
        self.conn = conn

    async def result(self, a: pb.Assignment) -> pb.StepResult:
        """`a`'s result, acknowledged (else the worker's drain waits for the ack)."""
        r = await self.conn.result(a.token)
        await self.conn.ack(a.token)
        return r


async def _worker(primary: FakePrimary, address: str, *extra: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "apollo11.scheduler.cli",
        "worker",
        "--server",
        address,
        "--workflows",
        FLOWS,
        "--name",
        "limits-w",
        "--slots",
        "2",
        *extra,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.fixture
async def worker(request: pytest.FixtureRequest) -> AsyncIterator[WorkerUnderTest]:
    extra: tuple[str, ...] = getattr(request, "param", ())
    primary = FakePrimary()
    async with serving(primary) as address:
        proc = await _worker(primary, address, *extra)
        try:
            yield WorkerUnderTest(proc, await primary.next_conn())
            assert proc.returncode is None, "the worker lives on"
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    async with asyncio.timeout(WAIT_S):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            assert proc.stderr is not None
            logged = (await proc.stderr.read()).decode()
            # the worker says once how it holds steps' memory, and why
            assert "step memory limits: " in logged, logged


async def test_a_step_past_its_memory_fails_while_another_finishes(
    worker: WorkerUnderTest,
) -> None:
    conn = worker.conn
    hog, light = (
        assignment("hog", 1, workflow="wlimits"),
        assignment("light", 2, workflow="wlimits"),
    )
    await conn.assign(hog, light)
    r = await worker.result(light)
    assert orjson.loads(r.result_json)["kept"] == 8 << 20
    r = await worker.result(hog)
    assert r.failure.error_type == "MemoryLimitExceeded", r.failure.message
    assert list(r.failure.mro) == MEMORY_MRO == list(mro_names(MemoryLimitExceeded))
    assert "past its memory limit of 128 MiB" in r.failure.message
    # the worker goes on: the same slot runs the next attempt
    again = assignment("light", 3, workflow="wlimits")
    await conn.assign(again)
    assert orjson.loads((await worker.result(again)).result_json)["kept"] == 8 << 20
    assert worker.proc.returncode is None


async def test_a_step_past_its_cpu_seconds_fails_while_another_finishes(
    worker: WorkerUnderTest,
) -> None:
    conn = worker.conn
    spin, light = (
        assignment("spin", 4, workflow="wlimits"),
        assignment("light", 5, workflow="wlimits"),
    )
    await conn.assign(spin, light)
    assert orjson.loads((await worker.result(light)).result_json)["kept"] == 8 << 20
    r = await worker.result(spin)
    assert r.failure.error_type == "CpuLimitExceeded", r.failure.message
    assert list(r.failure.mro) == CPU_MRO == list(mro_names(CpuLimitExceeded))
    assert "used its 1 CPU seconds (RLIMIT_CPU)" in r.failure.message
    assert worker.proc.returncode is None


@pytest.mark.parametrize("worker", [("--step-memory", "96MiB")], indirect=True)
async def test_step_memory_holds_a_step_that_declares_no_limits(worker: WorkerUnderTest) -> None:
    conn = worker.conn
    a = assignment("unlimited_hog", 6, workflow="wlimits")
    small = assignment("unlimited_hog", 7, workflow="wlimits", task_id="t2", input={"chunks": 2})
    await conn.assign(a, small)
    r = await worker.result(a)
    assert r.failure.error_type == "MemoryLimitExceeded", r.failure.message
    assert "of 96 MiB" in r.failure.message
    assert orjson.loads((await worker.result(small)).result_json) == 2


def test_real_node_and_worker_processes_record_the_cause_and_its_rule(tmp_path: Path) -> None:
    """All of it as deployed: `apollo11 node --execution remote` and `apollo11 worker`,
    the task submitted and read back through the client. The FAILED events carry the
    limits' causes with their MRO and the rule that named them; the step beside them
    succeeds; the worker is still there afterwards."""
    node = start_node(
        tmp_path / "d",
        "--execution",
        "remote",
        "--workflows",
        f"apollo11.scheduler.examples,{FLOWS}",
    )
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        w = subprocess.Popen(
            [*APOLLO11, "worker", "--server", node.address, "--workflows", FLOWS, "--slots", "3"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    try:
        with SyncClient(node.address) as client:
            task_id = client.submit("fenced", None).task_id
            task = client.wait(task_id, check=False, timeout=60)
            events, _ = client.events(task_id=task_id, limit=1000)
        assert w.poll() is None, "the worker lives on"
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(WAIT_S)
        node.stop()
    assert task.state == "FAILED"
    failed = {e.step_name: e.payload for e in events if e.event_type == "STEP_FAILED"}
    assert set(failed) == {"hog", "spin"}, log.read_text()
    assert failed["hog"]["cause"]["mro"] == MEMORY_MRO
    assert (failed["hog"]["rule"], failed["hog"]["final"]) == ("apollo11.MemoryLimitExceeded", True)
    assert failed["spin"]["cause"]["mro"] == CPU_MRO
    assert failed["spin"]["rule"] == "apollo11.CpuLimitExceeded"
    succeeded = [e.step_name for e in events if e.event_type == "STEP_SUCCEEDED"]
    assert succeeded == ["light"]
