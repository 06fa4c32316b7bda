"""A call gRPC sheds before the node's handler runs is retried by the client.

Flooded from two connections, a node's gRPC server answers about 1% of calls
CANCELLED at once: gRPC core drops, at random, calls that arrive while over
`grpc.server.max_pending_requests` (1000) wait for the event loop to take them
(measured with `apollo11 bench overload`: no such answer from one connection,
which max_concurrent_streams keeps under 1000; none with that limit raised).
The handler never ran, so a submission (idempotency key) is retried like
UNAVAILABLE; an operator action, which is not retried on UNAVAILABLE either,
is not."""

from __future__ import annotations

import grpc
import pytest

from apollo11.scheduler.client import ApiError, Client
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg


class Shedding(pbg.SchedulerServicer):
    """Answers CANCELLED to the first `shed` calls, as gRPC core does to shed calls."""

    def __init__(self, shed: int) -> None:
        self.shed = shed
        self.calls = 0

    async def _answer(self, context: grpc.aio.ServicerContext) -> None:
        self.calls += 1
        if self.calls <= self.shed:
            await context.abort(grpc.StatusCode.CANCELLED, "CANCELLED")

    async def SubmitTask(
        self, request: pb.SubmitTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.SubmitTaskResponse:
        await self._answer(context)
        return pb.SubmitTaskResponse(task_id="t1", created=True, event_id=7)

    async def CancelTask(
        self, request: pb.CancelTaskRequest, context: grpc.aio.ServicerContext
    ) -> pb.ActionResponse:
        await self._answer(context)
        return pb.ActionResponse(event_id=8)


async def _serve(service: Shedding) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    pbg.add_SchedulerServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def test_a_shed_submission_is_retried_with_its_key() -> None:
    service = Shedding(shed=2)
    server, address = await _serve(service)
    try:
        async with Client(address, retries=3, backoff_s=0.01) as c:
            sub = await c.submit("etl", {}, idempotency_key="k1")
    finally:
        await server.stop(None)
    assert (sub.task_id, service.calls) == ("t1", 3)


async def test_a_shed_operator_action_is_not_retried() -> None:
    service = Shedding(shed=1)
    server, address = await _serve(service)
    try:
        async with Client(address, retries=3, backoff_s=0.01) as c:
            with pytest.raises(ApiError) as e:
                await c.cancel("t1", reason="test")
    finally:
        await server.stop(None)
    assert e.value.code is grpc.StatusCode.CANCELLED
    assert service.calls == 1
