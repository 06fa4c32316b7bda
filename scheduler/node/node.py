"""The node process: store, lease, engine, API, and its role in the cluster.

`Node` composes the parts, starts them and stops them; each part is a file:
roleloop.py (the role in the cluster: the loop, with leading.py the primary's
side, promotion, demotion, switchover and the fence, and following.py the
standby's), logwatch.py (a failed log becomes a fact the loop reads, and is
reopened), storekeeper.py (the store opened, set aside, reopened around a
change of its files), upkeep.py (the scrub and the mending of damaged files),
commit.py (when a write may be acknowledged), views.py (the node as the API and
the pages see it). Standalone (no --etcd) a node is a cluster of one on an
in-memory lease: it leads at once, and the same loop brings it back to primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from apollo11.lease import (
    Lease,
    NodeIdTaken,
)
from apollo11.scheduler import gctune, metrics
from apollo11.scheduler.api import ApiServer, ConnectionShedder
from apollo11.scheduler.bucket import BucketHistory, Shipper, open_bucket
from apollo11.scheduler.cancelling import stop_task
from apollo11.scheduler.clock import Clock
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.dispatch import WorkersService
from apollo11.scheduler.engine import Engine
from apollo11.scheduler.errors import (
    ApolloError,
    BucketConfigError,
    BucketError,
    WorkflowDefinitionError,
)
from apollo11.scheduler.log import DataDir
from apollo11.scheduler.node import join, options
from apollo11.scheduler.node.commit import Commit
from apollo11.scheduler.node.logwatch import LogWatch
from apollo11.scheduler.node.looplag import watch_loop_lag
from apollo11.scheduler.node.nodeid import DUPLICATE_HINT
from apollo11.scheduler.node.roleloop import RoleLoop
from apollo11.scheduler.node.storekeeper import StoreKeeper
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
    Store,
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
        self.dispatch, self.executor = options.executors(settings, self.registry)
        self.api: ApiServer | None = None
        self.shipper: Shipper | None = None  # with --archive-url (scheduler/bucket/)
        self.http: Any = None
        self.http_port = 0
        self.notice_text = ""  # what this node found wrong (etcd's state, its log): status says it
        self.repair: Repair | None = None  # set while refilled from the primary
        self.cluster_id = ""  # this cluster's id, once checked against etcd (scheduler/identity.py)
        # Random per process: tells this process's member record from another's with
        # the same node id (a duplicate, or this node's own record from before a crash).
        self.instance = uuid.uuid4().hex
        self.port = 0
        self.started_at = time.time()
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.roles = RoleLoop(self)
        self.logwatch = LogWatch(self)
        self.upkeep = Upkeep(
            self, self.roles, mb_per_s=settings.scrub_mb_per_s, interval_s=settings.scrub_interval
        )
        self.views = Views(self, self.roles, self.roles.leading)
        self.keeper = StoreKeeper(self, self._open_store, self._reopen_failed)
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
    def known_term(self) -> int:
        return self.roles.known_term

    @property
    def log_trouble(self) -> str | None:
        """Why this node's event log refuses writes; None while it takes them."""
        return self.logwatch.trouble

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def reshaping(self) -> bool:
        return self.keeper.reshaping

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

    def welcome_clients(self) -> None:
        """This node took over: its gRPC ports shed strangers less for a while
        (api/knownsources.py)."""
        if self.api is not None and self.api.known is not None:
            self.api.known.welcome()

    def saw_term(self, term: int) -> None:
        self.roles.saw_term(term)

    def lease_valid(self) -> bool:
        return self.roles.lease_valid()

    # ------------------------------------------------------------ start

    def _open_store(self, segment_bytes: int) -> Store:
        """The store, and the engine that stands on it (storekeeper.py calls this)."""
        s = self.settings
        cfg = options.store_config(s, segment_max_bytes=segment_bytes)
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
        if self.shipper is not None:
            store.retention_floor = self.shipper.retention_floor
            store.bucket_redacted = self.shipper.redacted
            # what retention dropped from this disk is read back from the bucket
            store.older = BucketHistory(self.shipper.objects)
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
        if s.archive_url:
            # before anything opens: a wrong URL or missing credentials refuse the start
            self.shipper = await self._archive(s.archive_url)
        options.load_workflows(self.registry, s)
        refused = options.limits_refusal(self.registry, s)
        if refused:
            raise WorkflowDefinitionError(refused)
        self.store = await self.keeper.open_or_set_aside()
        if self._lease is None:
            self._lease = options.lease(s)
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
        self.api = ApiServer(self.views, self.principals, extra=extra, clock=self.clock)
        self.port = await self.api.start(s.listen)
        if s.grpc_threads_cpu_budget > 0:
            ports = (self.port, self.api.peer_port) if self.api.peer else (self.port,)
            shedder = ConnectionShedder(
                ports=ports, budget=s.grpc_threads_cpu_budget, known=self.api.known
            )
            self._spawn(shedder.run(), "apollo11-grpc-shed")
        if s.http:
            from apollo11.scheduler.web import HttpServer

            self.http = HttpServer(self.views, s.http)
            self.http_port = await self.http.start()
        self._spawn(watch_loop_lag(self._tick), "apollo11-loop-lag")
        self._spawn(self.logwatch.run(), "apollo11-log-watch")
        if self.shipper is not None:
            self._spawn(self.shipper.run(), "apollo11-archive")
        self._loop = asyncio.get_running_loop()
        self.upkeep.scrubber.start()
        # What exists now (modules, the recovered state) lives as long as the node;
        # without this every full collection rescans it, and each such pause is a
        # replication-latency outlier (docs/benchmarks.md, "Figures behind the knobs").
        # The young threshold is raised too (gctune.py).
        gctune.settle()
        metrics.watch_gc()
        warm_merger()
        try:
            begun = await self.roles.begin()
        except NodeIdTaken as e:
            await self.stop()  # serving already: stop all of it, then refuse
            raise ApolloError(f"{e}; {DUPLICATE_HINT}") from None
        # The same loop, standalone too: a cluster of one on the in-memory lease is
        # taken back to primary after it stepped down (a pause past its TTL, a failed log).
        self._spawn(self.roles.run(), "apollo11-role")
        return f"{begun}, serving on port {self.port}{self._peers()}"

    async def _archive(self, url: str) -> Shipper:
        """The archive's shipper; refused (BucketConfigError) when the URL, the
        credentials or the bucket are wrong. An unreachable bucket is no reason not to
        start: the node works, and uploads wait for it."""
        objects = open_bucket(url)
        try:
            log.info("%s", await asyncio.to_thread(objects.probe))
        except BucketConfigError:
            raise
        except BucketError as e:
            log.warning("archive: %s; the node starts, uploads wait for the bucket", e)
        s = self.settings
        return Shipper(self, objects, node_id=s.node_id, cluster=s.cluster)

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

    def _reopen_failed(self, why: str) -> None:
        if self.logwatch.trouble is None:
            self.logwatch.failed(why, None)

    def _peers(self) -> str:
        return f", replication on port {self.api.peer_port}" if self.api and self.api.peer else ""

    def _spawn(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    def _tick(self, lag: float) -> None:
        if self.role == "primary":
            self.roles.hub.tick(responsive=lag < 0.25)

    # ------------------------------------- for a follower (replicator/ports.py)

    def adopt_segment_size(self, size: int) -> None:
        self.keeper.adopt_segment_size(size)

    async def cut_divergent_tail(self, keep_through: int, reason: str) -> str:
        return await self.keeper.cut_divergent_tail(keep_through, reason)

    async def install_snapshot(self, staging: Path, watermark: int) -> str:
        return await self.keeper.install_snapshot(staging, watermark)

    def reopen(self, change: Callable[[DataDir], str]) -> Awaitable[str]:
        return self.keeper.reopen(change)

    def not_leader(self) -> ApolloError:
        return self.views.not_leader()

    # ------------------------------------------------------------- stop

    async def stop(self) -> str:
        """Graceful: stop starting steps and refuse new writes, let running steps finish
        (up to drain_timeout), resign the lease so a standby takes over at once
        instead of after the TTL, then stop serving and close the store."""
        self._stopping = True
        self.roles.wake()
        await asyncio.to_thread(self.upkeep.scrubber.stop)
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
        self.roles.fence.disarm()
        metrics.ROLE.set(0)
        await self.roles.leading.stop_fence()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:  # cancelled again while one runs on (a lost cancellation)
            await stop_task(t, t.get_name())
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
