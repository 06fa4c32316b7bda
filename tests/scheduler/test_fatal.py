"""A node that dies of a fatal error says so: the stacks of its threads in its log
(one primary died without a line in a kill loop)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.nodes import start_node


def test_a_fatal_signal_leaves_the_stacks_in_the_log(tmp_path: Path) -> None:
    node = start_node(tmp_path / "d")
    node.proc.send_signal(signal.SIGSEGV)
    node.proc.wait(20)
    assert node.proc.stdout is not None
    text = "".join(node.lines) + node.proc.stdout.read()
    assert "Fatal Python error: Segmentation fault" in text, text[-2000:]
    assert "Current thread" in text or "Thread 0x" in text
