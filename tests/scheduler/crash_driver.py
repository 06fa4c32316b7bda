"""A node process for the crash tests: submits `etl` tasks (idempotently) and runs them.

    python -m tests.scheduler.crash_driver DATA_DIR LEDGER N_TASKS STEP_SECONDS

Restarted on the same data directory it submits the same idempotency keys,
gets the same tasks back, and resumes them.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.node import Node


async def main(data_dir: str, ledger: str, n: int, step_seconds: float) -> None:
    node = Node(
        NodeSettings(
            node_id=f"n{os.getpid()}",
            data_dir=Path(data_dir),
            listen="127.0.0.1:0",  # not the default port: other suites run on this machine
            workflows=["apollo11.scheduler.examples"],
            snapshot_interval=40,
            segment_max_bytes=16 * 1024,
            concurrency=8,
        )
    )
    print(await node.start(), flush=True)
    assert node.engine is not None
    ids = []
    for i in range(n):
        sub = await node.engine.submit(
            "etl", {"step_seconds": step_seconds, "ledger": ledger}, idempotency_key=f"job-{i}"
        )
        ids.append(sub.task_id)
    print("SUBMITTED", flush=True)
    for task_id in ids:
        await node.engine.wait(task_id)
    print("ALL DONE", flush=True)
    await node.stop()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
