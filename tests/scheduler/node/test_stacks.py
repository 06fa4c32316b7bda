"""SIGUSR1: a node logs every asyncio task's stack and every thread's, and goes on."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

from apollo11.scheduler.node.stacks import task_stacks
from tests.nodes import start_node


def test_a_node_sent_sigusr1_logs_the_role_loops_stack_and_goes_on(tmp_path: Path) -> None:
    node = start_node(tmp_path / "d").drained()
    try:
        node.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while "task 'apollo11-role'" not in (text := "".join(node.lines)):
            assert time.monotonic() < deadline, text[-3000:]
            time.sleep(0.05)
        role = text[text.index("task 'apollo11-role'") :].split("\ntask ")[0]
        assert "roleloop.py" in role and "in run" in role, role  # its chain of awaits
        assert "Current thread" in text or "Thread 0x" in text, text  # faulthandler's
        assert node.alive()
    finally:
        assert node.stop() == 0, "".join(node.lines)[-3000:]


async def test_a_tasks_stack_goes_down_to_the_await_it_waits_in() -> None:
    never = asyncio.Event()

    async def inner() -> None:
        await never.wait()

    async def outer() -> None:
        await inner()

    task = asyncio.create_task(outer(), name="stuck")
    await asyncio.sleep(0)
    try:
        text = task_stacks()
        stuck = text[text.index("task 'stuck'") :].split("\ntask ")[0]
        assert "in outer" in stuck and "in inner" in stuck and "in wait" in stuck, stuck
        assert "waiting on <Future pending" in stuck, stuck
    finally:
        task.cancel()
