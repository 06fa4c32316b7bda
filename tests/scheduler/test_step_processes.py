"""A Python step's own subprocesses and the node process (issue 15, 4a).

The node process is a child subreaper: an orphan a step leaves stays in its tree
and is killed when the node stops. A subprocess started under `ctx.guarded` dies
with its node even by SIGKILL."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

from apollo11.scheduler.client import SyncClient
from tests.nodes import start_node

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _alive(pid: int) -> bool:
    s = _stat(pid)
    return s is not None and s[0] != b"Z"


def _pid_from(path: Path, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError("the step never started its process")


def _gone(pid: int, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not _alive(pid)


def test_an_orphan_of_a_python_step_stays_with_the_node_and_ends_with_it(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pid"
    node = start_node(
        tmp_path / "d",
        "--workflows",
        "tests.scheduler.spawning",
        env={"APOLLO11_DRAIN_TIMEOUT": "0"},  # the step sleeps: do not wait for it
    )
    try:
        with SyncClient(node.address) as c:
            c.submit("spawn", {"pidfile": str(pidfile)})
        orphan = _pid_from(pidfile)
        time.sleep(0.2)
        stat = _stat(orphan)
        assert stat is not None and int(stat[1]) == node.proc.pid, "adopted by the node"
        assert node.stop() == 0
        assert _gone(orphan), "the orphan outlived its node's stop"
    finally:
        node.stop(signal.SIGKILL)


def test_a_guarded_subprocess_of_a_python_step_dies_with_a_sigkilled_node(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "pid"
    node = start_node(tmp_path / "d", "--workflows", "tests.scheduler.spawning")
    try:
        with SyncClient(node.address) as c:
            c.submit("spawn", {"pidfile": str(pidfile), "guarded": True})
        child = _pid_from(pidfile)
        assert _alive(child)
        node.stop(signal.SIGKILL)
        assert _gone(child), "the guarded subprocess outlived its SIGKILLed node"
    finally:
        node.stop(signal.SIGKILL)


def test_a_node_stopping_leaves_its_own_helper_processes_alone(tmp_path: Path) -> None:
    """The stop's sweep of leftover step processes also killed the resource tracker
    that the merge processes' spawn started: every stop logged "killed 1 process(es)
    the steps left behind" (none had) and the tracker's KeyError tracebacks."""
    node = start_node(tmp_path / "d")
    with SyncClient(node.address) as c:
        c.wait(c.submit("etl", {"step_seconds": 0}).task_id)
    assert node.stop() == 0
    assert node.proc.stdout is not None
    out = "".join(node.lines) + node.proc.stdout.read()
    assert "left behind" not in out
    assert "resource_tracker" not in out and "Traceback" not in out


def test_a_sighup_while_the_node_starts_does_not_kill_it(tmp_path: Path) -> None:
    """The signal handlers were installed after the ready line: a SIGHUP (a tokens
    reload) sent while the node came up killed it (a test sending one right after
    the ready line failed now and then with the node gone)."""
    import subprocess

    from tests.nodes import APOLLO11, ROOT

    proc = subprocess.Popen(
        [*APOLLO11, "node", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "open files limit" in line:  # the node process is in serve(), starting
                for _ in range(3):
                    proc.send_signal(signal.SIGHUP)
            if "serving on port" in line:
                break
        time.sleep(0.5)
        assert proc.poll() is None, "".join(lines)
    finally:
        proc.terminate()
        proc.wait(20)
