"""Only nodes of the cluster replicate: a standby follows only a primary whose
certificate the cluster CA signed for the node id the lease names; a primary feeds
only a standby whose certificate the cluster CA signed for the id it says hello with."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from apollo11.replicator.receiver import Follower
from apollo11.scheduler.client import SyncClient
from apollo11.scheduler.security.tls import KeyPair, server_credentials
from apollo11.v1 import replication_pb2 as rpb
from apollo11.v1 import replication_pb2_grpc as rpbg
from tests.replicator.test_receiver import FakePrimary, _batch, _source, _standby
from tests.secure import Pki, make_pki, start_secure_node


async def _serve_tls(primary: FakePrimary, key: bytes, cert: bytes, ca: bytes) -> tuple[Any, str]:
    server = grpc.aio.server()
    rpbg.add_ReplicationServicer_to_server(primary, server)
    port = server.add_secure_port("127.0.0.1:0", server_credentials(KeyPair(cert, key), ca))
    await server.start()
    return server, f"127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def _standby_of(
    tmp_path: Path, pki: Pki, key: bytes, cert: bytes, leader_id: str
) -> AsyncIterator[tuple[Any, FakePrimary, Any]]:
    """A standby n2 (with its cluster certificate) following a primary that presents
    `cert`, which the lease says is `leader_id`."""
    source = await _source(tmp_path, 3)
    primary = FakePrimary()
    server, address = await _serve_tls(primary, key, cert, pki.pem("ca.pem"))
    node = _standby(tmp_path)
    node.settings.peer_ca = pki.dir / "ca.pem"
    node.settings.peer_cert = pki.dir / "n2.pem"
    node.settings.peer_key = pki.dir / "n2-key.pem"
    follower = Follower(node, address, 1, leader_id=leader_id)
    follower.start()
    try:
        yield source, primary, node
    finally:
        await follower.stop()
        await server.stop(None)
        await node.store.close()
        await source.close()


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


async def test_a_standby_follows_the_primary_the_lease_names(tmp_path: Path, pki: Pki) -> None:
    key, cert = pki.pem("n1-key.pem"), pki.pem("n1.pem")
    async with _standby_of(tmp_path, pki, key, cert, "n1") as (source, primary, node):
        await asyncio.wait_for(primary.hellos.get(), 10)
        await primary.outgoing.put(_batch(source, 1))
        await node.store.log.wait_durable(3)
        assert node.store.log.durable_id == 4


@pytest.mark.parametrize("who", ["another CA", "another node of the cluster"])
async def test_a_fake_primary_cannot_feed_a_standby(tmp_path: Path, pki: Pki, who: str) -> None:
    if who == "another CA":
        key, cert = pki.foreign_key, pki.foreign_cert  # names n1, but not signed by ours
    else:
        key, cert = pki.pem("n3-key.pem"), pki.pem("n3.pem")  # ours, but n3's, not n1's
    async with _standby_of(tmp_path, pki, key, cert, "n1") as (_, primary, node):
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(primary.hellos.get(), 3)  # no stream ever opened
        assert node.store.log.durable_id == 0, "nothing written"


def _follow(address: str, creds: grpc.ChannelCredentials, node_id: str) -> list[str]:
    """Open Follow as `node_id`; the kinds of the first messages (or the error)."""
    hello = rpb.StandbyMessage(hello=rpb.Hello(node_id=node_id, address="127.0.0.1:1"))
    options = [("grpc.ssl_target_name_override", "n1")]
    with grpc.secure_channel(address, creds, options=options) as ch:
        call = rpbg.ReplicationStub(ch).Follow(iter([hello]), timeout=10)
        kinds = []
        try:
            for msg in call:
                kinds.append(msg.WhichOneof("kind"))
                if msg.WhichOneof("kind") == "batch":
                    break
        except grpc.RpcError as e:
            kinds.append(f"{e.code().name}: {e.details()}")
        call.cancel()
        return kinds


def test_a_fake_standby_receives_no_record(tmp_path: Path, pki: Pki) -> None:
    node = start_secure_node(tmp_path, pki)
    try:
        with SyncClient(node.address, ca=pki.dir / "ca.pem", token=pki.tokens["submitter"]) as c:
            c.submit("etl", {"step_seconds": 0, "password": "hunter2"})
        peer = f"127.0.0.1:{node.peer_port}"
        got = _follow(peer, pki.channel_creds("foreign"), "n2")
        assert len(got) == 1 and got[0].startswith("UNAVAILABLE"), got
        got = _follow(peer, pki.channel_creds(), "n2")  # TLS, no certificate at all
        assert len(got) == 1 and got[0].startswith("UNAVAILABLE"), got
        # A certificate of the cluster, but n3's, claiming to be n2:
        got = _follow(peer, pki.channel_creds("n3"), "n2")
        assert got == [
            "PERMISSION_DENIED: the peer certificate is 'n3''s, but the stream says it is 'n2'"
        ]
        # The real n2 is fed: the control that shows the others were refused for cause.
        assert _follow(peer, pki.channel_creds("n2"), "n2")[:2] == ["welcome", "batch"]
    finally:
        assert node.stop() == 0
