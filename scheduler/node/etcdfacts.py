"""What etcd holds for the cluster, as the role loop reads it each cycle: the
cluster-wide settings (lease/clusterconfig.py), the cluster id (a node of
another cluster takes no part), and whether etcd lost its data (restored
empty or from an old backup: it then knows fewer terms than this node)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

from apollo11.lease import ClusterConfig, Lease, World
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.node.fence import Fence

log = logging.getLogger("apollo11.scheduler.node")


class Host(Protocol):
    @property
    def settings(self) -> NodeSettings: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def cluster_id(self) -> str: ...

    def notice(self, text: str) -> None: ...


class EtcdFacts:
    def __init__(self, host: Host, config: ClusterConfig) -> None:
        self.host = host
        # the cluster-wide settings in force here: this node's flags until etcd's are
        # read, and etcd's from then on
        self.config = config
        self.store_behind: str | None = None  # etcd knows less than this node: why
        self.store_behind_since = 0.0  # monotonic time this node first saw that
        self.revision = 0  # etcd's revision as last read: it never goes back, but in a restore

    def apply_config(self, stored: Mapping[str, Any], *, primary: bool, fence: Fence) -> str | None:
        """Follow the cluster's settings as etcd holds them: sync_replicas and sync_mode
        at once, lease_ttl for this node's next lease (a primary keeps the TTL its lease
        was granted with). The sentence saying what changed; None: nothing did."""
        lease = self.host.lease
        try:
            new = ClusterConfig.of(stored, self.config)
        except ValueError as e:
            log.warning("ignoring the cluster settings in etcd: %s", e)
            return None
        old = self.config
        if new.lease_ttl != lease.ttl_s and not primary:
            lease.set_ttl(new.lease_ttl)
            fence.set_ttl(new.lease_ttl)
        if new == old:
            return None
        self.config = new
        changed = ", ".join(
            f"{k} {getattr(old, k)} -> {getattr(new, k)}"
            for k in ("lease_ttl", "sync_replicas", "sync_mode")
            if getattr(old, k) != getattr(new, k)
        )
        sentence = f"cluster settings from etcd: {changed}"
        if primary and new.lease_ttl != lease.ttl_s:
            sentence += " (the lease TTL applies from the next election)"
        log.info("%s", sentence)
        return sentence

    async def check_cluster(self, world: World) -> str | None:
        """etcd must still hold this node's cluster id. None when it does; else the
        sentence: this node then takes no part in the cluster's business."""
        h = self.host
        stored = world.cluster_id
        if stored is None and h.cluster_id:
            # etcd lost its data (restored empty): the data directories keep the id
            stored = await h.lease.claim_cluster_id(h.cluster_id)
            if stored == h.cluster_id:
                h.notice(f"etcd held no cluster id: put this node's back ({stored})")
        if stored is None or stored == h.cluster_id:
            return None
        return (
            f"etcd holds cluster id {stored} for {h.settings.cluster!r}, but this node "
            f"belongs to cluster {h.cluster_id}: not taking part (is --etcd pointing at "
            f"another cluster's etcd?)"
        )

    def check_store(self, world: World, known_term: int) -> None:
        """Notice etcd knowing less than this node (restored empty or from an old
        backup): say so once, in the log and in status, and hold this node's next
        campaign for a TTL (role._leaderless). A node that reads etcd only after
        another recreated the leader key says so too, from the revision."""
        held = max(world.term or 0, world.leader.term if world.leader else 0)
        went_back = world.revision < self.revision
        before, self.revision = self.revision, world.revision
        if went_back and known_term <= held and self.store_behind is None:
            # Another node saw the loss, waited its TTL and leads again before this one
            # read etcd (it was paused, or busy demoting): the revision still tells.
            leader = world.leader
            if leader is not None:
                now = f"the leader key names {leader.node_id} at term {leader.term}"
            else:
                now = "no term" if world.term is None else f"term {world.term}"
                now = f"it holds {now} and no leader"
            self.host.notice(
                f"etcd lost its data (restored empty or from a backup): its revision went "
                f"back from {before} to {world.revision}; {now}"
            )
        elif known_term > held:
            if self.store_behind is None:
                if world.term is None:
                    why = "etcd lost its data: it holds no term for this cluster"
                else:
                    why = "etcd lost its data (restored from an older backup?): it holds "
                    why += f"term {world.term} for this cluster"
                why += f", below term {known_term} this node knows"
                if world.term is None and world.revision >= known_term:
                    # Earlier versions' terms were revisions, so an etcd that kept its
                    # data has a revision above them: this may be no loss at all.
                    why += " (or the first election since an upgrade that added the term key)"
                self.store_behind, self.store_behind_since = why, time.monotonic()
                self.host.notice(why)
        elif self.store_behind is not None:
            leader = world.leader
            self.caught_up(
                f"leader key recreated at term {leader.term} by {leader.node_id}"
                if leader
                else f"its term is {world.term} again"
            )

    def caught_up(self, how: str) -> None:
        assert self.store_behind is not None
        self.host.notice(f"{self.store_behind}; {how}")
        self.store_behind = None
