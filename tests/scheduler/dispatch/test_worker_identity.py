"""A worker's name is bound to its credential on a node with authentication, and a
worker speaks only for its own attempts: a real node in this process (with a
tokens file, or open), and workers that speak the protocol by hand (rawworker.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc
import pytest

from apollo11.scheduler.log import EventType
from apollo11.scheduler.node import Node
from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import create_token
from apollo11.scheduler.state import TaskStatus
from apollo11.v1 import scheduler_pb2 as pb
from apollo11.v1 import scheduler_pb2_grpc as pbg
from apollo11.v1 import worker_pb2 as wpb

from .rawworker import RawWorker, running


@pytest.fixture
def tokens(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A tokens file with two worker tokens, w1 and mallory: token by name."""
    path = tmp_path / "tokens"
    return path, {n: create_token(path, n, Role.WORKER) for n in ("w1", "mallory")}


async def _registered(w: RawWorker, *a: Any, **kw: Any) -> grpc.aio.AioRpcError | None:
    """None if `w` registered; else the status it was refused with."""
    try:
        await w.connect(*a, **kw)
    except grpc.aio.AioRpcError as e:
        return e
    return None


async def test_a_forged_worker_name_after_a_restart_is_refused_and_its_result_not_applied(
    start: Any, tokens: tuple[Path, dict[str, str]]
) -> None:
    """Found from outside: after a failover, a holder of any worker token who
    registered first under another worker's name, reporting its attempt running
    (the token is the term and event id of the STARTED, which any reader sees in
    GetEvents), was adopted in its place and its result applied."""
    path, token = tokens
    node = await start(tokens_file=path)
    w1 = RawWorker(f"127.0.0.1:{node.port}", name="w1", token=token["w1"])
    await w1.connect()
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    a = (await w1.next("assign")).assignments[0]
    await node.stop()  # the attempt runs on at w1, which the new primary will adopt
    await w1.close()
    node = await start(tokens_file=path)
    address = f"127.0.0.1:{node.port}"
    forger = RawWorker(address, name="w1", token=token["mallory"])
    refused = await _registered(forger, running=(running(a),))
    if refused is None:
        await forger.result(a, {"n": 666})
        await asyncio.sleep(0.3)
    await forger.close()
    assert refused is not None, "a mallory token registered as w1"
    assert refused.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "'w1'" in (refused.details() or "") and "'mallory'" in (refused.details() or "")
    again = RawWorker(address, name="w1", token=token["w1"])
    again.instance = w1.instance
    assert await _registered(again, running=(running(a),)) is None
    await again.result(a, {"n": 1})
    assert (await again.next("acks")).acks[0].accepted
    b = (await again.next("assign")).assignments[0]
    await again.result(b, {"n": 2})
    assert node.engine is not None
    async with asyncio.timeout(20):
        task = await node.engine.wait(task_id)
    assert task.status is TaskStatus.SUCCEEDED
    assert task.steps["first"].result == {"n": 1}
    assert node.store is not None
    started = [
        e
        for e in node.store.log.read()
        if e.task_id == task_id and e.event_type is EventType.STEP_STARTED
    ]
    assert [e.step_name for e in started] == ["first", "second"], "adopted, not run again"
    await again.close()


async def test_a_worker_token_speaks_for_its_own_name_and_the_names_beneath_it(
    start: Any, tokens: tuple[Path, dict[str, str]]
) -> None:
    path, token = tokens
    node = await start(tokens_file=path)
    address = f"127.0.0.1:{node.port}"
    for name in ("w1", "w1/host-a"):
        w = RawWorker(address, name=name, token=token["w1"])
        assert await _registered(w) is None, name
        await w.close()
    for name in ("w2", "w1x", "w1/", "mallory"):
        w = RawWorker(address, name=name, token=token["w1"])
        refused = await _registered(w)
        await w.close()
        assert refused is not None, name
        assert refused.code() is grpc.StatusCode.PERMISSION_DENIED, name
        assert f"worker name {name!r}" in (refused.details() or ""), refused.details()


async def test_a_default_name_is_registered_beneath_the_credentials_name(
    start: Any, tokens: tuple[Path, dict[str, str]]
) -> None:
    path, token = tokens
    node = await start(tokens_file=path)
    w = RawWorker(f"127.0.0.1:{node.port}", name="host-1", token=token["w1"])
    w.default_name = True
    reg = await w.connect()
    assert reg.name == "w1/host-1"
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    await w.next("assign")
    assert node.store is not None
    [started] = [
        e
        for e in node.store.log.read()
        if e.task_id == task_id and e.event_type is EventType.STEP_STARTED
    ]
    assert started.payload == {"worker": "w1/host-1"}
    await w.close()


async def test_an_open_node_takes_any_name(start: Any) -> None:
    node: Node = await start()
    w = RawWorker(f"127.0.0.1:{node.port}", name="anything/at-all")
    assert (await w.connect()).name == "anything/at-all"
    await w.close()
    w = RawWorker(f"127.0.0.1:{node.port}", name="host-1")
    w.default_name = True
    assert (await w.connect()).name == "host-1"
    await w.close()


async def test_heartbeat_details_count_only_from_the_worker_the_attempt_was_given_to(
    start: Any,
) -> None:
    """An attempt token is no secret: a heartbeat naming another worker's attempt must
    not become the details its retry is given (and the STEP_FAILED records)."""
    node = await start()
    address = f"127.0.0.1:{node.port}"
    w1 = RawWorker(address, name="w1", slots=1)
    await w1.connect()
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    a = (await w1.next("assign")).assignments[0]
    await w1.heartbeat(running(a, {"rows": 500}))
    await asyncio.sleep(0.2)
    other = RawWorker(address, name="w2")
    await other.connect(workflows=())
    await other.heartbeat(running(a, {"rows": 0, "forged": True}))
    await asyncio.sleep(0.2)
    await w1.close()  # its stream breaks: the attempt is lost and runs again
    w3 = RawWorker(address, name="w3")
    await w3.connect()
    b = (await w3.next("assign")).assignments[0]
    assert b.attempt == 2
    assert b.last_heartbeat_json == b'{"rows":500}'
    assert node.store is not None
    [failed] = [
        e
        for e in node.store.log.read()
        if e.task_id == task_id and e.event_type is EventType.STEP_FAILED
    ]
    assert failed.payload["heartbeat"] == {"rows": 500}
    await other.close()
    await w3.close()


async def test_an_attempt_token_a_reader_sees_is_useless_to_another_worker_identity(
    start: Any, tokens: tuple[Path, dict[str, str]]
) -> None:
    """Issue item: "attempt tokens are readable by a reader". They are: a token is the
    term and event id of the STARTED, which GetEvents shows a reader, with the name of
    the worker it was given to. It is no credential: only that worker's credential
    speaks for the attempt (the name is bound to it), so a holder of another worker
    token who reports by it, as a result, a row of packed results, a heartbeat or a
    running attempt of its own, is refused, and the attempt's own result applies."""
    path, token = tokens
    reader = create_token(path, "ann", Role.READER)
    node = await start(tokens_file=path)
    address = f"127.0.0.1:{node.port}"
    w1 = RawWorker(address, name="w1", slots=1, token=token["w1"])
    await w1.connect()
    assert node.engine is not None
    task_id = (await node.engine.submit("pair", None)).task_id
    a = (await w1.next("assign")).assignments[0]
    await w1.heartbeat(running(a, {"rows": 500}))
    async with grpc.aio.insecure_channel(address) as ch:
        seen = await pbg.SchedulerStub(ch).GetEvents(
            pb.GetEventsRequest(task_id=task_id),
            metadata=(("authorization", f"Bearer {reader}"),),
        )
    [started] = [e for e in seen.events if e.event_type == pb.EVENT_TYPE_STEP_STARTED]
    assert (started.term, started.event_id) == (a.token.term, a.token.event_id)
    assert started.payload_json == '{"worker":"w1"}'  # the reader knows whose it is, too
    # mallory builds the attempt from what the reader saw
    forged = wpb.Assignment(task_id=task_id, step=started.step_name, attempt=started.attempt)
    forged.token.term, forged.token.event_id = started.term, started.event_id
    mallory = RawWorker(address, name="mallory", token=token["mallory"])
    # it claims the attempt running: told to cancel it, as not its own
    reg = await mallory.connect(workflows=(), running=(running(forged, {"rows": 0}),))
    assert [(t.term, t.event_id) for t in reg.stale] == [(started.term, started.event_id)]
    assert await _registered(RawWorker(address, name="w1", token=token["mallory"])) is not None
    await mallory.heartbeat(running(forged, {"rows": 1, "forged": True}))
    await mallory.result(forged, {"n": 666})
    refusal = (await mallory.next("acks")).acks[0]
    assert not refusal.accepted and refusal.reason == "the attempt was given to worker w1"
    await mallory.packed([(forged, {"n": 667})])
    refusal = (await mallory.next("acks")).acks[0]
    assert not refusal.accepted and refusal.reason == "the attempt was given to worker w1"
    await w1.result(a, {"n": 1})
    assert (await w1.next("acks")).acks[0].accepted
    b = (await w1.next("assign")).assignments[0]
    await w1.result(b, {"n": 2})
    async with asyncio.timeout(20):
        task = await node.engine.wait(task_id)
    assert task.status is TaskStatus.SUCCEEDED and task.steps["first"].result == {"n": 1}
    assert node.store is not None
    assert not [
        e
        for e in node.store.log.read()
        if e.task_id == task_id and e.event_type is EventType.STEP_FAILED
    ]
    await mallory.close()
    await w1.close()
