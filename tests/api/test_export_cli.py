"""`apollo11 export` against a real secured node process (issue 34, part 5): the
reader role is enough; two exports of the same tasks are the same file; an export
cut in the middle of a line resumes after its last complete line, with no duplicate;
a large value goes by reference; bad flags are refused naming the flag."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nodes import NodeProc, cli
from tests.secure import Pki, make_pki, start_secure_node

WORKFLOWS = "tests.api.exportflows"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NodeProc, Pki]]:
    root = tmp_path_factory.mktemp("export")
    pki = make_pki(root)
    node = start_secure_node(root, pki, "--workflows", WORKFLOWS)
    yield node, pki
    assert node.stop() == 0


def _run(node: NodeProc, pki: Pki, role: str, *args: str, code: int = 0) -> tuple[str, str]:
    res = cli("--ca", str(pki.dir / "ca.pem"), "--token", pki.tokens[role], *args,
              server=node.address)  # fmt: skip
    assert res.returncode == code, res.stderr
    return res.stdout, res.stderr


def _finished(node: NodeProc, pki: Pki, task_ids: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    for task_id in task_ids:
        while json.loads(_run(node, pki, "reader", "task", task_id, "--json")[0])["state"] != (
            "SUCCEEDED"
        ):
            assert time.monotonic() < deadline, f"{task_id} did not succeed"
            time.sleep(0.1)


@pytest.fixture(scope="module")
def tasks(secured: tuple[NodeProc, Pki]) -> list[str]:
    node, pki = secured
    ids = []
    for i in range(7):
        text = "x" * 3000 if i == 3 else f"hello {i}"
        data = json.dumps({"text": text})
        ids.append(_run(node, pki, "submitter", "submit", "echo", "--input", data, "-q")[0].strip())
    _finished(node, pki, ids)
    return ids


def test_two_exports_are_the_same_file_in_submission_order(
    secured: tuple[NodeProc, Pki], tasks: list[str], tmp_path: Path
) -> None:
    node, pki = secured
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    _run(node, pki, "reader", "export", "--workflow", "echo", "--output", str(one),
         "--inline-max-bytes", "1000")  # fmt: skip
    _run(node, pki, "reader", "export", "--workflow", "echo", "--output", str(two),
         "--inline-max-bytes", "1000")  # fmt: skip
    assert one.read_bytes() == two.read_bytes()
    lines = [json.loads(line) for line in one.read_text().splitlines()]
    assert [t["task_id"] for t in lines] == tasks
    first = lines[0]
    assert first["state"] == "SUCCEEDED" and first["input"] == {"text": "hello 0"}
    kinds = [e["event_type"] for e in first["events"]]
    assert kinds == ["TASK_SUBMITTED", "STEP_STARTED", "STEP_SUCCEEDED"]
    big = lines[3]
    ref = big["steps"][0]["result"]
    assert ref["$ref"].startswith("sha256-") and ref["bytes"] == 3002
    assert json.loads((tmp_path / "one.jsonl.refs" / ref["$ref"]).read_text()) == "x" * 3000
    stdout, _ = _run(node, pki, "reader", "export", "--workflow", "echo",
                     "--inline-max-bytes", "1000", "--refs-dir", str(tmp_path / "r"))  # fmt: skip
    assert stdout.encode() == one.read_bytes()


def test_an_interrupted_export_resumes_after_its_last_complete_line(
    secured: tuple[NodeProc, Pki], tasks: list[str], tmp_path: Path
) -> None:
    node, pki = secured
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    _run(node, pki, "reader", "export", "--output", str(whole))
    data = whole.read_bytes()
    second = data.index(b"\n") + 1
    cut.write_bytes(data[: data.index(b"\n", second) + 40])  # two lines and part of a third
    _, said = _run(node, pki, "reader", "export", "--output", str(cut))
    assert cut.read_bytes() == data
    assert "(2 already in the file)" in said, said
    _, said = _run(node, pki, "reader", "export", "--output", str(cut))
    assert cut.read_bytes() == data, "a finished export adds nothing"
    assert f"exported 0 tasks ({len(tasks)} already in the file)" in said, said


def test_the_window_and_state_filters(
    secured: tuple[NodeProc, Pki], tasks: list[str], tmp_path: Path
) -> None:
    node, pki = secured
    out, _ = _run(node, pki, "reader", "export", "--state", "failed")
    assert out == ""
    out, _ = _run(node, pki, "reader", "export", "--since", "2000-01-01T00:00:00Z",
                  "--until", "2000-01-02")  # fmt: skip
    assert out == ""
    out, _ = _run(node, pki, "reader", "export", "--state", "succeeded", "--since", "2000-01-01")
    assert len(out.splitlines()) == len(tasks)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--since", "yesterday"), "--since 'yesterday' is not a time"),
        (("--state", "sleepy"), "--state SLEEPY is not a task state"),
        (("--format", "csv"), "--format csv is not supported"),
        (("--since", "2026-01-02", "--until", "2026-01-01"), "--until 2026-01-01 is not after"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(
    secured: tuple[NodeProc, Pki], args: tuple[str, ...], said: str
) -> None:
    node, pki = secured
    _, err = _run(node, pki, "reader", "export", *args, code=2)
    assert said in err, err
