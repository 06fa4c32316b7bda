"""A node's graceful stop ends its own tasks even when one loses its cancellation,
as grpc.aio can (scheduler/cancelling.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.node import Node
from tests.deaf import deaf_once


async def test_a_task_that_loses_its_cancellation_does_not_hang_the_stop(tmp_path: Path) -> None:
    """Before: `stop()` cancelled each task once and awaited it: a task that lost the
    cancellation kept the stop waiting for ever."""
    node = Node(NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0"))
    await node.start()
    node._spawn(deaf_once(), "apollo11-deaf")
    await asyncio.sleep(0.05)  # it waits, and will swallow the first cancellation
    async with asyncio.timeout(30):
        assert await node.stop() == "stopped"
    assert all(t.done() for t in node._tasks)
