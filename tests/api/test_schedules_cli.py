"""`apollo11 schedule` against a real node process: the flags reach the node, its
answers print as the `--json` contract says, its refusals as one line with exit 1."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.nodes import NodeProc, cli, start_node


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    n = start_node(tmp_path_factory.mktemp("schedules") / "data")
    yield n
    assert n.stop() == 0


def test_create_describe_next_list_delete(node: NodeProc) -> None:
    res = cli(
        "schedule", "create", "nightly", "--workflow", "etl", "--cron", "0 3 * * *",
        "--tz", "Europe/Berlin", "--input", '{"step_seconds": 0}', "--catchup-window", "6h",
        "--json", server=node.address,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    made = json.loads(res.stdout)
    assert (made["id"], made["spec"]["cron"], made["spec"]["catchup_window"]) == (
        "nightly",
        "0 3 * * *",
        "6h",
    )
    res = cli("schedule", "describe", "nightly", "--json", server=node.address)
    shown = json.loads(res.stdout)
    assert {"id", "workflow", "spec", "paused", "next", "occurrences"} <= set(shown)
    assert shown["occurrences"] == [] and len(shown["next"]) == 5
    first = datetime.fromisoformat(shown["next"][0])
    assert first > datetime.now(UTC) and first.astimezone(UTC).minute == 0
    res = cli("schedule", "next", "nightly", "--count", "3", "--json", server=node.address)
    times = json.loads(res.stdout)["next"]
    assert [t["utc"] for t in times] == shown["next"][:3], "computed here, as the node does"
    assert all(t["local"][11:16] == "03:00" for t in times)
    res = cli("schedule", "list", server=node.address)
    assert res.returncode == 0 and "nightly" in res.stdout and "cron 0 3 * * *" in res.stdout
    res = cli("schedule", "delete", "nightly", server=node.address)
    assert res.returncode == 0 and res.stdout == "deleted schedule nightly\n"
    res = cli("schedule", "describe", "nightly", server=node.address)
    assert (res.returncode, res.stderr) == (
        3,
        "error: no schedule 'nightly' (apollo11 schedule list)\n",
    )


def test_a_bad_spec_is_one_line_naming_the_field(node: NodeProc) -> None:
    res = cli(
        "schedule", "create", "x", "--workflow", "etl", "--cron", "61 * * * *",
        server=node.address,
    )  # fmt: skip
    assert res.returncode == 2  # invalid input
    assert res.stderr == 'error: cron "61 * * * *": minute 61 is outside 0-59\n'
    res = cli("schedule", "create", "x", "--workflow", "nope", "--every", "1h", server=node.address)
    assert res.returncode == 3 and "unknown workflow 'nope'" in res.stderr  # not found


def test_a_backfill_from_the_cli_and_its_tasks_by_schedule(node: NodeProc) -> None:
    res = cli(
        "schedule", "create", "bf", "--workflow", "etl", "--cron", "0 3 * * *",
        "--input", '{"step_seconds": 0}', "--end", "2026-01-05T00:00Z", server=node.address,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    res = cli(
        "schedule", "backfill", "bf", "--from", "2026-01-01T00:00Z", "--to", "2026-01-04T12:00Z",
        server=node.address,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "4 nominal times from 2026-01-01T00:00Z to 2026-01-04T12:00Z" in res.stdout
    deadline = time.monotonic() + 60
    listed: list[dict[str, object]] = []
    while time.monotonic() < deadline and len(listed) < 4:
        res = cli("tasks", "--schedule", "bf", "--json", server=node.address)
        assert res.returncode == 0, res.stderr
        listed = json.loads(res.stdout)
        time.sleep(0.2)
    assert len(listed) == 4, listed
    # the four fired in one batch: ids from the same millisecond say nothing of order
    fields = []
    for row in listed:
        res = cli("task", str(row["task_id"]), "--json", server=node.address)
        fields.append(json.loads(res.stdout)["schedule"])
    assert sorted(fields, key=lambda f: f["nominal_time"]) == [
        {"id": "bf", "nominal_time": f"2026-01-0{day}T03:00:00Z", "triggered": False}
        for day in (1, 2, 3, 4)
    ]
    res = cli("task", str(listed[0]["task_id"]), server=node.address)
    shown = f"schedule bf: fired for {fields[0]['nominal_time']}"
    assert shown in res.stdout, res.stdout
    res = cli(
        "schedule", "backfill", "bf", "--from", "2026-01-01", "--to", "2026-01-02T00:00Z",
        server=node.address,
    )  # fmt: skip
    assert (res.returncode, res.stderr) == (
        2,
        'error: from_time "2026-01-01": needs a UTC offset (like Z or +02:00)\n',
    )
    res = cli("tasks", "--schedule", "nope", server=node.address)
    assert res.returncode == 3 and "no schedule 'nope'" in res.stderr
