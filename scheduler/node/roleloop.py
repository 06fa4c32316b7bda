"""The role loop: read the world, decide (role.py), carry it out, say so.

A few times a second the loop publishes this node's record, reads the world
from etcd once and takes one decision, logged as one sentence (Patroni's
style). It is the only way into and out of primary: the fence, the log's
watch and a switchover record a fact (`fence.lost`, the log's trouble,
`handed_over`) and wake the loop, which decides with all of them at once
(`role.leave`), so the sentence logged does not depend on which watcher got
there first. While the loop gets there the fence is already invalid: no ack
and no new attempt (node/commit.py, engine/steps.py).

A wake interrupts the loop's read of etcd: a primary cut off from etcd still
demotes itself on time (a read may take up to half a TTL before it times out).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from apollo11.lease import (
    ClusterConfig,
    LeaderInfo,
    Lease,
    LeaseUnavailable,
    MemberInfo,
    NodeIdTaken,
    World,
)
from apollo11.replicator import Follower, ReplicationHub, StandbySide
from apollo11.scheduler import metrics
from apollo11.scheduler.errors import ApolloError
from apollo11.scheduler.node import role
from apollo11.scheduler.node.etcdfacts import EtcdFacts
from apollo11.scheduler.node.fence import WATCHDOG_S, Fence
from apollo11.scheduler.node.following import Following
from apollo11.scheduler.node.leading import Leading
from apollo11.scheduler.node.logwatch import LOG_RETRY_S
from apollo11.scheduler.node.nodeid import DUPLICATE_HINT
from apollo11.scheduler.node.parts import Parts
from apollo11.scheduler.node.role import FAILED
from apollo11.scheduler.state import REPAIRING, Repair

log = logging.getLogger("apollo11.scheduler.node")

CYCLE_S = 0.1  # how often the role loop reads the world, at most
IDLE_S = 1.0  # ... and at least, while a leader leads and etcd reports no change
PUBLISH_S = 1.0  # a record unchanged is kept alive this often; a primary's put at most so


class Host(Parts, StandbySide, Protocol):
    """What the loop needs of its node (node.py's `Node`), and nothing more."""

    @property
    def lease(self) -> Lease: ...
    @property
    def peer_address(self) -> str: ...
    @property
    def instance(self) -> str: ...
    @property
    def log_trouble(self) -> str | None: ...

    repair: Repair | None

    def not_leader(self) -> ApolloError: ...
    def welcome_clients(self) -> None: ...


class RoleLoop:
    def __init__(self, host: Host) -> None:
        s = host.settings
        self.host = host
        self.role = "starting"
        self.known_term = 0
        self.leader: LeaderInfo | None = None
        self.world: World | None = None
        self.following = Following(host)
        self.leading = Leading(host, self)
        # the cluster-wide settings in force here (lease/clusterconfig.py): this node's
        # flags until etcd's are read, and etcd's from then on
        self.etcd = EtcdFacts(host, ClusterConfig(s.lease_ttl, s.sync_replicas, s.sync_mode))
        self._wake = asyncio.Event()
        self._last_sentence = ""
        self._leaderless_since: float | None = None
        self._leaderless_at = 0  # the store's revision then (role.Me.leaderless_at)
        self._published_at = -1e9  # monotonic time of the last member record put or kept
        self._published: MemberInfo | None = None  # the last record put

    def wake(self) -> None:
        """A reason to stop leading, or to look again, arose: cycle now."""
        self._wake.set()

    def saw_term(self, term: int) -> None:
        if term > self.known_term:
            self.known_term = term
            metrics.TERM.set(term)

    @property
    def cluster_config(self) -> ClusterConfig:
        return self.etcd.config

    def apply_config(self, stored: Mapping[str, Any]) -> str | None:
        return self.etcd.apply_config(stored, primary=self.role == "primary", fence=self.fence)

    @property
    def fence(self) -> Fence:
        return self.leading.fence

    @property
    def hub(self) -> ReplicationHub:
        return self.leading.hub

    @property
    def follower(self) -> Follower | None:
        return self.following.follower

    def store_reopened(self) -> None:
        self.leading.timing_batches = False  # a new store: register the hub's observer again

    @property
    def shown_role(self) -> str:
        """The role published and reported: a standby being refilled says so."""
        return REPAIRING if self.host.repair and self.role == "standby" else self.role

    def lease_valid(self) -> bool:
        """Sure to hold the lease now? (scheduler/node/fence.py)"""
        return self.role == "primary" and self.fence.valid()

    def record(self) -> MemberInfo:
        h = self.host
        assert h.store is not None
        return MemberInfo(
            h.settings.node_id,
            self.shown_role,
            h.address,
            h.store.log.durable_id,
            h.store.log.last_term,
            h.peer_address,
            h.settings.allow_shell,
            self.known_term,
            h.instance,
            self.leading.handover,
        )

    async def put_record(self) -> None:
        me = self.record()
        await self.host.lease.publish(me)
        self._published, self._published_at = me, time.monotonic()

    async def begin(self) -> str:
        """The role a starting node takes before its loop runs: standalone, primary at
        once; in a cluster, standby with its record published (raises NodeIdTaken)."""
        h, s = self.host, self.host.settings
        assert h.store is not None
        if s.standalone:
            t0 = time.monotonic()
            won = await h.lease.campaign(s.node_id, h.address, min_term=self.known_term)
            if won is None:
                raise ApolloError("the in-memory lease is taken: is another node running here?")
            return await self.promote(won, t0)
        self.role = "standby"
        try:
            # The first record is created only where none exists: another process that
            # started with this node id since the join checked loses here, not later.
            await self.put_record()
        except LeaseUnavailable as e:
            log.warning("publishing this node's member record: %s (the role loop retries)", e)
        return f"started as standby of cluster {s.cluster!r} ({h.cluster_id}): {h.store.recovery}"

    # ------------------------------------------------------------- the loop

    async def run(self) -> None:
        while not self.host.stopping:
            try:
                sentence = await self.cycle()
            except asyncio.CancelledError:
                if self.host.stopping:
                    raise
                # A stray cancellation (a request timeout that escaped as one) must not
                # end the loop that decides this node's role.
                task = asyncio.current_task()
                if task is not None:
                    while task.uncancel():
                        pass
                sentence = "role cycle interrupted; continuing"
            except Exception as e:  # one bad cycle must not end the loop
                log.exception("role cycle failed")
                sentence = f"role cycle failed: {e}"
            if sentence != self._last_sentence:
                log.info("%s", sentence)
                self._last_sentence = sentence
            await self._pause(CYCLE_S)
            if self._settled():
                # a leader, and nothing under way: until etcd reports a change (the
                # leader key gone, a record put), or IDLE_S, instead of 10 reads a second
                await self._pause(IDLE_S - CYCLE_S, etcd=True)

    async def _pause(self, seconds: float, *, etcd: bool = False) -> None:
        """Sleep `seconds` (or until etcd reports a change); a wake ends it at once."""
        if self._wake.is_set():
            return
        with contextlib.suppress(LeaseUnavailable):
            await self._or_wake(
                self.host.lease.wait_change(seconds) if etcd else asyncio.sleep(seconds)
            )

    def _settled(self) -> bool:
        """Is there nothing a role cycle must look at soon, but what etcd would report?"""
        world = self.world
        return (
            world is not None
            and world.leader is not None
            and self.role in ("primary", "standby")
            and not self.host.stopping
            and self.etcd.store_behind is None
            and self.host.log_trouble is None
            and not self.host.repair
            and self.leading.handed_over is None
        )

    async def cycle(self) -> str:
        """Read the world once and take one decision."""
        # First, also when there is no store: a wake left set makes the pause return
        # at once, and the loop would spin without ever yielding to the event loop.
        self._wake.clear()
        if self.host.store is None:
            # Between closing and reopening the store (node.reopen): no position to
            # publish or to campaign with. It was an AssertionError in record() and a
            # traceback every cycle while a rejoining standby cut its divergent tail.
            return (
                "reshaping the store (a divergent tail cut, or a snapshot installed): "
                "not publishing or deciding until it is open again"
            )
        now = time.monotonic()
        read = Read()
        if self._urgent():
            read.error = "etcd not read: a reason to stop leading came first"
        else:
            await self._read_or_wake(now, read)
        me = self._as_seen(now, read)
        move = role.decide(me, read.world, log_retry_s=LOG_RETRY_S)
        return await self._carry_out(move)

    def _urgent(self) -> bool:
        """A primary with a reason to stop leading decides at once, etcd or not."""
        return self.role == "primary" and role.leave(self._as_seen(time.monotonic())) is not None

    async def _or_wake(self, call: Coroutine[Any, Any, None]) -> bool:
        """Await an etcd call unless a wake comes first (then it is cancelled): False
        when woken. A hung etcd answers after up to half a TTL per endpoint, and the
        loop must be free to demote this node before its fence runs out."""
        doing = asyncio.ensure_future(call)
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait((doing, woken), return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            if not doing.done():
                doing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await doing
        if doing.cancelled():
            return False
        doing.result()  # its error, if it failed
        return True

    async def _read_or_wake(self, now: float, read: Read) -> None:
        try:
            if not await self._or_wake(self._read(now, read)):
                read.world, read.error = None, "woken before etcd answered"
        except LeaseUnavailable as e:
            read.world, read.error = None, f"cannot read the cluster from etcd: {e}"

    async def _read(self, now: float, read: Read) -> None:
        """Publish this node's record, read the world, check it holds this cluster."""
        lease = self.host.lease
        # A record is written when it changes, and every cycle while there is no
        # leader (an election counts only records put since the leader went:
        # role._leaderless); else its lease is only kept alive, once a second,
        # which makes no revision in etcd: an idle cluster writes nothing
        # (Patroni writes once per loop_wait; issue 19 counted 203 revisions in 10
        # idle seconds, standbys rewriting identical records). The primary's own
        # record changes with every write: it is put at most once a second.
        me = self.record()
        leaderless = self.role != "primary" and (self.world is None or self.world.leader is None)
        due = now - self._published_at >= PUBLISH_S
        try:
            if leaderless or (me != self._published and (self.role != "primary" or due)):
                await lease.publish(me)
                self._published, self._published_at = me, now
            elif due:
                await lease.keep(me)  # unchanged: its lease only
                self._published_at = now
        except NodeIdTaken as e:
            # Not publishing, this node is no candidate in any election (it is not
            # in the world the others read): it waits for the other one to go.
            read.duplicate = f"{e}; not taking part in elections: {DUPLICATE_HINT}"
        world = self.world = await lease.world()
        if world.revision < self._leaderless_at:
            # etcd restored: its revisions started again; only records put from now on
            # are known to be live members'
            self._leaderless_at = world.revision
        read.foreign = await self.etcd.check_cluster(world)
        if read.foreign is None and read.duplicate is None:
            if self.host.settings.node_id not in world.roster:
                # once, and again after etcd lost its data: the quorum is counted from it
                await lease.register(self.host.settings.node_id)
            self.etcd.check_store(world, self.known_term)
            if world.config is not None:
                self.apply_config(world.config)
            if world.leader is not None:
                self.saw_term(world.leader.term)
                if self.leading.handover and world.leader.node_id != self.host.settings.node_id:
                    self.leading.handover = ""  # handed over: the next record names no one
        read.world = world

    def _as_seen(self, now: float, read: Read | None = None) -> role.Me:
        """This node as the role decision sees it (role.py), read once."""
        h, since = self.host, self._leaderless_since
        read = read or Read()
        return role.Me(
            record=self.record(),
            role=self.role,
            known_term=self.known_term,
            holding=self.leader if self.role == "primary" else None,
            log_trouble=h.log_trouble,
            needs_through=h.repair.needs_through if h.repair is not None else None,
            leaderless_for=None if since is None else now - since,
            leaderless_at=self._leaderless_at,
            store_behind=self.etcd.store_behind,
            store_behind_for=now - self.etcd.store_behind_since,
            ttl_s=h.lease.ttl_s,
            sync_replicas=(
                self.cluster_config.sync_replicas
                if self.cluster_config.sync_mode == "strict"
                else 0
            ),
            fence_lapsed=self.fence.lapsed() if self.role == "primary" else None,
            foreign=read.foreign,
            duplicate=read.duplicate,
            handed_over=self.leading.handed_over,
            etcd_error=read.error,
        )

    async def _carry_out(self, move: role.Move) -> str:
        """Do what the decision says; the sentence to log."""
        if not isinstance(move, role.Abstain | role.Campaign | role.Hold):
            self._leaderless_since = None
        if self.role == FAILED and self.host.log_trouble is None:
            self.role = "standby"  # its log takes writes again
        match move:
            case role.StayPrimary(sentence):
                return f"{sentence}, {len(self.hub.connected())} standby(s) connected"
            case role.Hold(sentence):
                return sentence
            case role.Demote(why, to):
                return await self.demote(why, role=to)
            case role.StandAside(sentence, redirect, failed):
                await self.stop_following()
                self.leader = redirect
                if failed:
                    self.role = FAILED
                return sentence
            case role.Follow(leader):
                self.leader = leader
                await self.following.follow(leader, self.replication_address(leader))
                store = self.host.store
                assert store is not None
                if self.host.repair is not None:
                    return await self.following.check_repaired(leader)
                return (
                    f"standby: following {leader.node_id} (term {leader.term}) "
                    f"at event {store.log.durable_id}"
                )
            case role.Abstain(sentence):
                await self._become_leaderless()
                return sentence
            case role.Campaign(min_term):
                await self._become_leaderless()
                t0 = time.monotonic()
                h = self.host
                won = await h.lease.campaign(h.settings.node_id, h.address, min_term=min_term)
                if won is None:
                    return "no leader: another node won the election"
                return await self.promote(won, t0)
        raise AssertionError(f"unknown move {move!r}")

    async def _become_leaderless(self) -> None:
        self.leader = None
        await self.stop_following()
        if self._leaderless_since is None:
            self._leaderless_since = time.monotonic()
            self._leaderless_at = self.world.revision if self.world is not None else 0

    # -------------------------------------------------------- following

    def replication_address(self, leader: LeaderInfo) -> str:
        """Where the primary serves replication. With a peer port its member record
        says where (it publishes the record as it promotes); else its public address."""
        record = self.world.members.get(leader.node_id) if self.world else None
        return (record.peer_address if record else "") or leader.address

    async def stop_following(self) -> None:
        await self.following.stop()

    # ------------------------------------------------ promotion, demotion

    async def promote(self, won: LeaderInfo, renewed_at: float) -> str:
        h = self.host
        store = h.store
        assert store is not None
        last = store.log.last_term
        if won.term <= last:
            # Every event of a new term would be refused (StaleTermError): never call
            # this node primary for a term it cannot write in.
            with contextlib.suppress(Exception):
                await h.lease.resign()
            return (
                f"won term {won.term}, but the log already holds term {last}: resigned "
                f"(the lease handed out a term below this node's log)"
            )
        t0 = time.perf_counter()
        await self.stop_following()  # (its last staged batches are applied by now)
        previous = self.leading.previous_leader()  # before anything changes: it reads the log
        self.saw_term(won.term)
        self.role = "primary"
        self.leader = won
        h.welcome_clients()  # the workers and clients moving here are strangers to it
        started = await self.leading.begin(won, renewed_at, previous, self.world)
        spent = time.perf_counter() - t0
        metrics.PROMOTION_SECONDS.observe(spent)
        if self.etcd.store_behind is not None:
            self.etcd.caught_up(f"leader key recreated at term {won.term} by this node")
        with contextlib.suppress(LeaseUnavailable):
            await self._or_wake(self.put_record())  # else the next cycle puts it
        return (
            f"promoted: term {won.term} starts at event {started}, "
            f"scheduling after {spent * 1000:.1f} ms"
        )

    async def drain(self, draining: Awaitable[bool]) -> bool:
        """A graceful stop's drain, which the loop (ended by the stop) no longer
        watches: a lease lost or a log failed meanwhile still demotes this node at
        once (stop() is the other way out of primary). What `draining` returns."""
        doing = asyncio.ensure_future(draining)
        while not doing.done():
            await asyncio.wait((doing,), timeout=WATCHDOG_S)
            if self.role == "primary":
                demote = role.leave(self._as_seen(time.monotonic()))
                if demote is not None:
                    log.error("%s", await self.demote(demote.why, role=demote.role))
        return doing.result()

    async def demote(self, why: str, *, role: str = "standby") -> str:
        """Stop acting as primary at once: no more acks, no more steps. Called by the
        loop alone, never by a watcher."""
        if self.role != "primary":
            return f"already not primary ({why})"
        self.role = role
        self.leader = None
        return await self.leading.end(why)


@dataclass(slots=True)
class Read:
    """What one cycle read of etcd: the world (None: no answer), and what it says."""

    world: World | None = None
    error: str | None = None  # why there is no world
    foreign: str | None = None  # etcd holds another cluster's id
    duplicate: str | None = None  # another process publishes this node id
