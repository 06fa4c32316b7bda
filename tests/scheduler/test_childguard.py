"""The guard a step's commands run under: nothing they start outlives the attempt or
the node (issue 15, 4a). Real processes; a "node" here is a small Python process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from apollo11.scheduler.childguard import guarded

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"  # a zombie has ended


def _wait_for(path: Path, timeout: float = 10) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def test_a_command_exits_with_its_own_status() -> None:
    run = subprocess.run(guarded(["/bin/sh", "-c", "echo out; exit 3"]), capture_output=True)
    assert (run.returncode, run.stdout) == (3, b"out\n")
    killed = subprocess.run(guarded(["/bin/sh", "-c", "kill -TERM $$"]))
    assert killed.returncode == -signal.SIGTERM
    missing = subprocess.run(guarded(["/no/such/command"]), capture_output=True)
    assert missing.returncode == 127 and b"cannot run" in missing.stderr


def test_what_a_command_leaves_behind_dies_with_it(tmp_path: Path) -> None:
    """Background children, also ones that left the process group (setsid)."""
    pids = tmp_path / "pids"
    script = f"setsid sleep 60 & echo $! >> {pids}; (sleep 61 & echo $! >> {pids}); true"
    subprocess.run(guarded(["/bin/sh", "-c", script]), check=True, timeout=20)
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2
    assert not any(_alive(p) for p in left), "a step's processes outlived it"


NODE = textwrap.dedent(
    """
    import subprocess, sys, time
    from apollo11.scheduler.childguard import guarded
    subprocess.Popen(guarded(["/bin/sh", "-c", sys.argv[1]]), start_new_session=True)
    time.sleep(60)
    """
)


def test_a_command_dies_with_its_node_even_by_sigkill(tmp_path: Path) -> None:
    pids, marker = tmp_path / "pids", tmp_path / "marker"
    script = f"echo $$ >> {pids}; setsid sleep 2 & echo $! >> {pids}; sleep 2; touch {marker}"
    node = subprocess.Popen([sys.executable, "-c", NODE, script], cwd=Path(__file__).parents[2])
    try:
        _wait_for(pids)
        time.sleep(0.2)
        node.send_signal(signal.SIGKILL)
        node.wait()
        deadline = time.monotonic() + 5
        left = [int(p) for p in pids.read_text().split()]
        while any(_alive(p) for p in left) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not any(_alive(p) for p in left), "the command outlived its SIGKILLed node"
        # its shell, the one process that would touch the marker, is gone: no wait needed
        assert not marker.exists(), "the command finished after its node had died"
    finally:
        node.kill()
        node.wait()


def test_a_guard_whose_node_is_already_gone_starts_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    # Its "node" is a pid that is not its parent: as after the node died.
    run = subprocess.run(guarded(["/bin/touch", str(marker)], node_pid=os.getpid() + 999_999))
    assert run.returncode == 137 and not marker.exists()


def test_sigterm_to_the_guard_ends_the_whole_tree(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = f"setsid sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; sleep 60"
    guard = subprocess.Popen(guarded(["/bin/sh", "-c", script]), start_new_session=True)
    _wait_for(pids)
    time.sleep(0.1)
    left = [int(p) for p in pids.read_text().split()]
    guard.terminate()
    guard.wait(10)
    time.sleep(0.1)
    assert not any(_alive(p) for p in left)


REAPER = textwrap.dedent(
    """
    import subprocess, time
    from apollo11.scheduler.childguard import make_subreaper, reap_orphans
    assert make_subreaper()
    subprocess.run(["/bin/sh", "-c", "sleep 0.2 &"], check=True)  # an orphan, adopted
    time.sleep(0.5)  # it has ended: a zombie nobody else waits for
    seen = {}
    assert reap_orphans(seen, now=100.0, grace_s=30) == 0, "not before its grace"
    assert len(seen) == 1
    assert reap_orphans(seen, now=131.0, grace_s=30) == 1
    assert seen == {} and reap_orphans(seen, now=200.0) == 0
    print("ok")
    """
)


def test_a_subreaper_reaps_adopted_orphans_after_a_grace() -> None:
    run = subprocess.run(
        [sys.executable, "-c", REAPER],
        cwd=Path(__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.stdout.strip() == "ok", run.stderr
