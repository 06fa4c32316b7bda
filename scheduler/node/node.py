"""The node process: store, lease, engine, API, and its role in the cluster.

`Node` composes the parts, starts them and stops them; each part is a file:
roleloop.py (the role in the cluster: the loop, promotion, demotion,
switchover; it owns the fence), logwatch.py (a failed log becomes a fact the
loop reads, and is reopened), upkeep.py (the scrub and the mending of damaged
files), commit.py (when a write may be acknowledged), views.py (what the API
reads). Standalone (no --etcd) a node is a cluster of one on an in-memory
lease: it leads at once, and the same loop brings it back to primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apollo11.lease import (
    ClusterConfig,
    LeaderInfo,
    Lease,
    LeaseUnavailable,
    MemoryLease,
    NodeIdTaken,
    World,
)
from apollo11.replicator import Follower, ReplicationHub
from apollo11.scheduler import gctune, metrics
from apollo11.scheduler.api.server import ApiServer
from apollo11.scheduler.api.status import ClusterStatus, TermRecord, WorkerStatus
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.dispatch import WorkersService
from apollo11.scheduler.engine import Engine
from apollo11.scheduler.errors import (
    ApolloError,
    CorruptLogError,
    SnapshotError,
    SnapshotMismatchError,
)
from apollo11.scheduler.log import DataDir
from apollo11.scheduler.node import join, options, reshape
from apollo11.scheduler.node.commit import Commit
from apollo11.scheduler.node.fence import Fence
from apollo11.scheduler.node.logwatch import LogWatch
from apollo11.scheduler.node.nodeid import DUPLICATE_HINT
from apollo11.scheduler.node.roleloop import RoleLoop
from apollo11.scheduler.node.upkeep import Upkeep
from apollo11.scheduler.node.views import Views
from apollo11.scheduler.security import (
    Principals,
    describe_protection,
    protection_missing,
    protection_refusal,
)
from apollo11.scheduler.state import (
    Repair,
    Scrubber,
    Store,
    TaskState,
    load_repair,
    set_aside_for_repair,
    warm_merger,
)
from apollo11.scheduler.workflow import Registry

# the node's log lines keep the name they had before the node became a package
log = logging.getLogger("apollo11.scheduler.node")


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
        self.dispatch, self.executor = options.executors(settings)
        self.api: ApiServer | None = None
        self.http: Any = None
        self.http_port = 0
        self.notice_text = ""  # what this node found wrong (etcd's state, its log): status says it
        self._reopen_lock = asyncio.Lock()
        self.repair: Repair | None = None  # set while refilled from the primary
        self.cluster_id = ""  # this cluster's id, once checked against etcd (scheduler/identity.py)
        # Random per process: tells this process's member record from another's with
        # the same node id (a duplicate, or this node's own record from before a crash).
        self.instance = uuid.uuid4().hex
        self.port = 0
        self.started_at = time.time()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._segment_bytes = settings.segment_max_bytes
        self._loop: asyncio.AbstractEventLoop | None = None
        self.roles = RoleLoop(self)
        self.logwatch = LogWatch(self)
        self.upkeep = Upkeep(
            self, mb_per_s=settings.scrub_mb_per_s, interval_s=settings.scrub_interval
        )
        self.views = Views(self)
        self.commit = Commit(
            node_id=settings.node_id,
            standalone=settings.standalone,
            sync_timeout_s=settings.sync_timeout,
            hub=lambda: self.roles.hub,
            config=lambda: self.roles.cluster_config,
            lease_valid=self.roles.lease_valid,
            world=lambda: self.roles.world,
        )

    # -------------------------------------------------- what the parts read

    @property
    def lease(self) -> Lease:
        assert self._lease is not None
        return self._lease

    @property
    def lease_or_none(self) -> Lease | None:
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

    @property
    def role(self) -> str:
        return self.roles.role

    @property
    def shown_role(self) -> str:
        return self.roles.shown_role

    @property
    def leader(self) -> LeaderInfo | None:
        return self.roles.leader

    @property
    def world(self) -> World | None:
        return self.roles.world

    @property
    def hub(self) -> ReplicationHub:
        return self.roles.hub

    @property
    def follower(self) -> Follower | None:
        return self.roles.follower

    @property
    def fence(self) -> Fence:
        return self.roles.fence

    @property
    def known_term(self) -> int:
        return self.roles.known_term

    @property
    def cluster_config(self) -> ClusterConfig:
        return self.roles.cluster_config

    @property
    def log_trouble(self) -> str | None:
        """Why this node's event log refuses writes; None while it takes them."""
        return self.logwatch.trouble

    @property
    def scrubber(self) -> Scrubber:
        return self.upkeep.scrubber

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def reshaping(self) -> bool:
        return self._reopen_lock.locked()

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop

    def reload_principals(self) -> str:
        if self.principals is None:
            return "SIGHUP: no --tokens-file to reload"
        return self.principals.reload()

    def notice(self, text: str) -> None:
        log.warning("%s", text)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.clock.now()))
        self.notice_text = f"{stamp}: {text}"

    def wake(self) -> None:
        self.roles.wake()

    def saw_term(self, term: int) -> None:
        self.roles.saw_term(term)

    def lease_valid(self) -> bool:
        return self.roles.lease_valid()

    def replication_address(self, leader: LeaderInfo) -> str:
        return self.roles.replication_address(leader)

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
            shell_refusal=self.views.shell_refusal,
            lease_valid=self.lease_valid,
        )
        if self.api is not None:
            store.add_observer(self.api.watchers)
        self.roles.store_reopened()
        self.saw_term(store.log.last_term)
        return store

    async def start(self) -> str:
        s = self.settings
        refused = protection_refusal(s)
        if refused:
            raise ApolloError(refused)
        if protection_missing(s):
            log.warning("%s", describe_protection(s))
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
                from apollo11.lease import EtcdLease

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
        self._spawn(self.logwatch.run(), "apollo11-log-watch")
        self._loop = asyncio.get_running_loop()
        self.scrubber.start()
        # What exists now (modules, the recovered state) lives as long as the node;
        # without this every full collection rescans it, and each such pause is a
        # replication-latency outlier (docs/benchmarks.md, "Figures behind the knobs").
        # The young threshold is raised too (gctune.py).
        gctune.settle()
        metrics.watch_gc()
        warm_merger()
        if s.standalone:
            t0 = time.monotonic()
            won = await self.lease.campaign(s.node_id, self.address, min_term=self.roles.known_term)
            if won is None:
                raise ApolloError("the in-memory lease is taken: is another node running here?")
            promoted = await self.roles.promote(won, t0)
            # A cluster of one on the in-memory lease: the same loop takes it back to
            # primary after it stepped down (a pause past its TTL, a failed log).
            self._spawn(self.roles.run(), "apollo11-role")
            return f"{promoted}, serving on port {self.port}{self._peers()}"
        self.roles.role = "standby"
        try:
            # The first record is created only where none exists: another process that
            # started with this node id since _join() checked loses here, not later.
            await self.roles.put_record()
        except NodeIdTaken as e:
            await self.stop()  # serving already: stop all of it, then refuse
            raise ApolloError(f"{e}; {DUPLICATE_HINT}") from None
        except LeaseUnavailable as e:
            log.warning("publishing this node's member record: %s (the role loop retries)", e)
        self._spawn(self.roles.run(), "apollo11-role")
        return (
            f"started as standby of cluster {s.cluster!r} ({self.cluster_id}): "
            f"{self.store.recovery}, "
            f"serving on port {self.port}{self._peers()}"
        )

    async def _open_or_set_aside(self) -> Store:
        """Open the store; in a cluster, a damaged one is set aside and refilled from
        the primary (scheduler/state/repair.py). Standalone there is nobody to refill it
        from: the damage is refused, naming the file."""
        s = self.settings
        try:
            store = self._open_store()
        except (CorruptLogError, SnapshotError, SnapshotMismatchError) as e:
            if s.standalone:
                raise
            self.repair = await asyncio.to_thread(set_aside_for_repair, s.data_dir, str(e))
            metrics.LOG_DAMAGE_FOUND.labels("startup").inc()
            self.notice(f"{s.node_id}: {self.repair.describe()}")
            return self._open_store()
        self.repair = load_repair(s.data_dir)
        if self.repair is not None:
            self.notice(f"{s.node_id} (restarted): {self.repair.describe()}")
        return store

    async def _join(self) -> str:
        self.cluster_id, sentence = await join.join(
            self.lease,
            self.settings,
            self.store,
            self.roles.cluster_config,
            self.roles.apply_config,
        )
        return sentence

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

    def _tick(self, lag: float) -> None:
        if self.role == "primary":
            self.hub.tick(responsive=lag < 0.25)

    # ------------------------------------------------ reshaping the store

    def adopt_segment_size(self, size: int) -> None:
        """Rotate segments where the primary does, so segment files stay byte-identical."""
        if size and self.store is not None and size != self.store.log.config.segment_max_bytes:
            self._segment_bytes = size
            self.store.log.config = dataclasses.replace(
                self.store.log.config, segment_max_bytes=size
            )

    async def reopen(self, change: Callable[[DataDir], str]) -> str:
        """Close the store, change the files, open it again - whatever happens in between
        (a failed change leaves the files as they were, and the store is reopened).
        If the open fails, the closed store stays (its state answers reads) and the
        node's log counts as failed: the log's watch retries the open."""
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
                    if self.logwatch.trouble is None:
                        self.logwatch.failed(f"reopening it failed: {e}", None)
                    raise

    async def cut_divergent_tail(self, keep_through: int, reason: str) -> str:
        """A deposed primary rejoining: move its divergent tail to quarantine."""
        return await self.reopen(
            lambda data: reshape.cut_divergent_tail(data, keep_through, reason)
        )

    async def install_snapshot(self, staging: Path, watermark: int) -> str:
        return await self.reopen(lambda data: reshape.install_snapshot(data, staging, watermark))

    # ---------------------------------------------------------- for the API

    def not_leader(self) -> ApolloError:
        return self.views.not_leader()

    def durable_id(self) -> int:
        assert self.store is not None
        return self.store.log.durable_id

    async def task_at(self, task_id: str, event_id: int) -> TaskState | None:
        return await self.views.task_at(task_id, event_id)

    def status(self) -> ClusterStatus:
        return self.views.status()

    def history(self) -> list[TermRecord]:
        return self.views.history()

    def workers(self) -> tuple[WorkerStatus, ...]:
        return self.views.workers()

    async def switchover(self, to: str | None, *, operator: str) -> tuple[str, int, str]:
        return await self.roles.leading.switchover(to, operator=operator)

    # ------------------------------------------------------------- stop

    async def stop(self) -> str:
        """Graceful: stop starting steps and refuse new writes, let running steps finish
        (up to drain_timeout), resign the lease so a standby takes over at once
        instead of after the TTL, then stop serving and close the store."""
        self._stopping = True
        self.roles.wake()
        await asyncio.to_thread(self.scrubber.stop)
        was_primary = self.role == "primary"
        drained = True
        if self.engine is not None and self.engine.leading:
            if self.settings.execution != "remote":
                # (with `both`, attempts on workers may finish meanwhile too)
                drain = self.engine.drain(within_s=self.settings.drain_timeout)
                drained = await self.roles.drain(drain)
            if self.engine.leading:
                await self.engine.stop()
        if self.dispatch is not None:
            # Attempts on workers outlive this node: the next primary adopts them, so
            # nothing is failed (the engine, stopped first, decides nothing more).
            await self.dispatch.stop("this node is stopping")
        self.roles.role = "stopped"
        self.fence.disarm()
        metrics.ROLE.set(0)
        await self.roles.leading.stop_fence()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.roles.stop_following()
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
