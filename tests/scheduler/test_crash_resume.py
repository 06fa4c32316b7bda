"""Crash and resume with a real process and a real SIGKILL, many times over.

The ledger (one line per step execution, written before the step works)
and the log must agree: every task completes, a step that SUCCEEDED never
runs again, and only an interrupted attempt is ever run twice.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from apollo11.scheduler.log import EventLog, EventType
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.state.store import state_at

ROOT = Path(__file__).resolve().parents[2]


def _start(data: Path, ledger: Path, n: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.scheduler.crash_driver",
            str(data),
            str(ledger),
            str(n),
            "0.3",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tmp_path: Path) -> None:
    data, ledger = tmp_path / "data", tmp_path / "ledger"
    rng = random.Random(2026)
    n_tasks = 60
    kills = 0
    while kills < 24:
        proc = _start(data, ledger, n_tasks)
        if kills % 4 == 0:
            time.sleep(rng.uniform(0.3, 1.1))  # from the process's start: start-up too
        else:
            # From the node's first line: on a loaded machine the start-up alone took
            # longer than any delay above, and no kill ever landed in a step.
            assert proc.stdout is not None
            proc.stdout.readline()
            time.sleep(rng.uniform(0.0, 0.8))  # submission, or mid-step
        if proc.poll() is not None:
            break  # it finished before we could kill it
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        kills += 1
    proc = _start(data, ledger, n_tasks)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "ALL DONE" in out, out
    assert kills >= 20

    state = state_at(data)
    tasks = list(state.iter_tasks())
    assert len(tasks) == n_tasks, "idempotent submission: one task per key across restarts"
    assert all(t.status is TaskStatus.SUCCEEDED for t in tasks)

    log = EventLog.open(data, read_only=True)
    succeeded: dict[tuple[str, str], int] = {}
    lost: set[tuple[str, str, int]] = set()
    for e in log.read():
        if e.event_type is EventType.STEP_SUCCEEDED:
            assert (e.task_id, e.step_name) not in succeeded, "one success per step"
            succeeded[(e.task_id, e.step_name)] = e.attempt
        elif e.event_type is EventType.STEP_FAILED:
            assert e.payload.get("lost") is True, "no failures but interruptions here"
            lost.add((e.task_id, e.step_name, e.attempt))
    log.close_sync()

    runs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for line in ledger.read_text().splitlines():
        task_id, step, attempt, _node, _token, _where = line.split()
        runs[(task_id, step)].append(int(attempt))
    assert set(runs) == set(succeeded), "every step ran, and every step that ran succeeded"
    reran = 0
    for key, attempts in runs.items():
        ok = succeeded[key]
        assert attempts == sorted(set(attempts)), f"{key}: an attempt ran twice: {attempts}"
        assert attempts[-1] == ok, f"{key} ran again after it SUCCEEDED at attempt {ok}: {attempts}"
        for a in attempts[:-1]:
            assert (*key, a) in lost, f"{key} attempt {a} ran again but was never interrupted"
        reran += len(attempts) > 1
    assert reran > 0, "the kills interrupted some steps (otherwise this test proved little)"
