"""The primary's Follow stream, driven in process: the handshake with a standby that
holds records shipped ahead, and a standby that stops acknowledging."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from apollo11.replicator import sender
from apollo11.replicator.hub import ReplicationHub
from apollo11.replicator.sender import ReplicationService
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state.store import Store, StoreConfig
from apollo11.v1 import replication_pb2 as rpb
from tests.logs import hold_writes


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code


class Context:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


async def _primary(tmp_path: Path) -> Any:
    store = Store.open(
        tmp_path / "p",
        config=StoreConfig(log=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER)),
        instance_id="n1",
    )
    store.log.term = 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node_id": "n1"})
    return SimpleNamespace(
        role="primary",
        store=store,
        hub=ReplicationHub(),
        settings=SimpleNamespace(node_id="n1"),
        cluster_id="c1",
    )


async def _requests(hello: rpb.Hello, more: asyncio.Queue[Any]) -> AsyncIterator[Any]:
    yield rpb.StandbyMessage(hello=hello)
    while (msg := await more.get()) is not None:
        yield msg


def _follow(node: Any, standby_at: int, cluster_id: str = "c1") -> AsyncIterator[Any]:
    """The stream a standby (of `cluster_id`) whose log ends at `standby_at` (term 1) gets."""
    hello = rpb.Hello(
        node_id="n2",
        cluster_id=cluster_id,
        last_event_id=standby_at,
        last_term=1,
        terms=[rpb.TermStart(term=1, first_event_id=1)],
    )
    follow = ReplicationService(node).Follow
    return follow(_requests(hello, asyncio.Queue()), Context())  # type: ignore[arg-type]


async def _written_not_durable(
    node: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Event, asyncio.Task[Any]]:
    """Event 2 handed to the writer, held there until the returned gate is set."""
    gate = hold_writes(node.store.log, monkeypatch)
    writing = asyncio.create_task(
        node.store.log.append(
            EventType.TASK_SUBMITTED, "t1", payload={"workflow": "w", "steps": {"a": []}}
        )
    )
    await node.store.log.wait_written(1)
    return gate, writing


async def test_a_standby_ahead_of_the_primarys_fsync_is_not_called_divergent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await _primary(tmp_path)
    log = node.store.log
    gate, writing = await _written_not_durable(node, monkeypatch)
    assert (log.durable_id, log.written_id) == (1, 2)
    # the standby stored event 2, shipped ahead, before this primary's fsync ended
    stream = _follow(node, standby_at=2)
    first = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.1)
    assert not first.done(), "it waits for the primary's own write"
    gate.set()
    msg = await asyncio.wait_for(first, 5)
    assert msg.WhichOneof("kind") == "welcome", msg
    assert msg.welcome.from_event_id == 3
    await writing
    await stream.aclose()
    await node.store.close()


async def test_a_standby_of_another_cluster_is_refused_and_not_counted(tmp_path: Path) -> None:
    node = await _primary(tmp_path)
    with pytest.raises(Aborted, match=r"cluster c2.*cluster c1") as e:
        await anext(_follow(node, standby_at=0, cluster_id="c2"))
    assert e.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert not node.hub.standbys
    stream = _follow(node, standby_at=0)  # one of this cluster is welcome
    msg = await anext(stream)
    assert msg.WhichOneof("kind") == "welcome" and msg.welcome.cluster_id == "c1"
    await stream.aclose()
    assert not node.hub.standbys, "a stream that ended leaves no view behind"
    await node.store.close()


async def test_a_write_that_does_not_land_in_time_makes_the_standby_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sender, "HANDSHAKE_WAIT_S", 0.2)
    node = await _primary(tmp_path)
    gate, writing = await _written_not_durable(node, monkeypatch)
    stream = _follow(node, standby_at=2)
    with pytest.raises(Aborted) as e:
        await anext(stream)
    assert e.value.code is grpc.StatusCode.UNAVAILABLE, "not a divergence: nothing is cut"
    gate.set()
    await writing
    await node.store.close()


async def test_a_standby_that_stops_acking_gets_a_few_batches_then_heartbeats(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sender, "HEARTBEAT_S", 0.1)
    node = await _primary(tmp_path)
    log = node.store.log
    stream = _follow(node, standby_at=1)
    assert (await anext(stream)).WhichOneof("kind") == "welcome"
    kinds: list[str] = []
    for i in range(8):  # an event, then what the standby gets next
        await log.append(EventType.TASK_SUBMITTED, f"t{i}", payload={"workflow": "w", "steps": {}})
        kinds.append((await asyncio.wait_for(anext(stream), 5)).WhichOneof("kind"))
    n = sender.MAX_IN_FLIGHT
    assert kinds == ["batch"] * n + ["heartbeat"] * (8 - n), "then nothing until an ack"
    await node.store.close()  # the log is closed: the stream ends
    after = [m.WhichOneof("kind") async for m in _at_most(stream, 20)]
    assert len(after) < 20, f"the stream went on after its log closed: {after[:3]}..."


async def _at_most(stream: AsyncIterator[Any], n: int) -> AsyncIterator[Any]:
    for _ in range(n):
        try:
            yield await asyncio.wait_for(anext(stream), 5)
        except StopAsyncIteration:
            return


async def test_an_ack_past_what_was_sent_counts_only_what_was_sent(tmp_path: Path) -> None:
    node = await _primary(tmp_path)
    more: asyncio.Queue[Any] = asyncio.Queue()
    hello = rpb.Hello(
        node_id="n2",
        cluster_id="c1",
        last_event_id=1,
        last_term=1,
        terms=[rpb.TermStart(term=1, first_event_id=1)],
    )
    stream = ReplicationService(node).Follow(_requests(hello, more), Context())  # type: ignore[arg-type]
    assert (await anext(stream)).WhichOneof("kind") == "welcome"
    await node.store.log.append(
        EventType.TASK_SUBMITTED, "t", payload={"workflow": "w", "steps": {}}
    )
    batch = await asyncio.wait_for(anext(stream), 5)
    assert batch.WhichOneof("kind") == "batch" and batch.batch.last_event_id == 2
    more.put_nowait(rpb.StandbyMessage(ack=rpb.Ack(durable_event_id=2**60)))
    view = next(iter(node.hub.standbys.values()))
    for _ in range(100):
        if view.acked_id > 1:  # 1: what the hello said it held
            break
        await asyncio.sleep(0.01)
    assert view.acked_id == 2, "an ack counts no further than the stream sent"
    more.put_nowait(None)
    await node.store.close()
