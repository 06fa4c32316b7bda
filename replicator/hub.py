"""The sync gate: where each standby has acknowledged to, and the writes waiting
for enough of them (`ReplicationHub.wait` is what a synchronous write waits on,
after its own durability here). Fed by the Follow streams (replicator/sender.py)."""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler import metrics
from apollo11.scheduler.errors import ApolloError

log = logging.getLogger(__name__)

# A standby acknowledges every batch and every heartbeat: one not heard from for
# this long is not counted as connected (for --sync-replicas, relaxed mode and
# status), even while its stream looks open. A cut link that drops packets keeps
# a TCP stream "open" for many minutes.
STANDBY_SILENCE_S = 3.0
# ...long as measured by a loop that was responsive throughout: after a stall of
# the primary's own loop, the acks that arrived meanwhile are still queued.
SILENT_TICKS = 5


class ReplicationTimeout(ApolloError):
    """Not enough standbys acknowledged in time: the write's replication outcome is unknown."""


@dataclass
class StandbyView:
    """What the primary knows about one follower."""

    node_id: str
    address: str
    connected: bool = False
    acked_id: int = 0
    acked_at: float = 0.0  # monotonic
    silent_ticks: int = 0  # responsive ticks in a row past STANDBY_SILENCE_S without an ack
    sent_id: int = 0
    stream: int = 0  # the Follow stream this view belongs to (the hub's key)
    caught_up_at: float = 0.0  # monotonic time acked_id last equalled our durable id
    next_batch: int = 0  # index into the hub's durable-batch record not yet acked
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=10_000))
    ack_seconds: Any = None  # this standby's child of the ack-latency histogram
    acked: asyncio.Event = field(default_factory=asyncio.Event)  # set by every ack

    def lag_ms(self, q: float) -> float:
        """A percentile of recent ack latencies (durable on the primary -> acked)."""
        if not self.lags:
            return 0.0
        ordered = sorted(self.lags)
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 3)


class ReplicationHub:
    """Follower positions, and the writes waiting for enough of them.

    A synchronous write waits on a plain future: no timer of its own. One sweep,
    armed while anything waits, fails the waiters whose deadline passed (a timer
    per write cost more than the rest of the wait at thousands of writes a second).
    """

    SWEEP_S = 0.05  # how late past its deadline a waiter may be failed

    def __init__(self) -> None:
        # One view per Follow stream, keyed by stream: never by node id alone. Two
        # streams under one node id (a reconnect whose old stream has not ended yet,
        # or another process started with the same --node-id) each have their own,
        # and one ending drops its own view only. Keyed by node id, the second stream
        # took the first one's view over and, when it left, marked it disconnected
        # while the first one went on acking: 0 standbys counted, for as long as that
        # stream lived, and every synchronous write blocked (issue 15).
        self.standbys: dict[int, StandbyView] = {}
        # (last event id, monotonic time) of each durable batch, to time acks against
        self._batches: deque[tuple[int, float]] = deque()
        self._base = 0  # index of _batches[0] since the hub started
        # one heap of (event id, seq, future) per number of standbys waited for
        self._waiters: dict[int, list[tuple[int, int, asyncio.Future[None]]]] = {}
        # (deadline, seq, future, event id, n, timeout) of every waiter, earliest first
        self._deadlines: list[tuple[float, int, asyncio.Future[None], int, int, float]] = []
        self._sweep: asyncio.TimerHandle | None = None
        self._seq = 0
        self.streams = 0

    def register(self, node_id: str, address: str) -> StandbyView:
        """A view for a new Follow stream (its `stream` is the key)."""
        self.streams += 1
        view = StandbyView(node_id, address, stream=self.streams)
        for other in self.connected():
            if other.node_id == node_id:
                log.warning(
                    "a second replication stream for node id %s (from %s) while one from %s "
                    "is live: two processes with one node id, or a reconnect before the old "
                    "stream ended; each is counted once, as one standby",
                    node_id,
                    address,
                    other.address,
                )
        self.standbys[view.stream] = view
        return view

    def unregister(self, view: StandbyView) -> None:
        """The stream ended: forget its view (and only its view)."""
        view.connected = False
        if self.standbys.get(view.stream) is view:
            del self.standbys[view.stream]

    def connected(self) -> list[StandbyView]:
        """Standbys with an open stream that have not fallen silent: one view per node
        id (its furthest), so that one standby is never counted twice."""
        best: dict[str, StandbyView] = {}
        for s in self.standbys.values():
            if s.connected and s.silent_ticks < SILENT_TICKS:
                seen = best.get(s.node_id)
                if seen is None or s.acked_id > seen.acked_id:
                    best[s.node_id] = s
        return list(best.values())

    def by_node(self) -> dict[str, StandbyView]:
        """One view per node id, for status: a live one first, then the furthest."""
        live = {v.stream for v in self.connected()}
        best: dict[str, StandbyView] = {}
        for s in self.standbys.values():
            seen = best.get(s.node_id)
            if seen is None or (s.stream in live, s.acked_id) > (
                seen.stream in live,
                seen.acked_id,
            ):
                best[s.node_id] = s
        return best

    def describe(self) -> str:
        """Who the sync gate counts, for a message: 'n2 acked 41, n3 silent (acked 40)'."""
        live = {v.stream for v in self.connected()}
        parts = []
        for node_id, v in sorted(self.by_node().items()):
            if v.stream in live:
                parts.append(f"{node_id} connected, acked {v.acked_id}")
            elif v.connected:
                parts.append(f"{node_id} silent (acked {v.acked_id})")
            else:
                parts.append(f"{node_id} connecting (has {v.acked_id})")
        return "; ".join(parts) or "no standby streams"

    def tick(self, responsive: bool) -> None:
        """Called often (every 50 ms) with whether the loop ran on time since the last
        call: counts, per standby, the responsive ticks spent silent."""
        horizon = time.monotonic() - STANDBY_SILENCE_S
        for s in self.standbys.values():
            if not responsive or s.acked_at >= horizon:
                s.silent_ticks = 0
            else:
                s.silent_ticks += 1

    def acked_by(self, n: int) -> int:
        """The highest event id that at least `n` connected standbys hold."""
        if n <= 0:
            return 1 << 62
        acks = sorted((s.acked_id for s in self.connected()), reverse=True)
        return acks[n - 1] if len(acks) >= n else 0

    def on_durable(self, last_event_id: int) -> None:
        """A batch became durable on the primary (called per batch, not per event)."""
        now = time.monotonic()
        self._batches.append((last_event_id, now))
        if len(self._batches) > 100_000:
            self._batches.popleft()
            self._base += 1
        for view in self.standbys.values():
            if view.acked_id >= last_event_id:  # stored there first (shipped ahead): no wait
                self._observe(view, now)

    def _observe(self, view: StandbyView, now: float) -> None:
        """Time the durable batches this standby's acks now cover."""
        i = max(view.next_batch, self._base)
        hist = view.ack_seconds
        if hist is None:
            hist = view.ack_seconds = metrics.REPLICATION_ACK_SECONDS.labels(view.node_id)
        while i - self._base < len(self._batches):
            last, at = self._batches[i - self._base]
            if last > view.acked_id:
                break
            view.lags.append(now - at)
            hist.observe(now - at)
            i += 1
        view.next_batch = i

    def on_ack(self, view: StandbyView, event_id: int, durable_here: int) -> None:
        view.acked_id = max(view.acked_id, event_id)
        now = time.monotonic()
        self._observe(view, now)
        view.acked_at = now
        view.silent_ticks = 0
        view.acked.set()
        if view.acked_id >= durable_here:
            view.caught_up_at = now
        for n, heap in self._waiters.items():
            if not heap:
                continue
            reached = self.acked_by(n)
            while heap and heap[0][0] <= reached:
                fut = heapq.heappop(heap)[2]
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, event_id: int, n: int, timeout_s: float) -> None:
        """Until `n` standbys hold `event_id` durably; ReplicationTimeout after timeout_s."""
        if self.acked_by(n) >= event_id:
            return
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._seq += 1
        heapq.heappush(self._waiters.setdefault(n, []), (event_id, self._seq, fut))
        deadline = loop.time() + timeout_s
        heapq.heappush(self._deadlines, (deadline, self._seq, fut, event_id, n, timeout_s))
        if self._sweep is None:
            self._sweep = loop.call_later(self.SWEEP_S, self._sweep_expired)
        # A cancelled caller cancels `fut`; the heaps drop done futures lazily.
        await fut

    def _sweep_expired(self) -> None:
        self._sweep = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][2].done()):
            _, _, fut, event_id, n, timeout_s = heapq.heappop(deadlines)
            if not fut.done():
                fut.set_exception(ReplicationTimeout(self.timeout_message(event_id, n, timeout_s)))
        for n, heap in self._waiters.items():
            # Waiters that timed out or were cancelled stay in the event-id heap until
            # an ack pops them; while no ack comes, drop them here, not one by one, and
            # all of them once no deadline is left (every waiter has one: none is live).
            if heap and (not deadlines or len(heap) > 2 * len(deadlines) + 64):
                self._waiters[n] = [w for w in heap if not w[2].done()]
                heapq.heapify(self._waiters[n])
        if deadlines:
            self._sweep = loop.call_later(self.SWEEP_S, self._sweep_expired)

    def timeout_message(self, event_id: int, n: int, timeout_s: float) -> str:
        have = sum(1 for v in self.connected() if v.acked_id >= event_id)
        return (
            f"event {event_id} is durable on the primary but needs {n} standby "
            f"acknowledgement(s) and got {have} within {timeout_s:g}s "
            f"({len(self.connected())} standby(s) connected: {self.describe()}); its "
            f"replication outcome is unknown"
        )

    def time_from_now(self, view: StandbyView) -> None:
        """Time this stream's acks from the batches made durable from now on. A
        standby back from a restart acknowledges what it missed as it catches up; timed
        against when those batches were written, its downtime would read as ack
        latency (a p99 of 24 s lingering for 10,000 acks after the restart, issue 19)."""
        view.next_batch = self._base + len(self._batches)
        view.lags.clear()

    def fail_all(self, why: str) -> None:
        for heap in self._waiters.values():
            for _, _, fut in heap:
                if not fut.done():
                    fut.set_exception(ReplicationTimeout(why))
        self._waiters.clear()
        self._deadlines.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
