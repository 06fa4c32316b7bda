"""`apollo11 tasks --state paused` and `apollo11 retry TASK` without a step against a
real secured node process (issue 32 part 2): a task whose step's retries ran out under
on_exhausted="pause" is listed as PAUSED, and the operator's retry resumes it, recorded
with the authenticated principal (the name typed with --operator beside it, never in
its place)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nodes import NodeProc, cli
from tests.secure import Pki, make_pki, start_secure_node

WORKFLOWS = "apollo11.scheduler.examples,tests.api.pauseflows"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProc, Pki]]:
    root = tmp_path_factory.mktemp("pause")
    pki = make_pki(root)
    node = start_secure_node(root, pki, "--workflows", WORKFLOWS)
    yield node, pki
    assert node.stop() == 0


def _as(pki: Pki, role: str) -> list[str]:
    return ["--ca", str(pki.dir / "ca.pem"), "--token", pki.tokens[role]]


def _run(node: NodeProc, pki: Pki, role: str, *args: str) -> str:
    res = cli(*_as(pki, role), *args, server=node.address)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _state(node: NodeProc, pki: Pki, task_id: str) -> str:
    return str(json.loads(_run(node, pki, "reader", "task", task_id, "--json"))["state"])


def _until(node: NodeProc, pki: Pki, task_id: str, state: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while (now := _state(node, pki, task_id)) != state:
        assert time.monotonic() < deadline, f"{task_id} is {now}, not {state}"
        time.sleep(0.1)


def test_a_paused_task_is_listed_and_a_retry_without_a_step_resumes_it(
    secured: tuple[NodeProc, Pki], tmp_path: Path
) -> None:
    node, pki = secured
    fixed = tmp_path / "fixed"
    data = json.dumps({"fixed": str(fixed)})
    task_id = _run(node, pki, "submitter", "submit", "flaky_export", "--input", data, "-q").strip()
    other = _run(node, pki, "submitter", "submit", "flaky_export", "--input", data, "-q").strip()
    _until(node, pki, task_id, "PAUSED")
    _until(node, pki, other, "PAUSED")

    listed = json.loads(_run(node, pki, "reader", "tasks", "--state", "paused", "--json"))
    assert {t["task_id"] for t in listed} >= {task_id, other}
    assert {t["state"] for t in listed} == {"PAUSED"}
    shown = _run(node, pki, "reader", "tasks", "--state", "PAUSED")
    assert task_id in shown and "PAUSED" in shown, shown
    assert task_id not in _run(node, pki, "reader", "tasks", "--state", "running", "--json")
    told = _run(node, pki, "reader", "task", task_id)
    assert f"apollo11 retry {task_id} --reason WHY" in told, told

    fixed.touch()  # the warehouse is back: the operator resumes one of the two
    said = _run(
        node, pki, "operator", "retry", task_id, "--reason", "warehouse back", "--operator", "ana"
    )
    assert said.startswith("retry recorded as event "), said
    _until(node, pki, task_id, "SUCCEEDED")
    assert _state(node, pki, other) == "PAUSED"  # only the one named
    listed = json.loads(_run(node, pki, "reader", "tasks", "--state", "paused", "--json"))
    assert task_id not in {t["task_id"] for t in listed}

    lines = _run(node, pki, "reader", "events", "--task", task_id, "--json").splitlines()
    events = [json.loads(line) for line in lines]
    kinds = [e["event_type"] for e in events]
    assert kinds.count("TASK_PAUSED") == 1
    (override,) = [e for e in events if e["event_type"] == "MANUAL_OVERRIDE"]
    assert override["step_name"] == "export"
    assert override["payload"] == {
        "action": "retry",
        "operator": "operator-user",  # the token's principal
        "as": "ana",
        "reason": "warehouse back",
    }
    assert kinds.index("TASK_PAUSED") < kinds.index("MANUAL_OVERRIDE")
    assert kinds[-1] == "STEP_SUCCEEDED"


def test_retry_without_a_step_of_a_task_that_is_not_paused_is_refused(
    secured: tuple[NodeProc, Pki], tmp_path: Path
) -> None:
    node, pki = secured
    (tmp_path / "fixed").touch()
    data = json.dumps({"fixed": str(tmp_path / "fixed")})
    task_id = _run(node, pki, "submitter", "submit", "flaky_export", "--input", data, "-q").strip()
    _until(node, pki, task_id, "SUCCEEDED")
    res = cli(*_as(pki, "operator"), "retry", task_id, "--reason", "why not", server=node.address)
    assert res.returncode == 1, res.stdout
    assert "no step of it failed for good" in res.stderr, res.stderr
    # a reader may list paused tasks but not resume one
    res = cli(*_as(pki, "reader"), "retry", task_id, "--reason", "r", server=node.address)
    assert "RetryStep needs role operator; reader-user has role reader" in res.stderr
