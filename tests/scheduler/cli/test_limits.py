"""`apollo11 limits ...`, `submit --priority` and `task`'s waiting line in process, on a
fake client: the calls the flags make, what is printed (the `--json` shapes are a
contract), usage errors (exit 2) and the node's refusals (one line, exit 1)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from typer.testing import CliRunner

from apollo11.scheduler.cli import _limits, _submit, _tasks, app
from apollo11.scheduler.client import (
    EventsPage,
    InvalidArgumentError,
    KeyLoadView,
    LimitChange,
    LimitsView,
    LimitView,
    NotFoundError,
    Submission,
    TaskView,
)

runner = CliRunner()

HOST = LimitView(
    limit_id="runbook/host",
    kind="concurrency",
    scope="workflow",
    declared="max 2",
    effective="max 4",
    overridden=True,
    on_full="queue",
    keys=(KeyLoadView("db1", 4, 14), KeyLoadView("db2", 1, 0)),
    values=3,
)
TENANT = LimitView(
    limit_id="runbook/tenant",
    kind="rate",
    scope="workflow",
    declared="10 per 1s, burst 20",
    effective="10 per 1s, burst 20",
    overridden=False,
    on_full="",
    keys=(),
    values=0,
)
VIEW = LimitsView((HOST, TENANT), {"acme": 3.0})
TASK = TaskView(
    task_id="t-1",
    workflow="runbook",
    version=1,
    state="PENDING",
    input={"host": "db1"},
    steps=(),
    submitted_ms=1,
    updated_ms=1,
    first_event_id=1,
    last_event_id=1,
    idempotency_key=None,
    cancelled=None,
    anomalies=(),
    as_of_event_id=9,
    waiting="queued: host=db1 is full (2/2), 14 ahead",
    priority=1,
)


class FakeClient:
    """What the commands call; records each call, answers from the views above."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.refuse: Exception | None = None

    async def __aenter__(self) -> FakeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        async def call(*args: Any, **kw: Any) -> Any:
            self.calls.append((name, args, kw))
            if self.refuse is not None:
                raise self.refuse
            if name == "limits":
                return VIEW
            if name == "set_limit":
                limit = None if not args[0] else HOST if args[0] == HOST.limit_id else TENANT
                return LimitChange(41, limit, {"acme": 3.0})
            if name == "submit":
                return Submission("t-1", True, 7)
            if name == "events_page":  # `task` reads the task's failed attempts
                return EventsPage([], 0)
            return TASK

        return call


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    c = FakeClient()
    for module in (_limits, _submit, _tasks):
        monkeypatch.setattr(module, "client", lambda server: c)
    return c


def _run(*args: str) -> Any:
    return runner.invoke(app, list(args))


def test_show_prints_the_limits_their_busiest_keys_and_the_weights(fake: FakeClient) -> None:
    res = _run("limits", "show")
    assert res.exit_code == 0, res.output
    assert fake.calls == [("limits", (), {"all_keys": False})]
    lines = res.stdout.splitlines()
    cells = [" ".join(line.split()) for line in lines]  # plain columns in a pipe
    assert cells[:6] == [
        "limit kind scope declared effective on full values",
        "runbook/host concurrency workflow max 2 max 4 (set) queue 3",
        "runbook/tenant rate workflow 10 per 1s, burst 20 10 per 1s, burst 20 0",
        "limit value running queued",
        "runbook/host db1 4 14",
        "runbook/host db2 1 0",
    ]
    assert lines[6] == "runbook/host: the busiest 2 of 3 values (--all: every one)"
    assert lines[7] == "weights: acme=3 (others 1)"


def test_show_json_is_every_field_and_all_asks_every_key(fake: FakeClient) -> None:
    res = _run("limits", "show", "--all", "--json")
    assert res.exit_code == 0, res.output
    assert fake.calls == [("limits", (), {"all_keys": True})]
    shown = json.loads(res.stdout)
    assert set(shown) == {"limits", "weights"} and shown["weights"] == {"acme": 3.0}
    assert shown["limits"][0] == {
        "id": "runbook/host",
        "kind": "concurrency",
        "scope": "workflow",
        "declared": "max 2",
        "effective": "max 4",
        "overridden": True,
        "on_full": "queue",
        "keys": [
            {"value": "db1", "running": 4, "queued": 14},
            {"value": "db2", "running": 1, "queued": 0},
        ],
        "values": 3,
    }


def test_show_with_no_limits_says_so(fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tests.scheduler.cli.test_limits.VIEW", LimitsView((), {}))
    res = _run("limits", "show")
    assert res.stdout == "no limits: the loaded workflows declare none (docs/flow-control.md)\n"


def test_set_sends_what_is_given(fake: FakeClient) -> None:
    res = _run("limits", "set", "runbook/host", "--max", "4", "--reason", "more db")
    assert res.exit_code == 0, res.output
    assert fake.calls == [
        (
            "set_limit",
            ("runbook/host",),
            {"max": 4, "rate": None, "burst": None, "weights": {}, "reason": "more db"},
        )
    ]
    assert res.stdout == (
        "set runbook/host: max 4 (declared max 2), event 41\nweights: acme=3 (others 1)\n"
    )
    fake.calls.clear()
    res = _run("limits", "set", "runbook/tenant", "--rate", "10/1s", "--burst", "20")
    assert res.exit_code == 0, res.output
    assert fake.calls[0][2] | {"weights": None} == {
        "max": None,
        "rate": "10/1s",
        "burst": 20,
        "weights": None,
        "reason": "",
    }
    fake.calls.clear()
    res = _run("limits", "set", "--weight", "acme=3", "--weight", "beta=0.5", "--json")
    assert res.exit_code == 0, res.output
    ((_, args, kw),) = fake.calls
    assert (args, kw["weights"]) == ((None,), {"acme": 3.0, "beta": 0.5})
    assert json.loads(res.stdout) == {"event_id": 41, "limit": None, "weights": {"acme": 3.0}}


def test_reset_sends_reset(fake: FakeClient) -> None:
    res = _run("limits", "reset", "runbook/host", "--reason", "done")
    assert res.exit_code == 0, res.output
    assert fake.calls == [("set_limit", ("runbook/host",), {"reset": True, "reason": "done"})]
    assert res.stdout.startswith("reset runbook/host: max 4")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to set: give --max, --rate (and --burst) or --weight VALUE=W"),
        (("x", "--max", "2", "--rate", "1/1s"), "give --max (a concurrency limit) or --rate"),
        (("--max", "2"), "name the limit: apollo11 limits set ID"),
        (("x", "--rate", "10"), "--rate '10' is not N/DURATION, like 10/1s"),
        (("x", "--rate", "ten/1s"), "--rate 'ten/1s' is not N/DURATION"),
        (("--weight", "acme"), "--weight 'acme' is not VALUE=W, like acme=3"),
        (("--weight", "acme=lots"), "--weight 'acme=lots' is not VALUE=W"),
    ],
)
def test_set_usage_errors_exit_2_before_asking(
    fake: FakeClient, args: tuple[str, ...], message: str
) -> None:
    res = _run("limits", "set", *args)
    assert res.exit_code == 2 and message in res.stderr, res.output
    assert fake.calls == []


def test_the_nodes_refusal_is_one_line_with_its_exit_code(fake: FakeClient) -> None:
    fake.refuse = NotFoundError("no limit 'nope' is declared by a loaded workflow (known: a/b)")
    res = _run("limits", "set", "nope", "--max", "2")
    assert (res.exit_code, res.stderr) == (
        3,  # not found
        "error: no limit 'nope' is declared by a loaded workflow (known: a/b)\n",
    )
    fake.refuse = InvalidArgumentError("max must be at least 1, got 0")
    res = _run("limits", "set", "runbook/host", "--max", "0")
    assert (res.exit_code, res.stderr) == (2, "error: max must be at least 1, got 0\n")


def test_submit_priority(fake: FakeClient) -> None:
    res = _run("submit", "runbook", "--input", '{"host": "db1"}', "--priority", "1")
    assert res.exit_code == 0, res.output
    ((name, args, kw),) = fake.calls
    assert (name, args, kw["priority"]) == ("submit", ("runbook", {"host": "db1"}), 1)
    fake.calls.clear()
    assert _run("submit", "runbook").exit_code == 0
    assert fake.calls[0][2]["priority"] is None, "none given: the node's default"
    fake.calls.clear()
    for bad in ("0", "6"):
        res = _run("submit", "runbook", "--priority", bad)
        assert res.exit_code == 2 and f"--priority must be 1 to 5 (1 first), got {bad}" in (
            res.stderr
        )
    res = _run("submit", "shell", "--input", "{}", "--priority", "2")
    assert res.exit_code == 2 and "not a shell DAG" in res.stderr
    assert fake.calls == []


def test_submit_many_checks_each_lines_priority(fake: FakeClient, tmp_path: Any) -> None:
    lines = tmp_path / "t.jsonl"
    lines.write_text(
        '{"workflow": "runbook", "priority": 2}\n{"workflow": "runbook", "priority": 9}\n'
    )
    res = _run("submit-many", str(lines))
    assert res.exit_code == 2 and "line 2: priority must be 1 to 5 (1 first), got 9" in res.stderr
    assert fake.calls == []


def test_task_says_why_it_waits_and_its_priority(fake: FakeClient) -> None:
    res = _run("task", "t-1")
    assert res.exit_code == 0, res.output
    assert "queued: host=db1 is full (2/2), 14 ahead\n" in res.stdout
    assert "priority: 1 (1 first, default 3)\n" in res.stdout
    res = _run("task", "t-1", "--json")
    shown = json.loads(res.stdout)
    assert (shown["waiting"], shown["priority"]) == (TASK.waiting, 1)


def test_task_without_a_wait_prints_no_such_line(
    fake: FakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "tests.scheduler.cli.test_limits.TASK", replace(TASK, waiting=None, priority=3)
    )
    res = _run("task", "t-1")
    assert res.exit_code == 0, res.output
    assert "queued" not in res.stdout and "waiting" not in res.stdout
    assert "priority" not in res.stdout
