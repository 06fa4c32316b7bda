"""One suite for every lease implementation (etcd joins when the cluster lands)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lease import Lease, MemoryLease, MemoryStore


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["memory"])
def world(request: pytest.FixtureRequest) -> tuple[Callable[[], Lease], Callable[[float], None]]:
    clock = Clock()
    shared = MemoryStore(clock=clock)

    def make() -> Lease:
        return MemoryLease(ttl_s=3, store=shared)

    def wait(seconds: float) -> None:
        clock.t += seconds

    return make, wait


async def test_one_holder_at_a_time_and_terms_grow(world) -> None:  # type: ignore[no-untyped-def]
    make, _ = world
    a, b = make(), make()
    won = await a.campaign("a", "a:1")
    assert won is not None and won.node_id == "a"
    assert await b.campaign("b", "b:1") is None
    assert await b.leader() == won
    await a.resign()
    assert await a.leader() is None
    won_b = await b.campaign("b", "b:1")
    assert won_b is not None and won_b.term > won.term


async def test_an_unrenewed_lease_expires_and_cannot_be_renewed(world) -> None:  # type: ignore[no-untyped-def]
    make, wait = world
    a, b = make(), make()
    first = await a.campaign("a", "a:1")
    wait(2)
    assert await a.renew()
    wait(2)
    assert await a.leader() is not None, "renewed 2s ago, TTL 3s"
    wait(3.5)
    assert await a.leader() is None
    assert not await a.renew(), "a lapsed lease is gone for good"
    second = await b.campaign("b", "b:1")
    assert second is not None and first is not None and second.term > first.term
    assert not await a.renew(), "the old holder cannot take it back by renewing"


def test_ttl_below_two_seconds_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2s"):
        MemoryLease(ttl_s=1.5)


async def test_standalone_terms_start_above_the_log() -> None:
    won = await MemoryLease(min_term=41).campaign("n", "n:1")
    assert won is not None and won.term == 42
