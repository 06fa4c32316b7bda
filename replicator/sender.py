"""The primary's side of log shipping: one Follow stream per standby (the sync gate
they feed is replicator/hub.py).

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
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import aiofiles
import grpc

from apollo11.replicator import records
from apollo11.replicator.divergence import common_prefix
from apollo11.replicator.hub import StandbyView
from apollo11.scheduler import metrics
from apollo11.scheduler.errors import ApolloError
from apollo11.scheduler.security import current_principal
from apollo11.v1 import replication_pb2 as rpb
from apollo11.v1 import replication_pb2_grpc as rpbg

if TYPE_CHECKING:
    from apollo11.replicator.ports import PrimarySide
    from apollo11.scheduler.state import SnapshotInfo, Store

log = logging.getLogger(__name__)

BATCH_BYTES = 1024 * 1024
HEARTBEAT_S = 0.5
SNAPSHOT_CHUNK = 1024 * 1024
# Batches sent to a standby and not yet acknowledged. One, normally: the next batch
# goes when the last is durable there, and carries everything written meanwhile, so
# batches grow when a standby is slow instead of queueing in its receive buffer
# (the lowest ack p99 of 1, 2 and unbounded: docs/benchmarks.md, "Figures behind the
# knobs").
SEND_WINDOW = 1
# ...but when the last batch is not acknowledged within HOLD_S (a GC pause or a slow
# fsync there), another goes, up to MAX_IN_FLIGHT: the standby then has it at hand
# when it is free again, instead of waiting one more round trip for it (a lower ack
# p99: docs/benchmarks.md, "Figures behind the knobs").
HOLD_S = 0.002
MAX_IN_FLIGHT = 4
HANDSHAKE_WAIT_S = 2.0  # for records shipped ahead to land here (below receiver.SILENCE_S)


class ReplicationService(rpbg.ReplicationServicer):
    def __init__(self, node: PrimarySide) -> None:
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
        """Handshake, catch-up, stream (Litestream's syncOnce: the position first, then
        ship from position + 1), for a stream whose Hello was accepted."""
        store = self.node.store
        assert store is not None
        found = await self._handshake(hello, store, context)
        if found is None:
            return
        if isinstance(found, rpb.Diverged):
            yield rpb.PrimaryMessage(diverged=found)
            return
        start, snapshot = found
        self._track(view, hello, start)
        acks = asyncio.create_task(self._acks(request_iterator, view))
        try:
            yield rpb.PrimaryMessage(
                welcome=rpb.Welcome(
                    node_id=self.node.settings.node_id,
                    term=term,
                    from_event_id=start,
                    segment_max_bytes=store.log.config.segment_max_bytes,
                    cluster_id=self.node.cluster_id,
                )
            )
            if snapshot is not None:
                async for msg in self._snapshot(store, snapshot):
                    yield msg
                store.snapshots.unpin(snapshot.watermark)  # sent: it may be pruned again
                snapshot = None
                log.info("sent snapshot %d to %s", start - 1, hello.node_id)
            async for msg in self._stream(view, store, term, start, hello.node_id):
                yield msg
        except ApolloError as e:
            log.error("replication to %s stopped: %s", hello.node_id, e)
        finally:
            if snapshot is not None:  # the stream ended while sending it
                store.snapshots.unpin(snapshot.watermark)
            view.connected = False
            acks.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await acks

    async def _handshake(
        self, hello: rpb.Hello, store: Store, context: grpc.aio.ServicerContext
    ) -> tuple[int, SnapshotInfo | None] | rpb.Diverged | None:
        """Where this standby's stream starts (and the snapshot it needs first), or how
        its log diverged from ours; None when the call was aborted."""
        node_id = self.node.settings.node_id
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
                    f"{node_id} ({type(e).__name__}); retry",
                )
                return None
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
            return rpb.Diverged(keep_through_event_id=agree, reason=reason)
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
            return None
        if snapshot is not None:
            start = snapshot.watermark + 1
        return start, snapshot

    def _track(self, view: StandbyView, hello: rpb.Hello, start: int) -> None:
        """The sync gate's view of a stream about to start at `start`."""
        view.connected = True
        view.acked_at = time.monotonic()  # heard from: its hello
        view.silent_ticks = 0
        # What it holds for sure, not where streaming starts: a standby being sent a
        # snapshot holds nothing of it until it acknowledges.
        view.acked_id = hello.last_event_id
        self.node.hub.time_from_now(view)
        view.sent_id = start - 1

    async def _stream(
        self, view: StandbyView, store: Store, term: int, start: int, standby: str
    ) -> AsyncIterator[rpb.PrimaryMessage]:
        """Batches from `start` as they are written, one in flight (SEND_WINDOW), more
        while acks are late (up to MAX_IN_FLIGHT), heartbeats when there is nothing."""
        nxt = start
        at: tuple[int, int] | None = None
        unacked: deque[tuple[int, float]] = deque()  # (last id, monotonic time) sent
        shipped = metrics.REPLICATION_BATCH_EVENTS.labels(standby)
        while self.node.role == "primary" and store.log.term == term:
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
                            return  # this log failed or closed: nothing more will come
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

    @staticmethod
    def _heartbeat(store: Store, term: int) -> rpb.PrimaryMessage:
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

    async def _snapshot(
        self, store: Store, info: SnapshotInfo
    ) -> AsyncIterator[rpb.PrimaryMessage]:
        directory = store.snapshots.directory
        files = [*info.chunks, os.path.basename(info.path)]  # the snapshot file last
        for i, name in enumerate(files):
            path = os.path.join(directory, name)
            off = 0
            # aiofiles: a snapshot can be large and this is off the hot path.
            async with aiofiles.open(path, "rb") as f:
                # the size of the file opened: a redaction may replace the path's file
                # meanwhile (Snapshots.redact), and a smaller one would never end here
                size = os.fstat(f.fileno()).st_size
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
