"""The standby's Follow stream, in process: a real gRPC server plays the primary; the
follower writes, acknowledges, applies, and reconnects when the primary falls silent."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from apollo11.replicator import receiver
from apollo11.replicator.receiver import Follower
from apollo11.scheduler import cancelling
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state.store import Store, StoreConfig
from apollo11.v1 import replication_pb2 as rpb
from apollo11.v1 import replication_pb2_grpc as rpbg
from tests.deaf import deaf_once

CONFIG = StoreConfig(log=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER))


class FakePrimary(rpbg.ReplicationServicer):
    """Welcomes each stream, then sends what the test queues (None: go silent)."""

    def __init__(self, cluster_id: str = "c1") -> None:
        self.cluster_id = cluster_id
        self.hellos: asyncio.Queue[rpb.Hello] = asyncio.Queue()
        self.acks: asyncio.Queue[rpb.Ack] = asyncio.Queue()
        self.outgoing: asyncio.Queue[rpb.PrimaryMessage | None] = asyncio.Queue()

    async def Follow(
        self, request_iterator: AsyncIterator[rpb.StandbyMessage], context: Any
    ) -> AsyncIterator[rpb.PrimaryMessage]:
        first = await anext(aiter(request_iterator))
        await self.hellos.put(first.hello)

        async def acks() -> None:
            async for msg in request_iterator:
                await self.acks.put(msg.ack)

        reader = asyncio.create_task(acks())
        try:
            yield rpb.PrimaryMessage(
                welcome=rpb.Welcome(node_id="n1", term=1, cluster_id=self.cluster_id)
            )
            while (msg := await self.outgoing.get()) is not None:
                yield msg
            await asyncio.Event().wait()  # silent, stream open: a link that drops packets
        finally:
            reader.cancel()


async def _serve(primary: FakePrimary) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    rpbg.add_ReplicationServicer_to_server(primary, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _source(tmp_path: Path, n: int) -> Store:
    """A primary's store holding a term start and n submissions."""
    store = Store.open(tmp_path / "p", config=CONFIG, instance_id="n1")
    store.log.term = 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node_id": "n1"})
    for i in range(n):
        await store.log.append(
            EventType.TASK_SUBMITTED, f"t{i}", payload={"workflow": "w", "steps": {"a": []}}
        )
    return store


def _standby(tmp_path: Path) -> Any:
    node = SimpleNamespace(
        store=Store.open(tmp_path / "s", config=CONFIG, instance_id="n2"),
        known_term=0,
        cluster_id="c1",
        address="127.0.0.1:1",
        settings=SimpleNamespace(
            node_id="n2", data_dir=str(tmp_path / "s"), peer_ca=None, peer_cert=None, peer_key=None
        ),
        adopt_segment_size=lambda size: None,
    )
    node.saw_term = lambda term: setattr(node, "known_term", max(node.known_term, term))
    return node


def _batch(store: Store, start: int) -> rpb.PrimaryMessage:
    raw = store.log.read_raw(start)
    return rpb.PrimaryMessage(
        batch=rpb.Batch(
            first_event_id=raw.first_id,
            last_event_id=raw.last_id,
            term=1,
            records=raw.data,
            primary_durable_id=store.log.durable_id,
        )
    )


@contextlib.asynccontextmanager
async def _following(
    tmp_path: Path, events: int, known_term: int = 0, primary_cluster: str = "c1"
) -> AsyncIterator[tuple[Store, FakePrimary, Any, Follower]]:
    """A source log of `events` submissions, a fake primary (of cluster
    `primary_cluster`) serving it, and a standby of cluster c1 (knowing `known_term`)
    following that primary; all torn down after."""
    source = await _source(tmp_path, events)
    primary = FakePrimary(primary_cluster)
    server, address = await _serve(primary)
    node = _standby(tmp_path)
    node.known_term = known_term
    follower = Follower(node, address, 1)
    follower.start()
    try:
        yield source, primary, node, follower
    finally:
        await follower.stop()
        await server.stop(None)
        await node.store.close()
        await source.close()


async def test_the_follower_writes_acknowledges_and_the_loop_applies(tmp_path: Path) -> None:
    async with _following(tmp_path, 3) as (source, primary, node, follower):
        hello = await asyncio.wait_for(primary.hellos.get(), 10)
        assert hello.last_event_id == 0
        await primary.outgoing.put(_batch(source, 1))
        ack = await asyncio.wait_for(primary.acks.get(), 10)
        assert ack.durable_event_id == 4, "acknowledged durable through the batch's end"
        await node.store.log.wait_durable(3)
        assert {"t0", "t1", "t2"} <= set(node.store.state.tasks), "applied by the loop"
        assert follower.connected and node.known_term == 1
        mine, theirs = node.store.log.segments[0].path, source.log.segments[0].path
        assert Path(mine).read_bytes() == Path(theirs).read_bytes(), "byte-identical"


async def test_a_silent_primary_is_dropped_and_followed_again_from_the_durable_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(receiver, "SILENCE_S", 0.5)
    async with _following(tmp_path, 2) as (source, primary, _, _):
        assert (await asyncio.wait_for(primary.hellos.get(), 10)).last_event_id == 0
        await primary.outgoing.put(_batch(source, 1))
        await primary.outgoing.put(None)  # then silence, with the stream still open
        again = await asyncio.wait_for(primary.hellos.get(), 10)
        assert again.last_event_id == 3, "reconnected from where its log ends"


async def test_a_batch_from_a_deposed_primary_is_refused_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    async with _following(tmp_path, 2, known_term=2) as (source, primary, node, _):
        await asyncio.wait_for(primary.hellos.get(), 10)
        await primary.outgoing.put(_batch(source, 1))
        # The welcome (term 1) is refused already: the follower drops the stream and
        # comes back, from nothing.
        assert (await asyncio.wait_for(primary.hellos.get(), 10)).last_event_id == 0
        assert node.store.log.durable_id == 0
        assert primary.acks.empty()


async def test_a_primary_of_another_cluster_is_not_followed(tmp_path: Path) -> None:
    async with _following(tmp_path, 2, primary_cluster="c2") as (source, primary, node, f):
        hello = await asyncio.wait_for(primary.hellos.get(), 10)
        assert hello.cluster_id == "c1", "the standby says which cluster it belongs to"
        await primary.outgoing.put(_batch(source, 1))
        # its welcome names cluster c2: refused, the stream dropped, nothing written
        assert (await asyncio.wait_for(primary.hellos.get(), 10)).last_event_id == 0
        assert node.store.log.durable_id == 0 and not f.connected


class EndingPeer(rpbg.ReplicationServicer):
    """Ends every stream as it opens: refusing it after the hello, as a primary that
    just stepped down does, or closing it."""

    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse

    async def Follow(
        self, request_iterator: AsyncIterator[rpb.StandbyMessage], context: Any
    ) -> AsyncIterator[rpb.PrimaryMessage]:
        await anext(aiter(request_iterator))
        if self.refuse:
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "n1 is not the primary")
        return
        yield  # a stream handler


@pytest.mark.parametrize("peer", ["refusing", "closing", "absent"])
async def test_a_stop_that_lands_as_the_stream_ends_stops_the_follower(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peer: str
) -> None:
    """The role loop stops the follower before it campaigns. A cancellation that came
    as a stream ended (with the call's status in, its preparation not yet done) was
    lost inside grpc.aio: the follower retried forever, and stop() never returned."""
    server, address = await _serve(EndingPeer(refuse=peer == "refusing"))
    if peer == "absent":
        await server.stop(None)  # nobody listens there: the connection is refused
    follower = Follower(_standby(tmp_path), address, 1, leader_id="n1")
    stub = rpbg.ReplicationStub

    def cancelled_as_it_ends(channel: grpc.aio.Channel) -> Any:
        real = stub(channel)

        def follow(requests: Any) -> Any:
            call = real.Follow(requests)
            # stop()'s cancel, at the moment the call's status arrives
            call.add_done_callback(lambda _: follower.task and follower.task.cancel())
            return call

        return SimpleNamespace(Follow=follow)

    monkeypatch.setattr(rpbg, "ReplicationStub", cancelled_as_it_ends)
    follower.start()
    task = follower.task
    assert task is not None
    try:
        await asyncio.wait((task,), timeout=30)
        assert task.cancelled(), "the follower goes on after it was cancelled"
    finally:
        task.cancel()
        await follower.stop()
        await server.stop(None)
        await follower.node.store.close()


async def test_stop_cancels_again_a_follower_that_lost_its_cancellation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Whatever else may lose a cancellation one day, stop() returns, and says so."""

    monkeypatch.setattr(Follower, "_run", deaf_once)
    monkeypatch.setattr(cancelling, "CHECK_S", 0.05)
    follower = Follower(_standby(tmp_path), "127.0.0.1:1", 1)
    follower.start()
    try:
        await asyncio.sleep(0)  # in its first wait
        await asyncio.wait_for(follower.stop(), 30)
        assert follower.task is None
        assert "runs on 0.05s after it was cancelled: cancelling it again" in caplog.text
    finally:
        await follower.node.store.close()
