"""The role decision: given what this node knows of itself and the world it read
once this cycle, what does it do? Pure: no lease, no store, no clock of its own.

Patroni's HA cycle in two halves: `decide(me, world)` names the move as data,
with the sentence the node logs; the node (node.py) carries it out. The
election rule is `elect(me, world)`: among the members that may lead, the one
furthest ahead (last term, then last event id), the smallest node id on a tie.

Every reason to stop leading is a field of `Me` that `decide` reads, in one
order (`leave`): the watchers (the fence, the log's, a switchover) record a fact
and wake the loop, and the sentence logged is the same whichever got there first.
"""

from __future__ import annotations

from dataclasses import dataclass

from apollo11.lease import LeaderInfo, MemberInfo, World
from apollo11.scheduler.state import REPAIRING

FAILED = "failed"  # the role of a node whose log refuses writes: it neither leads nor follows
SETTLE_S = 0.25  # after the leader vanishes, let every standby publish its final position
# A member in one of these roles never leads: one still marked primary with no leader
# key is the one that died (or is about to demote itself), one whose log failed takes
# no event, one being refilled may lack acknowledged events.
NOT_CANDIDATES = ("primary", FAILED, REPAIRING)
NOT_REPORTERS = ("primary", FAILED)


@dataclass(frozen=True, slots=True)
class Me:
    """This node, as the role loop sees it at the start of a cycle."""

    record: MemberInfo  # what it just published (its position, its role)
    role: str  # "primary", "standby", FAILED
    known_term: int  # the highest term it has seen anywhere
    holding: LeaderInfo | None  # the lease it won, while primary
    log_trouble: str | None = None  # why its log refuses writes
    needs_through: int | None = None  # while repairing: the event it must hold again
    leaderless_for: float | None = None  # seconds since it first saw no leader (None: not)
    # the store's revision when it first saw no leader: a record not put since is
    # a dead member's, whose position is what it published while it still lived
    leaderless_at: int = 0
    store_behind: str | None = None  # etcd knows less than this node: why
    store_behind_for: float = 0.0  # seconds since it noticed
    ttl_s: float = 5.0
    # standbys a write waits for (0: asynchronous, or a relaxed sync mode that may ack
    # with fewer): what the election's quorum is counted from
    sync_replicas: int = 0
    # Reasons to stop leading, each None while it does not hold:
    fence_lapsed: str | None = None  # the lease is lost or may be (node/fence.py)
    foreign: str | None = None  # etcd holds another cluster's id: the sentence
    duplicate: str | None = None  # another process publishes this node id: the sentence
    handed_over: str | None = None  # a switchover caught its target up: why
    etcd_error: str | None = None  # etcd did not answer this cycle (the world is None)


# The moves. Each carries the sentence the node logs when it has carried it out
# (a move that acts may log its own result instead: a promotion, a demotion).


@dataclass(frozen=True, slots=True)
class StayPrimary:
    sentence: str


@dataclass(frozen=True, slots=True)
class Demote:
    why: str
    role: str = "standby"  # FAILED: its log takes no event


@dataclass(frozen=True, slots=True)
class Hold:
    """Change nothing this cycle (etcd did not answer: a standby keeps following)."""

    sentence: str


@dataclass(frozen=True, slots=True)
class Follow:
    leader: LeaderInfo


@dataclass(frozen=True, slots=True)
class StandAside:
    """Follow no one; `redirect` is the leader to send writes to (None: forget it)."""

    sentence: str
    redirect: LeaderInfo | None = None
    failed: bool = False  # its log refuses writes: the role says so (FAILED)


@dataclass(frozen=True, slots=True)
class Abstain:
    """No leader: not campaigning this cycle (the node keeps counting its leaderless time)."""

    sentence: str


@dataclass(frozen=True, slots=True)
class Campaign:
    min_term: int  # above every term this node and the live members know


Move = StayPrimary | Demote | Hold | Follow | StandAside | Abstain | Campaign


def elect(me: MemberInfo, world: World) -> MemberInfo:
    """The member that should lead now, if this node is one of the candidates: the
    furthest ahead (the smallest node id on a tie), or the one a primary handing over
    named (a switchover), when it is as far ahead: never one that lacks an event."""
    others = [
        m
        for m in world.members.values()
        if m.role not in NOT_CANDIDATES and m.node_id != me.node_id
    ]
    candidates = [*others, me]
    best = max(candidates, key=lambda m: (m.position, _reverse(m.node_id)))
    named = {m.handover for m in world.members.values() if m.handover} | (
        {me.handover} if me.handover else set()
    )
    for m in candidates:
        if m.node_id in named and m.position == best.position:
            return m
    return best


def began(me: str, previous: str | None, world: World | None) -> str:
    """How this node's term begins, recorded in its TERM_STARTED (`apollo11 history`).

    `previous` is the last term's leader (None: the log holds no term; "": its
    TERM_STARTED is no longer kept, or could not be read). "bootstrap": no earlier
    term; "restart": the previous leader was this node; "switchover": the previous
    leader's record names this node as the one it hands over to; "failover": the
    previous leader's lease ended (it died, stopped, or was cut off); "" when that
    leader is unknown."""
    if previous is None:
        return "bootstrap"
    if previous == me:
        return "restart"
    if not previous:
        return ""  # who led before is not known (its TERM_STARTED not kept or not read)
    record = world.members.get(previous) if world is not None else None
    if record is not None and record.handover == me:
        return "switchover"
    return "failover"


def quorum(members: int, sync_replicas: int) -> int:
    """How many members must report their position before one of them may lead.

    A write is acknowledged once it is on the primary and `sync_replicas` standbys:
    k + 1 members. Positions from n - k members always include one of those, so
    the furthest ahead of them holds every acknowledged write (Raft's quorum
    intersection, counted from the ack). Without synchronous acks nothing is
    certain; a majority keeps a member that was down longest from leading alone
    (a whole cluster restarting, that member first)."""
    if sync_replicas >= 1:
        return max(1, members - sync_replicas)
    return members // 2 + 1


def leave(me: Me) -> Demote | None:
    """Why a primary must stop leading now, the first reason in this order (the log
    first: the role it leaves to says so); None: nothing says it must."""
    if me.log_trouble is not None:
        return Demote(f"its event log failed ({me.log_trouble})", role=FAILED)
    for why in (me.fence_lapsed, me.foreign, me.duplicate, me.handed_over):
        if why is not None:
            return Demote(why)
    return None


def decide(me: Me, world: World | None, *, log_retry_s: float = 1.0) -> Move:
    """One decision for one cycle; `world` is None when etcd did not answer."""
    node_id = me.record.node_id
    if me.role == "primary":
        demote = leave(me)
        if demote is not None:
            return demote
        mine = me.holding
        if world is None:
            return Hold(f"primary: term {mine.term if mine else '?'}; {me.etcd_error}")
        leader = world.leader
        if leader is None or mine is None or leader.term != mine.term:
            return Demote("the leader key is gone or belongs to another term")
        return StayPrimary(f"primary: term {mine.term}")
    if me.log_trouble is not None:
        # Neither campaign nor follow: this log can take no event. The leader is
        # remembered only to redirect writes to it.
        leader = world.leader if world is not None else None
        return StandAside(
            f"not campaigning or following: the event log failed ({me.log_trouble}); "
            f"retrying to reopen it every {log_retry_s:g}s",
            redirect=leader if leader and leader.node_id != node_id else None,
            failed=True,
        )
    if me.foreign is not None:
        return StandAside(me.foreign)
    if me.duplicate is not None:
        return StandAside(me.duplicate)
    if world is None:
        return Hold(f"{me.etcd_error}")
    leader = world.leader
    if leader is not None and leader.term < me.known_term:
        # etcd restored from an older backup: the key names a term already over
        return StandAside(
            f"the leader key names {leader.node_id} at term {leader.term}, below term "
            f"{me.known_term} this node knows: not following it; waiting for it to lapse"
        )
    if leader is not None and leader.node_id != node_id:
        return Follow(leader)
    if leader is not None:
        return StandAside(
            f"the leader key still names this node (term {leader.term}) from before a "
            f"restart; waiting for its lease to lapse"
        )
    return _leaderless(me, world)


def _leaderless(me: Me, world: World) -> Move:
    if me.leaderless_for is None:
        return Abstain("no leader: published this node's position, waiting for the others'")
    if me.leaderless_for < SETTLE_S:
        return Abstain("no leader: waiting for every standby's final position")
    if me.store_behind is not None and me.store_behind_for < me.ttl_s:
        # The restore dropped the leader key, not the old primary's belief in it: it
        # fences itself within a TTL of its last renewal, which went to the lost etcd.
        return Abstain(
            f"no leader: {me.store_behind}; waiting one TTL ({me.ttl_s:g}s) "
            f"before campaigning, so that a primary of the old term has fenced itself"
        )
    if me.needs_through is not None:
        return Abstain(
            f"no leader: not campaigning while repairing (this node needs events "
            f"through {me.needs_through}, it holds {me.record.position})"
        )
    # Reporters: a record still marked primary is the one that died (its position is
    # no one's to take over), a failed log takes no more events. A repairing member
    # cannot lead, but what it refilled it holds: it reports (and see below). A live
    # member republishes every cycle; a record not put since the leader went is that
    # of a member killed with it, live until its TTL: it may understate what that
    # member holds, so it vouches for nothing.
    reporting = {
        m.node_id
        for m in world.members.values()
        if m.role not in NOT_REPORTERS
        and world.member_revisions.get(m.node_id, 0) > me.leaderless_at
    }
    reporting.add(me.record.node_id)
    members = len(world.roster | set(world.members) | reporting)
    need = quorum(members, me.sync_replicas)
    if len(reporting) < need:
        return Abstain(
            f"no leader: {len(reporting)} of {members} members report their position, "
            f"{need} must before one may lead (so that none that missed acknowledged "
            f"writes does); waiting for "
            + (", ".join(sorted((world.roster | set(world.members)) - reporting)) or "them")
            + " (one gone for good: apollo11 roster remove ID)"
        )
    best = elect(me.record, world)
    ahead = [
        m
        for m in world.members.values()
        if m.role == REPAIRING and m.node_id != me.record.node_id and m.position > best.position
    ]
    if ahead:
        # It followed the last primary further than any candidate: what it holds may
        # be acknowledged, and electing a candidate would cut it.
        return Abstain(
            f"no leader: {ahead[0].node_id} (repairing, it cannot lead) holds events up to "
            f"{ahead[0].position}, beyond the best candidate at {best.position}; waiting"
        )
    if best.node_id != me.record.node_id:
        return Abstain(
            f"no leader: {best.node_id} is at {best.position}, ahead of this node at "
            f"{me.record.position}; not campaigning"
        )
    # Above every term this node and the live members know: after etcd lost its
    # data, its own term key would start again from nothing (lease/base.py).
    return Campaign(max(me.known_term, world.highest_known_term()))


def _reverse(node_id: str) -> tuple[int, ...]:
    """Sort key so that max() prefers the smallest node id on a tie."""
    return tuple(-ord(c) for c in node_id)
