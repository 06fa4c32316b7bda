"""A client that cannot reach any node says so within its connect deadline, instead
of retrying for its whole failover budget (issue 19: a dead endpoint took 7-8 s)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest

from apollo11.scheduler.client import Client, UnavailableError


@pytest.fixture
def refused() -> str:
    """An address where nothing listens: connection refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def silent() -> Iterator[str]:
    """A port that takes the TCP connection and never answers (a hung process, a
    firewall that drops): only a deadline ends the wait."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("where", ["refused", "silent"])
async def test_no_node_reachable_fails_within_the_connect_deadline(
    where: str, request: pytest.FixtureRequest
) -> None:
    address = request.getfixturevalue(where)
    async with Client(address, connect_timeout_s=0.5) as c:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError) as e:
            await c.status()
        took = time.monotonic() - t0
    assert f"cannot reach any node ({address}) within 0.5s" in str(e.value)
    # the whole failover budget (6 rounds, backoff to 3 s) took 7-9 s here
    assert took < 3.0, f"took {took:.1f}s"


def test_the_connect_deadline_is_checked() -> None:
    with pytest.raises(ValueError, match="connect_timeout_s must be > 0"):
        Client("127.0.0.1:1", connect_timeout_s=0)


async def test_a_slow_first_answer_is_waited_for_not_taken_for_no_node() -> None:
    """Review finding: the connect deadline was also the first call's deadline, so a
    node that took over 2 s to answer (a write waiting for its sync standby, a big
    batch on a loaded primary) was reported as unreachable, and the write, maybe
    committed, lost to its caller."""
    import asyncio

    import grpc

    from apollo11.v1 import scheduler_pb2 as pb
    from apollo11.v1 import scheduler_pb2_grpc as pbg

    class Slow(pbg.SchedulerServicer):
        async def SubmitTask(self, request: Any, context: Any) -> Any:
            await asyncio.sleep(1.5)
            return pb.SubmitTaskResponse(task_id="t1", created=True, event_id=1)

    server = grpc.aio.server()
    pbg.add_SchedulerServicer_to_server(Slow(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with Client(f"127.0.0.1:{port}", timeout_s=10, connect_timeout_s=0.5) as c:
            sub = await c.submit("etl", {})
        assert sub.task_id == "t1"
    finally:
        await server.stop(0)


@pytest.mark.parametrize("call", ["submit", "status"])
async def test_a_hung_node_listed_first_does_not_hide_the_live_one(call: str, silent: str) -> None:
    """Issue 28: a client given every node, one of them SIGSTOPped, reported "cannot
    reach any node" when the stopped one came first: it waited out the whole connect
    deadline on that node and never asked the live ones after it."""
    import grpc

    from apollo11.v1 import scheduler_pb2 as pb
    from apollo11.v1 import scheduler_pb2_grpc as pbg

    class Live(pbg.SchedulerServicer, pbg.ClusterServicer):
        async def SubmitTask(self, request: Any, context: Any) -> Any:
            return pb.SubmitTaskResponse(task_id="t1", created=True, event_id=1)

        async def GetStatus(self, request: Any, context: Any) -> Any:
            return pb.ClusterStatus(node_id="n2", role="primary")

    server = grpc.aio.server()
    pbg.add_SchedulerServicer_to_server(Live(), server)
    pbg.add_ClusterServicer_to_server(Live(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with Client([silent, f"127.0.0.1:{port}"], connect_timeout_s=2) as c:
            if call == "submit":
                assert (await c.submit("etl", {})).task_id == "t1"
            else:
                assert (await c.status()).node_id == "n2"
    finally:
        await server.stop(0)
