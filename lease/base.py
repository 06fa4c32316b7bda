"""The lease: who is primary, and the fencing term every event carries.

Contract for every implementation (the conformance suite in tests/lease/
runs against each one):

* `campaign()` succeeds for at most one holder at a time (compare-and-swap
  on the leader key) and returns the term: the leader key's creation
  revision, which only ever grows.
* The holder must `renew()` before `ttl_s` runs out; a renewal that fails,
  or arrives after the lease expired, returns False and the holder must
  stop acting as primary at once. A lapsed lease is never revived.
* `resign()` releases the key so another node can win without waiting
  for the TTL.
* `leader()` reads who holds the key now (None when nobody does).
* `publish()` keeps this node's member record (role, address, durable
  position) under a lease of its own, so a dead node's record disappears
  by itself; `world()` reads the leader and every member in one request.
* Errors reaching the store (unreachable, timeout) raise LeaseUnavailable;
  callers treat that like a failed renewal.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from scheduler.errors import ApolloError

MIN_TTL_S = 2.0


class LeaseUnavailable(ApolloError):
    """The lease store (etcd) cannot be reached or did not answer in time."""


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    node_id: str
    address: str
    term: int


@dataclass(frozen=True, slots=True)
class MemberInfo:
    node_id: str
    role: str  # primary, standby, starting
    address: str
    last_event_id: int
    last_term: int
    peer_address: str = ""  # where standbys follow it ("": the public address)
    shell: bool = False  # started with --allow-shell

    @property
    def position(self) -> tuple[int, int]:
        """Who is more up to date: the higher (last term, last event id)."""
        return (self.last_term, self.last_event_id)


@dataclass(frozen=True, slots=True)
class World:
    """The cluster as the lease store saw it at `revision`, read in one request."""

    leader: LeaderInfo | None
    members: dict[str, MemberInfo] = field(default_factory=dict)
    revision: int = 0
    member_revisions: dict[str, int] = field(default_factory=dict)  # node -> mod revision


def check_ttl(ttl_s: float) -> float:
    if ttl_s < MIN_TTL_S:
        raise ValueError(
            f"lease TTL must be at least {MIN_TTL_S:g}s (got {ttl_s:g}s): below that, a "
            f"GC pause or a slow fsync can cost the primary its lease"
        )
    return ttl_s


class Lease(abc.ABC):
    """Leader election on a key with a TTL, plus member records."""

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

    @abc.abstractmethod
    async def publish(self, member: MemberInfo) -> None:
        """Write this node's member record (and keep its own lease alive)."""

    @abc.abstractmethod
    async def world(self) -> World:
        """The leader and every live member, in one read."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release client resources (and this node's member record)."""
