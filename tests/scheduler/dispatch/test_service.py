"""The Workers service's answer to a stream it does not take (scheduler/dispatch/service.py),
served in this process on an executor that is not the primary's: no node, no log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from apollo11.scheduler.dispatch import RemoteExecutor, WorkersService
from apollo11.scheduler.errors import ApolloError, NoLeaderError, NotLeaderError
from apollo11.scheduler.wire import ELECTION_METADATA, LEADER_METADATA
from apollo11.v1 import worker_pb2 as wpb
from apollo11.v1 import worker_pb2_grpc as wpbg

PRIMARY = "127.0.0.1:7001"


async def _serving(not_leader: ApolloError) -> AsyncIterator[str]:
    server = grpc.aio.server()
    service = WorkersService(RemoteExecutor(node_id="n2"), lambda: not_leader)
    wpbg.add_WorkersServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(0)


@pytest.fixture
async def standby() -> AsyncIterator[str]:
    async for address in _serving(
        NotLeaderError(f"this node is a standby; the primary is n1 at {PRIMARY}", leader=PRIMARY)
    ):
        yield address


@pytest.fixture
async def leaderless() -> AsyncIterator[str]:
    async for address in _serving(NoLeaderError("no primary is known right now; retry")):
        yield address


def _register() -> wpb.WorkerMessage:
    return wpb.WorkerMessage(
        register=wpb.Register(
            name="w1", instance="i1", slots=1, workflows=[wpb.WorkflowRef(name="pair", version=1)]
        )
    )


async def _refusal(address: str) -> grpc.aio.AioRpcError:
    """Open a stream, wait, then register: the refusal, which must not have come
    before the Register was sent."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = wpbg.WorkersStub(channel).Connect()
        status = asyncio.ensure_future(call.code())
        done, _ = await asyncio.wait({status}, timeout=0.5)
        assert not done, f"refused before the Register was read: {status.result()}"
        await call.write(_register())
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await call.read()
        await status
        return e.value


async def test_a_standby_refuses_only_once_it_read_the_register(standby: str) -> None:
    """Found against a cluster: a worker pointed at a standby was answered INTERNAL
    ("Internal error from Core"), not FAILED_PRECONDITION naming the primary. The
    standby refused as the stream opened; grpc.aio's client reports INTERNAL for a
    write that meets the stream's end (grpc/grpc#36066), and the worker was writing
    its Register: the redirect was lost."""
    refused = await _refusal(standby)
    assert refused.code() is grpc.StatusCode.FAILED_PRECONDITION
    assert refused.details() == f"this node is a standby; the primary is n1 at {PRIMARY}"
    assert (LEADER_METADATA, PRIMARY) in tuple(refused.trailing_metadata() or ())


async def test_a_node_that_knows_no_primary_refuses_once_it_read_the_register(
    leaderless: str,
) -> None:
    refused = await _refusal(leaderless)
    assert refused.code() is grpc.StatusCode.UNAVAILABLE
    assert "no primary is known" in (refused.details() or "")
    # what tells a worker passing over a frozen primary that an election is under way
    assert (ELECTION_METADATA, "1") in tuple(refused.trailing_metadata() or ())


async def test_a_standby_says_no_election(standby: str) -> None:
    refused = await _refusal(standby)
    keys = [k for k, _ in tuple(refused.trailing_metadata() or ())]
    assert ELECTION_METADATA not in keys
