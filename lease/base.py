"""The lease: who is primary, and the fencing term every event carries.

Contract for every implementation (the conformance suite in tests/lease/
runs against each one):

* `campaign()` succeeds for at most one holder at a time (compare-and-swap
  on the leader key) and returns the new term: one more than the higher of
  the store's term (the last one it handed out) and the candidate's
  `min_term`, written to the store in the same compare-and-swap.
* The holder must `renew()` before `ttl_s` runs out; a renewal that fails,
  or arrives after the lease expired, returns False and the holder must
  stop acting as primary at once. A lapsed lease is never revived.
* `resign()` releases the key so another node can win without waiting
  for the TTL.
* `leader()` reads who holds the key now (None when nobody does).
* `publish()` keeps this node's member record (role, address, durable
  position, the highest term it knows) under a lease of its own, so a dead
  node's record disappears by itself; `world()` reads the leader, every
  member, the store's term and the cluster id in one request. A record is
  created only where none exists, and then updated only by the Lease object
  that created it (compare-and-swap on the record's lease): a record another
  process holds raises NodeIdTaken, and is left as it is.
* `member_lease_left(node_id)` reads how long a member record's lease has
  left, so that a record kept alive can be told from one that is lapsing.
* `register(node_id)` puts the node on the cluster's roster (a key with no
  lease: it stays while the node is down); `world()` returns the roster. How
  many members there are is what an election's quorum is counted from.
* `claim_cluster_id(proposed)` creates the cluster id key if it is absent
  (compare-and-swap) and returns the id the store holds: the proposed one, or
  the one another node put there first.
* Errors reaching the store (unreachable, timeout) raise LeaseUnavailable;
  callers treat that like a failed renewal.

Why terms stay fencing tokens when the store loses its data
------------------------------------------------------------

A term must only grow and no two leaders may share one, also after etcd is
restored empty or from an old backup (its revisions then restart near 1, so
a term taken from a revision would fall below the terms already in the logs
and every promotion would fail with StaleTermError until the revision caught
up). So the term is a value of its own, the `term` key, and a campaign
proposes `max(min_term, term key) + 1`, where the node passes as `min_term`
the highest term it knows of: its own log, the leaders it has seen, and every
live member's published terms.

* Unique: every successful campaign rewrites the term key, and each one
  compares the key's revision (or its absence) as it read it. Of two
  campaigns that read the same term key, at most one commits; the other
  fails and reads again. Within one store history the term key only grows,
  so no value is handed out twice.
* Above every term in a live log, after a restore: the node campaigns only
  when it is at least as up to date as the best live member (the node's
  `_leaderless`), and its `min_term` covers every live member's last and
  known term, so the new term is above all of them whatever the restored
  store holds.
* Not two primaries at once: a restore drops the leader key while the old
  primary may still believe in its lease. A node that sees the store behind
  what it knows (no term key, or one below its known term) waits one TTL
  before it campaigns: by then the old primary has fenced itself (it fences
  before a TTL has passed since its last renewal, which went to the etcd
  that was lost).

What this cannot cover: a member that was down through the restore and
knows a term above the new one. It refuses to follow (it sees a term older
than its own) until an election runs with its record live; a restart of the
primary starts one.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler.errors import ApolloError

MIN_TTL_S = 2.0


class LeaseUnavailable(ApolloError):
    """The lease store (etcd) cannot be reached or did not answer in time."""


class NodeIdTaken(ApolloError):
    """Another process holds this node id's member record: two processes share one
    --node-id. `holder` is that record."""

    def __init__(self, message: str, holder: MemberInfo | None = None) -> None:
        super().__init__(message)
        self.holder = holder


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
    known_term: int = 0  # the highest term this node has seen (>= last_term)
    instance: str = ""  # random, per process: which process publishes this record
    # A primary handing over (a switchover): the member the election should prefer,
    # when that one is as far ahead as the best candidate.
    handover: str = ""

    @property
    def position(self) -> tuple[int, int]:
        """Who is more up to date: the higher (last term, last event id)."""
        return (self.last_term, self.last_event_id)


@dataclass(frozen=True, slots=True)
class World:
    """The cluster as the lease store saw it at `revision`, read in one request.

    `term`: the last term the store handed out; None when it holds none (a new
    cluster, or a store that lost its data)."""

    leader: LeaderInfo | None
    members: dict[str, MemberInfo] = field(default_factory=dict)
    revision: int = 0
    member_revisions: dict[str, int] = field(default_factory=dict)  # node -> mod revision
    term: int | None = None
    cluster_id: str | None = None  # None: the store holds none (new, or it lost its data)
    roster: frozenset[str] = frozenset()  # every member that ever registered, live or not
    config: Mapping[str, Any] | None = None  # the cluster-wide settings (clusterconfig.py)
    config_revision: int = 0  # their mod revision (write_config's `expect`)

    def highest_known_term(self) -> int:
        """The highest term any live member (or the leader) has published."""
        terms = [max(m.last_term, m.known_term) for m in self.members.values()]
        if self.leader is not None:
            terms.append(self.leader.term)
        return max(terms, default=0)


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
    async def campaign(self, node_id: str, address: str, *, min_term: int = 0) -> LeaderInfo | None:
        """Try to take the leader key; the LeaderInfo (with the new term) if won.

        The new term is above both the store's term and `min_term` (the highest
        term the candidate knows of), and is written to the store with the key."""

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

    def set_ttl(self, ttl_s: float) -> None:
        """The TTL of leases taken from now on (a cluster config change: clusterconfig.py);
        a lease held already keeps the TTL it was granted with."""
        self.ttl_s = check_ttl(ttl_s)

    @abc.abstractmethod
    async def claim_config(self, proposed: Mapping[str, Any]) -> Mapping[str, Any]:
        """Store `proposed` as the cluster's settings unless some are stored; the stored."""

    @abc.abstractmethod
    async def write_config(self, values: Mapping[str, Any], *, expect: int | None) -> bool:
        """Replace the cluster's settings, if they are still as read at store revision
        `expect` (their mod revision; None: whatever they are). False: they changed."""

    async def wait_change(self, timeout_s: float) -> None:
        """Return when the store may have changed (a leader key, a member record), or
        after `timeout_s`. A store that can watch returns as soon as it sees a change;
        the default returns at once, and the caller polls at its own pace."""
        return None

    async def keep(self, member: MemberInfo) -> None:
        """Keep this node's member record alive without writing it again: `member` is
        what was published last, and the store makes no new revision for it (a lease
        refresh), so an idle cluster writes nothing. The default publishes it."""
        await self.publish(member)

    @abc.abstractmethod
    async def world(self) -> World:
        """The leader and every live member, in one read."""

    @abc.abstractmethod
    async def member_lease_left(self, node_id: str) -> int | None:
        """Whole seconds left on the lease under `node_id`'s member record, rounded
        down (etcd's grain); None: there is no record. Only a refresh makes it more
        than it was less the time since: that is how a record kept alive by a live
        process is told from a dead one's (an idle member writes no new revision,
        see keep()). A lease past its end that the store has not removed yet is 0."""

    @abc.abstractmethod
    async def register(self, node_id: str) -> None:
        """Put `node_id` on the roster (kept while the node is down; idempotent)."""

    @abc.abstractmethod
    async def unregister(self, node_id: str) -> bool:
        """Take `node_id` off the roster (a member gone for good); False: it was not on
        it. Refused (NodeIdTaken) while the member is live."""

    @abc.abstractmethod
    async def claim_cluster_id(self, proposed: str) -> str:
        """Store `proposed` as the cluster id unless one is stored; the stored one."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release client resources (and this node's member record)."""
