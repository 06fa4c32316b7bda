"""Leading: what a node does as the primary, from its promotion to its demotion.

The role loop (roleloop.py) decides when; this holds what leading owns: the
fence and its tasks (keepalive, watchdog), the replication hub of the term,
and a switchover under way. `begin` arms the fence and writes the term's
first event; `end` stops the engine and the workers' dispatch, fails the
writes waiting for standbys and resigns the lease. A switchover catches its
target up, then records `handed_over` and wakes the loop, which demotes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from apollo11.lease import LeaderInfo, Lease, World
from apollo11.replicator import ReplicationHub
from apollo11.scheduler import metrics
from apollo11.scheduler.engine import AttemptToken
from apollo11.scheduler.errors import (
    ApolloError,
    FailedPreconditionError,
    NodeUnavailableError,
)
from apollo11.scheduler.log import EventType
from apollo11.scheduler.node import role
from apollo11.scheduler.node.fence import Fence
from apollo11.scheduler.node.parts import Parts
from apollo11.scheduler.state import StepStatus

log = logging.getLogger("apollo11.scheduler.node")

FENCE_TASKS = ("apollo11-keepalive", "apollo11-watchdog")


class Host(Parts, Protocol):
    """What leading needs of its node."""

    @property
    def lease(self) -> Lease: ...
    @property
    def address(self) -> str: ...

    def not_leader(self) -> ApolloError: ...


class Loop(Protocol):
    """What leading needs of the role loop that owns it."""

    @property
    def role(self) -> str: ...
    @property
    def world(self) -> World | None: ...

    def wake(self) -> None: ...
    async def put_record(self) -> None: ...


class Leading:
    def __init__(self, host: Host, loop: Loop) -> None:
        self.host = host
        self.loop = loop
        self.fence = Fence(lambda: host.lease, host.settings.lease_ttl)
        self.hub = ReplicationHub()
        self.handover = ""  # a switchover under way: the standby this primary hands to
        self.handed_over: str | None = None  # ... which holds every event now: why
        self.left = asyncio.Event()  # set by each demotion (a switchover waits for it)
        self.last_demotion = ""
        self.timing_batches = False  # the hub's durable-batch observer is registered
        self._tasks: list[asyncio.Task[None]] = []  # the fence's, while primary

    async def begin(
        self, won: LeaderInfo, renewed_at: float, previous: str | None, world: World | None
    ) -> int:
        """Lead in term `won.term`: arm the fence, write the term's first event, start
        the engine and the fence's tasks. The TERM_STARTED's event id."""
        h = self.host
        store, engine = h.store, h.engine
        assert store is not None and engine is not None
        self.fence.arm(renewed_at)
        self.handed_over = None
        store.log.term = won.term
        self.hub = ReplicationHub()
        if not self.timing_batches:
            # Registered once: it always feeds the current hub.
            store.add_observer(lambda events: self.hub.on_durable(events[-1].event_id))
            self.timing_batches = True
        started = await store.log.append(
            EventType.TERM_STARTED,
            "",
            payload={
                "node_id": h.settings.node_id,
                "address": h.address,
                "began": role.began(h.settings.node_id, previous, world),
                "previous": previous or "",
            },
        )
        await engine.start()
        if h.dispatch is not None:
            h.dispatch.start(won.term, self._is_current_attempt)
        for coro, name in (
            (self.fence.keepalive(self.loop.wake), FENCE_TASKS[0]),
            (self.fence.watchdog(self.loop.wake), FENCE_TASKS[1]),
        ):
            self._tasks.append(asyncio.create_task(coro, name=name))
        metrics.LEADER_CHANGES.inc()
        metrics.ROLE.set(1)
        metrics.TERM.set(won.term)
        return started.event_id

    async def end(self, why: str) -> str:
        """Stop acting as primary at once: no more acks, no more steps."""
        h = self.host
        self.fence.disarm()
        metrics.ROLE.set(0)
        self.hub.fail_all(f"this node stopped being the primary: {why}")
        if h.engine is not None:
            await h.engine.stop()  # first: nothing is decided once the workers go
        if h.dispatch is not None:
            # Workers go to the next primary with their attempts: nothing is failed.
            await h.dispatch.stop(f"this node stopped being the primary: {why}")
        await self.stop_fence()
        with contextlib.suppress(Exception):
            await h.lease.resign()  # if the key is still ours, let others go now
        self.handed_over = None  # (a standby from now: it settles, and reads etcd less)
        self.last_demotion = f"demoted self because {why}"
        self.left.set()
        return self.last_demotion

    def _is_current_attempt(
        self, task_id: str, step: str, token: AttemptToken, worker: str
    ) -> bool:
        """Is `token` the attempt the log says `step` is running, on `worker`? (A
        worker's result counts only then.)"""
        store = self.host.store
        task = None if store is None else store.state.tasks.get(task_id)
        found = None if task is None else task.steps.get(step)
        return (
            found is not None
            and found.status is StepStatus.STARTED
            and found.started_event == token.event_id
            and found.started_term == token.term
            and found.worker == worker
        )

    def previous_leader(self) -> str | None:
        """The leader of the last term this log holds (None: it holds none; "": its
        TERM_STARTED is no longer kept, or could not be read)."""
        store = self.host.store
        assert store is not None
        terms = store.state.terms
        if not terms:
            return None
        try:
            for e in store.log.read_ids([terms[-1][1]]):
                return str(e.payload.get("node_id", ""))
        except Exception as e:  # a history detail: never a reason not to lead
            log.warning("the previous term's TERM_STARTED cannot be read (%s): not recorded", e)
        return ""

    async def stop_fence(self) -> None:
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()
        for t in self._tasks:
            if t is not current:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
        self._tasks.clear()

    async def switchover(self, to: str | None, *, operator: str) -> tuple[str, int, str]:
        """A planned hand-over to `to` (None: the standby furthest ahead): start no new
        step, let running ones finish (up to the drain timeout), wait until the target
        holds every event this node wrote, then let the loop demote this node; the
        election prefers the target (role.elect) while this node's record names it.
        Returns (target, the last event id it holds, the sentence). Raises
        FailedPreconditionError (not the primary, no such standby) or
        NodeUnavailableError (it did not catch up in time; this node leads on)."""
        h = self.host
        engine = h.engine
        if self.loop.role != "primary" or engine is None or not engine.leading:
            raise h.not_leader()
        following = {v.node_id: v for v in self.hub.connected()}
        world = self.loop.world
        members = world.members if world is not None else {}
        standbys = {
            n: v
            for n, v in following.items()
            if (m := members.get(n)) is not None and m.role == "standby"
        }
        if to is not None and to == h.settings.node_id:
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
        budget = max(5.0, 2 * h.lease.ttl_s)
        log.info("switchover to %s asked by %s: draining", target, operator)
        self.left.clear()  # before the drain: a demotion meanwhile is seen below
        self.handover = target
        await self.loop.put_record()
        if h.settings.execution != "remote":
            await engine.drain(within_s=h.settings.drain_timeout)
        else:
            engine.stop_starting()
        last = h.store.log.durable_id if h.store is not None else 0
        deadline = time.monotonic() + budget
        while view.acked_id < last and time.monotonic() < deadline and not self.left.is_set():
            view.acked.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(view.acked.wait(), deadline - time.monotonic())
            if h.store is not None:
                last = h.store.log.durable_id
        if self.left.is_set() or self.loop.role != "primary":
            # The loop's demotion changes the role first and sets `left` only once it
            # has stopped the engine and resigned (awaits): one begun is not finished
            # yet, and handing over from a node already leaving would claim its exit.
            if not self.left.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.left.wait(), budget)
            why = self.last_demotion if self.left.is_set() else f"now {self.loop.role}"
            raise NodeUnavailableError(
                f"switchover to {target} called off: this node stopped being the primary "
                f"meanwhile ({why})"
            )
        if view.acked_id < last:
            self.handover = ""
            engine.resume()
            raise NodeUnavailableError(
                f"switchover to {target} called off: it holds events up to {view.acked_id} "
                f"of {last} after {budget:g}s; this node leads on"
            )
        self.handed_over = f"switchover to {target} asked by {operator}"
        self.loop.wake()
        try:
            await asyncio.wait_for(self.left.wait(), budget)
        except TimeoutError:
            raise NodeUnavailableError(
                f"switchover to {target}: it holds every event, but this node did not "
                f"step down within {budget:g}s (is it stopping?)"
            ) from None
        h.notice(f"handed over to {target} (asked by {operator})")
        return target, last, self.last_demotion
