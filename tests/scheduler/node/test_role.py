"""The role decision (scheduler/node/role.py), called in process: no etcd, no
subprocess. Pure: a world and a node's view in, a move and its sentence out
(Patroni's test_ha.py asserts `run_cycle()`'s sentence the same way); and then
three role loops on one MemoryLease, in process, each a real Node."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import pytest

from apollo11.lease import LeaderInfo, MemberInfo, MemoryLease, World
from apollo11.lease.memory import MemoryStore
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.node import Node, role
from apollo11.scheduler.workflow import Registry


def _rec(node_id: str, last: int, term: int = 1, r: str = "standby") -> MemberInfo:
    return MemberInfo(node_id, r, f"{node_id}:1", last, term, known_term=term)


def _world(*members: MemberInfo, leader: LeaderInfo | None = None) -> World:
    # every record republished since the node saw the leader go (leaderless_at=0)
    return World(
        leader,
        {m.node_id: m for m in members},
        revision=100,
        member_revisions={m.node_id: 100 for m in members},
    )


def _me(rec: MemberInfo, **kw: object) -> role.Me:
    base: dict[str, object] = {
        "record": rec,
        "role": rec.role,
        "known_term": rec.known_term,
        "holding": None,
        "leaderless_for": 1.0,  # long enough since the leader went
    }
    base.update(kw)
    return role.Me(**base)  # type: ignore[arg-type]


N1, N2, N3 = _rec("n1", 38), _rec("n2", 40), _rec("n3", 40)


def test_the_best_positioned_standby_and_only_it_campaigns() -> None:
    world = _world(N1, N2, N3)
    assert role.decide(_me(N2), world) == role.Campaign(min_term=1)
    assert role.decide(_me(N3), world) == role.Abstain(
        "no leader: n2 is at (1, 40), ahead of this node at (1, 40); not campaigning"
    )
    assert role.decide(_me(N1), world) == role.Abstain(
        "no leader: n2 is at (1, 40), ahead of this node at (1, 38); not campaigning"
    )


def test_a_switchover_target_is_elected_when_it_is_as_far_ahead() -> None:
    import dataclasses

    handing = dataclasses.replace(_rec("n1", 40), handover="n3")  # the resigned primary
    world = _world(handing, N2, N3)
    assert role.elect(N3, world).node_id == "n3"  # tied with n2: the named one wins
    assert role.decide(_me(N3), world) == role.Campaign(min_term=1)
    assert isinstance(role.decide(_me(N2), world), role.Abstain)
    # never one that lacks an event: a target behind the best is passed over
    behind = _rec("n3", 39)
    assert role.elect(N2, _world(handing, N2, behind)).node_id == "n1"  # by id, as ever


def test_how_a_term_began_is_read_from_the_log_and_the_previous_leaders_record() -> None:
    handing = dataclasses.replace(_rec("n1", 10, r="standby"), handover="n2")
    assert role.began("n2", None, None) == "bootstrap"  # no earlier term in the log
    assert role.began("n2", "n2", _world()) == "restart"
    assert role.began("n2", "n1", _world(handing)) == "switchover"
    assert role.began("n3", "n1", _world(handing)) == "failover"  # handed to another
    assert role.began("n2", "n1", _world(_rec("n1", 10))) == "failover"
    assert role.began("n2", "n1", _world()) == "failover"  # its record is gone too
    # the previous leader unknown (its TERM_STARTED not kept, or not read): no guess
    assert role.began("n2", "", _world(handing)) == ""
    assert role.began("n2", "", None) == ""


def test_a_higher_term_beats_a_longer_log() -> None:
    newer = _rec("n3", 10, term=2)
    assert role.elect(N1, _world(N1, N2, newer)).node_id == "n3"


def test_members_that_may_not_lead_are_no_candidates() -> None:
    dead_primary = _rec("n2", 90, r="primary")
    failed = _rec("n3", 80, r=role.FAILED)
    repairing = _rec("n4", 99, r=role.REPAIRING)
    world = _world(N1, dead_primary, failed, repairing)
    assert role.elect(N1, world).node_id == "n1"
    # ...and none of them vouches for a position: n1 alone is no quorum of four
    waiting = role.decide(_me(N1), world)
    assert waiting == role.Abstain(
        "no leader: 2 of 4 members report their position, 3 must before one may lead "
        "(so that none that missed acknowledged writes does); waiting for n2, n3 (one gone "
        "for good: apollo11 roster remove ID)"
    )
    live = (_rec("n5", 20), _rec("n6", 30))
    more = _world(N1, dead_primary, failed, repairing, *live)  # 4 of 6 report
    assert role.elect(N1, more).node_id == "n1"
    # the repairing n4 followed the last primary further than n1: it must not be cut
    assert role.decide(_me(N1), more) == role.Abstain(
        "no leader: n4 (repairing, it cannot lead) holds events up to (1, 99), beyond the "
        "best candidate at (1, 38); waiting"
    )
    behind = _rec("n4", 30, r=role.REPAIRING)
    assert isinstance(
        role.decide(_me(N1), _world(N1, dead_primary, failed, behind, *live)), role.Campaign
    )


def test_the_quorum_counts_from_the_acknowledgement() -> None:
    # k standbys ack a write with the primary: n - k positions include one of them
    assert [role.quorum(3, k) for k in (0, 1, 2)] == [2, 2, 1]
    assert [role.quorum(5, k) for k in (0, 1, 2, 4)] == [3, 4, 3, 1]
    assert role.quorum(1, 1) == 1 and role.quorum(2, 1) == 1


def test_a_member_back_first_after_a_whole_cluster_stopped_waits_for_the_others() -> None:
    # n1 was down longest; n2 and n3 (on the roster, no live record) hold what it lacks
    me = _me(_rec("n1", 10), sync_replicas=1)
    alone = World(None, {"n1": me.record}, roster=frozenset({"n1", "n2", "n3"}))
    assert isinstance(role.decide(me, alone), role.Abstain)
    assert "1 of 3 members report" in role.decide(me, alone).sentence  # type: ignore[union-attr]
    n2 = _rec("n2", 50)
    two = World(
        None,
        {"n1": me.record, "n2": n2},
        member_revisions={"n1": 1, "n2": 1},
        roster=frozenset({"n1", "n2", "n3"}),
    )
    assert role.decide(me, two) == role.Abstain(
        "no leader: n2 is at (1, 50), ahead of this node at (1, 10); not campaigning"
    )


def test_a_record_not_republished_since_the_leader_went_vouches_for_nothing() -> None:
    # CI, stop 22: all three killed, n1 restarted within a TTL and found n2's and n3's
    # records still live, from before the kill. It counted them as reporting and led
    # alone. Their positions are what they published when they last lived: n2 may hold
    # acknowledged writes its record never showed, and n1 would cut them.
    me = _me(_rec("n1", 10), sync_replicas=1, leaderless_at=500)
    dead = _rec("n2", 8)  # last published at revision 480, before the leader went
    world = World(
        None,
        {"n1": me.record, "n2": dead},
        revision=520,
        member_revisions={"n1": 519, "n2": 480},
        roster=frozenset({"n1", "n2", "n3"}),
    )
    assert role.decide(me, world) == role.Abstain(
        "no leader: 1 of 3 members report their position, 2 must before one may lead "
        "(so that none that missed acknowledged writes does); waiting for n2, n3 (one gone "
        "for good: apollo11 roster remove ID)"
    )
    # n2 alive publishes every cycle: once it has since the leader went, it counts
    live = dataclasses.replace(world, revision=530, member_revisions={"n1": 529, "n2": 525})
    assert role.decide(me, live) == role.Campaign(min_term=1)


def test_a_primary_whose_leader_key_is_gone_demotes_itself() -> None:
    mine = LeaderInfo("n1", "n1:1", 7)
    me = _me(_rec("n1", 50, term=7, r="primary"), holding=mine)
    assert role.decide(me, _world(N2)) == role.Demote(
        "the leader key is gone or belongs to another term"
    )
    other = LeaderInfo("n2", "n2:1", 8)
    assert isinstance(role.decide(me, _world(N2, leader=other)), role.Demote)
    assert role.decide(me, _world(N2, leader=mine)) == role.StayPrimary("primary: term 7")


def test_a_standby_refuses_to_follow_a_lower_term() -> None:
    stale = LeaderInfo("n2", "n2:1", 3)
    me = _me(_rec("n1", 50, term=5), known_term=5)
    assert role.decide(me, _world(N2, leader=stale)) == role.StandAside(
        "the leader key names n2 at term 3, below term 5 this node knows: not following "
        "it; waiting for it to lapse"
    )
    assert role.decide(me, _world(N2, leader=LeaderInfo("n2", "n2:1", 6))) == role.Follow(
        LeaderInfo("n2", "n2:1", 6)
    )


def test_no_campaign_before_the_positions_settle() -> None:
    world = _world(N1, N2)
    first = role.decide(_me(N2, leaderless_for=None), world)
    assert first == role.Abstain(
        "no leader: published this node's position, waiting for the others'"
    )
    settling = role.decide(_me(N2, leaderless_for=role.SETTLE_S / 2), world)
    assert settling == role.Abstain("no leader: waiting for every standby's final position")


def test_a_repairing_node_never_campaigns_even_alone() -> None:
    me = _me(N2, needs_through=500)
    assert role.decide(me, _world(N2)) == role.Abstain(
        "no leader: not campaigning while repairing (this node needs events through 500, "
        "it holds (1, 40))"
    )


def test_after_etcd_lost_its_data_the_term_starts_above_every_known_one() -> None:
    behind = _me(_rec("n2", 40, term=9), known_term=12, store_behind="etcd lost its data")
    world = _world(N1, _rec("n2", 40, term=9))
    assert isinstance(role.decide(behind, world), role.Abstain), "one TTL first"
    later = _me(_rec("n2", 40, term=9), known_term=12, store_behind="x", store_behind_for=10.0)
    assert role.decide(later, world) == role.Campaign(min_term=12)


def test_a_node_whose_log_failed_stands_aside_and_redirects() -> None:
    leader = LeaderInfo("n2", "n2:1", 4)
    move = role.decide(_me(N1, log_trouble="ENOSPC"), _world(N2, leader=leader))
    assert move == role.StandAside(
        "not campaigning or following: the event log failed (ENOSPC); retrying to reopen "
        "it every 1s",
        redirect=leader,
        failed=True,
    )


# ------------------------------------------------- three role loops, in process


async def _cluster(tmp_path: Path, store: MemoryStore) -> list[Node]:
    nodes = []
    for i in (1, 2, 3):
        settings = NodeSettings(
            node_id=f"n{i}",
            data_dir=tmp_path / f"n{i}",
            listen="127.0.0.1:0",
            etcd="http://127.0.0.1:1",  # never dialled: the lease below is the store
            lease_ttl=2.0,
        )
        node = Node(settings, lease=MemoryLease(ttl_s=2.0, store=store), registry=Registry())
        await node.start()
        nodes.append(node)
    return nodes


async def _until(cond: object, timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not (callable(cond) and cond()):
            await asyncio.sleep(0.05)


async def test_three_role_loops_on_one_memory_lease(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    caplog.set_level(logging.INFO, logger="apollo11.scheduler.node")
    nodes = await _cluster(tmp_path, store)
    try:
        await _until(lambda: sum(n.role == "primary" for n in nodes) == 1)
        first = next(n for n in nodes if n.role == "primary")
        others = [n for n in nodes if n is not first]
        await _until(
            lambda: all(n.roles.follower is not None and n.roles.follower.connected for n in others)
        )
        said = caplog.text
        assert f"promoted: term {first.known_term} starts at event" in said
        assert f"standby: following {first.settings.node_id} (term {first.known_term})" in said

        await first.stop()  # resigns: one of the others is promoted at once
        await _until(lambda: sum(n.role == "primary" for n in others) == 1)
        second = next(n for n in others if n.role == "primary")
        assert second.known_term > first.known_term
        assert store.holder is not None and store.holder.node_id == second.settings.node_id
    finally:
        for n in nodes:
            if n.role != "stopped":
                await n.stop()
