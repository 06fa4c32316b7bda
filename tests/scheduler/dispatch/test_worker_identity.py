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
from apollo11.scheduler.replay import TaskStatus
from apollo11.scheduler.security.roles import Role
from apollo11.scheduler.security.tokens import create_token

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
