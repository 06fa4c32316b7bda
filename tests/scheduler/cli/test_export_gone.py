"""`apollo11 export` over a fake client: a task retention purged between the listing
and its line is skipped and counted, a line carries no live hold, and a line whose
oldest events the node no longer holds says so."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from apollo11.scheduler.cli import _export, app
from apollo11.scheduler.client import EventsPage, TaskRead, TaskSummaryView, TaskView
from apollo11.scheduler.errors import NotFoundError


def _task(task_id: str, ms: int) -> TaskView:
    return TaskView(
        task_id, "echo", 1, "SUCCEEDED", {"text": "x"}, (), ms, ms, 1, 1, None, None, (), 9,
    )  # fmt: skip


class _Client:
    """Lists t1..t3; t2 was purged by retention before its line was read."""

    def __init__(self, held: dict[str, Any] | None = None, gone: str = "") -> None:
        self.held = held
        self.gone = gone  # this task's oldest events: no longer on the node's disk

    async def __aenter__(self) -> _Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def tasks(self, **kw: Any) -> Any:
        rows = [TaskSummaryView(f"t{i}", "echo", "SUCCEEDED", i, i, 1, 1) for i in (1, 2, 3)]
        return SimpleNamespace(tasks=rows, next_page_token="")

    async def task(self, task_id: str) -> TaskView:
        if task_id == "t2":
            raise NotFoundError("task 't2' was purged by retention (event 40)")
        return dataclasses.replace(_task(task_id, int(task_id[1:])), held=self.held)

    async def events_page(self, **kw: Any) -> EventsPage:
        return EventsPage([], 0, 0, 7 if kw["task_id"] == self.gone else 0)

    async def tasks_with_events(self, task_ids: list[str]) -> list[TaskRead]:
        """What GetTasks answers: the same, a window at a time."""
        reads = []
        for task_id in task_ids:
            try:
                task: TaskView | None = await self.task(task_id)
            except NotFoundError:
                task = None
            page = await self.events_page(task_id=task_id)
            reads.append(TaskRead(task_id, task, page))
        return reads


def _run(
    monkeypatch: pytest.MonkeyPatch, out: Path, held: dict[str, Any] | None = None, gone: str = ""
) -> Any:
    monkeypatch.setattr(_export, "client", lambda server: _Client(held, gone))
    return CliRunner().invoke(app, ["export", "--output", str(out)])


def test_a_task_purged_before_its_line_is_skipped_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "x.jsonl"
    res = _run(monkeypatch, out)
    assert res.exit_code == 0, res.output
    ids = [orjson.loads(line)["task_id"] for line in out.read_bytes().splitlines()]
    assert ids == ["t1", "t3"]
    assert "exported 2 tasks" in res.stderr
    assert "not exported: 1 listed task(s) gone when read" in res.stderr


def test_a_line_carries_no_live_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, held = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _run(monkeypatch, plain)
    hold = {"by": "ann", "reason": "audit", "at_ms": 5, "event_id": 12}
    _run(monkeypatch, held, hold)
    assert plain.read_bytes() == held.read_bytes()
    assert b'"held"' not in plain.read_bytes()


def test_a_line_without_its_oldest_events_says_so_and_is_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "x.jsonl"
    res = _run(monkeypatch, out, gone="t3")
    assert res.exit_code == 0, res.output
    lines = {(d := orjson.loads(line))["task_id"]: d for line in out.read_bytes().splitlines()}
    assert "events_from" not in lines["t1"]
    assert lines["t3"]["events_from"] == 7
    assert lines["t3"]["incomplete"] == (
        "events before 7 are no longer on this node's disk and no --archive-url is set"
    )
    assert "incomplete: 1 exported task(s) lack their oldest events" in res.stderr
