"""The primary's side of log shipping: one Follow stream per standby, and the sync gate.

Records are shipped exactly as they are on disk, many per message, as they go
to the disk here (Raft's parallel write: a synchronous write waits for the
slower of the two fsyncs, not for both in turn), one message in flight per
standby (a few when acks are late, see SEND_WINDOW). Each standby acknowledges
its durable position; `ReplicationHub.wait` is what a synchronous write waits
on, after its own durability here.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiofiles
import aiofiles.os
import grpc
from apollo11.v1 import replication_pb2 as rpb
from apollo11.v1 import replication_pb2_grpc as rpbg

from replicator import records
from replicator.divergence import common_prefix
from scheduler import metrics
from scheduler.errors import ApolloError
from scheduler.security import current_principal

if TYPE_CHECKING:
    from scheduler.node import Node

log = logging.getLogger(__name__)

BATCH_BYTES = 1024 * 1024
HEARTBEAT_S = 0.5
# A standby acknowledges every batch and every heartbeat: one not heard from for
# this long is not counted as connected (for --sync-replicas, relaxed mode and
# status), even while its stream looks open. A cut link that drops packets keeps
# a TCP stream "open" for many minutes.
STANDBY_SILENCE_S = 3.0
# ...long as measured by a loop that was responsive throughout: after a stall of
# the primary's own loop, the acks that arrived meanwhile are still queued.
SILENT_TICKS = 5
SNAPSHOT_CHUNK = 1024 * 1024
# Batches sent to a standby and not yet acknowledged. One, normally: the next batch
# goes when the last is durable there, and carries everything written meanwhile, so
# batches grow when a standby is slow instead of queueing in its receive buffer.
# Measured at 10k events/s (ack p99, 4 runs each): unbounded 14-25 ms (the queue on
# a busy standby built up to 14 ms), 2 in flight 12-19 ms, 1 in flight 7-16 ms.
SEND_WINDOW = 1
# ...but when the last batch is not acknowledged within HOLD_S (a GC pause or a slow
# fsync there), another goes, up to MAX_IN_FLIGHT: the standby then has it at hand
# when it is free again, instead of waiting one more round trip for it. Ack p99 at
# 10k events/s over twelve windows and nine: median 7.9 ms with it, 10.5 without.
HOLD_S = 0.002
MAX_IN_FLIGHT = 4
HANDSHAKE_WAIT_S = 2.0  # for records shipped ahead to land here (below receiver.SILENCE_S)


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
            # an ack pops them; while no ack comes, drop them here, not one by one.
            if heap and len(heap) > 2 * len(deadlines) + 64:
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

    def index_after(self, event_id: int) -> int:
        """Index of the first recorded batch ending after `event_id`."""
        for k, (last, _) in enumerate(self._batches):
            if last > event_id:
                return self._base + k
        return self._base + len(self._batches)

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


class ReplicationService(rpbg.ReplicationServicer):
    def __init__(self, node: Node) -> None:
        self.node = node

    async def Follow(
        self, request_iterator: AsyncIterator[rpb.StandbyMessage], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rpb.PrimaryMessage]:
        node = self.node
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "hello":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message must be Hello")
            return
        hello = first.hello
        caller = current_principal()
        if caller.via == "peer certificate" and caller.name != hello.node_id:
            # Every node has a certificate of the cluster; none may speak for another.
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"the peer certificate is {caller.name!r}'s, but the stream says it is "
                f"{hello.node_id!r}",
            )
            return
        if hello.cluster_id and node.cluster_id and hello.cluster_id != node.cluster_id:
            # Same etcd prefix or not, same node ids or not: another cluster's log.
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{hello.node_id} belongs to cluster {hello.cluster_id}, but this primary "
                f"({node.settings.node_id}) to cluster {node.cluster_id}: refusing to ship "
                f"this log to it (wipe its data directory to join this cluster)",
            )
            return
        if node.role != "primary" or node.store is None:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"{node.settings.node_id} is not the primary"
            )
            return
        store = node.store
        term = store.log.term
        if hello.known_term > term:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{hello.node_id} knows term {hello.known_term}, newer than this primary's {term}",
            )
            return
        hub = node.hub
        view = hub.register(hello.node_id, hello.address)
        try:
            async for msg in self._serve(hello, view, term, request_iterator, context):
                yield msg
        finally:
            hub.unregister(view)

    async def ReadRecords(
        self, request: rpb.ReadRecordsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[rpb.Records]:
        async for chunk in records.serve(self.node, request, context):
            yield chunk

    async def _serve(
        self,
        hello: rpb.Hello,
        view: StandbyView,
        term: int,
        request_iterator: AsyncIterator[rpb.StandbyMessage],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[rpb.PrimaryMessage]:
        """Catch-up, then streaming, for a stream whose Hello was accepted."""
        node = self.node
        store = node.store
        assert store is not None
        hub = node.hub
        if store.log.durable_id < hello.last_event_id <= store.log.written_id:
            # It stored records shipped ahead that are still being written here: not
            # a divergence, once they land. Not longer than the standby waits for a
            # first message (receiver.SILENCE_S), and never called a divergence.
            try:
                async with asyncio.timeout(HANDSHAKE_WAIT_S):
                    while store.log.durable_id < hello.last_event_id:
                        await store.log.wait_durable(store.log.durable_id)
            except (TimeoutError, ApolloError) as e:
                await context.abort(
                    grpc.StatusCode.UNAVAILABLE,
                    f"events up to {hello.last_event_id} are still being written on "
                    f"{node.settings.node_id} ({type(e).__name__}); retry",
                )
                return
        # Where does this standby's log stop agreeing with ours?
        standby_terms = [(t.term, t.first_event_id) for t in hello.terms]
        agree = common_prefix(
            store.state.terms, store.log.durable_id, standby_terms, hello.last_event_id
        )
        if hello.last_event_id > agree:
            reason = (
                f"events {agree + 1}..{hello.last_event_id} (term {hello.last_term}) are not in "
                f"the primary's history"
            )
            log.warning("standby %s diverged: %s", hello.node_id, reason)
            yield rpb.PrimaryMessage(
                diverged=rpb.Diverged(keep_through_event_id=agree, reason=reason)
            )
            return
        start = hello.last_event_id + 1
        empty = hello.last_event_id == 0
        snapshot = None
        if start < store.log.first_id or (empty and store.snapshots.watermarks()):
            snapshot = store.snapshots.newest_pinned()
        if snapshot is None and start < store.log.first_id:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"event {start} is no longer kept here and no snapshot is available",
            )
            return
        if snapshot is not None:
            start = snapshot.watermark + 1
        view.connected = True
        view.acked_at = time.monotonic()  # heard from: its hello
        view.silent_ticks = 0
        # What it holds for sure, not where streaming starts: a standby being sent a
        # snapshot holds nothing of it until it acknowledges.
        view.acked_id = hello.last_event_id
        view.next_batch = hub.index_after(start - 1)
        view.sent_id = start - 1
        acks = asyncio.create_task(self._acks(request_iterator, view))
        try:
            yield rpb.PrimaryMessage(
                welcome=rpb.Welcome(
                    node_id=node.settings.node_id,
                    term=term,
                    from_event_id=start,
                    segment_max_bytes=store.log.config.segment_max_bytes,
                    cluster_id=node.cluster_id,
                )
            )
            if snapshot is not None:
                try:
                    async for msg in self._snapshot(store, snapshot):
                        yield msg
                finally:
                    store.snapshots.unpin(snapshot.watermark)
                log.info("sent snapshot %d to %s", snapshot.watermark, hello.node_id)
            nxt = start
            at: tuple[int, int] | None = None
            unacked: deque[tuple[int, float]] = deque()  # (last id, monotonic time) sent
            shipped = metrics.REPLICATION_BATCH_EVENTS.labels(hello.node_id)
            while node.role == "primary" and store.log.term == term:
                while unacked and unacked[0][0] <= view.acked_id:
                    unacked.popleft()
                if len(unacked) >= SEND_WINDOW:
                    full = len(unacked) >= MAX_IN_FLIGHT
                    wait = HEARTBEAT_S if full else unacked[-1][1] + HOLD_S - time.monotonic()
                    if wait > 0:
                        view.acked.clear()
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(wait):
                                await view.acked.wait()
                                continue
                        if full:  # a slow disk there, not a dead link: tell it we are here
                            if not store.log.writable:
                                break  # this log failed or closed: nothing more will come
                            yield self._heartbeat(store, term)
                            continue
                batch = store.log.read_raw(nxt, BATCH_BYTES, at, ahead=True)
                at = (batch.segment_id, batch.end_offset) if batch.segment_id else None
                if batch.data:
                    # Before the yield: the standby's ack of this batch can be read
                    # before this generator resumes, and must not be cut short.
                    view.sent_id = batch.last_id
                    yield rpb.PrimaryMessage(
                        batch=rpb.Batch(
                            first_event_id=batch.first_id,
                            last_event_id=batch.last_id,
                            term=term,
                            records=batch.data,
                            primary_durable_id=store.log.durable_id,
                            sent_ms=time.time_ns() // 1_000_000,
                        )
                    )
                    unacked.append((batch.last_id, time.monotonic()))
                    shipped.observe(batch.last_id - batch.first_id + 1)
                    nxt = batch.last_id + 1
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(HEARTBEAT_S):
                        if store.log.written_id < nxt:
                            await store.log.wait_written(nxt - 1)
                        else:  # being written, but no longer in memory: from disk, then
                            await store.log.wait_durable(nxt - 1)
                        continue
                yield self._heartbeat(store, term)
        except ApolloError as e:
            log.error("replication to %s stopped: %s", hello.node_id, e)
        finally:
            view.connected = False
            acks.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await acks

    @staticmethod
    def _heartbeat(store: Any, term: int) -> rpb.PrimaryMessage:
        return rpb.PrimaryMessage(
            heartbeat=rpb.Heartbeat(
                term=term,
                primary_durable_id=store.log.durable_id,
                sent_ms=time.time_ns() // 1_000_000,
            )
        )

    async def _acks(self, requests: AsyncIterator[rpb.StandbyMessage], view: StandbyView) -> None:
        store = self.node.store
        async for msg in requests:
            if msg.WhichOneof("kind") == "ack" and store is not None:
                # Never past what this stream sent: an ack of events a standby was never
                # given would count it as holding writes it does not (red-team: a
                # stream acked 2**60 and would have counted as a synchronous replica).
                acked = min(msg.ack.durable_event_id, max(view.sent_id, view.acked_id))
                self.node.hub.on_ack(view, acked, store.log.durable_id)
                metrics.REPLICATION_LAG_EVENTS.labels(view.node_id).set(
                    max(0, store.log.durable_id - view.acked_id)
                )

    async def _snapshot(self, store: Any, info: Any) -> AsyncIterator[rpb.PrimaryMessage]:
        directory = store.snapshots.directory
        files = [*info.chunks, os.path.basename(info.path)]  # the snapshot file last
        for i, name in enumerate(files):
            path = os.path.join(directory, name)
            size = (await aiofiles.os.stat(path)).st_size
            off = 0
            # aiofiles: a snapshot can be large and this is off the hot path.
            async with aiofiles.open(path, "rb") as f:
                while True:
                    data = await f.read(SNAPSHOT_CHUNK)
                    last_of_file = off + len(data) >= size
                    yield rpb.PrimaryMessage(
                        snapshot=rpb.SnapshotChunk(
                            name=name,
                            offset=off,
                            data=data,
                            last_of_file=last_of_file,
                            last=last_of_file and i == len(files) - 1,
                            watermark=info.watermark,
                        )
                    )
                    off += len(data)
                    if last_of_file:
                        break
