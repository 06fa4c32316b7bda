"""Durable tasks end to end: a real node process, SendEvent over gRPC, the real CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from apollo11.scheduler.client import AlreadyExistsError, InvalidArgumentError, SyncClient
from tests.nodes import NodeProc, cli, start_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    n = start_node(tmp_path_factory.mktemp("durable") / "data")
    yield n
    assert n.stop() == 0


def _waiting(c: SyncClient, task_id: str) -> None:
    deadline = time.monotonic() + 20
    while c.task(task_id).state != "WAITING":
        assert time.monotonic() < deadline, c.task(task_id)
        time.sleep(0.05)


def test_approval_waits_then_an_event_from_the_cli_ships_it(node: NodeProc, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    with SyncClient(node.address) as c:
        sub = c.submit("approval", {"id": "A1", "amount": 3, "ledger": str(ledger)})
        _waiting(c, sub.task_id)
        res = cli("tasks", "--state", "waiting", "--json", server=node.address)
        assert res.returncode == 0, res.stderr
        assert sub.task_id in [t["task_id"] for t in json.loads(res.stdout)]
        # what it has done and what it waits for (issue 18, operators)
        durable = c.task(sub.task_id).durable
        assert durable is not None
        assert [(k["kind"], k["name"]) for k in durable["checkpoints"]] == [("step", "charge")]
        assert durable["wait"]["kind"] == "event" and durable["wait"]["key"] == "approval:A1"
        shown = cli("task", sub.task_id, server=node.address).stdout
        assert "checkpoints: 1" in shown and "waiting for event approval:A1 from event" in shown
        assert " until " in shown, shown  # its timeout: 3 days from the wait
        res = cli(
            "event",
            "send",
            "approval:A1",
            "--payload",
            '{"by": "alice"}',
            "--idempotency-key",
            "approve-A1",
            "--json",
            server=node.address,
        )
        assert res.returncode == 0, res.stderr
        first = json.loads(res.stdout)
        assert first["created"] is True
        again = c.send_event("approval:A1", {"by": "alice"}, idempotency_key="approve-A1")
        assert not again.created and again.event_id == first["event_id"]
        # the key reused for another payload: refused, not answered with alice's event
        with pytest.raises(AlreadyExistsError, match="idempotency key 'approve-A1' already"):
            c.send_event("approval:A1", {"by": "mallory"}, idempotency_key="approve-A1")
        res = cli(
            "event",
            "send",
            "approval:A1",
            "--payload",
            '{"by": "mallory"}',
            "--idempotency-key",
            "approve-A1",
            server=node.address,
        )
        assert res.returncode == 1, res.stdout
        said = " ".join(res.stderr.split())
        names = f"error: idempotency key 'approve-A1' already names event {first['event_id']}"
        assert names in said, said
        assert "use a new key for a new request" in said, said
        done = c.wait(sub.task_id)
    assert done.state == "SUCCEEDED"
    assert done.steps[0].result["approved_by"] == {"by": "alice"}
    assert [line.split()[1] for line in ledger.read_text().splitlines()] == ["charge", "ship"]
    res = cli("events", "--task", sub.task_id, "--json", server=node.address)
    kinds = [json.loads(line)["event_type"] for line in res.stdout.splitlines()]
    assert kinds == [
        "TASK_SUBMITTED",
        "STEP_STARTED",
        "CHECKPOINT",
        "WAIT",
        "STEP_STARTED",
        "CHECKPOINT",
        "CHECKPOINT",
        "STEP_SUCCEEDED",
    ]


def test_send_event_checks_its_fields(node: NodeProc) -> None:
    with SyncClient(node.address) as c, pytest.raises(InvalidArgumentError, match="key"):
        c.send_event("")


def test_fulfil_spawns_a_child_per_item_and_refunds_when_one_fails(
    node: NodeProc, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    with SyncClient(node.address) as c:
        ok = c.submit("fulfil", {"id": "F1", "items": ["a", "b"], "ledger": str(ledger)})
        done = c.wait(ok.task_id)
        assert done.state == "SUCCEEDED"
        assert done.steps[0].result["state"] == "shipped"
        assert [p["packed"] for p in done.steps[0].result["packed"]] == ["a", "b"]
        kids = [c["child"] for c in (done.durable or {})["checkpoints"] if c["kind"] == "spawn"]
        assert len(kids) == 2
        child = c.task(kids[0])
        assert child.workflow == "pack" and child.parent is not None
        assert child.parent["task_id"] == ok.task_id and child.parent["close"] == "cancel"
        shown = cli("task", ok.task_id, server=node.address).stdout
        assert f"children: {kids[0]} (cancel), {kids[1]} (cancel)" in shown, shown
        shown = cli("task", kids[1], server=node.address).stdout
        assert f"child of task {ok.task_id} (spawned at its checkpoint 2" in shown, shown
        bad = c.submit(
            "fulfil",
            {"id": "F2", "items": ["x", "y"], "out_of_stock": ["y"], "ledger": str(ledger)},
        )
        done = c.wait(bad.task_id)
    result = done.steps[0].result
    assert result["state"] == "refunded" and "y is out of stock" in result["because"]
    booked = [line.split()[1] for line in ledger.read_text().splitlines()]
    assert booked.count("charge") == 2 and booked.count("ship") == 1
    assert booked.count("refund") == 1 and booked.count("pack") == 4
