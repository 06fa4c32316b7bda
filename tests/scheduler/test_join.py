"""A node joining its cluster, in process on a shared in-memory lease: the cluster id
and the node id are checked before it serves anything."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from apollo11.lease import MemberInfo, MemoryLease, MemoryStore
from apollo11.scheduler import identity
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.errors import ApolloError
from apollo11.scheduler.identity import ForeignClusterError, Identity
from apollo11.scheduler.log import FsyncPolicy
from apollo11.scheduler.node import Node

TTL = 2.0


@pytest.fixture
async def node_on(tmp_path: Path) -> AsyncIterator[Callable[..., Node]]:
    nodes: list[Node] = []

    def make(store: MemoryStore, node_id: str, data: str, **kw: Any) -> Node:
        n = Node(
            NodeSettings(
                node_id=node_id,
                data_dir=tmp_path / data,
                listen="127.0.0.1:0",
                etcd=["http://127.0.0.1:1"],  # a cluster node; the lease below stands in
                cluster="c",
                lease_ttl=TTL,
                fsync=FsyncPolicy.UNSAFE_NEVER,
                **kw,
            ),
            lease=MemoryLease(ttl_s=TTL, store=store),
        )
        nodes.append(n)
        return n

    yield make
    for n in nodes:
        if n.store is not None:
            await n.stop()


async def test_the_first_node_creates_the_id_and_keeps_it(
    node_on: Callable[..., Node], tmp_path: Path
) -> None:
    store = MemoryStore()
    n1 = node_on(store, "n1", "d1")
    await n1.start()
    assert store.cluster_id and n1.cluster_id == store.cluster_id
    assert identity.read(tmp_path / "d1") == Identity(store.cluster_id, "c")


async def test_a_data_dir_of_another_cluster_is_refused(
    node_on: Callable[..., Node], tmp_path: Path
) -> None:
    store = MemoryStore(cluster_id="e" * 32)
    (tmp_path / "d1").mkdir()
    identity.write(tmp_path / "d1", Identity("f" * 32, "other"))
    with pytest.raises(ForeignClusterError, match=r"f{32}.*e{32}"):
        await node_on(store, "n1", "d1").start()
    assert identity.read(tmp_path / "d1") == Identity("f" * 32, "other"), "left as it was"


async def test_a_node_id_another_process_keeps_publishing_is_refused(
    node_on: Callable[..., Node], tmp_path: Path
) -> None:
    store = MemoryStore()
    await node_on(store, "n1", "d1").start()
    # "already live", not the bound's "neither lapsed nor was seen kept alive": the
    # live node's record was seen written again or refreshed (scheduler/node/nodeid.py)
    with pytest.raises(ApolloError, match="'n1' is already live"):
        await node_on(store, "n1", "d2").start()
    assert identity.read(tmp_path / "d2") is None, "a refused node keeps nothing"


async def test_a_record_nobody_refreshes_is_waited_out(
    node_on: Callable[..., Node], caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    # this node's own record from before a crash: nobody publishes it any more
    await MemoryLease(ttl_s=TTL, store=store).publish(
        MemberInfo("n1", "standby", "127.0.0.1:9", 0, 0, instance="dead")
    )
    n1 = node_on(store, "n1", "d1")
    with caplog.at_level(logging.INFO, logger="apollo11.scheduler.node"):
        await n1.start()
    assert "node id 'n1': its old record lapsed after" in caplog.text, "waited out"
    assert store.members["n1"][0].instance == n1.instance
