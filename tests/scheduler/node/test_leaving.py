"""Every way out of primary, one test each, in process: two real Nodes on one
MemoryLease. Each reason is a fact the role loop decides on (role.leave), so
each test asserts the one sentence logged, whatever noticed it first."""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from apollo11.lease import LeaseUnavailable, MemoryLease
from apollo11.lease.memory import MemoryStore
from apollo11.scheduler.api.knownsources import KnownSources
from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.log import writer
from apollo11.scheduler.node import FAILED, Node, logwatch
from apollo11.scheduler.workflow import Idempotent, Registry, StepContext, Workflow

TTL = 2.0


async def _until(ok: Callable[[], bool], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not ok():
            await asyncio.sleep(0.02)


def _settings(tmp_path: Path, node_id: str, **kw: object) -> NodeSettings:
    return NodeSettings(
        node_id=node_id,
        data_dir=tmp_path / node_id,
        listen="127.0.0.1:0",
        etcd="http://127.0.0.1:1",  # never dialled: the lease below is the store
        lease_ttl=TTL,
        cluster="c",
        **kw,  # type: ignore[arg-type]
    )


def _registry() -> Registry:
    wf = Workflow("w")

    @wf.step(idempotency=Idempotent())
    async def only(ctx: StepContext) -> None:
        pass

    registry = Registry()
    registry.register(wf)
    return registry


class Pair:
    def __init__(self, nodes: list[Node], store: MemoryStore) -> None:
        self.nodes, self.store = nodes, store

    @property
    def primary(self) -> Node:
        (p,) = [n for n in self.nodes if n.role == "primary"]
        return p

    @property
    def standby(self) -> Node:
        return next(n for n in self.nodes if n is not self.primary)


@pytest.fixture
async def pair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Pair]:
    caplog.set_level(logging.INFO, logger="apollo11.scheduler.node")
    store = MemoryStore()
    nodes = []
    for node_id in ("n1", "n2"):
        node = Node(
            _settings(tmp_path, node_id),
            lease=MemoryLease(ttl_s=TTL, store=store),
            registry=_registry(),
        )
        await node.start()
        nodes.append(node)
    p = Pair(nodes, store)
    try:
        await _until(lambda: sum(n.role == "primary" for n in nodes) == 1)
        await _until(
            lambda: p.standby.roles.follower is not None and p.standby.roles.follower.connected
        )
        yield p
    finally:
        for n in nodes:
            if n.role != "stopped":
                await n.stop()


async def _demoted(node: Node, caplog: pytest.LogCaptureFixture, because: str) -> str:
    """Wait for the demotion; the one sentence it logged."""
    await _until(lambda: "demoted self because" in caplog.text and node.role != "primary")
    said = [r.getMessage() for r in caplog.records if "demoted self because" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith(f"demoted self because {because}"), said[0]
    return said[0]


async def test_the_fence_lapsing_demotes_through_the_loop(
    pair: Pair, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = pair.primary
    # As if paused for 1000 s just now. A real pause stops the renewals too: one sent
    # before it ends with the time it was sent, 1000 s ago. Setting `renewed_at` alone
    # did not: a renewal in flight then ended with a time from just before, and under
    # load the fence never lapsed. So the renewals hang first (the one in flight ends).
    lease = old.roles.fence._lease()
    hung = asyncio.Event()

    async def paused() -> bool:
        hung.set()
        await asyncio.Event().wait()
        return True

    monkeypatch.setattr(lease, "renew", paused)
    await asyncio.wait_for(hung.wait(), 20)
    old.roles.fence.renewed_at = time.monotonic() - 1000
    assert not old.lease_valid(), "no ack from the moment the fence lapsed"
    await _demoted(old, caplog, "the lease was not renewed for")
    # it may lead again (a tie goes to the smallest node id): in a new term
    await _until(lambda: any(n.role == "primary" and n.known_term == 2 for n in pair.nodes))


async def test_etcd_refusing_the_renewal_demotes(
    pair: Pair, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = pair.primary

    async def refused() -> bool:
        return False

    monkeypatch.setattr(old.lease, "renew", refused)
    await _demoted(old, caplog, "etcd says the lease is gone")


async def test_the_leader_key_gone_demotes(
    pair: Pair, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = pair.primary

    async def renewed() -> bool:  # only the loop's read can see the key go
        return True

    monkeypatch.setattr(old.lease, "renew", renewed)
    pair.store.holder, pair.store.owner = None, None
    pair.store.revision += 1
    await _demoted(old, caplog, "the leader key is gone or belongs to another term")


async def test_a_failed_log_demotes_to_failed(
    pair: Pair, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = pair.primary

    def no_space(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer, "_write_all", no_space)
    monkeypatch.setattr(logwatch, "probe_writes", no_space)
    assert old.engine is not None
    with pytest.raises(Exception, match="No space left"):
        await old.engine.submit("w", {})
    await _demoted(old, caplog, "its event log failed (")
    assert old.role == FAILED


async def test_a_foreign_cluster_id_demotes(pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    old = pair.primary
    pair.store.cluster_id = "someone-else"
    pair.store.revision += 1
    await _demoted(old, caplog, "etcd holds cluster id someone-else for 'c'")


async def test_another_process_with_this_node_id_demotes(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    old = pair.primary
    node_id = old.settings.node_id
    record = pair.store.members[node_id][0]
    pair.store.members[node_id] = (record, pair.store.clock() + 60, pair.store.revision, object())
    await _demoted(old, caplog, f"node id {node_id!r} is already live")


async def test_a_switchover_demotes_through_the_loop(
    pair: Pair, caplog: pytest.LogCaptureFixture
) -> None:
    old, target = pair.primary, pair.standby
    to = target.settings.node_id
    _, _, sentence = await old.views.switchover(to, operator="alice")
    assert sentence == f"demoted self because switchover to {to} asked by alice"
    await _demoted(old, caplog, f"switchover to {to} asked by alice")
    await _until(lambda: target.role == "primary")


async def test_a_primary_whose_etcd_hangs_still_demotes_on_time(
    pair: Pair, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An etcd read may take half a TTL to time out: the fence's wake interrupts it."""
    old = pair.primary

    async def hangs(*args: object, **kw: object) -> None:
        await asyncio.sleep(3600)

    async def unreachable() -> bool:
        raise LeaseUnavailable("etcd unreachable")

    lease = old.lease
    for name in ("world", "publish", "keep", "wait_change"):
        monkeypatch.setattr(lease, name, hangs)
    monkeypatch.setattr(lease, "renew", unreachable)
    t0 = time.monotonic()
    await _demoted(old, caplog, "the lease was not renewed for")
    assert time.monotonic() - t0 < TTL + 1, "demoted within the TTL, not after a hung read"


async def test_a_standalone_node_paused_past_its_ttl_leads_again(tmp_path: Path) -> None:
    """A laptop's sleep: the standalone node's fence lapsed, it stepped down, and
    nothing ever made it primary again (every write refused "no primary")."""
    node = Node(
        NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0", lease_ttl=2)
    )
    await node.start()
    try:
        assert node.known_term == 1
        await asyncio.sleep(0.2)  # past the keepalive's first renewal
        node.roles.fence.renewed_at = time.monotonic() - 1000
        # (the role is primary a moment before the engine leads: the term's first
        # event is written in between)
        await _until(
            lambda: (
                node.role == "primary"
                and node.known_term == 2
                and node.engine is not None
                and node.engine.leading
            )
        )
    finally:
        await node.stop()


# ------------------------------------------- found by a review of the above


async def test_a_switchover_whose_node_is_demoted_while_draining_is_called_off(
    pair: Pair,
) -> None:
    """The fence lapsed during the switchover's drain: the loop demoted the node, and
    the switchover waited out its whole budget for a demotion already done (the
    message says which way out it took: not "after 5s", not "did not step down").
    Under load it was the demotion not yet finished: its role changed first, its end
    (engine stopped, lease resigned) came later, and the switchover, seeing no end
    yet, went on and answered as if it had handed over. Here the resign is held until
    the drain has returned, which makes that order every time (it failed first)."""
    from apollo11.scheduler.errors import NodeUnavailableError

    old, target = pair.primary, pair.standby
    assert old.engine is not None
    drained = False
    real_resign = old.lease.resign

    async def resign() -> None:
        await _until(lambda: drained)
        await real_resign()

    async def drain(within_s: float) -> bool:
        nonlocal drained
        old.roles.fence.renewed_at = time.monotonic() - 1000
        await _until(lambda: old.role != "primary")
        drained = True
        return True

    old.lease.resign = resign  # type: ignore[method-assign]
    old.engine.drain = drain  # type: ignore[method-assign]
    with pytest.raises(NodeUnavailableError, match="stopped being the primary meanwhile"):
        await old.views.switchover(target.settings.node_id, operator="alice")
    assert "was not renewed" in old.roles.leading.last_demotion


async def test_the_old_primary_settles_after_a_switchover(pair: Pair) -> None:
    """`handed_over` outlived the demotion: the old primary, now a standby, read etcd
    ten times a second instead of waiting for a change."""
    old, target = pair.primary, pair.standby
    await old.views.switchover(target.settings.node_id, operator="alice")
    await _until(lambda: target.role == "primary")
    await _until(lambda: old.roles.follower is not None and old.roles.follower.connected)
    await _until(lambda: old.roles._settled())


async def test_a_hung_etcd_just_after_a_promotion_still_demotes_on_time(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The promotion's record put waited on a hung etcd (half a TTL per endpoint)
    where no wake could interrupt it: the node led on past its fence."""
    old = pair.primary
    new = pair.standby
    lease = new.lease
    hang = False
    real_campaign = lease.campaign

    async def campaign(*args: object, **kw: object) -> object:
        nonlocal hang
        won = await real_campaign(*args, **kw)  # type: ignore[arg-type]
        hang = won is not None
        return won

    def hung(real: Callable[..., object]) -> Callable[..., object]:
        async def call(*args: object, **kw: object) -> object:
            if hang:
                await asyncio.sleep(1.5 * TTL)
                raise LeaseUnavailable("etcd did not answer")
            return await real(*args, **kw)  # type: ignore[misc]

        return call

    async def unreachable() -> bool:
        raise LeaseUnavailable("etcd unreachable")

    monkeypatch.setattr(lease, "campaign", campaign)
    for name in ("publish", "world", "keep", "wait_change"):
        monkeypatch.setattr(lease, name, hung(getattr(lease, name)))
    await old.stop()  # resigns: the standby campaigns, wins, and etcd hangs
    await _until(lambda: hang and new.role == "primary")
    t0 = time.monotonic()
    monkeypatch.setattr(lease, "renew", unreachable)
    await _until(lambda: new.role != "primary")
    assert time.monotonic() - t0 < new.roles.fence.fence_after_s + 0.5


async def test_a_lease_lost_during_a_graceful_stop_demotes_at_once(pair: Pair) -> None:
    """The stop ends the role loop before it drains (up to drain_timeout): a fence
    lapsing meanwhile was recorded, and nobody acted on it."""
    old = pair.primary
    assert old.engine is not None
    seen: dict[str, object] = {}

    async def drain(within_s: float) -> bool:  # steps still running, for a while
        old.roles.fence.renewed_at = time.monotonic() - 1000  # the lease lapses meanwhile
        await _until(lambda: old.role != "primary", timeout=3)
        seen.update(role=old.role, leading=old.engine is not None and old.engine.leading)
        return True

    old.engine.drain = drain  # type: ignore[method-assign]
    await old.stop()
    assert seen == {"role": "standby", "leading": False}


async def test_a_wake_while_the_store_is_reshaped_does_not_freeze_the_loop(pair: Pair) -> None:
    """A wake while the store was closed left the wake set: the role loop returned
    from each cycle and pause at once, and never yielded to the event loop."""
    node = pair.standby
    loop = asyncio.get_running_loop()
    ticks: list[float] = []

    def change(data: object) -> str:  # on a thread, while node.store is None
        loop.call_soon_threadsafe(node.wake)
        for _ in range(6):
            loop.call_soon_threadsafe(ticks.append, time.monotonic())
            time.sleep(0.05)
        return "changed nothing"

    frozen = threading.Event()

    def unfreeze() -> None:  # a spinning loop's only way out is its while condition
        time.sleep(3)
        if len(ticks) < 6:
            frozen.set()
            node._stopping = True

    threading.Thread(target=unfreeze, daemon=True).start()
    await node.reopen(change)
    await asyncio.sleep(0.1)
    assert not frozen.is_set(), "the role loop spun: the event loop ran nothing else"


async def test_the_node_that_takes_over_welcomes_the_clients_moving_to_it(pair: Pair) -> None:
    """The workers and clients moving to a new primary are strangers to it: for a
    while its gRPC ports shed strangers at the lower ceiling (api/knownsources.py)."""
    old, target = pair.primary, pair.standby
    assert target.api is not None
    # as on a node with tokens (these have none), long past its start
    clock = FakeClock()
    target.api.known = KnownSources(clock=clock.now, welcome_s=60)
    clock.advance(1000)
    assert not target.api.known.welcoming()
    await old.views.switchover(target.settings.node_id, operator="alice")
    await _until(lambda: target.role == "primary")
    assert target.api.known.welcoming()
