"""What the API reads of its node: status, terms, workers, time travel, and the
error for a write this node cannot take (nodeview/'s NodeView)."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Protocol

from apollo11.lease import ClusterConfig, LeaderInfo, Lease
from apollo11.replicator import ReplicationHub
from apollo11.scheduler import metrics
from apollo11.scheduler.errors import (
    ApolloError,
    LogFailedError,
    NodeUnavailableError,
    NoLeaderError,
    NotLeaderError,
)
from apollo11.scheduler.node.logwatch import LOG_RETRY_S
from apollo11.scheduler.node.parts import Parts, RoleFacts
from apollo11.scheduler.nodeview import (
    ClusterStatus,
    LeaseStatus,
    MemberStatus,
    TermRecord,
    WorkerStatus,
    members,
    read_events,
)
from apollo11.scheduler.security import describe_protection
from apollo11.scheduler.shell import SHELL_DISABLED
from apollo11.scheduler.state import NeedsFullReplay, State, TaskState, apply_all, state_at

if TYPE_CHECKING:
    from apollo11.scheduler.config import NodeSettings
    from apollo11.scheduler.engine import Engine
    from apollo11.scheduler.node.leading import Leading
    from apollo11.scheduler.security import Principals
    from apollo11.scheduler.state import Store

log = logging.getLogger("apollo11.scheduler.node")

HISTORY_PAGE = 10_000  # a task's events read back from the bucket a page at a time


class Host(Parts, Protocol):
    @property
    def address(self) -> str: ...
    @property
    def lease_or_none(self) -> Lease | None: ...
    @property
    def log_trouble(self) -> str | None: ...
    @property
    def notice_text(self) -> str: ...
    @property
    def cluster_id(self) -> str: ...
    @property
    def principals(self) -> Principals | None: ...


class Views:
    """The node as its API and pages see it: api/ports.py's NodeView (and
    replicator/ports.py's PrimarySide), read off the node and its role."""

    def __init__(self, host: Host, roles: RoleFacts, leading: Leading) -> None:
        self.host = host
        self.roles = roles
        self._leading = leading

    # ------------------------------------------- what the API reads as it is

    @property
    def settings(self) -> NodeSettings:
        return self.host.settings

    @property
    def store(self) -> Store | None:
        return self.host.store

    @property
    def engine(self) -> Engine | None:
        return self.host.engine

    @property
    def cluster_id(self) -> str:
        return self.host.cluster_id

    @property
    def principals(self) -> Principals | None:
        return self.host.principals

    @property
    def log_trouble(self) -> str | None:
        return self.host.log_trouble

    @property
    def role(self) -> str:
        return self.roles.role

    @property
    def hub(self) -> ReplicationHub:
        return self.roles.hub

    @property
    def leader(self) -> LeaderInfo | None:
        return self.roles.leader

    @property
    def known_term(self) -> int:
        return self.roles.known_term

    @property
    def cluster_config(self) -> ClusterConfig:
        return self.roles.cluster_config

    def durable_id(self) -> int:
        assert self.host.store is not None
        return self.host.store.log.durable_id

    async def switchover(self, to: str | None, *, operator: str) -> tuple[str, int, str]:
        return await self._leading.switchover(to, operator=operator)

    # ------------------------------------------------------- what it derives

    def shell_refusal(self) -> str | None:
        """Why shell steps may not be submitted or run now: every node must allow them,
        or a failover would hand them to one that was never meant to run commands."""
        if not self.host.settings.allow_shell:
            return SHELL_DISABLED
        world = self.roles.world
        if world is not None:
            for m in world.members.values():
                if not m.shell and m.node_id != self.host.settings.node_id:
                    return (
                        f"shell steps are disabled on node {m.node_id}; start every node "
                        f"with --allow-shell"
                    )
        return None

    def not_leader(self) -> ApolloError:
        h, r = self.host, self.roles
        leader = r.leader
        if r.role == "primary" or h.stopping:
            # UNAVAILABLE, not FAILED_PRECONDITION: no leader to redirect to yet, and
            # clients retry only what says "try again" (issue 15: a submit lost to it)
            return NodeUnavailableError(
                f"{h.settings.node_id} is shutting down or stepping down; retry, here "
                f"or on another node"
            )
        if leader is None and h.log_trouble is not None:
            return LogFailedError(
                f"{h.settings.node_id} refuses writes: its event log failed "
                f"({h.log_trouble}); free space in {h.settings.data_dir} (it reopens "
                f"the log by itself within {LOG_RETRY_S:g}s of writes working again)"
            )
        if leader is None:
            return NoLeaderError("no primary is known right now (an election is under way); retry")
        return NotLeaderError(
            f"this node is a standby; the primary is {leader.node_id} at {leader.address}",
            leader=leader.address,
        )

    async def state_at(self, event_id: int) -> State:
        """Time travel: the state as of `event_id`, rebuilt read-only off the loop
        (without the scan for later redactions: task_at applies them from memory)."""
        return await asyncio.to_thread(
            functools.partial(state_at, hide_later=False), self.host.settings.data_dir, event_id
        )

    async def task_at(self, task_id: str, event_id: int) -> TaskState | None:
        """Time travel for one task: from its own events (a few reads), or by
        rebuilding the whole state when those are not all at hand."""
        store = self.host.store
        assert store is not None
        try:
            return store.task_at(task_id, event_id)
        except NeedsFullReplay as e:
            now = store.state.peek(task_id)
            if store.older is not None and now is not None and now.event_ids is not None:
                # its oldest events are in the bucket: read them back, replay it alone
                return await self._task_at_from_bucket(store, now, event_id)
            log.info("time travel for %s replays the log: %s", task_id, e)
            return store.hide_since((await self.state_at(event_id)).peek(task_id), event_id)

    async def _task_at_from_bucket(
        self, store: Store, now: TaskState, event_id: int
    ) -> TaskState | None:
        events = []
        start = 0
        while True:
            page = await read_events(store, now, start, event_id, HISTORY_PAGE)
            if page.gone_before:  # the bucket does not hold them all: the slow way
                past = (await self.state_at(event_id)).peek(now.task_id)
                return store.hide_since(past, event_id)
            events += page.events
            start = page.next_id
            if not start:
                break
        if not events:
            return None  # submitted after `event_id`
        return apply_all(State(), events).peek(now.task_id)

    def not_found(self, task_id: str, as_of: int = 0) -> str:
        store = self.host.store
        assert store is not None
        return store.state.not_found(task_id, as_of)

    def status(self) -> ClusterStatus:
        h, r = self.host, self.roles
        store = h.store
        assert store is not None
        durable = store.log.durable_id
        primary = r.role == "primary"
        follower = r.follower
        head = durable
        if not primary and follower is not None:
            head = max(durable, follower.primary_durable_id)
        me = MemberStatus(
            h.settings.node_id,
            r.role,
            h.address,
            durable,
            store.log.last_term,
            connected=primary or (follower is not None and follower.connected),
        )
        views = list(r.hub.by_node().values()) if primary else []
        listed = members(
            me,
            r.world.members.values() if r.world is not None else (),
            roster=r.world.roster if r.world is not None else (),
            standbys=views,
            live={v.node_id for v in r.hub.connected()} if primary else set(),
            synchronous=r.cluster_config.sync_replicas > 0,
            head=head,
            durable=durable,
        )
        streaming = {v.node_id for v in views}
        for m in listed:
            if m.node_id in streaming:
                metrics.REPLICATION_LAG_SECONDS.labels(m.node_id).set(m.lag_ms / 1000)
        lease = h.lease_or_none
        return ClusterStatus(
            node_id=h.settings.node_id,
            role=r.shown_role,
            term=max(r.known_term, store.state.term),
            leader=r.leader,
            lease=None
            if lease is None
            else LeaseStatus(lease.ttl_s, round(r.fence.remaining_s(), 3)),
            members=listed,
            last_event_id=durable,
            applied_event_id=store.state.last_event_id,
            recovery=str(store.recovery),
            running_steps=h.engine.running() if h.engine else 0,
            active_tasks=sum(1 for t in store.state.tasks.values() if not t.quiescent),
            security=describe_protection(h.settings),
            notice=h.notice_text,
            workers=self.workers(),
            execution=h.settings.execution,
            terms_started=len(store.state.terms),
        )

    def history(self) -> list[TermRecord]:
        """Every term in this node's log, oldest first, with its TERM_STARTED's leader
        and time (one indexed read for all of them)."""
        store = self.host.store
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
        dispatch = self.host.dispatch
        return () if dispatch is None else dispatch.statuses()
