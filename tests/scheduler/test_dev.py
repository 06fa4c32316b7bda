"""`apollo11 dev` for real: it refuses ports that are taken, and says what it runs."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from apollo11.scheduler.tools.dev import port_taken
from tests.nodes import ROOT

pytestmark = [pytest.mark.cluster, pytest.mark.etcd, pytest.mark.slow]


def _free_run(n: int) -> int:
    """The first of n free consecutive ports, below the ephemeral range: a port the
    kernel hands out (free_port) is the next outgoing connection's too, and another
    suite on the machine took one between this choice and the bind (a flaky run)."""
    low, _ = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    while True:
        port = random.randrange(10_000, low - n)
        if not any(port_taken(port + i) for i in range(n)):
            return port


def _ports() -> tuple[int, int]:
    """Two nodes' base port and etcd's, apart."""
    base = _free_run(2)
    while abs((etcd := _free_run(2)) - base) < 2:
        pass
    return base, etcd


@contextmanager
def _listening(port: int) -> Iterator[None]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield


def _dev(root: Path, base: int, etcd_port: int, *more: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "apollo11.scheduler.cli",
        "dev",
        "--dir",
        str(root),
        "--nodes",
        "2",
        "--base-port",
        str(base),
        "--etcd-port",
        str(etcd_port),
        "--http-base-port",
        "0",
        "--lease-ttl",
        "2",
        *more,
    ]


@pytest.mark.parametrize("which", ["etcd", "node"])
def test_a_taken_port_is_refused_and_nothing_is_started(tmp_path: Path, which: str) -> None:
    base, etcd_port = _ports()
    taken = etcd_port if which == "etcd" else base + 1
    with _listening(taken):
        done = subprocess.run(
            _dev(tmp_path, base, etcd_port),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert f"{taken} (" in out and "in use" in out and "Nothing was started" in out, out
    assert "export APOLLO11_SERVER" not in out, "no address printed for what did not start"
    assert not (tmp_path / "n1.log").exists() and not (tmp_path / "etcd").exists()


def _start(tmp_path: Path, base: int, etcd_port: int, *more: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _dev(tmp_path, base, etcd_port, *more),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _ready(proc: subprocess.Popen[str], lines: list[str]) -> str:
    """What `apollo11 dev` printed up to its ready line."""
    assert proc.stdout is not None
    while not any("Ctrl-C stops everything" in line for line in lines):
        line = proc.stdout.readline()
        assert line, "".join(lines)
        lines.append(line)
    return "".join(lines)


def test_it_prints_pids_and_says_when_a_node_dies(tmp_path: Path) -> None:
    base, etcd_port = _ports()
    proc = _start(tmp_path, base, etcd_port)
    assert proc.stdout is not None
    try:
        lines: list[str] = []
        text = _ready(proc, lines)
        pids = dict(re.findall(r"^(?:node )?(etcd|n\d)\s.*?pid (\d+)", text, re.M))
        assert set(pids) == {"etcd", "n1", "n2"}, text
        os.kill(int(pids["n2"]), signal.SIGKILL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if "n2 (pid" in line:
                assert f"n2 (pid {pids['n2']}) exited (killed by signal 9)" in line, line
                break
        else:
            raise AssertionError("the death of n2 was not reported:\n" + "".join(lines))
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    # ...and its log says so too, below whatever the node wrote: a node killed with
    # SIGKILL cannot write its own last line
    log = (tmp_path / "n2.log").read_text()
    assert f"started n2 (pid {pids['n2']})" in log, log
    assert f"n2 (pid {pids['n2']}) exited (killed by signal 9), not stopped by anyone" in log


def test_with_workers_the_steps_run_on_them(tmp_path: Path) -> None:
    base, etcd_port = _ports()
    proc = _start(tmp_path, base, etcd_port, "--workers", "2")
    try:
        text = _ready(proc, [])
        assert re.search(r"^worker w1 .*pid \d+", text, re.M), text
        assert re.search(r"^worker w2 .*pid \d+", text, re.M), text
        servers = f"127.0.0.1:{base},127.0.0.1:{base + 1}"
        ledger = tmp_path / "ledger"
        given = json.dumps({"step_seconds": 0, "ledger": str(ledger)})
        done = subprocess.run(
            [sys.executable, "-m", "apollo11.scheduler.cli", "submit", "etl", "--server",
             servers, "--input", given, "--wait"],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0 and "SUCCEEDED" in done.stdout, done.stdout + done.stderr
        where = [line.split()[5] for line in ledger.read_text().splitlines()]
        assert len(where) == 5 and set(where) <= {"w1", "w2"}, where
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
