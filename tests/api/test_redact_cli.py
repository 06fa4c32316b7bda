"""`apollo11 redact` against a real secured node process (issue 34, part 6): the
operator role may, the reader may not; the event records the authenticated principal
(the name typed with --operator beside it) and the reason; the task's input and
output read as redacted; a second redaction is refused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from tests.nodes import NodeProc, cli
from tests.secure import Pki, make_pki, start_secure_node

SECRET = "passport X1234567"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProc, Pki]]:
    root = tmp_path_factory.mktemp("redact")
    pki = make_pki(root)
    node = start_secure_node(root, pki, "--workflows", "tests.api.exportflows")
    yield node, pki
    assert node.stop() == 0


def _run(node: NodeProc, pki: Pki, role: str, *args: str, code: int = 0) -> str:
    res = cli("--ca", str(pki.dir / "ca.pem"), "--token", pki.tokens[role], *args,
              server=node.address)  # fmt: skip
    assert res.returncode == code, res.stderr
    return res.stdout + res.stderr


def _finished(node: NodeProc, pki: Pki, task_id: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while json.loads(_run(node, pki, "reader", "task", task_id, "--json"))["state"] != (
        "SUCCEEDED"
    ):
        assert time.monotonic() < deadline, f"{task_id} did not succeed"
        time.sleep(0.1)


def test_an_operator_redacts_a_finished_task(secured: tuple[NodeProc, Pki]) -> None:
    node, pki = secured
    data = json.dumps({"text": SECRET})
    task_id = _run(node, pki, "submitter", "submit", "echo", "--input", data, "-q").split()[0]
    _finished(node, pki, task_id)
    said = _run(node, pki, "reader", "redact", task_id, "--reason", "why", code=5)
    assert "RedactTask needs role operator; reader-user has role reader" in said, said

    said = _run(node, pki, "operator", "redact", task_id, "--reason", "GDPR erasure",
                "--operator", "ana")  # fmt: skip
    assert said.startswith("redact recorded as event "), said
    rid = int(said.split()[-1])
    shown = json.loads(_run(node, pki, "reader", "task", task_id, "--json"))
    assert SECRET not in json.dumps(shown)
    assert shown["steps"][0]["result"] == {"$redacted": rid}
    lines = _run(node, pki, "reader", "events", "--task", task_id, "--json").splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert SECRET not in json.dumps(events)
    (red,) = [e for e in events if e["event_type"] == "TASK_REDACTED"]
    assert red["payload"] == {"operator": "operator-user", "as": "ana", "reason": "GDPR erasure"}

    again = _run(node, pki, "operator", "redact", task_id, "--reason", "twice", code=1)
    assert f"already redacted (event {rid})" in again, again
