"""The standby's side of log shipping: follow the primary, append, apply, acknowledge.

Ship by position, reset on error (Litestream's replica loop): the standby
states where its durable log ends, the primary streams from there; on any
error the stream is dropped, the position is read again from the log, and
the standby reconnects with capped backoff and rate-limited error logs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from apollo11.replicator.channel import peer_channel
from apollo11.scheduler.cancelling import end_if_cancelled, stop_task
from apollo11.scheduler.errors import ApolloError, StaleTermError
from apollo11.scheduler.identity import ForeignClusterError
from apollo11.v1 import replication_pb2 as rpb
from apollo11.v1 import replication_pb2_grpc as rpbg

if TYPE_CHECKING:
    from apollo11.replicator.ports import StandbySide

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 2.0
MAX_INFLIGHT = 64  # batches staged but not yet durable
SILENCE_S = 3.0  # six missed heartbeats


class Diverged(Exception):
    def __init__(self, keep_through: int, reason: str) -> None:
        super().__init__(reason)
        self.keep_through = keep_through


class Follower:
    """Follows one primary address until cancelled."""

    def __init__(
        self, node: StandbySide, leader_address: str, leader_term: int, *, leader_id: str = ""
    ) -> None:
        self.node = node
        self.address = leader_address
        self.leader_term = leader_term
        self.leader_id = leader_id
        self.connected = False
        self.primary_durable_id = 0
        self.last_batch_at = 0.0  # monotonic
        self.task: asyncio.Task[None] | None = None
        self._last_error_log = 0.0
        self._inflight: deque[asyncio.Future[None]] = deque()

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"follow {self.address}")

    async def stop(self) -> None:
        if self.task is not None:
            # The role loop waits here before it may campaign: a cancellation lost on
            # the way must not keep a cluster without a primary.
            await stop_task(self.task, f"the follower of {self.address}")
            self.task = None
        self.connected = False

    async def _run(self) -> None:
        delay = 0.05
        while True:
            try:
                await self._session()
                delay = 0.05
            except asyncio.CancelledError:
                raise
            except Diverged as d:
                try:
                    log.warning("%s", await self.node.cut_divergent_tail(d.keep_through, str(d)))
                except Exception as e:  # the follower must live on, and retry
                    self._rate_limited(f"cutting the divergent tail failed: {e}")
                    await asyncio.sleep(delay)
                    delay = min(MAX_BACKOFF_S, delay * 2)
                else:
                    delay = 0.05
                continue
            except (grpc.aio.AioRpcError, ApolloError, OSError) as e:
                self._rate_limited(f"following {self.address}: {_describe(e)}")
            finally:
                self.connected = False
            end_if_cancelled()  # (one grpc.aio lost is not retried)
            await asyncio.sleep(delay)
            delay = min(MAX_BACKOFF_S, delay * 2)

    def _rate_limited(self, msg: str) -> None:
        now = time.monotonic()
        if now - self._last_error_log > 5:
            self._last_error_log = now
            log.warning("%s (retrying with backoff)", msg)

    def _channel(self) -> grpc.aio.Channel:
        """To the primary's peer port, checked for the node id the lease names."""
        return peer_channel(self.node.settings, self.address, self.leader_id)

    def _hello(self) -> rpb.StandbyMessage:
        store = self.node.store
        assert store is not None
        state = store.state
        return rpb.StandbyMessage(
            hello=rpb.Hello(
                node_id=self.node.settings.node_id,
                address=self.node.address,
                first_event_id=store.log.first_id,
                last_event_id=store.log.durable_id,
                last_term=store.log.last_term,
                terms=[rpb.TermStart(term=t, first_event_id=f) for t, f in state.terms],
                known_term=self.node.known_term,
                cluster_id=self.node.cluster_id,
            )
        )

    async def _session(self) -> None:
        outgoing: asyncio.Queue[rpb.StandbyMessage | None] = asyncio.Queue()
        outgoing.put_nowait(self._hello())

        async def requests() -> AsyncIterator[rpb.StandbyMessage]:
            while (msg := await outgoing.get()) is not None:
                # Acks are cumulative: of those queued while the last one was being
                # sent, only the newest need go.
                while msg.WhichOneof("kind") == "ack" and not outgoing.empty():
                    nxt = outgoing.get_nowait()
                    if nxt is None:
                        yield msg
                        return
                    msg = nxt
                yield msg

        async with self._channel() as channel:
            call = rpbg.ReplicationStub(channel).Follow(requests())
            staging: Path | None = None
            try:
                messages = aiter(call)
                while True:
                    # The primary sends at least a heartbeat every HEARTBEAT_S: silence
                    # for much longer means a dead link, even if TCP has not noticed.
                    try:
                        async with asyncio.timeout(SILENCE_S):  # no task per message
                            msg = await anext(messages)
                    except StopAsyncIteration:
                        break
                    except TimeoutError:
                        raise ConnectionError(
                            f"{self.address} went silent for {SILENCE_S:g}s"
                        ) from None
                    kind = msg.WhichOneof("kind")
                    if kind == "batch":
                        await self._batch(msg.batch, outgoing)
                    elif kind == "heartbeat":
                        self._check_term(msg.heartbeat.term)
                        self.primary_durable_id = msg.heartbeat.primary_durable_id
                        # answered, so that the primary can tell a live standby from
                        # a stream whose packets no longer arrive
                        self._queue_ack(outgoing)
                    elif kind == "welcome":
                        self._check_cluster(msg.welcome.cluster_id)
                        self._check_term(msg.welcome.term)
                        self.connected = True
                        self.node.adopt_segment_size(msg.welcome.segment_max_bytes)
                    elif kind == "diverged":
                        raise Diverged(msg.diverged.keep_through_event_id, msg.diverged.reason)
                    elif kind == "snapshot":
                        staging = await self._snapshot_chunk(msg.snapshot, staging)
                        if msg.snapshot.last:
                            assert staging is not None
                            log.info(
                                "%s",
                                await self.node.install_snapshot(staging, msg.snapshot.watermark),
                            )
                            staging = None
            finally:
                # Staged batches become durable regardless; forget their acks.
                for t in self._inflight:
                    t.cancel()
                self._inflight.clear()
                outgoing.put_nowait(None)
                if staging is not None:
                    shutil.rmtree(staging, ignore_errors=True)

    def _check_cluster(self, theirs: str) -> None:
        mine = self.node.cluster_id
        if theirs and mine and theirs != mine:
            raise ForeignClusterError(
                f"{self.address} is a primary of cluster {theirs}, but this node belongs to "
                f"cluster {mine}: not following it (two clusters on one etcd prefix, or an "
                f"address reused by another cluster's node?)"
            )

    def _check_term(self, term: int) -> None:
        known = self.node.known_term
        if term < known:
            raise StaleTermError(
                f"{self.address} streams term {term} but term {known} exists: a deposed primary"
            )
        self.node.saw_term(term)

    async def _batch(
        self, b: rpb.Batch, outgoing: asyncio.Queue[rpb.StandbyMessage | None]
    ) -> None:
        """Stage the batch now, acknowledge it once durable, and go on reading: the next
        batches are staged while this one is written (one fsync can cover several)."""
        self._check_term(b.term)
        store = self.node.store
        assert store is not None
        if b.last_event_id < store.log.next_id:
            return  # already have it (a resend after reconnect)
        durable = store.log.stage_raw(b.records)  # checks CRCs, ids and terms: raises here
        self.primary_durable_id = b.primary_durable_id
        # A callback, not a task per batch: it queues the ack once the batch is durable.
        durable.add_done_callback(lambda f: self._ack(f, outgoing))
        self._inflight.append(durable)
        while self._inflight and self._inflight[0].done():
            self._inflight.popleft().result()  # surfaces a write failure
        if len(self._inflight) >= MAX_INFLIGHT:
            await self._inflight.popleft()  # backpressure on the stream

    def _ack(
        self, durable: asyncio.Future[None], outgoing: asyncio.Queue[rpb.StandbyMessage | None]
    ) -> None:
        if durable.cancelled() or durable.exception() is not None:
            return  # the session is over, or the write failed (raised by _batch)
        self.last_batch_at = time.monotonic()
        self._queue_ack(outgoing)

    def _queue_ack(self, outgoing: asyncio.Queue[rpb.StandbyMessage | None]) -> None:
        store = self.node.store
        assert store is not None
        outgoing.put_nowait(
            rpb.StandbyMessage(
                ack=rpb.Ack(
                    durable_event_id=store.log.durable_id,
                    applied_event_id=store.state.last_event_id,
                )
            )
        )

    async def _snapshot_chunk(self, c: rpb.SnapshotChunk, staging: Path | None) -> Path:
        if staging is None:
            staging = Path(self.node.settings.data_dir) / f"incoming-snapshot-{c.watermark}"
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)
        name = os.path.basename(c.name)  # never a path from the wire
        path = staging / name
        mode = "r+b" if c.offset and path.exists() else "wb"
        await asyncio.to_thread(_write_at, path, mode, c.offset, c.data, c.last_of_file)
        return staging


def _write_at(path: Path, mode: str, offset: int, data: bytes, sync: bool) -> None:
    with open(path, mode) as f:
        f.seek(offset)
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


def _describe(e: BaseException) -> str:
    if isinstance(e, grpc.aio.AioRpcError):
        return f"{e.code().name}: {e.details()}"
    return str(e)
