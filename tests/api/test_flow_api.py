"""Flow control over gRPC, on a node in this process: a submission's priority on the
wire (0 the default, 6 refused naming the field), why a task waits (GetTask's
`waiting`), the limits read and changed at runtime with the principal recorded, a
reader refused SetLimit, and every refusal with its status and a message naming the
field."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from apollo11.scheduler.api.flowlimits import LimitCalls
from apollo11.scheduler.client import (
    ApiError,
    Client,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
)
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.errors import NotLeaderError
from apollo11.scheduler.log import EventType
from apollo11.scheduler.node import Node
from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import create_token
from apollo11.scheduler.workflow import (
    Concurrency,
    Idempotent,
    Rate,
    Registry,
    StepContext,
    Workflow,
)
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg

GATE: list[asyncio.Event] = []  # each test's own: a step runs until it is set


async def _held(ctx: StepContext) -> None:
    await GATE[-1].wait()


hosts = Workflow("hosts", version=1, concurrency=Concurrency(key="host", max=1), fairness="tenant")
hosts.step(idempotency=Idempotent())(_held)

paced = Workflow("paced", version=1, rate=Rate(key="tenant", limit=100, per="1s", burst=5))


@paced.step(idempotency=Idempotent())
def quick(ctx: StepContext) -> None:
    return None


strict = Workflow(
    "strict", version=1, concurrency=Concurrency(key="host", max=1, on_full="reject_new")
)
strict.step(idempotency=Idempotent())(_held)


@pytest.fixture(autouse=True)
def _gate() -> None:
    GATE.append(asyncio.Event())


async def _start(tmp_path: Path, **settings: Any) -> Node:
    registry = Registry()
    for wf in (hosts, paced, strict):
        registry.register(wf)
    node = Node(
        NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0", **settings),
        registry=registry,
    )
    await node.start()
    return node


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = await _start(tmp_path)
    try:
        yield n
    finally:
        GATE[-1].set()
        await n.stop()


@pytest.fixture
async def client(node: Node) -> AsyncIterator[Client]:
    async with Client(f"127.0.0.1:{node.port}", retries=0) as c:
        yield c


async def _until(check: Callable[[], Any], what: str) -> None:
    async with asyncio.timeout(20):
        while not await check():
            await asyncio.sleep(0.01)


async def _running(c: Client, task_id: str) -> None:
    async def started() -> bool:
        return (await c.task(task_id)).state == "RUNNING"

    await _until(started, f"{task_id} runs")


async def test_a_task_queued_behind_a_full_key_says_why_with_its_priority(
    client: Client,
) -> None:
    c = client
    first = await c.submit("hosts", {"host": "db1", "tenant": "a"})
    await _running(c, first.task_id)
    second = await c.submit("hosts", {"host": "db1", "tenant": "b"}, priority=1)
    third = await c.submit("hosts", {"host": "db1", "tenant": "a"})

    async def queued() -> bool:
        return (await c.task(third.task_id)).waiting is not None

    await _until(queued, "the third is held back")
    t2, t3 = await c.task(second.task_id), await c.task(third.task_id)
    assert (t2.priority, t2.waiting) == (1, "queued: host=db1 is full (1/1), 0 ahead")
    assert (t3.priority, t3.waiting) == (3, "queued: host=db1 is full (1/1), 1 ahead")
    t1 = await c.task(first.task_id)
    assert (t1.priority, t1.waiting) == (3, None), "it runs: nothing holds it back"
    assert t2.to_json()["waiting"] == t2.waiting and t2.to_json()["priority"] == 1
    past = await c.task(second.task_id, as_of=t2.first_event_id)
    assert (past.waiting, past.priority) == (None, 1), "a past state: no waiting"
    GATE[-1].set()
    for sub in (first, second, third):
        done = await c.wait(sub.task_id, timeout=20)
        assert (done.state, done.waiting) == ("SUCCEEDED", None)


async def test_priority_0_on_the_wire_is_the_default_and_6_is_refused(node: Node) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as ch:
        stub = pbg.SchedulerStub(ch)
        sub = await stub.SubmitTask(
            pb.SubmitTaskRequest(workflow="paced", input_json='{"tenant": "t"}', priority=0)
        )
        task = await stub.GetTask(pb.GetTaskRequest(task_id=sub.task_id))
        assert task.priority == 3
        five = await stub.SubmitTask(
            pb.SubmitTaskRequest(workflow="paced", input_json='{"tenant": "t"}', priority=5)
        )
        assert (await stub.GetTask(pb.GetTaskRequest(task_id=five.task_id))).priority == 5
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.SubmitTask(pb.SubmitTaskRequest(workflow="paced", priority=6))
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert e.value.details() == (
            "priority must be 1 to 5 (1 first; 0 or unset: the default, 3), got 6"
        )
        batch = [
            pb.SubmitTaskRequest(workflow="paced", input_json='{"tenant": "t"}', priority=p)
            for p in (2, 9)
        ]
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.SubmitTasks(pb.SubmitTasksRequest(tasks=batch))
        assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert (e.value.details() or "").startswith("tasks[1].priority must be 1 to 5")


async def test_the_clients_refuse_a_priority_outside_1_to_5(client: Client) -> None:
    for bad in (0, 6, -1, True):
        with pytest.raises(InvalidArgumentError, match=r"^priority must be 1 to 5 \(1 first\)"):
            await client.submit("paced", {"tenant": "t"}, priority=bad)
    with pytest.raises(InvalidArgumentError, match=r"^tasks\[1\]\.priority must be 1 to 5"):
        await client.submit_many(
            [{"workflow": "paced", "priority": 2}, {"workflow": "paced", "priority": 7}]
        )
    subs = await client.submit_many(
        [{"workflow": "paced", "input": {"tenant": "t"}, "priority": p} for p in (1, 4)]
    )
    assert [(await client.task(s.task_id)).priority for s in subs] == [1, 4]


async def test_an_operator_raises_a_limit_and_resets_it(node: Node, client: Client) -> None:
    c = client
    view = {v.limit_id: v for v in (await c.limits()).limits}
    assert set(view) == {"hosts/host", "paced/tenant", "strict/host"}
    h = view["hosts/host"]
    assert (h.kind, h.scope, h.declared, h.effective, h.overridden, h.on_full) == (
        "concurrency",
        "workflow",
        "max 1",
        "max 1",
        False,
        "queue",
    )
    assert (view["paced/tenant"].kind, view["paced/tenant"].effective) == (
        "rate",
        "100 per 1s, burst 5",
    )
    ids = [(await c.submit("hosts", {"host": "db1", "n": i})).task_id for i in range(3)]
    await _running(c, ids[0])

    async def two_queued() -> bool:
        keys = {v.limit_id: v.keys for v in (await c.limits()).limits}["hosts/host"]
        return [(k.value, k.running, k.queued) for k in keys] == [("db1", 1, 2)]

    await _until(two_queued, "one runs, two queue")

    change = await c.set_limit("hosts/host", max=3, reason="more db")
    assert change.limit is not None
    assert (change.limit.effective, change.limit.declared, change.limit.overridden) == (
        "max 3",
        "max 1",
        True,
    )
    for t in ids:
        await _running(c, t)  # in force at once: the queued two start
    assert node.store is not None
    limit = [e for e in node.store.log.read() if e.event_type is EventType.LIMIT]
    assert limit[-1].event_id == change.event_id
    recorded = {"id": "hosts/host", "max": 3, "by": "anonymous", "reason": "more db"}
    assert limit[-1].payload == recorded

    rate = await c.set_limit("paced/tenant", rate="10/1s", burst=20)
    assert rate.limit is not None and rate.limit.effective == "10 per 1s, burst 20"
    rate = await c.set_limit("paced/tenant", rate=(600, "1m"))
    assert rate.limit is not None and rate.limit.effective == "600 per 1m, burst 20"
    shares = await c.set_limit(weights={"acme": 3, "beta": 0.5})
    assert (shares.limit, shares.weights) == (None, {"acme": 3.0, "beta": 0.5})
    assert (await c.limits()).weights == {"acme": 3.0, "beta": 0.5}

    back = await c.set_limit("hosts/host", reset=True, reason="done")
    assert back.limit is not None
    assert (back.limit.effective, back.limit.overridden) == ("max 1", False)
    assert (await c.limits()).to_json()["limits"][0].keys() == {
        "id",
        "kind",
        "scope",
        "declared",
        "effective",
        "overridden",
        "on_full",
        "keys",
        "values",
    }


async def test_bad_limit_changes_are_refused_naming_the_field(client: Client) -> None:
    c = client
    with pytest.raises(NotFoundError, match=r"^no limit 'nope' .*known: hosts/host, paced/tenant"):
        await c.set_limit("nope", max=2)
    cases: list[tuple[str, dict[str, Any]]] = [
        (r"^max must be at least 1, got 0", {"max": 0}),
        (r"^hosts/host is a concurrency limit: give max, not rate", {"rate": "10/1s"}),
        (r"^reset takes no max, rate or burst", {"max": 2, "reset": True}),
        (r"^reason is 2000 characters, over the limit of 1024", {"max": 2, "reason": "r" * 2000}),
    ]
    for message, fields in cases:
        with pytest.raises(InvalidArgumentError, match=message):
            await c.set_limit("hosts/host", **fields)
    rates: list[tuple[str, dict[str, Any]]] = [
        (r"^paced/tenant is a rate: give rate \(and burst\), not max", {"max": 2}),
        (r"^rate limit must be at least 1, got 0", {"rate": "0/1s"}),
        (r"^burst must be at least 1, got 0", {"burst": 0}),
        (r"^per '1x' is not a duration", {"rate": "10/1x"}),
        (r"^rate '10' is not N/DURATION", {"rate": "10"}),
    ]
    for message, fields in rates:
        with pytest.raises(InvalidArgumentError, match=message):
            await c.set_limit("paced/tenant", **fields)
    with pytest.raises(InvalidArgumentError, match=r"^name a limit id, or give weights"):
        await c.set_limit()
    with pytest.raises(InvalidArgumentError, match=r"^weight of 'acme' must be above 0"):
        await c.set_limit(weights={"acme": 0})
    with pytest.raises(InvalidArgumentError, match=r"^weights: a fairness value is 300 char"):
        await c.set_limit(weights={"v" * 300: 1})


async def test_a_rate_without_its_period_is_refused_on_the_wire(node: Node) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as ch:
        stub = pbg.SchedulerStub(ch)
        for request, message in (
            (pb.SetLimitRequest(limit_id="paced/tenant", rate=10), "rate 10 needs per"),
            (pb.SetLimitRequest(limit_id="paced/tenant", per="1s"), "per '1s' needs rate"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.SetLimit(request)
            assert e.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert (e.value.details() or "").startswith(message)
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await stub.SetLimit(pb.SetLimitRequest(limit_id="nope", max=2))
        assert e.value.code() is grpc.StatusCode.NOT_FOUND


async def test_reject_new_is_resource_exhausted_naming_the_limit(
    node: Node, client: Client
) -> None:
    await client.submit("strict", {"host": "h"})
    with pytest.raises(ResourceExhaustedError, match="strict/host is full for 'h': 1 of 1"):
        await client.submit("strict", {"host": "h"})
    async with grpc.aio.insecure_channel(f"127.0.0.1:{node.port}") as ch:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await pbg.SchedulerStub(ch).SubmitTask(
                pb.SubmitTaskRequest(workflow="strict", input_json='{"host": "h"}')
            )
    assert e.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_a_reader_may_list_limits_but_not_set_one(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    rita = create_token(tokens, "rita", Role.READER)
    olga = create_token(tokens, "olga", Role.OPERATOR)
    n = await _start(tmp_path, tokens_file=tokens)
    address = f"127.0.0.1:{n.port}"
    try:
        async with Client(address, retries=0, token=rita) as reader:
            listed = [v.limit_id for v in (await reader.limits()).limits]
            assert listed == ["hosts/host", "paced/tenant", "strict/host"]
            with pytest.raises(ApiError, match="SetLimit needs role operator") as e:
                await reader.set_limit("hosts/host", max=2)
            assert e.value.code is grpc.StatusCode.PERMISSION_DENIED
        async with Client(address, retries=0, token=olga) as operator:
            change = await operator.set_limit("hosts/host", max=2)
        assert n.store is not None
        (event,) = [e for e in n.store.log.read() if e.event_type is EventType.LIMIT]
        assert (event.event_id, event.payload["by"]) == (change.event_id, "olga")
    finally:
        await n.stop()


async def test_a_standby_sends_list_limits_to_the_primary() -> None:
    """The queues are the primary engine's: a standby answers as it does a write."""
    elsewhere = NotLeaderError("this node is a standby", leader="127.0.0.1:7421")
    standby = SimpleNamespace(engine=None, not_leader=lambda: elsewhere)
    calls = LimitCalls(standby)  # type: ignore[arg-type]
    with pytest.raises(NotLeaderError) as e:
        calls.listed(pb.ListLimitsRequest())
    assert e.value.leader == "127.0.0.1:7421"
    with pytest.raises(NotLeaderError):
        await calls.set(pb.SetLimitRequest(limit_id="hosts/host", max=2))
