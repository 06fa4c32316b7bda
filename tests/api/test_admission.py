"""Overload is refused, not queued without bound: past max_pending_writes
submissions waiting to commit, or max_tasks_in_memory unfinished tasks, the
primary answers RESOURCE_EXHAUSTED with a retry hint, and the node stays up."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import grpc
import pytest

from apollo11.scheduler.api.limits import Admission
from apollo11.scheduler.errors import ResourceExhaustedError
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg
from tests.nodes import start_node

NO_DRAIN = {"APOLLO11_DRAIN_TIMEOUT": "0"}  # the parked steps are not waited for at the stop


async def _flood(address: str, clients: int, seconds: float) -> tuple[dict[str, int], list[str]]:
    codes: dict[str, int] = {}
    pushback: list[str] = []
    async with grpc.aio.insecure_channel(address) as ch:
        stub = pbg.SchedulerStub(ch)
        stop = asyncio.get_running_loop().time() + seconds

        async def one(k: int) -> None:
            i = 0
            while asyncio.get_running_loop().time() < stop:
                i += 1
                req = pb.SubmitTaskRequest(
                    workflow="etl", input_json='{"step_seconds": 3600}', idempotency_key=f"{k}-{i}"
                )
                try:
                    await stub.SubmitTask(req, timeout=30)
                    codes["OK"] = codes.get("OK", 0) + 1
                except grpc.aio.AioRpcError as e:
                    codes[e.code().name] = codes.get(e.code().name, 0) + 1
                    if e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED:
                        for key, value in e.trailing_metadata() or ():
                            if key == "grpc-retry-pushback-ms":
                                pushback.append(str(value))
                        if len(pushback) == 1:
                            pushback.append(e.details() or "")
                        await asyncio.sleep(0.05)

        await asyncio.gather(*(one(k) for k in range(clients)))
    return codes, pushback


async def test_unfinished_tasks_past_the_limit_are_refused(tmp_path: Path) -> None:
    # Every task parks on an hour-long step: they pile up as a real overload would.
    node = start_node(tmp_path / "d", "--max-tasks-in-memory", "300", env=NO_DRAIN)
    try:
        codes, pushback = await _flood(node.address, 16, 6)
        assert node.alive()
    finally:
        node.stop()
    assert codes.get("RESOURCE_EXHAUSTED", 0) > 0, codes
    assert 250 <= codes.get("OK", 0) <= 300, codes  # nothing past the limit
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, codes
    assert any(p.isdigit() and int(p) > 0 for p in pushback), pushback
    assert any("max_tasks_in_memory" in p for p in pushback), pushback


async def test_writes_waiting_to_commit_past_the_limit_are_refused(tmp_path: Path) -> None:
    node = start_node(tmp_path / "d", "--max-pending-writes", "4", env=NO_DRAIN)
    try:
        codes, pushback = await _flood(node.address, 64, 4)
        assert node.alive()
    finally:
        node.stop()
    assert codes.get("RESOURCE_EXHAUSTED", 0) > 0 and codes.get("OK", 0) > 0, codes
    assert any("max_pending_writes" in p for p in pushback), pushback


def test_submissions_waiting_for_their_commit_count_against_the_task_limit() -> None:
    """Each checked the tasks already in memory only: a flood with a thousand calls in
    flight took a node 1,018 tasks past max_tasks_in_memory (bench overload)."""
    admission = Admission(100, 10, lambda: 5)
    with contextlib.ExitStack() as waiting:
        for _ in range(5):
            waiting.enter_context(admission.admit(1))
        with pytest.raises(ResourceExhaustedError, match="max_tasks_in_memory"):
            waiting.enter_context(admission.admit(1))
    with admission.admit(5):  # committed and gone from the count: room again
        pass
