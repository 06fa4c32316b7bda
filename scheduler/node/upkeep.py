"""Upkeep of the files at rest: what the scrub reads, and how damage is mended.

The scrub (scheduler/state/scrub.py) re-reads sealed segments and archive chunks on
its own thread; these are its callbacks, so they copy what they need on the
event loop or hand the work over to it. A damaged segment is replaced with
another member's copy of its records (scheduler/log/mend.py: the primary's, or
a standby's that holds them); a damaged archive chunk is rebuilt from the log.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Protocol

import grpc

from apollo11.lease import LeaderInfo
from apollo11.replicator import FETCH_TIMEOUT_S, Member, fetch_records
from apollo11.scheduler import metrics
from apollo11.scheduler.errors import ApolloError
from apollo11.scheduler.log import Segment, rewrite_segment
from apollo11.scheduler.node.parts import RoleFacts
from apollo11.scheduler.node.role import FAILED
from apollo11.scheduler.state import REPAIRING, Archive, Damage, Scrubber, ScrubTargets


class Host(Member, Protocol):
    @property
    def stopping(self) -> bool: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop | None: ...

    def notice(self, text: str) -> None: ...


class Roles(RoleFacts, Protocol):
    def replication_address(self, leader: LeaderInfo) -> str: ...


class Upkeep:
    def __init__(self, host: Host, roles: Roles, *, mb_per_s: float, interval_s: float) -> None:
        self.host = host
        self.roles = roles
        self.scrubber = Scrubber(
            targets=self._targets,
            report=self._found,
            repair=self._repair,
            mb_per_s=mb_per_s,
            interval_s=interval_s,
        )

    # Called on the scrub's thread: they copy, or hand over.

    def _targets(self) -> ScrubTargets | None:
        store, loop = self.host.store, self.host.loop
        if store is None or self.host.stopping or loop is None or loop.is_closed():
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
            return ScrubTargets(store.log.segments[:-1], paths)
        return ScrubTargets([*store.log.segments[:-1], current], paths)

    def _found(self, damage: Damage) -> None:
        loop = self.host.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.host.notice, str(damage))

    def _repair(self, damage: Damage) -> str:
        store, loop = self.host.store, self.host.loop
        if store is None or loop is None or loop.is_closed():
            return "scrub: no store open to repair it from"
        if damage.kind == "segment":
            fut = asyncio.run_coroutine_threadsafe(self.mend_segment(damage), loop)
            try:
                return fut.result(timeout=3 * FETCH_TIMEOUT_S)
            except ApolloError:
                raise
            except Exception as e:  # a timeout, the loop closing: say so, the scrub goes on
                fut.cancel()
                raise ApolloError(f"mending {damage.path}: {e!r}") from e
        chunk, sentence = store.rebuild_chunk(damage.path, self.scrubber.pause)
        loop.call_soon_threadsafe(store.install_chunk, chunk)
        loop.call_soon_threadsafe(self.host.notice, f"{damage}; {sentence}")
        return f"scrub: {sentence}"

    # On the event loop.

    async def mend_segment(self, damage: Damage) -> str:
        """Replace a damaged sealed segment with another member's copy of its records."""
        store = self.host.store
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
                data = await fetch_records(self.host, address, peer_id, seg.first_id, seg.last_id)
                await asyncio.to_thread(rewrite_segment, seg, data)
            except grpc.aio.AioRpcError as e:
                tried.append(f"{peer_id}: {e.code().name} {e.details()}")
                continue
            except (ApolloError, OSError) as e:
                tried.append(f"{peer_id}: {e}")
                continue
            metrics.LOG_SEGMENTS_MENDED.inc()
            said = f"mended it with {peer_id}'s copy of events {seg.first_id}..{seg.last_id}"
            self.host.notice(f"{damage}; {said}")
            return f"scrub: {damage.path}: {said}"
        why = "; ".join(tried) or f"no other live member holds events through {seg.last_id}"
        raise ApolloError(f"could not mend {damage.path}: {why}")

    def _holders(self, last_id: int) -> list[tuple[str, str]]:
        """(node id, peer address) of the members that may hold events through
        `last_id`: the primary first (for a standby), then the others."""
        r = self.roles
        me = self.host.settings.node_id
        members = r.world.members if r.world is not None else {}
        out: list[tuple[str, str]] = []
        leader = r.leader
        if leader is not None and leader.node_id != me:
            out.append((leader.node_id, r.replication_address(leader)))
        for m in sorted(members.values(), key=lambda m: -m.last_event_id):
            if m.node_id == me or any(m.node_id == n for n, _ in out):
                continue
            if m.last_event_id >= last_id and m.role not in (FAILED, REPAIRING):
                out.append((m.node_id, m.peer_address or m.address))
        return out
