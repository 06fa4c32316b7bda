"""What `apollo11 task`, `events` and `status` show of durable mains, cancels, lost
attempts and dead members (issue 33, part 4e): a task folded from its events, sent
through the API's codec and the client's conversion, printed as in a pipe."""

from __future__ import annotations

from typing import Any

import pytest

from apollo11.lease import MemberInfo
from apollo11.scheduler.api import codec
from apollo11.scheduler.cli import _show
from apollo11.scheduler.client import EventView
from apollo11.scheduler.client._convert import task_from_pb
from apollo11.scheduler.nodeview import MemberStatus, members
from tests.scheduler.engine.histories import E, History

CHECKPOINT = {"seq": 0, "kind": "step", "name": "charge", "input_hash": "h", "output": 1}
WAIT = {"seq": 1, "kind": "event", "name": "approval:A1", "input_hash": "h2",
        "key": "approval:A1", "since": 2, "until_ms": 1_800_000_000_000}  # fmt: skip


def _durable() -> History:
    return (
        History({"main": []}, workflow="approval")
        .add(E.STEP_STARTED, "main", 1)
        .add(E.CHECKPOINT, "main", 1, CHECKPOINT)
        .add(E.WAIT, "main", 1, WAIT)
    )


def _shown(h: History, capsys: pytest.CaptureFixture[str]) -> list[list[str]]:
    capsys.readouterr()
    _show.show_task_view(task_from_pb(codec.task_to_pb(h.task, 0)))
    return [line.split() for line in capsys.readouterr().out.splitlines()]


def _row(lines: list[list[str]], step: str) -> list[str]:
    return next(cells for cells in lines if cells and cells[0] == step)


def test_a_durable_mains_wake_up_is_not_shown_as_a_retry(
    capsys: pytest.CaptureFixture[str],
) -> None:
    h = _durable().add(E.STEP_STARTED, "main", 2)
    row = _row(_shown(h, capsys), "main")
    assert row[1] == "STARTED"
    assert row[2:4] == ["run", "2"], row  # not "attempt 2": it woke, nothing failed


def test_a_cancelled_main_is_not_shown_waiting(capsys: pytest.CaptureFixture[str]) -> None:
    h = _durable().add(E.TASK_CANCELLED, payload={"operator": "ana", "reason": "no"})
    lines = _shown(h, capsys)
    assert _row(lines, "main")[1] == "CANCELLED"
    said = [" ".join(cells) for cells in lines]
    assert not any(s.startswith("waiting for") for s in said), said
    assert any(s.startswith("was waiting for event approval:A1") for s in said), said


def test_a_lost_attempt_says_lost_while_the_step_runs_again(
    capsys: pytest.CaptureFixture[str],
) -> None:
    h = (
        History({"a": []})
        .add(E.STEP_STARTED, "a", 1)
        .add(E.STEP_FAILED, "a", 1, {"error": "lost: its node died", "lost": True})
        .add(E.STEP_STARTED, "a", 2)
    )
    row = " ".join(_row(_shown(h, capsys), "a"))
    assert "STARTED" in row and "lost" in row, row


def _event(event_id: int, kind: str, attempt: int) -> EventView:
    return EventView(event_id, 1, "n1", "t", "main", kind, {}, 0, attempt)


def test_events_show_a_wake_up_as_one(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _show.EventLines()
    for ev in (_event(2, "STEP_STARTED", 1), _event(3, "WAIT", 1), _event(4, "STEP_STARTED", 2)):
        lines.show(ev)
    said = capsys.readouterr().out.splitlines()
    assert "(attempt 1)" in said[0]
    assert "attempt 2" not in said[2] and "(woken: run 2)" in said[2], said


def _me() -> MemberStatus:
    return MemberStatus("n1", "primary", "10.0.0.1:7411", 100, 3, connected=True)


def test_a_dead_member_stays_in_status_as_down() -> None:
    live = [MemberInfo("n2", "standby", "10.0.0.2:7411", 100, 3)]
    shown: Any = members(_me(), live, roster={"n1", "n2", "n3"}, head=100, durable=100)
    assert [(m.node_id, m.role, m.connected) for m in shown] == [
        ("n1", "primary", True),
        ("n2", "standby", False),
        ("n3", "down", False),
    ]
