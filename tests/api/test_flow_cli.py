"""`apollo11 limits`, `submit --priority` and `task`'s waiting line against a real node
process: the flags reach the node, its answers print as the `--json` contract says,
its refusals as one line with exit 1."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nodes import NodeProc, cli, start_node

WORKFLOWS = "apollo11.scheduler.examples,tests.api.flowflows"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProc]:
    n = start_node(tmp_path_factory.mktemp("flow") / "data", "--workflows", WORKFLOWS)
    yield n
    assert n.stop() == 0


def _submit(node: NodeProc, gate: Path, *flags: str) -> str:
    data = json.dumps({"host": "db1", "gate": str(gate)})
    res = cli("submit", "gated", "--input", data, "-q", *flags, server=node.address)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def _task(node: NodeProc, task_id: str) -> dict[str, object]:
    res = cli("task", task_id, "--json", server=node.address)
    assert res.returncode == 0, res.stderr
    shown: dict[str, object] = json.loads(res.stdout)
    return shown


def _until(check: object, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_queued_task_says_why_and_an_operator_raises_the_limit(
    node: NodeProc, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    first = _submit(node, gate)
    _until(lambda: _task(node, first)["state"] == "RUNNING", "the first runs")
    second = _submit(node, gate, "--priority", "1")
    _until(lambda: _task(node, second)["waiting"], "the second is held back")
    shown = _task(node, second)
    assert (shown["waiting"], shown["priority"]) == ("queued: host=db1 is full (1/1), 0 ahead", 1)
    res = cli("task", second, server=node.address)
    assert "queued: host=db1 is full (1/1), 0 ahead\n" in res.stdout, res.stdout
    assert "priority: 1 (1 first, default 3)\n" in res.stdout

    res = cli("limits", "show", "--json", server=node.address)
    assert res.returncode == 0, res.stderr
    listed = json.loads(res.stdout)
    assert set(listed) == {"limits", "weights"}
    limits = {v["id"]: v for v in listed["limits"]}
    assert {"gated/host", "gated/starts"} <= set(limits)  # and the examples' runbook/host
    host = limits["gated/host"]
    assert set(host) == {
        "id",
        "kind",
        "scope",
        "declared",
        "effective",
        "overridden",
        "on_full",
        "keys",
        "values",
    }
    assert (host["kind"], host["effective"], host["keys"]) == (
        "concurrency",
        "max 1",
        [{"value": "db1", "running": 1, "queued": 1}],
    )
    assert limits["gated/starts"]["effective"] == "100 per 1s, burst 10"
    res = cli("limits", "show", server=node.address)
    assert res.returncode == 0 and "gated/host" in res.stdout and "db1" in res.stdout

    res = cli("limits", "set", "gated/host", "--max", "2", "--reason", "more", server=node.address)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("set gated/host: max 2 (declared max 1), event "), res.stdout
    _until(lambda: _task(node, second)["state"] == "RUNNING", "raised: the second starts")
    assert _task(node, second)["waiting"] is None

    res = cli(
        "limits", "set", "gated/starts", "--rate", "5/1m", "--burst", "2", "--json",
        server=node.address,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["limit"]["effective"] == "5 per 1m, burst 2"
    res = cli("limits", "set", "--weight", "acme=3", server=node.address)
    assert res.returncode == 0 and "weights: acme=3 (others 1)" in res.stdout, res.stdout
    res = cli("limits", "reset", "gated/host", "--json", server=node.address)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["limit"]["effective"] == "max 1"
    gate.touch()
    for t in (first, second):
        _until(lambda t=t: _task(node, t)["state"] == "SUCCEEDED", f"{t} ends")


def test_refusals_are_one_line_naming_the_field(node: NodeProc) -> None:
    res = cli("limits", "set", "gated/host", "--max", "0", server=node.address)
    assert (res.returncode, res.stderr) == (2, "error: max must be at least 1, got 0\n")
    res = cli("limits", "set", "nope", "--max", "2", server=node.address)
    assert res.returncode == 3 and res.stderr.startswith("error: no limit 'nope'"), res.stderr
    res = cli("limits", "set", "gated/starts", "--rate", "5/1x", server=node.address)
    assert res.returncode == 2 and res.stderr.startswith("error: per '1x' is not a duration")
    res = cli("submit", "gated", "--priority", "7", server=node.address)
    assert res.returncode == 2 and "--priority must be 1 to 5" in res.stderr
