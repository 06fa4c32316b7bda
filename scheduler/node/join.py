"""Joining a cluster at start: is this node's cluster id etcd's, is its node id
free, and which cluster-wide settings are in force. Before anything is served
or published: a node of another cluster, or a second process with this node
id, must take no part at all."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from apollo11.lease import ClusterConfig, Lease, LeaseUnavailable
from apollo11.scheduler import identity
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.node import nodeid
from apollo11.scheduler.state import Store

log = logging.getLogger("apollo11.scheduler.node")

RETRY_S = 1.0  # how often a starting node asks an unreachable etcd again


async def join(
    lease: Lease,
    settings: NodeSettings,
    store: Store | None,
    config: ClusterConfig,
    apply_config: Callable[[Mapping[str, Any]], str | None],
) -> tuple[str, str]:
    """Check this node's cluster id and node id against etcd (retrying while etcd
    does not answer): (the cluster id, the sentence to log), or an ApolloError
    saying why not."""
    last_warned = -1e9
    while True:
        try:
            ident, joined = await _check_cluster_id(lease, settings, store)
            waited = await nodeid.check(lease, settings.node_id, settings.cluster)
            if identity.read(settings.data_dir) is None:
                # kept only now: a node refused for its node id leaves nothing behind
                await asyncio.to_thread(identity.write, settings.data_dir, ident)
            # this node's flags are the cluster's settings only if none are stored
            stored = await lease.claim_config(config.to_json())
            configured = apply_config(stored) or "cluster settings as this node's flags"
            return ident.cluster_id, f"{joined}; {waited}; {configured}"
        except LeaseUnavailable as e:
            now = time.monotonic()
            if now - last_warned > 5:
                log.warning("cannot check this node's identity with etcd yet: %s", e)
                last_warned = now
            await asyncio.sleep(RETRY_S)


async def _check_cluster_id(
    lease: Lease, s: NodeSettings, store: Store | None
) -> tuple[identity.Identity, str]:
    assert store is not None
    local = identity.read(s.data_dir)
    stored = await lease.claim_cluster_id(local.cluster_id if local else identity.new_id())
    has_history = store.log.durable_id > 0 or bool(store.snapshots.watermarks())
    return identity.decide(
        data_dir=str(s.data_dir),
        cluster=s.cluster,
        local=local,
        stored=stored,
        has_history=has_history,
    )
