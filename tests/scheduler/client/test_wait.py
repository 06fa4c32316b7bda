"""wait() raises on FAILED and CANCELLED (carrying the task) and after its timeout;
result() returns what the task produced. A real node in its own process."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from apollo11.scheduler.client import Client, SyncClient, TaskCancelled, TaskFailed
from tests.nodes import NodeProc, start_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    n = start_node(tmp_path_factory.mktemp("wait") / "n1")
    yield n
    n.stop()


def test_wait_raises_on_failure_and_cancel_and_result_returns_the_results(
    node: NodeProc,
) -> None:
    with SyncClient(node.address) as c:
        ok = c.submit("etl", {"step_seconds": 0}).task_id
        results = c.result(ok)
        assert set(results) == {"collect", "clean", "feature", "infer", "persist"}
        assert results["persist"]["rows"] == 500
        bad = c.submit("etl", {"step_seconds": 0, "fail_step": "clean", "fail_times": 9})
        with pytest.raises(TaskFailed, match=r"ended FAILED: step clean: RuntimeError") as e:
            c.wait(bad.task_id)
        assert e.value.task.task_id == bad.task_id and e.value.task.state == "FAILED"
        assert c.wait(bad.task_id, check=False).state == "FAILED"
        slow = c.submit("etl", {"step_seconds": 30}).task_id
        with pytest.raises(TimeoutError):
            c.wait(slow, timeout=0.5)
        c.cancel(slow, reason="not today", operator="ana")
        with pytest.raises(TaskCancelled, match=r"was cancelled by .*: not today") as cancelled:
            c.result(slow)
        assert cancelled.value.task.state == "CANCELLED"


async def test_the_async_client_alike(node: NodeProc) -> None:
    async with Client(node.address) as c:
        sub = await c.submit("etl", {"step_seconds": 0})
        assert (await c.wait(sub.task_id, timeout=60)).state == "SUCCEEDED"
        assert (await c.result(sub.task_id))["persist"]["rows"] == 500
        bad = await c.submit("etl", {"step_seconds": 0, "fail_step": "clean", "fail_times": 9})
        with pytest.raises(TaskFailed, match=r"ended FAILED: step clean: RuntimeError") as e:
            await c.wait(bad.task_id, timeout=60)
        assert e.value.task.task_id == bad.task_id and e.value.task.state == "FAILED"
        slow = (await c.submit("etl", {"step_seconds": 30})).task_id
        with pytest.raises(TimeoutError):
            await c.wait(slow, timeout=0.5)
        await c.cancel(slow, reason="not today", operator="ana")
        with pytest.raises(TaskCancelled, match=r"was cancelled by .*: not today") as cancelled:
            await c.result(slow)
        assert cancelled.value.task.state == "CANCELLED"
