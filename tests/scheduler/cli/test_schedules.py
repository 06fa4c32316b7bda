"""`apollo11 schedule ...` in process, on a fake client: the flags it sends, what it
prints (the `--json` shapes are a contract), and its usage errors (exit 2) and the
node's refusals (one line, exit 1)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from apollo11.scheduler.cli import _schedules, app
from apollo11.scheduler.client import (
    InvalidArgumentError,
    NotFoundError,
    OccurrenceView,
    ScheduleDescription,
    SchedulePage,
    ScheduleSpecView,
    ScheduleView,
)

runner = CliRunner()

SPEC = ScheduleSpecView(
    cron="0 3 * * *",
    every=None,
    at=None,
    tz="Europe/Berlin",
    start=None,
    end=None,
    jitter="0s",
    catchup_window="1d",
    overlap="skip",
    nonexistent="next",
    ambiguous="first",
)
FIRED = OccurrenceView("2026-03-28T02:00:00Z", "fired", "", "t-1", 40)
LATE = "older than the catch-up window"
MISSED = OccurrenceView("2026-03-29T01:00:00Z", "missed", LATE, None, 41)
NIGHTLY = ScheduleView(
    schedule_id="nightly",
    workflow="etl",
    spec=SPEC,
    input={"step_seconds": 0},
    paused=False,
    note="",
    by="alice",
    source="api",
    created_ms=1,
    updated_ms=2,
    next=("2026-03-30T01:00:00Z",),
    last=MISSED,
    watermark="2026-03-29T01:00:00Z",
    occurrences=2,
)


class FakeClient:
    """What the commands call, answering from one schedule; records each call."""

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
            if name == "trigger_schedule":
                return "t-9"
            if name == "delete_schedule":
                return None
            if name == "list_schedules":
                return SchedulePage((NIGHTLY, replace(NIGHTLY, schedule_id="b", paused=True)), "")
            if name == "describe_schedule":
                return _describe(**kw)
            return NIGHTLY

        return call


def _describe(
    page_size: int, page_token: str = "", newest_first: bool = False, next_count: int = 5
) -> ScheduleDescription:
    held = [FIRED, MISSED]
    if newest_first:
        return ScheduleDescription(NIGHTLY, tuple(held[::-1][:page_size]), "")
    start = int(page_token or 0)  # one a page: the command follows the tokens
    more = str(start + 1) if start + 1 < len(held) else ""
    return ScheduleDescription(NIGHTLY, (held[start],), more)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    c = FakeClient()
    monkeypatch.setattr(_schedules, "client", lambda server: c)
    return c


def _run(*args: str) -> Any:
    return runner.invoke(app, ["schedule", *args])


def test_create_sends_the_flags_given_and_no_others(fake: FakeClient) -> None:
    res = _run(
        "create", "nightly", "--workflow", "etl", "--cron", "0 3 * * *", "--tz", "Europe/Berlin",
        "--input", '{"step_seconds": 0}', "--overlap", "buffer-one", "--note", "ops-12",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    ((name, args, kw),) = fake.calls
    assert (name, args) == ("create_schedule", ("nightly", "etl", {"step_seconds": 0}))
    assert (kw["cron"], kw["tz"], kw["overlap"], kw["note"]) == (
        "0 3 * * *",
        "Europe/Berlin",
        "buffer-one",
        "ops-12",
    )
    assert kw["every"] is None and kw["jitter"] is None, "unset: the node's default holds"
    assert res.stdout == (
        "created schedule nightly: cron 0 3 * * * (Europe/Berlin), next 2026-03-30T01:00:00Z\n"
    )


def test_create_needs_exactly_one_when(fake: FakeClient) -> None:
    res = _run("create", "x", "--workflow", "etl")
    assert res.exit_code == 2 and "give one of --cron, --every or --at" in res.stderr
    res = _run("create", "x", "--workflow", "etl", "--cron", "@daily", "--every", "1h")
    assert res.exit_code == 2 and "not --cron and --every" in res.stderr
    assert fake.calls == [], "refused before the node is asked"


def test_a_refusal_of_the_node_is_one_line_exit_2_invalid_input(fake: FakeClient) -> None:
    fake.refuse = InvalidArgumentError('cron "61 * * * *": minute 61 is outside 0-59')
    res = _run("create", "x", "--workflow", "etl", "--cron", "61 * * * *")
    assert res.exit_code == 2
    assert res.stderr == 'error: cron "61 * * * *": minute 61 is outside 0-59\n'
    fake.refuse = NotFoundError("no schedule 'x' (apollo11 schedule list)")
    res = _run("describe", "x")
    assert (res.exit_code, res.stderr) == (3, "error: no schedule 'x' (apollo11 schedule list)\n")


def test_update_sends_what_changes(fake: FakeClient) -> None:
    res = _run("update", "nightly", "--every", "1h", "--start", "", "--input", "null")
    assert res.exit_code == 0, res.output
    ((name, args, kw),) = fake.calls
    assert (name, args, kw["every"], kw["start"], kw["input"]) == (
        "update_schedule",
        ("nightly",),
        "1h",
        "",
        None,
    )
    assert kw["cron"] is None and kw["workflow"] is None and kw["note"] is None
    res = _run("update", "nightly", "--note", "x")
    assert "input" not in fake.calls[-1][2], "no --input: the input is kept"
    res = _run("update", "nightly")
    assert res.exit_code == 2 and "nothing to update" in res.stderr


def test_describe_json_holds_the_contract(fake: FakeClient) -> None:
    res = _run("describe", "nightly", "--json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert {"id", "workflow", "spec", "paused", "next", "occurrences"} <= set(shown)
    assert (shown["id"], shown["spec"]["cron"], shown["next"]) == (
        "nightly",
        "0 3 * * *",
        ["2026-03-30T01:00:00Z"],
    )
    assert shown["occurrences"] == [
        {
            "nominal_time": "2026-03-28T02:00:00Z",
            "outcome": "fired",
            "reason": "",
            "task_id": "t-1",
            "event_id": 40,
        },
        {
            "nominal_time": "2026-03-29T01:00:00Z",
            "outcome": "missed",
            "reason": LATE,
            "task_id": None,
            "event_id": 41,
        },
    ], "every one, oldest first, across pages"
    assert [kw.get("page_token") for _, _, kw in fake.calls] == ["", "1"]


def test_describe_shows_next_times_in_utc_and_the_zone(fake: FakeClient) -> None:
    res = _run("describe", "nightly")
    assert res.exit_code == 0, res.output
    assert "when        cron 0 3 * * * in Europe/Berlin" in res.stdout
    assert "2026-03-30T01:00:00Z  (2026-03-30 03:00:00 CEST)" in res.stdout
    lines = res.stdout.splitlines()
    table = lines[lines.index("occurrences: 2") + 1 :]
    assert table[1].split() == ["2026-03-28T02:00:00Z", "fired", "t-1"], "oldest first"
    assert table[2].startswith("2026-03-29T01:00:00Z  missed")
    assert fake.calls[0][2]["newest_first"] is True, "the latest ones: one call"


def test_list_shows_next_last_and_paused(fake: FakeClient) -> None:
    res = _run("list")
    assert res.exit_code == 0, res.output
    head, first, second = res.stdout.splitlines()
    assert head.split() == ["schedule", "workflow", "when", "tz", "next", "(UTC)", "last", "paused"]
    assert first.split()[:2] == ["nightly", "etl"]
    assert "2026-03-30T01:00:00Z  missed 2026-03-29T01:00:00Z" in first
    assert second.endswith("paused") and not first.endswith("paused")
    listed = json.loads(_run("list", "--json").stdout)
    assert [s["id"] for s in listed] == ["nightly", "b"]
    assert listed[0]["last"]["outcome"] == "missed" and listed[1]["paused"] is True


def test_pause_trigger_delete(fake: FakeClient) -> None:
    assert _run("pause", "nightly", "--note", "maintenance").exit_code == 0
    assert fake.calls[-1] == ("pause_schedule", ("nightly",), {"note": "maintenance"})
    assert _run("unpause", "nightly").exit_code == 0
    assert fake.calls[-1] == ("unpause_schedule", ("nightly",), {"note": ""})
    res = _run("trigger", "nightly", "--json")
    assert json.loads(res.stdout) == {"id": "nightly", "task_id": "t-9"}
    assert _run("trigger", "nightly").stdout == "triggered nightly: task t-9\n"
    res = _run("delete", "nightly", "--json")
    assert json.loads(res.stdout) == {"id": "nightly", "deleted": True}


def test_next_is_computed_here_in_utc_and_the_zone(fake: FakeClient) -> None:
    res = _run("next", "nightly", "--count", "3", "--json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)
    assert shown["id"] == "nightly" and shown["tz"] == "Europe/Berlin"
    times = [datetime.fromisoformat(t["utc"]) for t in shown["next"]]
    assert len(times) == 3 and times == sorted(times)
    assert all(t.astimezone(UTC) > datetime.now(UTC) for t in times)
    assert all(t["local"][11:19] == "03:00:00" for t in shown["next"]), "03:00 in Berlin"
    assert times[1] - times[0] in (timedelta(hours=23), timedelta(days=1), timedelta(hours=25))
    res = _run("next", "nightly", "--count", "0")
    assert res.exit_code == 2 and "--count must be at least 1" in res.stderr


class LongHistory(FakeClient):
    """A schedule with 2,500 occurrences, paged as the node pages them (1,000 at most)."""

    HELD = tuple(
        OccurrenceView(f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z", "fired", "", f"t-{i}", i)
        for i in range(2500)
    )

    def __getattr__(self, name: str) -> Any:
        async def describe_schedule(
            schedule_id: str,
            *,
            page_size: int,
            page_token: str = "",
            newest_first: bool = False,
            next_count: int = 5,
        ) -> ScheduleDescription:
            assert page_size <= _schedules.LIST_PAGE, "over the node's limit: refused"
            self.calls.append((name, (schedule_id,), {"page_token": page_token}))
            n = len(self.HELD)
            schedule = replace(NIGHTLY, occurrences=n)
            if newest_first:
                end = int(page_token or n)
                start = max(0, end - page_size)
                more = str(start) if start else ""
                return ScheduleDescription(schedule, self.HELD[start:end][::-1], more)
            start = int(page_token or 0)
            end = min(n, start + page_size)
            more = str(end) if end < n else ""
            return ScheduleDescription(schedule, self.HELD[start:end], more)

        assert name == "describe_schedule", name
        return describe_schedule


def test_describe_limit_past_one_page_goes_on_to_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = LongHistory()
    monkeypatch.setattr(_schedules, "client", lambda server: c)
    res = _run("describe", "nightly", "--limit", "1500", "--json")
    assert res.exit_code == 0, res.output
    shown = json.loads(res.stdout)["occurrences"]
    assert [o["event_id"] for o in shown] == list(range(1000, 2500)), "the last 1,500, oldest first"
    res = _run("describe", "nightly", "--limit", "2000")
    assert res.exit_code == 0, res.output
    assert "occurrences: the last 2000 of 2500" in res.stdout
    res = _run("describe", "nightly", "--json")
    assert len(json.loads(res.stdout)["occurrences"]) == 2500, "--json alone: every one"


def test_the_bounds_help_says_they_need_an_offset() -> None:
    # the node refuses a bound without one (start "2027-01-01T00:00": needs a UTC
    # offset): the help says so before a newcomer meets the refusal
    for verb in ("create", "update"):
        res = runner.invoke(app, ["schedule", verb, "--help"], env={"COLUMNS": "200"})
        lines = [line for line in res.stdout.splitlines() if "--start" in line or "--end" in line]
        assert len(lines) == 2 and all("offset" in line for line in lines), lines
