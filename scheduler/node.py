"""The node process: store, lease, engine (and, as they land, the API and replication).

Each step of the node's life is a small decision that returns a sentence,
logged as is (Patroni's style): "promoted: term 7, recovered from snapshot
41000 + 312 events in 9.1 ms".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from typing import Any

from lease import LeaderInfo, Lease, MemoryLease
from scheduler.api.server import ApiServer
from scheduler.clock import Clock
from scheduler.config import NodeSettings
from scheduler.engine import Engine
from scheduler.errors import NotLeaderError
from scheduler.log import EventType, LogConfig
from scheduler.replay import State
from scheduler.store import Store, StoreConfig, state_at
from scheduler.workflow import Registry

log = logging.getLogger(__name__)


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
        self.store: Store | None = None
        self.engine: Engine | None = None
        self.leader: LeaderInfo | None = None
        self.role = "starting"
        self._keepalive: asyncio.Task[None] | None = None
        self._renewed_at = 0.0  # monotonic time of the last successful renewal
        self.started_at = time.time()
        self.api: ApiServer | None = None
        self.port = 0

    @property
    def lease(self) -> Lease:
        assert self._lease is not None
        return self._lease

    def _open_store(self) -> Store:
        s = self.settings
        cfg = StoreConfig(
            log=LogConfig(
                segment_max_bytes=s.segment_max_bytes,
                payload_max_bytes=s.payload_max_bytes,
                fsync=s.fsync,
            ),
            snapshot_interval=s.snapshot_interval,
        )
        return Store.open(s.data_dir, config=cfg, instance_id=s.node_id, clock=self.clock.now_ms)

    async def start(self) -> str:
        s = self.settings
        for module in s.workflows:
            self.registry.load_module(module)
        self.store = self._open_store()
        self.engine = Engine(
            self.store,
            self.registry,
            node_id=s.node_id,
            clock=self.clock,
            concurrency=s.concurrency,
            idempotency_ttl_s=s.idempotency_ttl,
        )
        if self._lease is None:
            if not s.standalone:
                raise NotImplementedError("cluster mode (--etcd) arrives with the cluster issue")
            # Standalone: an in-memory lease whose terms start above everything in the log.
            self._lease = MemoryLease(ttl_s=s.lease_ttl, min_term=self.store.log.last_term)
        self.api = ApiServer(self)
        self.port = await self.api.start(s.listen)
        won = await self.lease.campaign(s.node_id, self.address)
        if won is None:
            self.role = "standby"
            return f"standby: {self.store.recovery}, serving on port {self.port}"
        return f"{await self._promote(won)}, serving on port {self.port}"

    @property
    def address(self) -> str:
        """Where clients reach this node (the real port when --listen asked for port 0)."""
        if self.settings.advertise:
            return self.settings.advertise
        host = self.settings.listen.rpartition(":")[0]
        return f"{host}:{self.port}"

    async def _promote(self, won: LeaderInfo) -> str:
        assert self.store is not None and self.engine is not None
        t0 = time.perf_counter()
        log_ = self.store.log
        log_.term = won.term
        await log_.append(
            EventType.TERM_STARTED,
            "",
            payload={"node_id": self.settings.node_id, "address": self.address},
        )
        await self.engine.start()
        self._renewed_at = time.monotonic()
        self.leader = won
        self.role = "primary"
        self._keepalive = asyncio.create_task(self._renew_loop(), name="apollo11-keepalive")
        return (
            f"promoted: term {won.term}, {self.store.recovery}, "
            f"scheduling in {(time.perf_counter() - t0) * 1000:.1f} ms"
        )

    async def _renew_loop(self) -> None:
        period = self.lease.ttl_s / 3
        while True:
            await asyncio.sleep(period)
            if not await self.lease.renew():
                log.error("%s", await self.demote("lease renewal failed"))
                return
            self._renewed_at = time.monotonic()

    async def demote(self, why: str) -> str:
        """Stop acting as primary at once (the lease is gone or going)."""
        if self.engine is not None:
            await self.engine.stop()
        self.role = "standby"
        self.leader = None
        return f"demoted self because {why}"

    # ---------------------------------------------------------- for the API

    def not_leader(self) -> NotLeaderError:
        leader = self.leader
        if self.role == "primary" or leader is None:
            return NotLeaderError("this node is not the primary (or is shutting down)")
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

    def status(self) -> dict[str, Any]:
        assert self.store is not None
        store = self.store
        leader = self.leader
        remaining = -1.0
        if self.role == "primary" and self._lease is not None:
            remaining = max(0.0, self.lease.ttl_s - (time.monotonic() - self._renewed_at))
        me = {
            "node_id": self.settings.node_id,
            "role": self.role,
            "address": self.address,
            "last_event_id": store.log.durable_id,
            "term": store.log.last_term,
            "lag_events": 0,
            "lag_ms": 0.0,
            "connected": True,
            "synchronous": False,
        }
        return {
            "node_id": self.settings.node_id,
            "role": self.role,
            "term": store.state.term,
            "leader": None
            if leader is None
            else {"node_id": leader.node_id, "address": leader.address, "term": leader.term},
            "lease": None
            if self._lease is None
            else {"ttl_s": self.lease.ttl_s, "remaining_s": round(remaining, 3)},
            "members": [me],
            "last_event_id": store.log.durable_id,
            "applied_event_id": store.state.last_event_id,
            "recovery": str(store.recovery),
            "running_steps": self.engine.running() if self.engine else 0,
            "active_tasks": sum(1 for t in store.state.tasks.values() if not t.quiescent),
        }

    async def stop(self) -> str:
        """Graceful: stop taking requests, stop starting steps, let running ones finish
        (up to drain_timeout), resign the lease so a standby need not wait for the
        TTL, close the store."""
        if self.api is not None:
            await self.api.stop(grace_s=min(5.0, self.settings.drain_timeout))
        if self._keepalive is not None:
            self._keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keepalive
        drained = True
        if self.engine is not None and self.engine.leading:
            drained = await self.engine.drain(within_s=self.settings.drain_timeout)
            await self.engine.stop()
        if self._lease is not None:
            with contextlib.suppress(Exception):
                await self.lease.resign()
            await self.lease.close()
        if self.store is not None:
            await self.store.close()
        self.role = "stopped"
        return "stopped" + (
            "" if drained else " (steps still running were left for the next leader)"
        )


async def serve(settings: NodeSettings) -> int:
    """Run a node until SIGTERM or SIGINT; exit status 0 on a clean stop."""
    node = Node(settings)
    print(f"apollo11 node {settings.node_id}: {await node.start()}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print(f"apollo11 node {settings.node_id}: {await node.stop()}", flush=True)
    return 0
