"""An in-memory lease: unit tests and a standalone node. Not for a cluster.

Several MemoryLease objects sharing one `MemoryStore` behave like nodes
sharing one etcd: same contract, same conformance suite.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from apollo11.lease.base import LeaderInfo, Lease, MemberInfo, NodeIdTaken, World


@dataclass
class MemoryStore:
    """The shared "etcd": one leader key, the term key, member records, a revision
    counter, a clock. `lose_data()` is etcd restored empty."""

    revision: int = 0
    term: int | None = None  # the term key: the last term handed out
    holder: LeaderInfo | None = None
    expires: float = 0.0
    owner: object | None = None
    # node id -> (record, expiry, mod revision, the MemoryLease that created it)
    members: dict[str, tuple[MemberInfo, float, int, object]] = field(default_factory=dict)
    cluster_id: str | None = None
    roster: set[str] = field(default_factory=set)
    config: dict[str, Any] | None = None  # the cluster-wide settings
    config_revision: int = 0
    clock: Callable[[], float] = field(default=time.monotonic)

    def current(self) -> LeaderInfo | None:
        if self.holder is not None and self.clock() >= self.expires:
            self.holder = None
            self.owner = None
            self.revision += 1  # the expiry deletes the key: a new revision
        return self.holder

    def lose_data(self) -> None:
        """What an etcd restored empty looks like: no keys, revisions from the start."""
        self.revision = 0
        self.term = None
        self.holder = None
        self.owner = None
        self.members.clear()
        self.cluster_id = None
        self.roster.clear()
        self.config, self.config_revision = None, 0


class MemoryLease(Lease):
    def __init__(self, *, ttl_s: float = 5.0, store: MemoryStore | None = None) -> None:
        super().__init__(ttl_s=ttl_s)
        self.store = store or MemoryStore()

    async def campaign(self, node_id: str, address: str, *, min_term: int = 0) -> LeaderInfo | None:
        s = self.store
        if s.current() is not None:
            return None
        # one step, like etcd's transaction: the key and the term key together
        s.revision += 1
        s.term = max(min_term, s.term or 0) + 1
        s.holder = LeaderInfo(node_id, address, s.term)
        s.owner = self
        s.expires = s.clock() + self.ttl_s
        return s.holder

    async def renew(self) -> bool:
        s = self.store
        if s.current() is None or s.owner is not self:
            return False
        s.expires = s.clock() + self.ttl_s
        return True

    async def resign(self) -> None:
        s = self.store
        if s.owner is self:
            s.holder = None
            s.owner = None
            s.revision += 1

    async def leader(self) -> LeaderInfo | None:
        return self.store.current()

    async def publish(self, member: MemberInfo) -> None:
        s = self.store
        held = s.members.get(member.node_id)
        if held is not None and held[1] > s.clock() and held[3] is not self:
            raise NodeIdTaken(
                f"node id {member.node_id!r} is already live: another process publishes "
                f"its member record ({held[0].address})",
                held[0],
            )
        s.revision += 1
        s.members[member.node_id] = (member, s.clock() + self.ttl_s, s.revision, self)

    async def keep(self, member: MemberInfo) -> None:
        s = self.store
        held = s.members.get(member.node_id)
        if held is None or held[3] is not self or held[1] <= s.clock() or held[0] != member:
            await self.publish(member)  # gone, lapsed or different: written again
            return
        s.members[member.node_id] = (held[0], s.clock() + self.ttl_s, held[2], self)

    async def register(self, node_id: str) -> None:
        s = self.store
        if node_id not in s.roster:
            s.revision += 1
            s.roster.add(node_id)

    async def unregister(self, node_id: str) -> bool:
        s = self.store
        held = s.members.get(node_id)
        if held is not None and held[1] > s.clock():
            raise NodeIdTaken(f"member {node_id!r} is live: stop it before removing it", held[0])
        if node_id not in s.roster:
            return False
        s.revision += 1
        s.roster.discard(node_id)
        return True

    async def claim_cluster_id(self, proposed: str) -> str:
        s = self.store
        if s.cluster_id is None:
            s.revision += 1
            s.cluster_id = proposed
        return s.cluster_id

    async def claim_config(self, proposed: Mapping[str, Any]) -> Mapping[str, Any]:
        s = self.store
        if s.config is None:
            s.revision += 1
            s.config, s.config_revision = dict(proposed), s.revision
        return dict(s.config)

    async def write_config(self, values: Mapping[str, Any], *, expect: int | None) -> bool:
        s = self.store
        if expect is not None and expect != s.config_revision:
            return False
        s.revision += 1
        s.config, s.config_revision = dict(values), s.revision
        return True

    async def member_lease_left(self, node_id: str) -> int | None:
        s = self.store
        held = s.members.get(node_id)
        if held is None or held[1] <= s.clock():
            return None
        return math.floor(held[1] - s.clock())

    async def world(self) -> World:
        s = self.store
        leader = s.current()
        now = s.clock()
        live = {k: v for k, v in s.members.items() if v[1] > now}
        return World(
            leader,
            {k: v[0] for k, v in live.items()},
            s.revision,
            {k: v[2] for k, v in live.items()},
            s.term,
            s.cluster_id,
            frozenset(s.roster),
            None if s.config is None else dict(s.config),
            s.config_revision,
        )
