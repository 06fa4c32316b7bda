"""A node between closing and reopening its store (a deposed primary cutting its
divergent tail, a standby installing a snapshot) answers every request UNAVAILABLE
with the reason, never INTERNAL with an empty message (seen 15 times while a paused
primary stepped down)."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import pytest

from apollo11.scheduler.api.limits import Admission, WatchSlots
from apollo11.scheduler.api.server import SchedulerService, Watchers
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.errors import NotLeaderError
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg


async def test_requests_while_the_store_is_reopened_are_unavailable_with_a_reason() -> None:
    node = SimpleNamespace(
        store=None,  # as during Node._reopen
        engine=None,
        settings=SimpleNamespace(node_id="n1"),
        not_leader=lambda: NotLeaderError("standby"),
    )
    server = grpc.aio.server()
    admission = Admission(10, 10, lambda: 0)
    service = SchedulerService(node, Watchers(), WatchSlots(10), admission, Clock())  # type: ignore[arg-type]
    pbg.add_SchedulerServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pbg.SchedulerStub(ch)
            calls = [
                stub.ListTasks(pb.ListTasksRequest()),
                stub.GetTask(pb.GetTaskRequest(task_id="t")),
                stub.GetEvents(pb.GetEventsRequest()),
                stub.SubmitTask(pb.SubmitTaskRequest(workflow="etl")),
            ]
            for call in calls:
                with pytest.raises(grpc.aio.AioRpcError) as e:
                    await call
                assert e.value.code() is grpc.StatusCode.UNAVAILABLE, e.value
                assert "reopening its log" in (e.value.details() or "")
            with pytest.raises(grpc.aio.AioRpcError) as e:
                async for _ in stub.WatchTask(pb.WatchTaskRequest(task_id="t")):
                    pass
            assert e.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(None)
