"""The gRPC server's abuse limits, on a real node in this process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest

from apollo11.scheduler.api import limits
from apollo11.scheduler.client import Client
from apollo11.scheduler.client._connection import CLIENT_OPTIONS
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.errors import ResourceExhaustedError
from apollo11.scheduler.log import EventType, FsyncPolicy
from apollo11.scheduler.node import Node
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg

WATCHES = 3


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Node]]]:
    nodes: list[Node] = []

    async def make(**settings: Any) -> Node:
        n = Node(
            NodeSettings(
                node_id="n1",
                data_dir=tmp_path / f"data{len(nodes)}",
                listen="127.0.0.1:0",
                workflows=["apollo11.scheduler.examples"],
                fsync=FsyncPolicy.UNSAFE_NEVER,
                drain_timeout=0,  # the parked tasks' steps are not waited for
                **settings,
            )
        )
        await n.start()
        nodes.append(n)
        return n

    yield make
    for n in nodes:
        await n.stop()


@pytest.fixture
async def node(start: Callable[..., Awaitable[Node]]) -> Node:
    return await start(max_watch_streams=WATCHES, max_message_bytes=1024 * 1024)


async def _parked_task(node: Node) -> str:
    """A task that stays RUNNING for the test, so its watch streams stay open."""
    assert node.engine is not None
    return (await node.engine.submit("etl", {"step_seconds": 3600})).task_id


async def _first_event(call: Any, timeout: float = 5) -> pb.Event:
    async with asyncio.timeout(timeout):
        event: pb.Event = await call.read()
        return event


async def _open_watches(node: Node, n: int) -> None:
    """Until the server counts n open streams (a cancel reaches it a moment later)."""
    assert node.api is not None
    async with asyncio.timeout(5):
        while node.api.watch_slots.open != n:
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert node.api.watch_slots.open == n, "each stream gives its slot back once"


async def test_watch_streams_are_bounded_and_a_closed_one_frees_its_slot(node: Node) -> None:
    task_id = await _parked_task(node)
    async with grpc.aio.insecure_channel(node.address) as ch:
        stub = pbg.SchedulerStub(ch)
        calls = [stub.WatchTask(pb.WatchTaskRequest(task_id=task_id)) for _ in range(WATCHES)]
        for c in calls:
            assert (await _first_event(c)).event_type == pb.EVENT_TYPE_TASK_SUBMITTED
        extra = stub.WatchTask(pb.WatchTaskRequest(task_id=task_id))
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await _first_event(extra)
        assert exc.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"max_watch_streams = {WATCHES}" in (exc.value.details() or "")

        calls.pop().cancel()  # the client goes away: its slot comes back
        await _open_watches(node, WATCHES - 1)
        again = stub.WatchTask(pb.WatchTaskRequest(task_id=task_id))
        assert (await _first_event(again)).event_type == pb.EVENT_TYPE_TASK_SUBMITTED
        for c in [*calls, again]:
            c.cancel()
    await _open_watches(node, 0)


async def test_a_finished_watch_gives_its_slot_back(node: Node) -> None:
    assert node.engine is not None
    sub = await node.engine.submit("etl", {"step_seconds": 0})
    await node.engine.wait(sub.task_id)
    async with Client(node.address, retries=0) as c:
        for _ in range(2 * WATCHES):  # each stream ends when the history is sent
            events = [e async for e in c.watch(sub.task_id)]
            assert events[-1].event_type == "STEP_SUCCEEDED"
    await _open_watches(node, 0)


async def test_the_client_reports_a_full_node(node: Node) -> None:
    task_id = await _parked_task(node)
    async with grpc.aio.insecure_channel(node.address) as ch:
        stub = pbg.SchedulerStub(ch)
        calls = [stub.WatchTask(pb.WatchTaskRequest(task_id=task_id)) for _ in range(WATCHES)]
        for call in calls:
            await _first_event(call)
        async with Client(node.address, retries=0) as c:
            with pytest.raises(ResourceExhaustedError, match="max_watch_streams"):
                await c.wait(task_id)
        for call in calls:
            call.cancel()


async def test_calls_past_max_streams_per_connection_wait_for_a_free_stream(
    start: Callable[..., Awaitable[Node]],
) -> None:
    node = await start(max_streams_per_connection=2)
    task_id = await _parked_task(node)
    watch = pb.WatchTaskRequest(task_id=task_id)
    async with (
        grpc.aio.insecure_channel(node.address) as ch,
        grpc.aio.insecure_channel(
            node.address, options=[("grpc.use_local_subchannel_pool", 1)]
        ) as other,
    ):
        stub = pbg.SchedulerStub(ch)
        calls = [stub.WatchTask(watch) for _ in range(2)]
        for call in calls:
            await _first_event(call)
        third = stub.WatchTask(watch)
        # (a task: cancelling a read, as a timeout would, cancels the call)
        first = asyncio.ensure_future(third.read())
        done, _ = await asyncio.wait([first], timeout=0.3)
        assert not done, "queued in the client: no stream free on this connection"
        # another connection is not held back by this one's streams
        elsewhere = pbg.SchedulerStub(other).WatchTask(watch)
        await _first_event(elsewhere)
        calls.pop(0).cancel()
        async with asyncio.timeout(5):
            assert (await first).event_type == pb.EVENT_TYPE_TASK_SUBMITTED
        for call in [*calls, third, elsewhere]:
            call.cancel()


async def test_a_message_over_max_message_bytes_is_refused_by_grpc(node: Node) -> None:
    big = json.dumps({"blob": "x" * (1024 * 1024)})
    async with grpc.aio.insecure_channel(node.address) as ch:
        stub = pbg.SchedulerStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.SubmitTask(pb.SubmitTaskRequest(workflow="etl", input_json=big))
        assert exc.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "larger than max" in (exc.value.details() or "")
        # under it, our own cap speaks (submit_max_bytes), naming the field
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.SubmitTask(
                pb.SubmitTaskRequest(workflow="etl", input_json=json.dumps({"b": "x" * 70_000}))
            )
        assert exc.value.code() is grpc.StatusCode.INVALID_ARGUMENT


JSON_MAX_DEPTH = 64  # json_max_depth's default


def _deep(depth: int) -> str:
    """JSON text whose arrays nest `depth` levels deep."""
    return "[" * depth + "]" * depth


def _deep_input(depth: int) -> str:
    """An etl input `depth` levels deep: its arrays inside the object."""
    return '{"step_seconds": 0, "deep": ' + _deep(depth - 1) + "}"


async def _refused(call: Awaitable[Any]) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await call
    assert exc.value.code() is grpc.StatusCode.INVALID_ARGUMENT, exc.value.details()
    return exc.value.details() or ""


async def test_json_nested_past_json_max_depth_is_refused_and_nothing_written(
    node: Node,
) -> None:
    """An input 900 levels deep was refused as "not JSON-serializable: Recursion limit
    reached" (the log's encoder), and one 250 deep was taken: an event payload that
    deep then broke every snapshot of the node. The depth has a limit of its own."""
    assert node.store is not None
    async with grpc.aio.insecure_channel(node.address) as ch:
        stub = pbg.SchedulerStub(ch)
        for depth in (JSON_MAX_DEPTH - 1, JSON_MAX_DEPTH):  # just under and at the limit
            await stub.SubmitTask(
                pb.SubmitTaskRequest(workflow="etl", input_json=_deep_input(depth))
            )
            await stub.SendEvent(pb.SendEventRequest(key="k", payload_json=_deep(depth)))
        # brackets inside strings are text, not nesting
        flat = json.dumps({"step_seconds": 0, "s": "[{" * 500, "q": '\\"[' * 100})
        await stub.SubmitTask(pb.SubmitTaskRequest(workflow="etl", input_json=flat))
        before = node.store.log.next_id
        over = JSON_MAX_DEPTH + 1
        refusals = {
            "input_json": [
                stub.SubmitTask(pb.SubmitTaskRequest(workflow="etl", input_json=_deep_input(n)))
                for n in (over, 900, 5000)
            ],
            "payload_json": [
                stub.SendEvent(pb.SendEventRequest(key="k", payload_json=_deep(n)))
                for n in (over, 900)
            ],
            "tasks[1].input_json": [
                stub.SubmitTasks(
                    pb.SubmitTasksRequest(
                        tasks=[
                            pb.SubmitTaskRequest(workflow="etl", input_json="{}"),
                            pb.SubmitTaskRequest(workflow="etl", input_json=_deep_input(over)),
                        ]
                    )
                )
            ],
        }
        for field, calls in refusals.items():
            said = [await _refused(call) for call in calls]
            depths = (over, 900, 5000)[: len(said)]
            assert said == [
                f"{field} is nested {n} levels deep, over the limit of {JSON_MAX_DEPTH} "
                f"(json_max_depth): flatten it, or pass a reference to the data"
                for n in depths
            ]
        # the accepted tasks' steps go on; no refused submission or event was written
        written = {e.event_type for e in node.store.log.read(before)}
        assert not written & {EventType.TASK_SUBMITTED, EventType.EVENT}, written


async def test_json_max_depth_is_a_setting_and_holds_for_shell_dags(
    start: Callable[..., Awaitable[Node]],
) -> None:
    node = await start(json_max_depth=4, allow_shell=True)
    assert node.store is not None
    async with grpc.aio.insecure_channel(node.address) as ch:
        stub = pbg.SchedulerStub(ch)
        await stub.SendEvent(pb.SendEventRequest(key="k", payload_json=_deep(4)))
        before = node.store.log.next_id
        said = await _refused(stub.SendEvent(pb.SendEventRequest(key="k", payload_json=_deep(5))))
        assert said.startswith("payload_json is nested 5 levels deep, over the limit of 4 ")
        dag = {"steps": [{"name": "a", "run": "true", "idempotency": "idempotent"}]}
        dag["steps"][0]["env"] = {"X": [[["deep"]]]}  # {, steps [, {, env {, [[[: 7 levels
        said = await _refused(stub.SubmitShell(pb.SubmitShellRequest(dag_json=json.dumps(dag))))
        assert said.startswith("dag_json is nested 7 levels deep, over the limit of 4 "), said
        assert node.store.log.next_id == before, "nothing written"


def test_json_max_depth_is_bounded_below_what_the_log_can_encode() -> None:
    """The log and its snapshots wrap an input in a few levels of their own (an event's
    payload sits 5 deep in a snapshot); orjson encodes at most 254."""
    for bad in (0, 129):
        with pytest.raises(ValueError, match="json_max_depth"):
            NodeSettings(data_dir=Path("/nonexistent"), json_max_depth=bad)
    assert NodeSettings(data_dir=Path("/nonexistent")).json_max_depth == JSON_MAX_DEPTH


def test_the_client_keepalive_is_within_what_the_server_permits() -> None:
    client = dict(CLIENT_OPTIONS)
    assert client["grpc.keepalive_time_ms"] >= 2 * limits.MIN_PING_INTERVAL_MS
    assert client["grpc.keepalive_permit_without_calls"] == 0
    server = dict(limits.server_options(NodeSettings(data_dir=Path("/nonexistent")), 1000))
    assert server["grpc.http2.min_ping_interval_without_data_ms"] == limits.MIN_PING_INTERVAL_MS
    assert server["grpc.max_receive_message_length"] == 16 * 1024 * 1024


async def test_a_connection_that_never_sends_the_preface_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Red-team: idle connections without a byte of HTTP/2 (or TLS) held a file
    descriptor each until the node ran out of them; the handshake timeout closes one."""
    settings = NodeSettings(data_dir=Path("/nonexistent"))
    handshake = dict(limits.server_options(settings, 1000))["grpc.server_handshake_timeout_ms"]
    assert handshake <= 10_000, "gRPC's own default (120 s) let idle connections pile up"
    # The server is given a short timeout: what is tested is that gRPC closes at it,
    # not the length of the wait (the node's 10 s).
    monkeypatch.setattr(limits, "HANDSHAKE_TIMEOUT_MS", 1_000)
    server = grpc.aio.server(options=limits.server_options(settings, 1000))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t0 = asyncio.get_running_loop().time()
        async with asyncio.timeout(limits.HANDSHAKE_TIMEOUT_MS / 1000 + 5):
            while await reader.read(4096):  # the server's SETTINGS, then EOF
                pass
        assert asyncio.get_running_loop().time() - t0 >= limits.HANDSHAKE_TIMEOUT_MS / 2000
        writer.close()
    finally:
        await server.stop(0)
