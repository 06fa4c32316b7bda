"""An in-memory lease: unit tests and a standalone node. Not for a cluster.

Several MemoryLease objects sharing one `MemoryStore` behave like nodes
sharing one etcd: same contract, same conformance suite.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lease.base import LeaderInfo, Lease


@dataclass
class MemoryStore:
    """The shared "etcd": one leader key, a revision counter, a clock."""

    revision: int = 0
    holder: LeaderInfo | None = None
    expires: float = 0.0
    owner: object | None = None
    clock: Callable[[], float] = field(default=time.monotonic)

    def current(self) -> LeaderInfo | None:
        if self.holder is not None and self.clock() >= self.expires:
            self.holder = None
            self.owner = None
        return self.holder


class MemoryLease(Lease):
    def __init__(
        self, *, ttl_s: float = 5.0, store: MemoryStore | None = None, min_term: int = 0
    ) -> None:
        super().__init__(ttl_s=ttl_s)
        self.store = store or MemoryStore()
        # A standalone node's terms must keep growing across restarts: start above its log.
        self.store.revision = max(self.store.revision, min_term)

    async def campaign(self, node_id: str, address: str) -> LeaderInfo | None:
        s = self.store
        if s.current() is not None:
            return None
        s.revision += 1
        s.holder = LeaderInfo(node_id, address, s.revision)
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

    async def leader(self) -> LeaderInfo | None:
        return self.store.current()
