"""Worker processes for the cluster tests: `apollo11 worker` run for real, and
what the tests read of them (tests/cluster_tests/conftest.py has the fixtures)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from apollo11.scheduler.client import SyncClient
from tests.cluster import Cluster, Member
from tests.nodes import ROOT

HEARTBEAT_TIMEOUT = 3.0


class WorkerProc:
    def __init__(self, root: Path, name: str, servers: str, *extra: str) -> None:
        self.name = name
        self.log_path = root / f"worker-{name}.log"
        args = [
            sys.executable,
            "-m",
            "apollo11.scheduler.cli",
            "worker",
            "--server",
            servers,
            "--workflows",
            "apollo11.scheduler.examples",
            "--name",
            name,
            *extra,
        ]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _lines(ledger: Path) -> list[list[str]]:
    return [ln.split() for ln in ledger.read_text().splitlines()] if ledger.exists() else []


def _until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _connected(primary: Member, name: str) -> Callable[[], bool]:
    return lambda: f"worker {name} connected" in primary.log_text()


def _events(c: Cluster, task_id: str) -> list[object]:
    with SyncClient(c.endpoints) as client:
        events, _ = client.events(task_id=task_id, limit=1000)
    return events
