"""A real node in this process, for the primary's half of remote execution."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.log import FsyncPolicy
from apollo11.scheduler.node import Node

FLOWS = "tests.scheduler.dispatch.flows"


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Node]]]:
    """Start a node (n1, remote execution, a data directory of the test's): call it
    again after a stop for the same node restarted."""
    nodes: list[Node] = []

    async def make(**settings: Any) -> Node:
        settings.setdefault("data_dir", tmp_path / "data")
        settings.setdefault("execution", "remote")
        n = Node(
            NodeSettings(
                node_id="n1",
                listen="127.0.0.1:0",
                workflows=[FLOWS],
                fsync=FsyncPolicy.UNSAFE_NEVER,
                worker_heartbeat_interval=0.2,
                worker_heartbeat_timeout=1.0,
                **settings,
            )
        )
        await n.start()
        nodes.append(n)
        return n

    yield make
    for n in nodes:
        if n.role != "stopped":
            await n.stop()
