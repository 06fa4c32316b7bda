"""One suite for every lease implementation: the in-memory one and real etcd."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from lease import Lease, MemberInfo, MemoryLease, MemoryStore
from lease.etcd import EtcdLease

TTL = 2.0


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


Make = Callable[[], Lease]
Wait = Callable[[float], Awaitable[None]]


@pytest.fixture(params=["memory", "etcd"])
def world(request: pytest.FixtureRequest) -> tuple[Make, Wait]:
    if request.param == "memory":
        clock = FakeTime()
        shared = MemoryStore(clock=clock)

        async def wait(seconds: float) -> None:
            clock.t += seconds

        return (lambda: MemoryLease(ttl_s=TTL, store=shared)), wait
    etcd = request.getfixturevalue("etcd_server")
    name = request.getfixturevalue("cluster_name")

    async def real_wait(seconds: float) -> None:
        await asyncio.sleep(seconds)

    return (lambda: EtcdLease([etcd.url], cluster=name, ttl_s=TTL)), real_wait


async def test_one_holder_at_a_time_and_terms_grow(world: tuple[Make, Wait]) -> None:
    make, _ = world
    a, b = make(), make()
    won = await a.campaign("a", "a:1")
    assert won is not None and won.node_id == "a" and won.address == "a:1"
    assert await b.campaign("b", "b:1") is None
    assert await b.leader() == won
    await a.resign()
    assert await a.leader() is None
    won_b = await b.campaign("b", "b:1")
    assert won_b is not None and won_b.term > won.term
    await a.close()
    await b.close()


async def test_an_unrenewed_lease_expires_and_is_never_revived(world: tuple[Make, Wait]) -> None:
    make, wait = world
    a, b = make(), make()
    first = await a.campaign("a", "a:1")
    assert first is not None
    await wait(1.2)
    assert await a.renew()
    await wait(1.2)
    assert await a.leader() is not None, "renewed 1.2s ago, TTL 2s"
    await wait(TTL + 1.5)
    assert await a.leader() is None, "the key went with the lease"
    assert not await a.renew(), "a lapsed lease is gone for good"
    second = await b.campaign("b", "b:1")
    assert second is not None and second.term > first.term
    assert not await a.renew(), "the old holder cannot take it back by renewing"
    await a.close()
    await b.close()


async def test_members_and_world(world: tuple[Make, Wait]) -> None:
    make, wait = world
    a, b = make(), make()
    await a.publish(MemberInfo("a", "primary", "a:1", 10, 3))
    await b.publish(MemberInfo("b", "standby", "b:1", 9, 3))
    await a.campaign("a", "a:1")
    w = await b.world()
    assert w.leader is not None and w.leader.node_id == "a"
    assert w.members["a"].position > w.members["b"].position
    assert set(w.member_revisions) == {"a", "b"}
    before = w.member_revisions["b"]
    await b.publish(MemberInfo("b", "standby", "b:1", 11, 3))
    w2 = await a.world()
    assert w2.members["b"].last_event_id == 11 and w2.member_revisions["b"] > before
    # A member that stops publishing disappears after its TTL.
    for _ in range(3):
        await wait(1.0)
        await a.publish(MemberInfo("a", "primary", "a:1", 12, 3))
        await a.renew()
    assert set((await a.world()).members) == {"a"}
    await a.close()
    await b.close()


def test_ttl_below_two_seconds_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2s"):
        MemoryLease(ttl_s=1.5)
    with pytest.raises(ValueError, match="at least 2s"):
        EtcdLease(["http://127.0.0.1:1"], cluster="x", ttl_s=1)


async def test_standalone_terms_start_above_the_log() -> None:
    won = await MemoryLease(min_term=41).campaign("n", "n:1")
    assert won is not None and won.term == 42


async def test_etcd_down_is_reported_as_unavailable_in_time() -> None:
    from lease import LeaseUnavailable

    lease = EtcdLease(["http://127.0.0.1:1"], cluster="x", ttl_s=3)
    t0 = time.monotonic()
    with pytest.raises(LeaseUnavailable, match="etcd did not answer"):
        await lease.campaign("a", "a:1")
    assert time.monotonic() - t0 < 3, "never blocks past the TTL"
    await lease.close()
