"""A node that dies of a fatal error says so: the stacks of its threads in its log
(one primary died without a line in a kill loop)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from apollo11.scheduler.cli import app
from apollo11.scheduler.loop_errors import thread_died
from tests.nodes import start_node


def test_a_fatal_signal_leaves_the_stacks_in_the_log(tmp_path: Path) -> None:
    node = start_node(tmp_path / "d")
    node.proc.send_signal(signal.SIGSEGV)
    node.proc.wait(20)
    assert node.proc.stdout is not None
    text = "".join(node.lines) + node.proc.stdout.read()
    assert "Fatal Python error: Segmentation fault" in text, text[-2000:]
    assert "Current thread" in text or "Thread 0x" in text


@pytest.mark.parametrize("escape", [asyncio.CancelledError, RuntimeError])
def test_whatever_ends_the_node_is_logged_as_critical(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    escape: type[BaseException],
) -> None:
    """A CancelledError is no Exception: out of the node's main task it ended the
    process with a bare traceback and no line saying the node stopped."""

    async def serve(settings: object) -> int:
        raise escape("from inside the node")

    monkeypatch.setattr("apollo11.scheduler.node.serve", serve)
    res = CliRunner().invoke(app, ["node", "--data-dir", str(tmp_path / "d")])
    assert res.exit_code == 70, res.output
    assert "the node stopped on an error" in caplog.text
    assert "from inside the node" in caplog.text


def test_a_thread_that_dies_says_so_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    def work() -> None:
        raise OSError("disk gone")

    old = threading.excepthook
    threading.excepthook = thread_died
    try:
        t = threading.Thread(target=work, name="snapshot-writer")
        t.start()
        t.join()
    finally:
        threading.excepthook = old
    assert "thread snapshot-writer ended on an error" in caplog.text
    assert "OSError: disk gone" in caplog.text


def test_signals_sent_on_the_ready_line_are_handled(tmp_path: Path) -> None:
    """The ready line came before the SIGHUP and SIGTERM handlers: a SIGHUP sent on
    seeing it could find the default action and kill the node by signal 1, silently
    (a token-reload test, under load)."""
    node = start_node(tmp_path / "d")
    node.proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert node.alive()
    assert node.stop() == 0
