"""The node process: store, lease, engine, API, and its role in the cluster.

Standalone (no --etcd) a node leads at once on an in-memory lease. In a
cluster, a loop reads the world from etcd a few times a second and takes
one small decision per cycle, each returning a sentence that is logged as
is (Patroni's style): "standby: following node-1 (term 7) at event 40213",
"promoted: term 9, ...", "demoted self because the lease was not renewed
for 3.4s".

A failed write or fsync makes the event log refuse appends (scheduler/log):
the node notices within LOG_WATCH_S, steps down as SIGTERM would (resigning the
lease, so that a healthy standby takes over at once), and tries every
LOG_RETRY_S to reopen its log; once a probe write succeeds it cuts what the
failed write left, reopens, and rejoins as a standby (standalone: leads again).

Losing the lease is an explicit branch, taken before the TTL can run out:
a watchdog compares the monotonic time of the last successful renewal with
the TTL minus a margin, and every acknowledgement re-checks it, so a
primary that was paused (SIGSTOP) and resumes acknowledges nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import grpc

from apollo11.lease import (
    LeaderInfo,
    Lease,
    LeaseUnavailable,
    MemberInfo,
    MemoryLease,
    NodeIdTaken,
    World,
)
from apollo11.lease.clusterconfig import ClusterConfig
from apollo11.replicator import records
from apollo11.replicator.hub import ReplicationHub, ReplicationTimeout
from apollo11.replicator.receiver import Follower
from apollo11.scheduler import gctune, identity, merger, metrics, repair, scrub
from apollo11.scheduler.api.server import ApiServer
from apollo11.scheduler.api.status import (
    ClusterStatus,
    LeaseStatus,
    MemberStatus,
    TermRecord,
    WorkerStatus,
    members,
)
from apollo11.scheduler.archive import Archive
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.dispatch import BothExecutor, RemoteExecutor, WorkersService
from apollo11.scheduler.engine import Engine
from apollo11.scheduler.engine.executor import AttemptToken, Executor, InProcessExecutor
from apollo11.scheduler.errors import (
    ApolloError,
    CorruptLogError,
    FailedPreconditionError,
    LeaseLostError,
    LogFailedError,
    NodeUnavailableError,
    NoLeaderError,
    NotLeaderError,
    OutcomeUnknownError,
    SnapshotError,
    SnapshotMismatchError,
)
from apollo11.scheduler.log import EventType, mend
from apollo11.scheduler.log.datadir import DataDir
from apollo11.scheduler.log.eventlog import Position, cut_unsynced
from apollo11.scheduler.log.segment import Segment
from apollo11.scheduler.node import nodeid, options, reshape, role
from apollo11.scheduler.node.fence import Fence
from apollo11.scheduler.node.nodeid import DUPLICATE_HINT
from apollo11.scheduler.node.role import FAILED
from apollo11.scheduler.replay import State, StepStatus, TaskState
from apollo11.scheduler.security import Principals, protect
from apollo11.scheduler.shell import SHELL_DISABLED
from apollo11.scheduler.store import NeedsFullReplay, Store, state_at
from apollo11.scheduler.workflow import Registry

# the node's log lines keep the name they had before the node became a package
log = logging.getLogger("apollo11.scheduler.node")

CYCLE_S = 0.1  # how often the role loop reads the world, at most
IDLE_S = 1.0  # ... and at least, while a leader leads and etcd reports no change
PUBLISH_S = 1.0  # a record unchanged is kept alive this often; a primary's put at most so
LOG_WATCH_S = 0.05  # how often a node looks whether its event log failed (one attribute)
LOG_RETRY_S = 1.0  # how often a node whose log failed tries to reopen it
# Written and fsynced before a failed log is reopened: a disk that takes this takes
# writes again (a smaller probe would reopen into the next ENOSPC at once).
PROBE_BYTES = 1 << 20
JOIN_RETRY_S = 1.0  # how often a starting node asks an unreachable etcd again


class Node:
    def __init__(
        self,
        settings: NodeSettings,
        *,
        lease: Lease | None = None,
        registry: Registry | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock or Clock()
        self.registry = registry or Registry()
        self._lease = lease
        self.principals: Principals | None = None
        self.store: Store | None = None
        self.engine: Engine | None = None
        # Remote execution: the workers' side of the engine (scheduler/dispatch/).
        self.dispatch: RemoteExecutor | None = None
        self.executor: Executor | None = None  # None: the engine's own (in process)
        if settings.execution != "embedded":
            self.dispatch = RemoteExecutor(
                node_id=settings.node_id,
                heartbeat_interval_s=settings.worker_heartbeat_interval,
                heartbeat_timeout_s=settings.worker_heartbeat_timeout,
            )
            self.executor = self.dispatch
            if settings.execution == "both":
                local = InProcessExecutor(threads=settings.concurrency)
                self.executor = BothExecutor(local, self.dispatch, settings.concurrency)
        self.api: ApiServer | None = None
        self.http: Any = None
        self.http_port = 0
        self.hub = ReplicationHub()
        self.follower: Follower | None = None
        self.leader: LeaderInfo | None = None
        self.world: World | None = None
        self.role = "starting"
        self.known_term = 0
        self.notice = ""  # what this node found wrong (etcd's state, its log): status says it
        self._log_trouble: str | None = None  # why this node's log refuses writes
        self._log_cut: Position | None = None  # where that log was last durable
        self._log_failed_at = 0.0  # monotonic
        self._log_retry_at = 0.0  # monotonic time of the next attempt to reopen it
        self._log_said = ""
        self._reopen_lock = asyncio.Lock()
        self.repair: repair.Repair | None = None  # set while refilled from the primary
        self.cluster_id = ""  # this cluster's id, once checked against etcd (scheduler/identity.py)
        # Random per process: tells this process's member record from another's with
        # the same node id (a duplicate, or this node's own record from before a crash).
        self.instance = uuid.uuid4().hex
        self._store_behind: str | None = None  # etcd knows less than this node: why
        self._store_behind_since = 0.0  # monotonic time this node first saw that
        self.port = 0
        self.started_at = time.time()
        self._tasks: list[asyncio.Task[None]] = []
        self._leaderless_since: float | None = None
        self._leaderless_at = 0  # the store's revision then (role.Me.leaderless_at)
        self._published_at = -1e9  # monotonic time of the last member record put or kept
        self._published: MemberInfo | None = None  # the last record put
        self._handover = ""  # a switchover under way: the standby this primary hands to
        self._last_sentence = ""
        self._stopping = False
        self._segment_bytes = settings.segment_max_bytes
        self._timing_batches = False  # the hub's durable-batch observer is registered
        self.scrubber = scrub.Scrubber(
            targets=self._scrub_targets,
            report=self._scrub_found,
            repair=self._scrub_repair,
            mb_per_s=settings.scrub_mb_per_s,
            interval_s=settings.scrub_interval,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fence = Fence(lambda: self.lease, settings.lease_ttl)
        # the cluster-wide settings in force here (lease/clusterconfig.py): this node's
        # flags until etcd's are read, and etcd's from then on
        self.cluster_config = ClusterConfig(
            settings.lease_ttl, settings.sync_replicas, settings.sync_mode
        )

    @property
    def lease(self) -> Lease:
        assert self._lease is not None
        return self._lease

    @property
    def address(self) -> str:
        """Where clients and peers reach this node (the real port when --listen used 0)."""
        if self.settings.advertise:
            return self.settings.advertise
        host = self.settings.listen.rpartition(":")[0]
        return f"{host}:{self.port}"

    @property
    def peer_address(self) -> str:
        """Where standbys follow this node: "" when replication shares the public port."""
        s = self.settings
        if s.peer_advertise:
            return s.peer_advertise
        if not s.peer_listen or self.api is None:
            return ""
        return f"{s.peer_listen.rpartition(':')[0]}:{self.api.peer_port}"

    def shell_refusal(self) -> str | None:
        """Why shell steps may not be submitted or run now: every node must allow them,
        or a failover would hand them to one that was never meant to run commands."""
        if not self.settings.allow_shell:
            return SHELL_DISABLED
        world = self.world
        if world is not None:
            for m in world.members.values():
                if not m.shell and m.node_id != self.settings.node_id:
                    return (
                        f"shell steps are disabled on node {m.node_id}; start every node "
                        f"with --allow-shell"
                    )
        return None

    def reload_principals(self) -> str:
        if self.principals is None:
            return "SIGHUP: no --tokens-file to reload"
        return self.principals.reload()

    # ------------------------------------------------------------ start

    def _open_store(self) -> Store:
        s = self.settings
        cfg = options.store_config(s, segment_max_bytes=self._segment_bytes)
        store = Store.open(s.data_dir, config=cfg, instance_id=s.node_id, clock=self.clock.now_ms)
        self.engine = Engine(
            store,
            self.registry,
            node_id=s.node_id,
            executor=self.executor,
            clock=self.clock,
            **options.engine_options(s),
            commit=self.commit,
            shell_refusal=self.shell_refusal,
            lease_valid=self.lease_valid,
        )
        if self.api is not None:
            store.add_observer(self.api.watchers)
        self._timing_batches = False  # a new store: register the hub's observer again
        self.saw_term(store.log.last_term)
        return store

    async def start(self) -> str:
        s = self.settings
        refused = protect.refusal(s)
        if refused:
            raise ApolloError(refused)
        if protect.missing(s):
            log.warning("%s", protect.describe(s))
        self.principals = None if s.tokens_file is None else Principals(s.tokens_file)
        for module in s.workflows:
            self.registry.load_module(module)
        if "apollo11.scheduler.examples" in s.workflows:
            from apollo11.scheduler import examples

            examples.configure(s.examples_dir)  # the one directory its `ledger` may write in
        self.store = await self._open_or_set_aside()
        if self._lease is None:
            if s.standalone:
                # Standalone: an in-memory lease (min_term keeps its terms above the log's).
                self._lease = MemoryLease(ttl_s=s.lease_ttl)
            else:
                from apollo11.lease.etcd import EtcdLease

                self._lease = EtcdLease(
                    s.etcd, cluster=s.cluster, ttl_s=s.lease_ttl, **s.etcd_security()
                )
        if not s.standalone:
            try:
                # before anything is served or published: a node of another cluster,
                # or a second process with this node id, must not take part at all
                log.info("%s", await self._join())
            except BaseException:
                await self._abandon_start()
                raise
        extra = []
        if self.dispatch is not None:
            from apollo11.v1 import worker_pb2

            service = WorkersService(self.dispatch, self.not_leader)
            extra.append((worker_pb2.DESCRIPTOR.services_by_name["Workers"], service))
        self.api = ApiServer(self, self.principals, extra=extra)
        self.port = await self.api.start(s.listen)
        if s.http:
            from apollo11.scheduler.web import HttpServer

            self.http = HttpServer(self, s.http)
            self.http_port = await self.http.start()
        self._spawn(_watch_loop_lag(self._tick), "apollo11-loop-lag")
        self._spawn(self._watch_log(), "apollo11-log-watch")
        self._loop = asyncio.get_running_loop()
        self.scrubber.start()
        # What exists now (modules, the recovered state) lives as long as the node;
        # without this every full collection rescans it, and each such pause is a
        # replication-latency outlier (docs/benchmarks.md, "Figures behind the knobs").
        # The young threshold is raised too (gctune.py).
        gctune.settle()
        metrics.watch_gc()
        merger.warm()
        if s.standalone:
            t0 = time.monotonic()
            won = await self.lease.campaign(s.node_id, self.address, min_term=self.known_term)
            if won is None:
                raise ApolloError("the in-memory lease is taken: is another node running here?")
            return f"{await self._promote(won, t0)}, serving on port {self.port}{self._peers()}"
        self.role = "standby"
        try:
            # The first record is created only where none exists: another process that
            # started with this node id since _join() checked loses here, not later.
            self._published = self._me()
            await self.lease.publish(self._published)
            self._published_at = time.monotonic()
        except NodeIdTaken as e:
            await self.stop()  # serving already: stop all of it, then refuse
            raise ApolloError(f"{e}; {DUPLICATE_HINT}") from None
        except LeaseUnavailable as e:
            log.warning("publishing this node's member record: %s (the role loop retries)", e)
        self._spawn(self._role_loop(), "apollo11-role")
        return (
            f"started as standby of cluster {s.cluster!r} ({self.cluster_id}): "
            f"{self.store.recovery}, "
            f"serving on port {self.port}{self._peers()}"
        )

    async def _open_or_set_aside(self) -> Store:
        """Open the store; in a cluster, a damaged one is set aside and refilled from
        the primary (scheduler/repair.py). Standalone there is nobody to refill it
        from: the damage is refused, naming the file."""
        s = self.settings
        try:
            store = self._open_store()
        except (CorruptLogError, SnapshotError, SnapshotMismatchError) as e:
            if s.standalone:
                raise
            self.repair = await asyncio.to_thread(repair.set_aside, s.data_dir, str(e))
            metrics.LOG_DAMAGE_FOUND.labels("startup").inc()
            self._notice(f"{s.node_id}: {self.repair.describe()}")
            return self._open_store()
        self.repair = repair.load(s.data_dir)
        if self.repair is not None:
            self._notice(f"{s.node_id} (restarted): {self.repair.describe()}")
        return store

    async def _join(self) -> str:
        """Check this node's cluster id and node id against etcd (retrying while etcd
        does not answer); the sentence to log, or an ApolloError saying why not."""
        last_warned = -1e9
        while True:
            try:
                ident, joined = await self._check_cluster_id()
                waited = await nodeid.check(
                    self.lease, self.settings.node_id, self.settings.cluster
                )
                if identity.read(self.settings.data_dir) is None:
                    # kept only now: a node refused for its node id leaves nothing behind
                    await asyncio.to_thread(identity.write, self.settings.data_dir, ident)
                self.cluster_id = ident.cluster_id
                # this node's flags are the cluster's settings only if none are stored
                stored = await self.lease.claim_config(self.cluster_config.to_json())
                configured = self._apply_config(stored) or "cluster settings as this node's flags"
                return f"{joined}; {waited}; {configured}"
            except LeaseUnavailable as e:
                now = time.monotonic()
                if now - last_warned > 5:
                    log.warning("cannot check this node's identity with etcd yet: %s", e)
                    last_warned = now
                await asyncio.sleep(JOIN_RETRY_S)

    async def _check_cluster_id(self) -> tuple[identity.Identity, str]:
        s, store = self.settings, self.store
        assert store is not None
        local = identity.read(s.data_dir)
        stored = await self.lease.claim_cluster_id(local.cluster_id if local else identity.new_id())
        has_history = store.log.durable_id > 0 or bool(store.snapshots.watermarks())
        ident, sentence = identity.decide(
            data_dir=str(s.data_dir),
            cluster=s.cluster,
            local=local,
            stored=stored,
            has_history=has_history,
        )
        return ident, sentence

    async def _abandon_start(self) -> None:
        """Undo what start() did before refusing: nothing may be left open."""
        if self._lease is not None:
            with contextlib.suppress(Exception):
                await self.lease.close()
        if self.store is not None:
            with contextlib.suppress(Exception):
                await self.store.close()
            self.store = None

    def _peers(self) -> str:
        return f", replication on port {self.api.peer_port}" if self.api and self.api.peer else ""

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    # ------------------------------------------------------- the role loop

    async def _role_loop(self) -> None:
        while not self._stopping:
            try:
                sentence = await self._cycle()
            except LeaseUnavailable as e:
                sentence = f"cannot read the cluster from etcd: {e}"
            except NodeIdTaken as e:
                # Not publishing, this node is no candidate in any election (it is not
                # in the world the others read): it waits for the other one to go.
                sentence = f"{e}; not taking part in elections: {DUPLICATE_HINT}"
            except asyncio.CancelledError:
                if self._stopping:
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
            await asyncio.sleep(CYCLE_S)
            if self._settled():
                # a leader, and nothing under way: until etcd reports a change (the
                # leader key gone, a record put), or IDLE_S, instead of 10 reads a second
                with contextlib.suppress(LeaseUnavailable):
                    await self.lease.wait_change(IDLE_S - CYCLE_S)

    def _settled(self) -> bool:
        """Is there nothing a role cycle must look at soon, but what etcd would report?"""
        world = self.world
        return (
            world is not None
            and world.leader is not None
            and self.role in ("primary", "standby")
            and not self._stopping
            and self._store_behind is None
            and self.log_trouble is None
            and not self.repair
        )

    @property
    def shown_role(self) -> str:
        """The role published and reported: a standby being refilled says so."""
        return repair.REPAIRING if self.repair and self.role == "standby" else self.role

    def _tick(self, lag: float) -> None:
        if self.role == "primary":
            self.hub.tick(responsive=lag < 0.25)

    def _me(self) -> MemberInfo:
        assert self.store is not None
        return MemberInfo(
            self.settings.node_id,
            self.shown_role,
            self.address,
            self.store.log.durable_id,
            self.store.log.last_term,
            self.peer_address,
            self.settings.allow_shell,
            self.known_term,
            self.instance,
            self._handover,
        )

    def _apply_config(self, stored: Mapping[str, Any]) -> str | None:
        """Follow the cluster's settings as etcd holds them: sync_replicas and sync_mode
        at once, lease_ttl for this node's next lease (a primary keeps the TTL its lease
        was granted with). The sentence saying what changed; None: nothing did."""
        try:
            new = ClusterConfig.of(stored, self.cluster_config)
        except ValueError as e:
            log.warning("ignoring the cluster settings in etcd: %s", e)
            return None
        old = self.cluster_config
        if new.lease_ttl != self.lease.ttl_s and self.role != "primary":
            self.lease.set_ttl(new.lease_ttl)
            self.fence.set_ttl(new.lease_ttl)
        if new == old:
            return None
        self.cluster_config = new
        changed = ", ".join(
            f"{k} {getattr(old, k)} -> {getattr(new, k)}"
            for k in ("lease_ttl", "sync_replicas", "sync_mode")
            if getattr(old, k) != getattr(new, k)
        )
        sentence = f"cluster settings from etcd: {changed}"
        if self.role == "primary" and new.lease_ttl != self.lease.ttl_s:
            sentence += " (the lease TTL applies from the next election)"
        log.info("%s", sentence)
        return sentence

    async def _put_record(self) -> None:
        me = self._me()
        await self.lease.publish(me)
        self._published, self._published_at = me, time.monotonic()

    async def _cycle(self) -> str:
        """Read the world once and take one decision."""
        if self.store is None:
            # Between closing and reopening the store (_reopen): no position to publish
            # or to campaign with. It was an AssertionError in _me() and a traceback
            # every cycle while a rejoining standby cut its divergent tail (1.3 s).
            return (
                "reshaping the store (a divergent tail cut, or a snapshot installed): "
                "not publishing or deciding until it is open again"
            )
        now = time.monotonic()
        # A record is written when it changes, and every cycle while there is no
        # leader (an election counts only records put since the leader went:
        # role._leaderless); else its lease is only kept alive, once a second,
        # which makes no revision in etcd: an idle cluster writes nothing
        # (Patroni writes once per loop_wait; issue 19 counted 203 revisions in 10
        # idle seconds, standbys rewriting identical records). The primary's own
        # record changes with every write: it is put at most once a second.
        me = self._me()
        leaderless = self.role != "primary" and (self.world is None or self.world.leader is None)
        due = now - self._published_at >= PUBLISH_S
        if leaderless or (me != self._published and (self.role != "primary" or due)):
            await self.lease.publish(me)
            self._published, self._published_at = me, now
        elif due:
            await self.lease.keep(me)  # unchanged: its lease only
            self._published_at = now
        world = self.world = await self.lease.world()
        if world.revision < self._leaderless_at:
            # etcd restored: its revisions started again; only records put from now on
            # are known to be live members'
            self._leaderless_at = world.revision
        foreign = await self._check_cluster(world)
        if foreign is not None:
            return foreign
        if self.settings.node_id not in world.roster:
            # once, and again after etcd lost its data: the quorum is counted from it
            await self.lease.register(self.settings.node_id)
        self._check_store(world)
        if world.config is not None:
            self._apply_config(world.config)
        if world.leader is not None:
            self.saw_term(world.leader.term)
            if self._handover and world.leader.node_id != self.settings.node_id:
                self._handover = ""  # handed over: the next record names no one
        move = role.decide(self._as_seen(now), world, log_retry_s=LOG_RETRY_S)
        return await self._carry_out(move)

    def _as_seen(self, now: float) -> role.Me:
        """This node as the role decision sees it (role.py), read once."""
        since = self._leaderless_since
        return role.Me(
            record=self._me(),
            role=self.role,
            known_term=self.known_term,
            holding=self.leader if self.role == "primary" else None,
            log_trouble=self._log_trouble,
            needs_through=self.repair.needs_through if self.repair is not None else None,
            leaderless_for=None if since is None else now - since,
            leaderless_at=self._leaderless_at,
            store_behind=self._store_behind,
            store_behind_for=now - self._store_behind_since,
            ttl_s=self.lease.ttl_s,
            sync_replicas=(
                self.cluster_config.sync_replicas
                if self.cluster_config.sync_mode == "strict"
                else 0
            ),
        )

    async def _carry_out(self, move: role.Move) -> str:
        """Do what the decision says; the sentence to log."""
        if not isinstance(move, role.Wait | role.Campaign):
            self._leaderless_since = None
        match move:
            case role.StayPrimary(sentence):
                return f"{sentence}, {len(self.hub.connected())} standby(s) connected"
            case role.Demote(why):
                return await self.demote(why)
            case role.StandAside(sentence, redirect):
                await self._stop_following()
                self.leader = redirect
                return sentence
            case role.Follow(leader):
                self.leader = leader
                await self._follow(leader)
                assert self.store is not None
                if self.repair is not None:
                    return await self._check_repaired(leader)
                return (
                    f"standby: following {leader.node_id} (term {leader.term}) "
                    f"at event {self.store.log.durable_id}"
                )
            case role.Wait(sentence):
                await self._become_leaderless()
                return sentence
            case role.Campaign(min_term):
                await self._become_leaderless()
                t0 = time.monotonic()
                won = await self.lease.campaign(
                    self.settings.node_id, self.address, min_term=min_term
                )
                if won is None:
                    return "no leader: another node won the election"
                return await self._promote(won, t0)
        raise AssertionError(f"unknown move {move!r}")

    async def _become_leaderless(self) -> None:
        self.leader = None
        await self._stop_following()
        if self._leaderless_since is None:
            self._leaderless_since = time.monotonic()
            self._leaderless_at = self.world.revision if self.world is not None else 0

    async def _check_repaired(self, leader: LeaderInfo) -> str:
        """A repairing standby is repaired once it holds every event it held before
        and has caught up with the primary it follows."""
        r, store, f = self.repair, self.store, self.follower
        assert r is not None and store is not None
        durable = store.log.durable_id
        head = f.primary_durable_id if f is not None and f.connected else 0
        if head and durable >= max(r.needs_through, head):
            await asyncio.to_thread(repair.done, self.settings.data_dir)
            self.repair = None
            self._notice(
                f"repaired from {leader.node_id}: this node holds events through {durable} "
                f"again (it needed {r.needs_through}); the damaged files stay in {r.quarantine}"
            )
            return f"standby: repaired, following {leader.node_id} (term {leader.term})"
        return (
            f"repairing: following {leader.node_id} (term {leader.term}) at event {durable}, "
            f"needs {max(r.needs_through, head)}"
        )

    async def _check_cluster(self, world: World) -> str | None:
        """etcd must still hold this node's cluster id. None when it does; else the
        sentence, after stepping out of the cluster's business."""
        stored = world.cluster_id
        if stored is None and self.cluster_id:
            # etcd lost its data (restored empty): the data directories keep the id
            stored = await self.lease.claim_cluster_id(self.cluster_id)
            if stored == self.cluster_id:
                self._notice(f"etcd held no cluster id: put this node's back ({stored})")
        if stored is None or stored == self.cluster_id:
            return None
        why = (
            f"etcd holds cluster id {stored} for {self.settings.cluster!r}, but this node "
            f"belongs to cluster {self.cluster_id}: not taking part (is --etcd pointing at "
            f"another cluster's etcd?)"
        )
        if self.role == "primary":
            return await self.demote(why)
        self.leader = None
        self._leaderless_since = None
        await self._stop_following()
        return why

    def _check_store(self, world: World) -> None:
        """Notice etcd knowing less than this node (restored empty or from an old
        backup): say so once, in the log and in status, and hold this node's next
        campaign for a TTL (_leaderless)."""
        held = max(world.term or 0, world.leader.term if world.leader else 0)
        if self.known_term > held:
            if self._store_behind is None:
                if world.term is None:
                    why = "etcd lost its data: it holds no term for this cluster"
                else:
                    why = "etcd lost its data (restored from an older backup?): it holds "
                    why += f"term {world.term} for this cluster"
                why += f", below term {self.known_term} this node knows"
                if world.term is None and world.revision >= self.known_term:
                    # Earlier versions' terms were revisions, so an etcd that kept its
                    # data has a revision above them: this may be no loss at all.
                    why += " (or the first election since an upgrade that added the term key)"
                self._store_behind, self._store_behind_since = why, time.monotonic()
                self._notice(why)
        elif self._store_behind is not None:
            leader = world.leader
            self._store_caught_up(
                f"leader key recreated at term {leader.term} by {leader.node_id}"
                if leader
                else f"its term is {world.term} again"
            )

    def _store_caught_up(self, how: str) -> None:
        assert self._store_behind is not None
        self._notice(f"{self._store_behind}; {how}")
        self._store_behind = None

    def _notice(self, text: str) -> None:
        log.warning("%s", text)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.clock.now()))
        self.notice = f"{stamp}: {text}"

    # ------------------------------------------------------------- scrub
    # Called on the scrub's thread (scheduler/scrub.py): they copy, or hand over.

    def _scrub_targets(self) -> scrub.Targets | None:
        store, loop = self.store, self._loop
        if store is None or self._stopping or loop is None or loop.is_closed():
            return None
        archive = store.state.archive
        paths = [c.path for c in archive.chunks] if isinstance(archive, Archive) else []
        # The segment being written, up to what is durable now: its size and last id
        # change together on the loop, so they are read there.
        active: concurrent.futures.Future[Segment] = concurrent.futures.Future()

        def take() -> None:
            s = store.log.segments[-1]
            active.set_result(Segment(s.first_id, s.path, s.size, s.last_id))

        loop.call_soon_threadsafe(take)
        try:
            current = active.result(timeout=5)
        except concurrent.futures.TimeoutError:  # a loop that busy: next pass
            return scrub.Targets(store.log.segments[:-1], paths)
        return scrub.Targets([*store.log.segments[:-1], current], paths)

    def _scrub_found(self, damage: scrub.Damage) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._notice, str(damage))

    def _scrub_repair(self, damage: scrub.Damage) -> str:
        store, loop = self.store, self._loop
        if store is None or loop is None or loop.is_closed():
            return "scrub: no store open to repair it from"
        if damage.kind == "segment":
            fut = asyncio.run_coroutine_threadsafe(self._mend_segment(damage), loop)
            try:
                return fut.result(timeout=3 * records.FETCH_TIMEOUT_S)
            except ApolloError:
                raise
            except Exception as e:  # a timeout, the loop closing: say so, the scrub goes on
                fut.cancel()
                raise ApolloError(f"mending {damage.path}: {e!r}") from e
        chunk, sentence = store.rebuild_chunk(damage.path, self.scrubber.pause)
        loop.call_soon_threadsafe(store.install_chunk, chunk)
        loop.call_soon_threadsafe(self._notice, f"{damage}; {sentence}")
        return f"scrub: {sentence}"

    async def _mend_segment(self, damage: scrub.Damage) -> str:
        """Replace a damaged sealed segment with another member's copy of its records
        (scheduler/log/mend.py): the primary's, or a standby's that holds them."""
        store = self.store
        if store is None:
            raise ApolloError(f"mending {damage.path}: no store open")
        live = next((s for s in store.log.segments if s.path == damage.path), None)
        if live is None:
            return f"scrub: {damage.path} is no longer in the log; nothing to mend"
        # what is durable there now: the segment being written grows meanwhile
        seg = Segment(live.first_id, live.path, live.size, live.last_id)
        tried: list[str] = []
        for peer_id, address in self._holders(seg.last_id):
            try:
                data = await records.fetch(self, address, peer_id, seg.first_id, seg.last_id)
                await asyncio.to_thread(mend.rewrite, seg, data)
            except grpc.aio.AioRpcError as e:
                tried.append(f"{peer_id}: {e.code().name} {e.details()}")
                continue
            except (ApolloError, OSError) as e:
                tried.append(f"{peer_id}: {e}")
                continue
            metrics.LOG_SEGMENTS_MENDED.inc()
            said = f"mended it with {peer_id}'s copy of events {seg.first_id}..{seg.last_id}"
            self._notice(f"{damage}; {said}")
            return f"scrub: {damage.path}: {said}"
        why = "; ".join(tried) or f"no other live member holds events through {seg.last_id}"
        raise ApolloError(f"could not mend {damage.path}: {why}")

    def _holders(self, last_id: int) -> list[tuple[str, str]]:
        """(node id, peer address) of the members that may hold events through
        `last_id`: the primary first (for a standby), then the others."""
        me = self.settings.node_id
        members = self.world.members if self.world is not None else {}
        out: list[tuple[str, str]] = []
        leader = self.leader
        if leader is not None and leader.node_id != me:
            out.append((leader.node_id, self._replication_address(leader)))
        for m in sorted(members.values(), key=lambda m: -m.last_event_id):
            if m.node_id == me or any(m.node_id == n for n, _ in out):
                continue
            if m.last_event_id >= last_id and m.role not in (FAILED, repair.REPAIRING):
                out.append((m.node_id, m.peer_address or m.address))
        return out

    def _replication_address(self, leader: LeaderInfo) -> str:
        """Where the primary serves replication. With a peer port its member record
        says where (it publishes the record as it promotes); else its public address."""
        record = self.world.members.get(leader.node_id) if self.world else None
        return (record.peer_address if record else "") or leader.address

    async def _follow(self, leader: LeaderInfo) -> None:
        address = self._replication_address(leader)
        f = self.follower
        if f is not None and f.address == address and f.leader_term == leader.term:
            return
        await self._stop_following()
        self.follower = Follower(self, address, leader.term, leader_id=leader.node_id)
        self.follower.start()

    async def _stop_following(self) -> None:
        if self.follower is not None:
            await self.follower.stop()
            self.follower = None

    # ------------------------------------------------ promotion, demotion

    async def _promote(self, won: LeaderInfo, renewed_at: float) -> str:
        assert self.store is not None and self.engine is not None
        last = self.store.log.last_term
        if won.term <= last:
            # Every event of a new term would be refused (StaleTermError): never call
            # this node primary for a term it cannot write in.
            with contextlib.suppress(Exception):
                await self.lease.resign()
            return (
                f"won term {won.term}, but the log already holds term {last}: resigned "
                f"(the lease handed out a term below this node's log)"
            )
        t0 = time.perf_counter()
        await self._stop_following()  # (its last staged batches are applied by now)
        previous = self._previous_leader()  # before anything changes: it reads the log
        self.fence.arm(renewed_at)
        self.saw_term(won.term)
        log_ = self.store.log
        log_.term = won.term
        self.role = "primary"
        self.leader = won
        self.hub = ReplicationHub()
        if not self._timing_batches:
            # Registered once: it always feeds the current hub.
            self.store.add_observer(lambda events: self.hub.on_durable(events[-1].event_id))
            self._timing_batches = True
        started = await log_.append(
            EventType.TERM_STARTED,
            "",
            payload={
                "node_id": self.settings.node_id,
                "address": self.address,
                "began": role.began(self.settings.node_id, previous, self.world),
                "previous": previous or "",
            },
        )
        await self.engine.start()
        if self.dispatch is not None:
            self.dispatch.start(won.term, self._is_current_attempt)
        self._spawn(self.fence.keepalive(self.demote), "apollo11-keepalive")
        self._spawn(self.fence.watchdog(self.demote), "apollo11-watchdog")
        spent = time.perf_counter() - t0
        metrics.PROMOTION_SECONDS.observe(spent)
        metrics.LEADER_CHANGES.inc()
        metrics.ROLE.set(1)
        metrics.TERM.set(won.term)
        if self._store_behind is not None:
            self._store_caught_up(f"leader key recreated at term {won.term} by this node")
        if not self.settings.standalone:
            with contextlib.suppress(LeaseUnavailable):
                await self._put_record()
        return (
            f"promoted: term {won.term} starts at event {started.event_id}, "
            f"scheduling after {spent * 1000:.1f} ms"
        )

    def _is_current_attempt(
        self, task_id: str, step: str, token: AttemptToken, worker: str
    ) -> bool:
        """Is `token` the attempt the log says `step` is running, on `worker`? (A
        worker's result counts only then.)"""
        task = None if self.store is None else self.store.state.tasks.get(task_id)
        found = None if task is None else task.steps.get(step)
        return (
            found is not None
            and found.status is StepStatus.STARTED
            and found.started_event == token.event_id
            and found.started_term == token.term
            and found.worker == worker
        )

    def lease_valid(self) -> bool:
        """Sure to hold the lease now? (scheduler/node/fence.py)"""
        return self.role == "primary" and self.fence.valid()

    async def demote(self, why: str, *, role: str = "standby") -> str:
        """Stop acting as primary at once: no more acks, no more steps."""
        if self.role != "primary":
            return f"already not primary ({why})"
        self.role = role
        self.fence.disarm()
        self.leader = None
        metrics.ROLE.set(0)
        self.hub.fail_all(f"this node stopped being the primary: {why}")
        if self.engine is not None:
            await self.engine.stop()  # first: nothing is decided once the workers go
        if self.dispatch is not None:
            # Workers go to the next primary with their attempts: nothing is failed.
            await self.dispatch.stop(f"this node stopped being the primary: {why}")
        for t in self._tasks:
            if (
                t.get_name() in ("apollo11-keepalive", "apollo11-watchdog")
                and t is not asyncio.current_task()
            ):
                t.cancel()
        with contextlib.suppress(Exception):
            await self.lease.resign()  # if the key is still ours, let others go now
        if self.settings.standalone:
            return f"demoted self because {why}"
        if not any(t.get_name() == "apollo11-role" and not t.done() for t in self._tasks):
            self._spawn(self._role_loop(), "apollo11-role")
        return f"demoted self because {why}"

    async def switchover(self, to: str | None, *, operator: str) -> tuple[str, int, str]:
        """A planned hand-over to `to` (None: the standby furthest ahead): start no new
        step, let running ones finish (up to the drain timeout), wait until the target
        holds every event this node wrote, then resign; the election prefers the
        target (role.elect) while this node's record names it. Returns (target, the
        last event id it holds, the sentence). Raises FailedPreconditionError (not the
        primary, no such standby) or NodeUnavailableError (it did not catch up in
        time; this node leads on as before)."""
        engine = self.engine
        if self.role != "primary" or engine is None or not engine.leading:
            raise self.not_leader()
        following = {v.node_id: v for v in self.hub.connected()}
        world = self.world
        members = world.members if world is not None else {}
        standbys = {
            n: v
            for n, v in following.items()
            if (m := members.get(n)) is not None and m.role == "standby"
        }
        if to is not None and to == self.settings.node_id:
            raise FailedPreconditionError(f"{to} is the primary already")
        if to is not None and to not in standbys:
            raise FailedPreconditionError(
                f"{to} is not a live standby following this primary (standbys: "
                f"{', '.join(sorted(standbys)) or 'none'})"
            )
        if not standbys:
            raise FailedPreconditionError("no live standby follows this primary: no one to hand to")
        target = to or max(standbys.values(), key=lambda v: (v.acked_id, v.node_id)).node_id
        view = standbys[target]
        budget = max(5.0, 2 * self.lease.ttl_s)
        log.info("switchover to %s asked by %s: draining", target, operator)
        self._handover = target
        await self._put_record()
        if self.settings.execution != "remote":
            await engine.drain(within_s=self.settings.drain_timeout)
        else:
            engine.stop_starting()
        last = self.store.log.durable_id if self.store is not None else 0
        deadline = time.monotonic() + budget
        while view.acked_id < last and time.monotonic() < deadline:
            view.acked.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(view.acked.wait(), deadline - time.monotonic())
            if self.store is not None:
                last = self.store.log.durable_id
        if view.acked_id < last:
            self._handover = ""
            engine.resume()
            raise NodeUnavailableError(
                f"switchover to {target} called off: it holds events up to {view.acked_id} "
                f"of {last} after {budget:g}s; this node leads on"
            )
        why = f"switchover to {target} asked by {operator}"
        sentence = await self.demote(why)
        self._notice(f"handed over to {target} (asked by {operator})")
        return target, last, sentence

    # ------------------------------------------------------- a failed log

    @property
    def log_trouble(self) -> str | None:
        """Why this node's event log refuses writes; None while it takes them."""
        return self._log_trouble

    async def _watch_log(self) -> None:
        """Notice a failed log at once and step down; reopen it once writes work again."""
        while not self._stopping:
            try:
                sentence = await self._log_cycle()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the watch must outlive one bad attempt
                log.exception("watching the event log failed")
                sentence = f"watching the event log failed: {e}"
            if sentence and sentence != self._log_said:
                log.warning("%s", sentence)
                self._log_said = sentence
            await asyncio.sleep(LOG_WATCH_S)

    async def _log_cycle(self) -> str | None:
        store = self.store
        if store is None or self._stopping or self._reopen_lock.locked():
            return None
        if self._log_trouble is None:
            failure = store.log.failure
            if failure is None:
                return None
            return await self._log_failed(str(failure) or type(failure).__name__, store)
        if time.monotonic() < self._log_retry_at:
            return None
        self._log_retry_at = time.monotonic() + LOG_RETRY_S
        return await self._reopen_failed_log()

    async def _log_failed(self, why: str, store: Store | None) -> str:
        """Step down at once: a primary that cannot log decides nothing, and holding the
        lease would keep the healthy standbys from taking over (issue 15)."""
        self._log_trouble = why
        self._log_cut = store.log.position() if store is not None else None
        self._log_failed_at = time.monotonic()
        self._log_retry_at = self._log_failed_at + LOG_RETRY_S
        metrics.LOG_WRITABLE.set(0)
        primary = self.role == "primary"
        if not primary:
            done = "stopped following"
        elif self.settings.standalone:
            done = "stopped leading (no standby to hand over to)"
        else:
            done = "resigned the lease for a standby to take over"
        # The notice first: the step-down awaits (the engine, the lease), and a status
        # read meanwhile showed role `failed` with no reason (a flaky test, on main).
        self._notice(
            f"the event log failed ({why}): {done}; refusing writes until it can be "
            f"reopened (free space in {self.settings.data_dir}?), retrying every "
            f"{LOG_RETRY_S:g}s"
        )
        if primary:
            # FAILED before the lease goes, so that no cycle offers this node as a candidate.
            return await self.demote(f"its event log failed ({why})", role=FAILED)
        # The role loop stops the follower (this may run in the follower's own task).
        self.role = FAILED
        return f"stopped following: the event log failed ({why})"

    async def _reopen_failed_log(self) -> str:
        data_dir = str(self.settings.data_dir)
        try:
            await asyncio.to_thread(_probe_writes, data_dir)
        except OSError as e:
            return f"the event log is still failed: a probe write to {data_dir} failed ({e})"
        cut = self._log_cut

        def change(data: DataDir) -> str:
            if cut is None:
                return "nothing to cut"
            n = cut_unsynced(data.root, cut)
            return f"cut {n} bytes the failed write left after event {cut.event_id}"

        try:
            done = await self._reopen(change)
        except Exception as e:
            return f"the event log is still failed: reopening it failed ({e})"
        assert self.store is not None
        why, self._log_trouble, self._log_cut = self._log_trouble, None, None
        metrics.LOG_WRITABLE.set(1)
        spent = time.monotonic() - self._log_failed_at
        self.role = "standby"
        if self.settings.standalone:
            t0 = time.monotonic()
            won = await self.lease.campaign(
                self.settings.node_id, self.address, min_term=self.known_term
            )
            then = "in-memory lease taken" if won is None else await self._promote(won, t0)
        else:
            then = "rejoining as a standby"
        self._notice(
            f"the event log failed ({why}); reopened it {spent:.1f}s later at event "
            f"{self.store.log.durable_id} ({done}); {then}"
        )
        return f"reopened the event log: {then}"

    # ------------------------------------------------------------ writes

    async def commit(self, event_id: int) -> None:
        """What an acknowledgement waits for: this node still holds the lease, and
        (in synchronous mode) enough standbys hold the event durably."""
        self._check_lease(event_id)
        s, c = self.settings, self.cluster_config
        if c.sync_replicas and not s.standalone:
            need = c.sync_replicas
            if c.sync_mode == "relaxed":
                need = min(need, len(self.hub.connected()))
            if need:
                try:
                    await self.hub.wait(event_id, need, s.sync_timeout)
                except ReplicationTimeout as e:
                    raise OutcomeUnknownError(f"{e}{self._not_streaming()}") from None
        self._check_lease(event_id)

    def _not_streaming(self) -> str:
        """Members etcd knows that have no replication stream here, for a message."""
        world = self.world
        if world is None:
            return ""
        streaming = set(self.hub.by_node())
        absent = sorted(
            m for m in world.members if m != self.settings.node_id and m not in streaming
        )
        return f"; members not following this primary: {', '.join(absent)}" if absent else ""

    def _check_lease(self, event_id: int) -> None:
        if not self.lease_valid():
            raise LeaseLostError(
                f"event {event_id} is durable on {self.settings.node_id}, but this node is "
                f"no longer sure it holds the lease; the write's outcome is unknown (check "
                f"with the new primary)"
            )

    def saw_term(self, term: int) -> None:
        if term > self.known_term:
            self.known_term = term
            metrics.TERM.set(term)

    def adopt_segment_size(self, size: int) -> None:
        """Rotate segments where the primary does, so segment files stay byte-identical."""
        if size and self.store is not None and size != self.store.log.config.segment_max_bytes:
            self._segment_bytes = size
            self.store.log.config = dataclasses.replace(
                self.store.log.config, segment_max_bytes=size
            )

    # ------------------------------------------------ reshaping the store

    async def _reopen(self, change: Callable[[DataDir], str]) -> str:
        """Close the store, change the files, open it again - whatever happens in between
        (a failed change leaves the files as they were, and the store is reopened).
        If the open fails, the closed store stays (its state answers reads) and the
        node's log counts as failed: _watch_log retries the open."""
        async with self._reopen_lock:
            old = self.store
            assert old is not None
            await old.close()
            self.store = None
            try:
                data = DataDir.open(self.settings.data_dir)
                return await asyncio.to_thread(change, data)
            finally:
                try:
                    self.store = self._open_store()
                except Exception as e:
                    self.store = old
                    if self._log_trouble is None:
                        await self._log_failed(f"reopening it failed: {e}", None)
                    raise

    async def cut_divergent_tail(self, keep_through: int, reason: str) -> str:
        """A deposed primary rejoining: move its divergent tail to quarantine."""
        return await self._reopen(
            lambda data: reshape.cut_divergent_tail(data, keep_through, reason)
        )

    async def install_snapshot(self, staging: Path, watermark: int) -> str:
        return await self._reopen(lambda data: reshape.install_snapshot(data, staging, watermark))

    # ---------------------------------------------------------- for the API

    def not_leader(self) -> ApolloError:
        leader = self.leader
        if self.role == "primary" or self._stopping:
            # UNAVAILABLE, not FAILED_PRECONDITION: no leader to redirect to yet, and
            # clients retry only what says "try again" (issue 15: a submit lost to it)
            return NodeUnavailableError(
                f"{self.settings.node_id} is shutting down or stepping down; retry, here "
                f"or on another node"
            )
        if leader is None and self._log_trouble is not None:
            return LogFailedError(
                f"{self.settings.node_id} refuses writes: its event log failed "
                f"({self._log_trouble}); free space in {self.settings.data_dir} (it reopens "
                f"the log by itself within {LOG_RETRY_S:g}s of writes working again)"
            )
        if leader is None:
            return NoLeaderError("no primary is known right now (an election is under way); retry")
        return NotLeaderError(
            f"this node is a standby; the primary is {leader.node_id} at {leader.address}",
            leader=leader.address,
        )

    def durable_id(self) -> int:
        assert self.store is not None
        return self.store.log.durable_id

    async def state_at(self, event_id: int) -> State:
        """Time travel: the state as of `event_id`, rebuilt read-only off the loop."""
        return await asyncio.to_thread(state_at, self.settings.data_dir, event_id)

    async def task_at(self, task_id: str, event_id: int) -> TaskState | None:
        """Time travel for one task: from its own events (a few reads), or by
        rebuilding the whole state when those are not all at hand."""
        assert self.store is not None
        try:
            return self.store.task_at(task_id, event_id)
        except NeedsFullReplay as e:
            log.info("time travel for %s replays the log: %s", task_id, e)
            return (await self.state_at(event_id)).peek(task_id)

    def status(self) -> ClusterStatus:
        assert self.store is not None
        store = self.store
        durable = store.log.durable_id
        primary = self.role == "primary"
        follower = self.follower
        head = durable
        if not primary and follower is not None:
            head = max(durable, follower.primary_durable_id)
        me = MemberStatus(
            self.settings.node_id,
            self.role,
            self.address,
            durable,
            store.log.last_term,
            connected=primary or (follower is not None and follower.connected),
        )
        views = list(self.hub.by_node().values()) if primary else []
        listed = members(
            me,
            self.world.members.values() if self.world is not None else (),
            standbys=views,
            live={v.node_id for v in self.hub.connected()} if primary else set(),
            synchronous=self.cluster_config.sync_replicas > 0,
            head=head,
            durable=durable,
        )
        streaming = {v.node_id for v in views}
        for m in listed:
            if m.node_id in streaming:
                metrics.REPLICATION_LAG_SECONDS.labels(m.node_id).set(m.lag_ms / 1000)
        return ClusterStatus(
            node_id=self.settings.node_id,
            role=self.shown_role,
            term=max(self.known_term, store.state.term),
            leader=self.leader,
            lease=None
            if self._lease is None
            else LeaseStatus(self.lease.ttl_s, round(self.fence.remaining_s(), 3)),
            members=listed,
            last_event_id=durable,
            applied_event_id=store.state.last_event_id,
            recovery=str(store.recovery),
            running_steps=self.engine.running() if self.engine else 0,
            active_tasks=sum(1 for t in store.state.tasks.values() if not t.quiescent),
            security=protect.describe(self.settings),
            notice=self.notice,
            workers=self.workers(),
            execution=self.settings.execution,
            terms_started=len(store.state.terms),
        )

    def _previous_leader(self) -> str | None:
        """The leader of the last term this log holds (None: it holds none; "": its
        TERM_STARTED is no longer kept, or could not be read)."""
        assert self.store is not None
        terms = self.store.state.terms
        if not terms:
            return None
        try:
            for e in self.store.log.read_ids([terms[-1][1]]):
                return str(e.payload.get("node_id", ""))
        except Exception as e:  # a history detail: never a reason not to lead
            log.warning("the previous term's TERM_STARTED cannot be read (%s): not recorded", e)
        return ""

    def history(self) -> list[TermRecord]:
        """Every term in this node's log, oldest first, with its TERM_STARTED's leader
        and time (one indexed read for all of them)."""
        store = self.store
        if store is None:
            return []
        terms = list(store.state.terms)
        events = {e.event_id: e for e in store.log.read_ids([eid for _, eid in terms])}
        out = []
        for term, eid in terms:
            e = events.get(eid)
            p = e.payload if e is not None else {}
            out.append(
                TermRecord(
                    term,
                    eid,
                    str(p.get("node_id", "")),
                    str(p.get("address", "")),
                    e.timestamp if e is not None else 0,
                    str(p.get("began", "")),
                    str(p.get("previous", "")),
                )
            )
        return out

    def workers(self) -> tuple[WorkerStatus, ...]:
        return () if self.dispatch is None else self.dispatch.statuses()

    # ------------------------------------------------------------- stop

    async def stop(self) -> str:
        """Graceful: stop starting steps and refuse new writes, let running steps finish
        (up to drain_timeout), resign the lease so a standby takes over at once
        instead of after the TTL, then stop serving and close the store."""
        self._stopping = True
        await asyncio.to_thread(self.scrubber.stop)
        was_primary = self.role == "primary"
        drained = True
        if self.engine is not None and self.engine.leading:
            if self.settings.execution != "remote":
                # (with `both`, attempts on workers may finish meanwhile too)
                drained = await self.engine.drain(within_s=self.settings.drain_timeout)
            await self.engine.stop()
        if self.dispatch is not None:
            # Attempts on workers outlive this node: the next primary adopts them, so
            # nothing is failed (the engine, stopped first, decides nothing more).
            await self.dispatch.stop("this node is stopping")
        self.role = "stopped"
        self.fence.disarm()
        metrics.ROLE.set(0)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self._stop_following()
        if self._lease is not None:
            if was_primary:
                with contextlib.suppress(Exception):
                    await self.lease.resign()
            with contextlib.suppress(Exception):
                await self.lease.close()
        if self.api is not None:
            # Replication streams never end by themselves: a short grace is for unary calls.
            await self.api.stop(grace_s=1.0)
        if self.http is not None:
            await self.http.stop()
        if self.store is not None:
            await self.store.close()
        if drained:
            return "stopped"
        return "stopped (steps still running were left for the next leader)"


def _probe_writes(data_dir: str) -> None:
    """Write and fsync PROBE_BYTES beside the log, then remove them: does the disk
    take writes again? Raises OSError (ENOSPC, EIO) when not."""
    path = os.path.join(data_dir, ".write-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(bytes(PROBE_BYTES))
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(path)


async def _watch_loop_lag(
    on_tick: Callable[[float], None] | None = None, period_s: float = 0.05
) -> None:
    """Observe how late the event loop wakes a timer: a busy or blocked loop delays
    everything this node does, and this is the one number that shows it."""
    loop = asyncio.get_running_loop()
    while True:
        t0 = loop.time()
        await asyncio.sleep(period_s)
        lag = max(0.0, loop.time() - t0 - period_s)
        metrics.LOOP_LAG_SECONDS.observe(lag)
        if on_tick is not None:
            on_tick(lag)
