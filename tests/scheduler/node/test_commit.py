"""The commit gate (scheduler/node/commit.py) with no node: durable here (the
caller's part) -> k standbys -> the lease still valid, checked before and after."""

from __future__ import annotations

import asyncio

import pytest

from apollo11.lease import MemberInfo, World
from apollo11.lease.clusterconfig import ClusterConfig
from apollo11.replicator.hub import ReplicationHub, ReplicationTimeout
from apollo11.scheduler.errors import LeaseLostError, OutcomeUnknownError
from apollo11.scheduler.node.commit import Commit


class Hub(ReplicationHub):
    """A hub whose wait says what it was asked and does what the test says."""

    def __init__(self, *, connected: int = 0, on_wait: object = None) -> None:
        super().__init__()
        self.asked: list[tuple[int, int]] = []
        self._connected = connected
        self.on_wait = on_wait

    def connected(self) -> list:  # type: ignore[override, type-arg]
        return [object()] * self._connected

    async def wait(self, event_id: int, n: int, timeout_s: float) -> None:
        self.asked.append((event_id, n))
        if callable(self.on_wait):
            self.on_wait()
        await asyncio.sleep(0)


def _gate(hub: Hub, valid: list[bool], config: ClusterConfig, **kw: object) -> Commit:
    return Commit(
        node_id="n1",
        standalone=bool(kw.get("standalone", False)),
        sync_timeout_s=1.0,
        hub=lambda: hub,
        config=lambda: config,
        lease_valid=lambda: valid[0],
        world=kw.get("world", lambda: None),  # type: ignore[arg-type]
    )


async def test_a_write_waits_for_k_standbys_between_two_lease_checks() -> None:
    valid = [True]
    hub = Hub()
    await _gate(hub, valid, ClusterConfig(sync_replicas=2))(7)
    assert hub.asked == [(7, 2)]


async def test_a_lease_lost_before_asks_no_standby() -> None:
    valid = [False]
    hub = Hub()
    with pytest.raises(LeaseLostError, match="event 7 is durable on n1"):
        await _gate(hub, valid, ClusterConfig(sync_replicas=1))(7)
    assert hub.asked == []


async def test_a_lease_lost_during_the_wait_is_not_acknowledged() -> None:
    """A primary paused while its standbys acknowledged: replaced meanwhile."""
    valid = [True]
    hub = Hub(on_wait=lambda: valid.__setitem__(0, False))
    with pytest.raises(LeaseLostError):
        await _gate(hub, valid, ClusterConfig(sync_replicas=1))(7)
    assert hub.asked == [(7, 1)]


async def test_standbys_that_do_not_answer_make_the_outcome_unknown() -> None:
    def late() -> None:
        raise ReplicationTimeout("1 of 1 standbys did not acknowledge event 7 within 1s")

    world = World(None, {"n2": MemberInfo("n2", "standby", "n2:1", 0, 1)}, 1, {"n2": 1})
    hub = Hub(on_wait=late)
    gate = _gate(hub, [True], ClusterConfig(sync_replicas=1), world=lambda: world)
    with pytest.raises(OutcomeUnknownError, match="members not following this primary: n2"):
        await gate(7)


async def test_relaxed_mode_waits_for_those_connected_and_standalone_for_none() -> None:
    hub = Hub(connected=1)
    await _gate(hub, [True], ClusterConfig(sync_replicas=2, sync_mode="relaxed"))(7)
    assert hub.asked == [(7, 1)]
    alone = Hub(connected=0)
    await _gate(alone, [True], ClusterConfig(sync_replicas=2, sync_mode="relaxed"))(8)
    assert alone.asked == [], "relaxed with no standby connected: durable here is enough"
    standalone = Hub()
    await _gate(standalone, [True], ClusterConfig(sync_replicas=2), standalone=True)(9)
    assert standalone.asked == []
