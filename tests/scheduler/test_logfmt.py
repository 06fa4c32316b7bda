"""Logs as JSON (scheduler/logfmt.py): one object a line, and the lines of a running
attempt carry its task id, step, attempt and term."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from apollo11.scheduler import logfmt
from apollo11.scheduler.client import SyncClient
from tests.nodes import start_node


def _record(msg: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            import sys

            info = sys.exc_info()
    return logging.LogRecord("apollo11.x", logging.WARNING, __file__, 1, msg, ("a",), info)


def test_a_line_is_one_json_object_with_the_attempt_when_one_runs() -> None:
    f = logfmt.JsonFormatter()
    plain = json.loads(f.format(_record("hello %s")))
    assert plain["message"] == "hello a" and plain["level"] == "WARNING"
    assert plain["logger"] == "apollo11.x" and plain["ts"].endswith("Z")
    assert "task_id" not in plain

    def in_the_attempts_task() -> dict[str, Any]:
        logfmt.tag_task("t1", "charge", 2, 7)
        return dict(json.loads(f.format(_record("x %s", exc=True))))

    inside = contextvars.copy_context().run(in_the_attempts_task)  # as a task runs
    assert (inside["task_id"], inside["step"], inside["attempt"], inside["term"]) == (
        "t1",
        "charge",
        2,
        7,
    )
    assert "ValueError: boom" in inside["exc"]
    assert "task_id" not in json.loads(f.format(_record("after %s"))), "not outside its task"


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="must be one of text, json"):
        logfmt.configure("xml")


def test_a_node_logging_json_tags_its_steps_lines(tmp_path: Path) -> None:
    node = start_node(
        tmp_path / "data",
        "--workflows",
        "tests.scheduler.logflows",
        env={"APOLLO11_LOG_FORMAT": "json"},
    )
    try:
        with SyncClient(node.address) as c:
            sub = c.submit("chatty", "order-9")
            assert c.wait(sub.task_id).state == "SUCCEEDED"
    finally:
        assert node.stop() == 0
    assert node.proc.stdout is not None
    text = "".join(node.lines) + node.proc.stdout.read()
    logged = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert logged, text
    by_step = {r.get("step"): r for r in logged if "working on order-9" in r["message"]}
    for step in ("in_a_thread", "on_the_loop"):
        r = by_step[step]
        assert r["task_id"] == sub.task_id and r["attempt"] == 1 and r["term"] >= 1, r
    # the node's own lines are JSON too (its start-up, its stop)
    assert any(r["logger"].startswith("apollo11.") for r in logged)
    assert not [line for line in text.splitlines() if " INFO apollo11." in line], "no text lines"


def test_a_worker_logging_json_tags_its_steps_lines(tmp_path: Path) -> None:
    """A worker's attempt tags its task (no context manager around it): its step's
    lines carry the attempt, its own lines after the attempt do not."""
    import subprocess

    from tests.nodes import APOLLO11, ROOT

    node = start_node(
        tmp_path / "data",
        "--workflows",
        "tests.scheduler.logflows",
        "--execution",
        "remote",
    )
    worker = subprocess.Popen(
        [*APOLLO11, "worker", "--server", node.address, "--workflows", "tests.scheduler.logflows"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "APOLLO11_LOG_FORMAT": "json"},
    )
    try:
        with SyncClient(node.address) as c:
            sub = c.submit("chatty", "order-7")
            assert c.wait(sub.task_id, timeout=60).state == "SUCCEEDED"
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
        assert node.stop() == 0
    logged = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    by_step = {r.get("step"): r for r in logged if "working on order-7" in r["message"]}
    for step in ("in_a_thread", "on_the_loop"):
        r = by_step[step]
        assert r["task_id"] == sub.task_id and r["attempt"] == 1 and r["term"] >= 1, r
    untagged = [r for r in logged if "connected to the primary" in r["message"]]
    assert untagged and "task_id" not in untagged[0], untagged
