"""One client, several event loops (issue 33, part 4g: mixing the sync and async
clients once printed grpc's "Event loop is closed" traceback).

A grpc.aio channel belongs to the loop it was made on. An AsyncClient made in one
`asyncio.run` and used in the next (a module-level client, pytest-asyncio's loop per
test) raised "Event loop is closed" and left grpc's "coroutine was never awaited"
warning: it makes its channels again on the loop that calls it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from apollo11.scheduler.client import Client, SyncClient
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg


class _Accepts(pbg.SchedulerServicer):
    def SubmitTask(self, request: Any, context: Any) -> Any:
        return pb.SubmitTaskResponse(task_id="t1", created=True, event_id=1)


@pytest.fixture
def address() -> Iterator[str]:
    """A node that takes every submission, served from threads (no event loop)."""
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    pbg.add_SchedulerServicer_to_server(_Accepts(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def test_an_async_client_serves_one_asyncio_run_after_another(address: str) -> None:
    c = Client(address)

    async def submit() -> str:
        return (await c.submit("etl", {})).task_id

    assert asyncio.run(submit()) == "t1"
    assert asyncio.run(submit()) == "t1"  # was: RuntimeError: Event loop is closed
    with SyncClient(address) as s:
        assert s.submit("etl", {}).task_id == "t1"
    assert asyncio.run(submit()) == "t1"
    asyncio.run(c.close())


def test_mixing_the_clients_prints_nothing(address: str) -> None:
    probe = f"""
import asyncio
from apollo11 import AsyncClient, Client
c = AsyncClient({address!r})
async def submit():
    return (await c.submit("etl", {{}})).task_id
with Client({address!r}) as s:
    s.submit("etl", {{}})
print(asyncio.run(submit()), asyncio.run(submit()))
with Client({address!r}) as s:
    s.submit("etl", {{}})
asyncio.run(c.close())
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "t1 t1\n", "")
