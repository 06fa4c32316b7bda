"""Is this node id free (scheduler/node/nodeid.py): decided by what the store shows,
a record that lapses, is written again or has its lease refreshed, never by how long
the check waited."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from apollo11.lease import MemberInfo, MemoryLease, MemoryStore
from apollo11.scheduler.errors import ApolloError
from apollo11.scheduler.node.nodeid import Sighting, check, refreshed

TTL = 2.0
REC = MemberInfo("n2", "standby", "127.0.0.1:9", 5, 1, instance="live")


def test_a_lease_running_down_is_no_refresh() -> None:
    first = Sighting(revision=7, left=1, asked=10.0, answered=10.1)
    # 1 s left when answered at 10.1: it ends before 12.1 unless refreshed
    assert not refreshed(first, Sighting(7, 1, asked=10.5, answered=10.6))
    assert not refreshed(first, Sighting(7, 0, asked=11.5, answered=11.6))
    # past its end and not yet removed by the store: 0 left, never proof
    assert not refreshed(first, Sighting(7, 0, asked=30.0, answered=30.1))


def test_time_left_beyond_what_the_first_look_allows_is_a_refresh() -> None:
    first = Sighting(revision=7, left=1, asked=10.0, answered=10.1)
    assert refreshed(first, Sighting(7, 1, asked=11.2, answered=11.3))
    assert refreshed(first, Sighting(7, 2, asked=10.2, answered=10.3))
    # however late the look comes (a loaded machine), time left then is a refresh
    assert refreshed(first, Sighting(7, 1, asked=60.0, answered=75.0))


async def _every(period: float, act: Callable[[], Awaitable[None]]) -> None:
    while True:
        await asyncio.sleep(period)
        await act()


@contextlib.asynccontextmanager
async def live(act: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    task = asyncio.create_task(_every(0.5, act))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_free_id_is_free() -> None:
    store = MemoryStore()
    assert await check(MemoryLease(ttl_s=TTL, store=store), "n2", "c") == "node id 'n2' is free"


async def test_a_settled_live_node_keeping_its_lease_is_refused() -> None:
    """Issue 28: an idle live node writes no new revision, it only refreshes its lease;
    that was waited out and reported as a record that "did not lapse"."""
    store = MemoryStore()
    other = MemoryLease(ttl_s=TTL, store=store)
    await other.publish(REC)
    async with live(lambda: other.keep(REC)):
        with pytest.raises(ApolloError, match=r"'n2' is already live.*keeps its lease alive"):
            await check(MemoryLease(ttl_s=TTL, store=store), "n2", "c")
    assert store.members["n2"][0] == REC, "the live node's record is left as it is"


async def test_a_live_node_writing_its_record_is_refused() -> None:
    store = MemoryStore()
    other = MemoryLease(ttl_s=TTL, store=store)
    await other.publish(REC)
    position = iter(range(6, 1000))

    async def write() -> None:
        await other.publish(MemberInfo("n2", "standby", REC.address, next(position), 1))

    async with live(write):
        with pytest.raises(ApolloError, match=r"'n2' is already live.*writes it again"):
            await check(MemoryLease(ttl_s=TTL, store=store), "n2", "c")


async def test_a_dead_process_record_is_waited_out() -> None:
    store = MemoryStore()
    await MemoryLease(ttl_s=TTL, store=store).publish(REC)  # then nobody keeps it
    said = await check(MemoryLease(ttl_s=TTL, store=store), "n2", "c")
    assert said.startswith("node id 'n2': its old record lapsed after"), said
