"""EtcdFacts.check_store: every node says when etcd lost its data, including one
that first reads etcd after another node recreated the leader key (paused, or busy
demoting, through the restore): the CI run of Dec 7 found a node that never said it."""

from __future__ import annotations

from typing import cast

from apollo11.lease import ClusterConfig, LeaderInfo, World
from apollo11.scheduler.node.etcdfacts import EtcdFacts, Host


class _Host:
    def __init__(self) -> None:
        self.notices: list[str] = []

    def notice(self, text: str) -> None:
        self.notices.append(text)


def _facts() -> tuple[EtcdFacts, _Host]:
    host = _Host()
    return EtcdFacts(cast(Host, host), ClusterConfig()), host


def _world(revision: int, term: int | None, leader: str | None = None) -> World:
    held = None if leader is None or term is None else LeaderInfo(leader, f"{leader}:1", term)
    return World(held, revision=revision, term=term)


def test_a_node_that_reads_etcd_only_after_the_key_was_recreated_says_so() -> None:
    facts, host = _facts()
    facts.check_store(_world(3050, 3001, "n1"), known_term=3001)
    assert host.notices == []
    # etcd restored empty; n2 noticed, waited a TTL, and leads at 3002 before this
    # node reads etcd again: nothing in etcd is below what this node knows
    facts.check_store(_world(14, 3002, "n2"), known_term=3001)
    assert len(host.notices) == 1, host.notices
    (said,) = host.notices
    assert said.startswith("etcd lost its data"), said
    assert "revision went back from 3050 to 14" in said, said
    assert "the leader key names n2 at term 3002" in said, said
    assert facts.store_behind is None, "nothing to wait for: a leader of a higher term"
    facts.check_store(_world(15, 3002, "n2"), known_term=3002)
    assert len(host.notices) == 1, "said once"


def test_a_node_that_sees_etcd_empty_says_so_once_and_again_when_caught_up() -> None:
    facts, host = _facts()
    facts.check_store(_world(3050, 3001, "n1"), known_term=3001)
    facts.check_store(_world(1, None), known_term=3001)
    assert facts.store_behind is not None
    assert host.notices == [facts.store_behind]
    assert host.notices[0].startswith("etcd lost its data: it holds no term"), host.notices
    facts.check_store(_world(2, None), known_term=3001)
    assert len(host.notices) == 1
    facts.check_store(_world(9, 3002, "n2"), known_term=3001)
    assert facts.store_behind is None
    assert host.notices[1].endswith("; leader key recreated at term 3002 by n2"), host.notices


def test_revisions_that_only_climb_say_nothing() -> None:
    facts, host = _facts()
    for revision, term in ((5, 1), (9, 1), (30, 2), (31, 2)):
        facts.check_store(_world(revision, term, "n1"), known_term=term)
    assert host.notices == []


def test_a_revision_gone_back_with_no_leader_says_what_etcd_holds() -> None:
    facts, host = _facts()
    facts.check_store(_world(80, None), known_term=0)  # a new cluster: no term yet
    facts.check_store(_world(3, None), known_term=0)
    assert host.notices == [
        "etcd lost its data (restored empty or from a backup): its revision went back "
        "from 80 to 3; it holds no term and no leader"
    ]
