"""Real node processes for integration tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APOLLO11 = [sys.executable, "-m", "apollo11.scheduler.cli"]


@dataclass
class NodeProc:
    proc: subprocess.Popen[str]
    data_dir: Path
    port: int
    lines: list[str] = field(default_factory=list)
    peer_port: int = 0  # the replication port, with --peer-listen

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def drained(self) -> NodeProc:
        """Keep reading the node's output into `lines` on a thread, for a test that
        does not read it as it goes: a full pipe would stall the node."""
        out = self.proc.stdout
        assert out is not None

        def drain() -> None:
            for line in out:
                self.lines.append(line)

        threading.Thread(target=drain, daemon=True).start()
        return self


def start_node(
    data_dir: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 30
) -> NodeProc:
    """Start `apollo11 node` on a free port and wait for its ready line."""
    cmd = [
        *APOLLO11,
        "node",
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--workflows",
        "apollo11.scheduler.examples",
        *args,
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"serving on port (\d+)", line)
        if m:
            peer = re.search(r"replication on port (\d+)", line)
            return NodeProc(
                proc, data_dir, int(m.group(1)), lines, int(peer.group(1)) if peer else 0
            )
    proc.kill()
    raise RuntimeError("node did not start:\n" + "".join(lines))


def cli(
    *args: str, server: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if server:
        env["APOLLO11_SERVER"] = server
    return subprocess.run(
        [*APOLLO11, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
    )
