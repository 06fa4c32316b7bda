"""One suite for every lease implementation: the in-memory one and real etcd."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import orjson
import pytest

from apollo11.lease import Lease, MemberInfo, MemoryLease, MemoryStore, NodeIdTaken
from apollo11.lease.etcd import EtcdLease
from apollo11.lease.local_etcd import LocalEtcd

TTL = 2.0


class FakeTime:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


Make = Callable[[], Lease]
Wait = Callable[[float], Awaitable[None]]


# etcd's param is fetched by name at run time, which tests/tiers.py cannot read: marked.
@pytest.fixture(params=["memory", pytest.param("etcd", marks=pytest.mark.etcd)])
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


async def test_keeping_a_record_alive_writes_no_revision(world: tuple[Make, Wait]) -> None:
    make, wait = world
    a, b = make(), make()
    rec = MemberInfo("a", "standby", "a:1", 10, 3)
    await a.publish(rec)
    before = await b.world()
    for _ in range(4):  # past the TTL: kept alive by keep() alone
        await wait(0.8)
        await a.keep(rec)
    after = await b.world()
    assert after.members["a"] == rec, "still live"
    # and not written again (etcd's revision is the whole store's: other clusters of
    # a shared etcd move it; the record's own mod revision is ours alone)
    assert after.member_revisions["a"] == before.member_revisions["a"]
    # a record that lapsed meanwhile is written again by keep()
    await wait(TTL + 1.5)
    assert "a" not in (await b.world()).members
    await a.keep(rec)
    assert (await b.world()).members["a"] == rec
    await a.close()
    await b.close()


async def test_a_kept_record_shows_its_lease_refreshed(world: tuple[Make, Wait]) -> None:
    """What tells a live member's record from a dead one's when neither is written
    again (scheduler/node/nodeid.py): a refresh puts time back on its lease."""
    make, wait = world
    a, b = make(), make()
    rec = MemberInfo("a", "standby", "a:1", 10, 3)
    assert await b.member_lease_left("a") is None, "no record"
    await a.publish(rec)
    first = await b.member_lease_left("a")
    assert first is not None and 0 <= first <= TTL
    await wait(1.2)
    # whole seconds, rounded down: the lease had less than first + 1 s left at first
    unkept = await b.member_lease_left("a")
    assert unkept is None or unkept <= max(first - 1, 0), "not refreshed: it runs down"
    await a.keep(rec)
    kept = await b.member_lease_left("a")
    assert kept is not None and kept >= TTL - 1, "a refresh puts the TTL back"
    await wait(TTL + 1.5)
    assert await b.member_lease_left("a") is None, "lapsed: no record"
    await a.close()
    await b.close()


async def test_a_member_record_of_another_process_is_never_overwritten(
    world: tuple[Make, Wait],
) -> None:
    """Two processes with one node id: the second's publish is refused, the first's
    record stays, and once it lapses (the first died) the second may take it."""
    make, wait = world
    first, second = make(), make()
    await first.publish(MemberInfo("n2", "standby", "first:1", 10, 3, instance="i1"))
    with pytest.raises(NodeIdTaken, match=r"n2.*already live") as e:
        await second.publish(MemberInfo("n2", "standby", "second:1", 0, 0, instance="i2"))
    assert e.value.holder is not None and e.value.holder.address == "first:1"
    assert (await second.world()).members["n2"].instance == "i1"
    await first.publish(MemberInfo("n2", "standby", "first:1", 11, 3, instance="i1"))
    for _ in range(4):  # the first stops publishing (it died): its record lapses
        await wait(1.0)
    await second.publish(MemberInfo("n2", "standby", "second:1", 0, 0, instance="i2"))
    assert (await second.world()).members["n2"].address == "second:1"
    await first.close()
    await second.close()


async def test_the_cluster_id_is_created_once(world: tuple[Make, Wait]) -> None:
    make, _ = world
    a, b = make(), make()
    assert (await a.world()).cluster_id is None
    assert await a.claim_cluster_id("aaaa") == "aaaa"
    assert await b.claim_cluster_id("bbbb") == "aaaa", "the first claim wins"
    assert (await b.world()).cluster_id == "aaaa"
    await a.close()
    await b.close()


async def test_the_roster_keeps_members_that_are_down(world: tuple[Make, Wait]) -> None:
    make, _ = world
    a, b = make(), make()
    await a.register("n1")
    await a.register("n1")  # idempotent
    await b.register("n2")
    await b.publish(MemberInfo("n2", "standby", "n2:1", 0, 0))
    assert (await a.world()).roster == frozenset({"n1", "n2"})
    with pytest.raises(NodeIdTaken, match="'n2' is live"):
        await a.unregister("n2")
    assert await a.unregister("n1") is True
    assert await a.unregister("n1") is False, "not on it any more"
    await b.close()  # n2's record goes with its process; its roster entry stays
    assert (await a.world()).roster == frozenset({"n2"})
    await a.close()


def test_ttl_below_two_seconds_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2s"):
        MemoryLease(ttl_s=1.5)
    with pytest.raises(ValueError, match="at least 2s"):
        EtcdLease(["http://127.0.0.1:1"], cluster="x", ttl_s=1)


async def test_standalone_terms_start_above_the_log() -> None:
    won = await MemoryLease().campaign("n", "n:1", min_term=41)
    assert won is not None and won.term == 42


async def test_terms_strictly_increase_and_the_store_keeps_the_last(
    world: tuple[Make, Wait],
) -> None:
    make, _ = world
    a, b = make(), make()
    terms = []
    for lease, name in [(a, "a"), (b, "b"), (a, "a"), (b, "b")]:
        won = await lease.campaign(name, f"{name}:1")
        assert won is not None
        assert (await lease.world()).term == won.term, "the term is written with the key"
        assert await lease.leader() == won
        terms.append(won.term)
        await lease.resign()
    assert terms == sorted(set(terms)), f"terms must strictly increase: {terms}"
    # a lower min_term (a node that knows less) never takes a term back
    won = await a.campaign("a", "a:1", min_term=1)
    assert won is not None and won.term == terms[-1] + 1
    await a.close()
    await b.close()


async def test_a_campaign_with_min_term_above_the_store_wins_above_it(
    world: tuple[Make, Wait],
) -> None:
    """What a node does after etcd lost its data: it knows term 3167, etcd knows less."""
    make, _ = world
    a, b = make(), make()
    first = await a.campaign("a", "a:1")
    assert first is not None
    await a.resign()
    known = first.term + 3167
    won = await b.campaign("b", "b:1", min_term=known)
    assert won is not None and won.term > known
    assert (await b.world()).term == won.term
    assert await a.campaign("a", "a:1", min_term=won.term + 10) is None, "one holder at a time"
    await b.resign()
    after = await a.campaign("a", "a:1")
    assert after is not None and after.term > won.term, "the store keeps the raised term"
    await a.close()
    await b.close()


async def test_members_publish_the_highest_term_they_know(world: tuple[Make, Wait]) -> None:
    make, _ = world
    a = make()
    await a.publish(MemberInfo("a", "standby", "a:1", 10, 3, known_term=9))
    w = await a.world()
    assert w.members["a"].known_term == 9
    assert w.highest_known_term() == 9
    await a.close()


async def test_a_store_that_lost_its_data_hands_out_terms_above_min_term() -> None:
    store = MemoryStore()
    lease = MemoryLease(store=store)
    won = await lease.campaign("a", "a:1", min_term=3000)
    assert won is not None and won.term == 3001
    store.lose_data()
    assert (await lease.world()).term is None and await lease.leader() is None
    again = await lease.campaign("a", "a:1", min_term=won.term)
    assert again is not None and again.term == 3002


async def test_etcd_down_is_reported_as_unavailable_in_time() -> None:
    from apollo11.lease import LeaseUnavailable

    lease = EtcdLease(["http://127.0.0.1:1"], cluster="x", ttl_s=3)
    t0 = time.monotonic()
    with pytest.raises(LeaseUnavailable, match="etcd did not answer"):
        await lease.campaign("a", "a:1")
    assert time.monotonic() - t0 < 3, "never blocks past the TTL"
    await lease.close()


async def test_concurrent_campaigns_one_winner_and_a_fresh_term(world: tuple[Make, Wait]) -> None:
    make, _ = world
    leases = [make() for _ in range(4)]
    won = await asyncio.gather(
        *(x.campaign(f"n{i}", f"n{i}:1", min_term=50) for i, x in enumerate(leases))
    )
    winners = [w for w in won if w is not None]
    assert len(winners) == 1 and winners[0].term == 51
    for x in leases:
        await x.close()


async def test_etcd_reads_a_leader_key_written_before_the_term_key(
    etcd_server: LocalEtcd, cluster_name: str
) -> None:
    """Earlier versions: the term was the key's create revision (and maybe in the value)."""
    lease = EtcdLease([etcd_server.url], cluster=cluster_name, ttl_s=TTL)
    etcd_server.ctl("put", f"/apollo11/{cluster_name}/leader", '{"node_id":"old","address":"o:1"}')
    got = await lease.leader()
    assert got is not None and got.node_id == "old"
    revision = int(
        orjson.loads(etcd_server.ctl("get", lease.leader_key.decode(), "-w", "json"))["kvs"][0][
            "create_revision"
        ]
    )
    assert got.term == revision
    w = await lease.world()
    assert w.leader == got and w.term is None
    await lease.close()


async def test_the_cluster_config_is_claimed_once_and_changed_by_revision(
    world: tuple[Make, Wait],
) -> None:
    make, _ = world
    a, b = make(), make()
    first = {"lease_ttl": 5.0, "sync_replicas": 1, "sync_mode": "strict"}
    assert (await a.world()).config is None
    assert await a.claim_config(first) == first
    # a second node's flags are only a bootstrap value: the stored settings win
    assert await b.claim_config({**first, "lease_ttl": 3.0}) == first
    w = await b.world()
    assert w.config == first and w.config_revision > 0
    changed = {**first, "sync_replicas": 2}
    assert await a.write_config(changed, expect=w.config_revision)
    # a write made on what another one replaced since is refused
    assert not await b.write_config({**first, "sync_mode": "relaxed"}, expect=w.config_revision)
    assert (await b.world()).config == changed
    await a.close()
    await b.close()
