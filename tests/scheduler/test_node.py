"""A node in process, standalone (an in-memory lease): its lease checks around a step."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.log import EventType
from apollo11.scheduler.node import Node
from apollo11.scheduler.workflow import Idempotent, Registry, StepContext, Workflow


async def test_a_primary_paused_between_commit_and_start_does_not_begin_the_attempt(
    tmp_path: Path,
) -> None:
    """Issue 15 (4b): the STARTED's commit checked the lease, the node was paused right
    after (SIGSTOP) and resumed past its lease: it must not begin the attempt, which a
    new primary has failed as lost and retried meanwhile."""
    ran: list[int] = []
    wf = Workflow("once")

    @wf.step(idempotency=Idempotent())
    async def s(ctx: StepContext) -> None:
        ran.append(ctx.attempt)

    reg = Registry()
    reg.register(wf)
    # A long TTL: no renewal of the keepalive comes between the "pause" and the start.
    settings = NodeSettings(
        node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0", lease_ttl=30
    )
    node = Node(settings, registry=reg)
    await node.start()
    assert node.engine is not None and node.store is not None
    await asyncio.sleep(0.2)  # past the keepalive's first renewal
    commit = node.commit

    async def paused_after_commit(event_id: int) -> None:
        await commit(event_id)
        (event,) = node.store.log.read(event_id, event_id)  # type: ignore[union-attr]
        if event.event_type is EventType.STEP_STARTED and event.attempt == 1:
            node.roles.fence.renewed_at = (
                time.monotonic() - 1000
            )  # as if stopped for 1000 s just now

    node.engine._commit = paused_after_commit
    sub = await node.engine.submit("once")
    try:
        # It steps down, and (a cluster of one) leads again in the next term, which
        # fails the attempt it never began as lost and retries it.
        await _until(lambda: node.known_term == 2 and node.role == "primary")
        await _until(lambda: 2 in ran)
        assert 1 not in ran, "the resumed, deposed primary began the attempt"
        kinds = [e.event_type for e in node.store.log.read() if e.task_id == sub.task_id]
        assert kinds[:3] == [
            EventType.TASK_SUBMITTED,
            EventType.STEP_STARTED,
            EventType.STEP_FAILED,
        ], kinds
    finally:
        await node.stop()


async def _until(cond: Any, timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.02)


def test_the_open_files_limit_is_raised_to_the_hard_limit() -> None:
    """Red-team: idle connections ran a node at the default soft limit (1024) out of
    file descriptors, and the log then failed to open a segment."""
    import resource

    from apollo11.scheduler.node import raise_open_files_limit

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        low = min(256, soft)
        resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
        sentence = raise_open_files_limit()
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if hard != resource.RLIM_INFINITY:
            assert now == hard
        assert now > low
        assert sentence == f"open files limit raised from {low} to {now}"
        assert raise_open_files_limit() == f"open files limit {now}"
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_write_to_a_node_stepping_down_is_answered_unavailable(tmp_path: Path) -> None:
    """Issue 15, item 6: during a step-down a write was refused FAILED_PRECONDITION
    without a leader to go to, which clients (ours too) do not retry: under load a
    cluster test's submit failed with "this node is shutting down or stepping down"."""
    from apollo11.scheduler.client import Client, UnavailableError

    wf = Workflow("w")

    @wf.step(idempotency=Idempotent())
    async def only(ctx: StepContext) -> None:
        pass

    registry = Registry()
    registry.register(wf)
    node = Node(
        NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0"),
        registry=registry,
    )
    await node.start()
    try:
        assert node.engine is not None
        await node.engine.stop()  # what stop() and a step-down do first: the role follows
        async with Client(f"127.0.0.1:{node.port}", retries=0) as c:
            try:
                await c.submit("w", {})
            except UnavailableError as e:
                assert "stepping down" in str(e)
            else:
                raise AssertionError("a write was accepted by a node that is stopping")
    finally:
        await node.stop()


async def test_a_cycle_while_the_store_is_reshaped_sits_out_with_a_sentence(
    tmp_path: Path,
) -> None:
    """A rejoining standby cutting its divergent tail has no store for a moment: each
    role cycle then failed on an assert in _me(), a traceback every 100 ms (seen 12
    times in one cut, bench failover)."""
    node = Node(NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0"))
    await node.start()
    store = node.store
    try:
        node.store = None  # as _reopen leaves it while the files change
        sentence = await node.roles.cycle()
        assert sentence.startswith("reshaping the store"), sentence
    finally:
        node.store = store
        await node.stop()


async def test_how_a_term_began_is_recorded_and_an_unreadable_predecessor_leads_anyway(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """`apollo11 history`'s "how": a standalone node's first term is a bootstrap, its
    next one (restarted) a restart; if the previous TERM_STARTED cannot be read (a
    damaged segment), the node still leads, and the term says it does not know."""
    from apollo11.scheduler.log import EventLog

    def settings() -> NodeSettings:
        return NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0")

    async def lead_once() -> list[tuple[str, str]]:
        node = Node(settings(), registry=Registry())
        await node.start()
        try:
            assert node.role == "primary"
            return [(t.began, t.previous) for t in node.views.history()]
        finally:
            await node.stop()

    assert await lead_once() == [("bootstrap", "")]
    assert await lead_once() == [("bootstrap", ""), ("restart", "n1")]

    def unreadable(self: EventLog, ids: Any) -> list[Any]:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(EventLog, "read_ids", unreadable)
    node = Node(settings(), registry=Registry())
    await node.start()
    try:
        assert node.role == "primary" and node.engine is not None and node.engine.leading
        monkeypatch.undo()
        assert [(t.began, t.previous) for t in node.views.history()][-1] == ("", "")
    finally:
        await node.stop()
