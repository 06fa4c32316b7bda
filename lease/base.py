"""The lease: who is primary, and the fencing term every event carries.

Contract for every implementation (the conformance suite in tests/lease/
runs against each one):

* `campaign()` succeeds for at most one holder at a time (compare-and-swap
  on the leader key) and returns the term: the leader key's creation
  revision, which only ever grows.
* The holder must `renew()` before `ttl_s` runs out; a renewal that fails,
  or arrives after the lease expired, returns False and the holder must
  stop acting as primary at once.
* `resign()` releases the key so another node can win without waiting
  for the TTL.
* `leader()` reads who holds the key now (None when nobody does).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    node_id: str
    address: str
    term: int


MIN_TTL_S = 2.0


def check_ttl(ttl_s: float) -> float:
    if ttl_s < MIN_TTL_S:
        raise ValueError(
            f"lease TTL must be at least {MIN_TTL_S:g}s (got {ttl_s:g}s): below that, a "
            f"GC pause or a slow fsync can cost the primary its lease"
        )
    return ttl_s


class Lease(abc.ABC):
    """Leader election on a key with a TTL."""

    def __init__(self, *, ttl_s: float) -> None:
        self.ttl_s = check_ttl(ttl_s)

    @abc.abstractmethod
    async def campaign(self, node_id: str, address: str) -> LeaderInfo | None:
        """Try to take the leader key; the LeaderInfo (with the new term) if won."""

    @abc.abstractmethod
    async def renew(self) -> bool:
        """Keep the lease alive. False: it is lost, stop acting as primary now."""

    @abc.abstractmethod
    async def resign(self) -> None:
        """Give the leader key up (on a clean shutdown)."""

    @abc.abstractmethod
    async def leader(self) -> LeaderInfo | None:
        """Who holds the leader key now."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release client resources."""
