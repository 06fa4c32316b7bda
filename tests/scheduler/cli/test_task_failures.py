"""`apollo11 task` shows each failed attempt's cause and the retry rule's verdict
(issue 32), read from the task's FAILED events, on a fake client."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from typer.testing import CliRunner

from apollo11.scheduler.cause import verdict_line
from apollo11.scheduler.cli import _tasks, app
from apollo11.scheduler.client import EventsPage, EventView
from tests.scheduler.cli.test_limits import TASK

TIMEOUT = {
    "type": "builtins.TimeoutError",
    "mro": ["builtins.TimeoutError", "builtins.OSError", "builtins.Exception"],
    "message": "slow",
}


def _failed(attempt: int, **payload: Any) -> EventView:
    return EventView(10 + attempt, 1, "n1", "t-1", "call", "STEP_FAILED", payload, 0, attempt)


EVENTS = [
    EventView(1, 1, "n1", "t-1", "", "TASK_SUBMITTED", {}, 0, 0),
    _failed(
        1,
        error="TimeoutError: slow",
        cause=TIMEOUT,
        rule="builtins.TimeoutError",
        final=False,
        decision={"failures": 3, "attempts": 10},
        retry_in_s=0.5,
    ),
    _failed(2, error="broke", final=False),  # written before verdicts: nothing to say
    _failed(
        3,
        error="ValueError: bad",
        cause={"type": "builtins.ValueError", "mro": ["builtins.ValueError"], "message": "bad"},
        rule="builtins.ValueError",
        final=True,
        decision={"failures": 1, "attempts": 1},
    ),
]


@pytest.mark.parametrize(
    ("payload", "line"),
    [
        (EVENTS[1].payload, "TimeoutError → retry 3/10 in 0.5 s"),
        (
            {**EVENTS[1].payload, "cause": {**TIMEOUT, "type": "httpx.ReadTimeout"}},
            "ReadTimeout (as TimeoutError) → retry 3/10 in 0.5 s",
        ),
        (
            {
                "cause": {"type": "apollo11.x.Throttled", "retry_after_s": 30},
                "rule": "default",
                "final": False,
                "decision": {"failures": 1, "attempts": 5},
                "retry_in_s": 30.0,
            },
            "Throttled → retry 1/5 in 30 s (its retry_after)",
        ),
        (EVENTS[3].payload, "ValueError → final, never retried"),
        (
            {**EVENTS[1].payload, "final": True, "decision": {"failures": 10, "attempts": 10}},
            "TimeoutError → final, 10/10 spent",
        ),
        (
            {**EVENTS[1].payload, "final": True, "decision": {"failures": 2, "attempts": 10}},
            "TimeoutError → final (it said so)",
        ),
        ({"error": "lost: w1 died", "lost": True, "final": False}, "lost (its node died) → retry"),
        ({"error": "broke", "final": True}, None),
        ({"error": "compensation failed", "compensation": True}, None),
    ],
)
def test_a_verdict_in_a_line(payload: dict[str, Any], line: str | None) -> None:
    assert verdict_line(payload) == line


class FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __aenter__(self) -> FakeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def task(self, task_id: str, **kw: Any) -> Any:
        self.calls.append(("task", kw))
        return replace(TASK, waiting=None)

    async def events_page(self, **kw: Any) -> EventsPage:
        self.calls.append(("events", kw))
        return EventsPage(EVENTS, 0)


def test_task_shows_each_failed_attempts_cause_and_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeClient()
    monkeypatch.setattr(_tasks, "client", lambda server: fake)
    res = CliRunner().invoke(app, ["task", "t-1", "--as-of", "40"])
    assert res.exit_code == 0, res.output
    assert fake.calls[1] == (
        "events",
        {"task_id": "t-1", "from_id": 0, "to_id": 40, "limit": 1000},
    )
    lines = [" ".join(line.split()) for line in res.stdout.splitlines()]
    at = lines.index("failed attempts:")
    assert lines[at + 1 :] == [
        "step attempt cause → decision",
        "call 1 TimeoutError → retry 3/10 in 0.5 s",
        "call 3 ValueError → final, never retried",
    ]
