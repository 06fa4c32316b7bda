"""The open-files budget (scheduler/node/files.py): connections cannot take the
descriptors the node's own files need."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.node import files
from apollo11.scheduler.tools.bench import flood
from tests.nodes import APOLLO11, ROOT


def test_caps_that_fit_are_left_alone() -> None:
    caps = {"max_connections": 1000, "http_max_connections": 128}
    assert files.fit(1 << 20, 256, caps) == caps


def test_caps_that_do_not_fit_shrink_together_and_leave_the_reserve() -> None:
    caps = {"max_connections": 1000, "peer_max_connections": 64, "http_max_connections": 128}
    fitted = files.fit(1024, 512, caps)
    assert sum(fitted.values()) <= 1024 - 512
    assert (
        fitted["max_connections"] > fitted["http_max_connections"] > fitted["peer_max_connections"]
    )
    assert files.fit(100, 512, caps) == dict.fromkeys(caps, 1), "never 0: the port would refuse all"


def test_the_reserve_counts_step_slots_unless_steps_run_on_workers() -> None:
    embedded = NodeSettings(data_dir=Path("/nonexistent"), concurrency=100)
    remote = NodeSettings(data_dir=Path("/nonexistent"), concurrency=100, execution="remote")
    assert files.reserve(embedded) == files.RESERVE_BASE + 100 * files.PER_STEP_SLOT
    assert files.reserve(remote) == files.RESERVE_BASE


def test_fit_settings_says_what_shrank_and_why() -> None:
    s = NodeSettings(data_dir=Path("/nonexistent"), http="127.0.0.1:0", concurrency=10)
    same, why = files.fit_settings(s, 1 << 20)
    assert same is s and why is None
    fitted, why = files.fit_settings(s, 1024)
    assert why is not None and "open files limit (1024)" in why
    assert "max_connections 1000 ->" in why and "peer_max_connections" not in why
    assert fitted.max_connections + fitted.http_max_connections <= 1024 - files.reserve(s)


@pytest.mark.slow
def test_a_node_under_a_low_limit_keeps_its_reserve_through_a_flood(tmp_path: Path) -> None:
    limit = 700
    node = ["node", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0"]
    proc = subprocess.Popen(
        ["prlimit", f"--nofile={limit}:{limit}", *APOLLO11, *node],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "APOLLO11_CONCURRENCY": "8"},
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "serving on port" in line:
                break
        said = "".join(lines)
        assert f"open files limit ({limit}) leaves" in said, said
        port = int(said.rsplit("serving on port ", 1)[1].split()[0].rstrip(","))

        async def attack() -> int:
            held = await flood.hold("127.0.0.1", port, 900, "idle", source="127.0.0.2")
            fds = flood.open_fds(proc.pid)
            held.close()
            return fds

        fds = asyncio.run(attack())
        reserved = files.RESERVE_BASE + 8 * files.PER_STEP_SLOT
        assert fds <= limit - reserved + 40, f"{fds} open of {limit}"
    finally:
        proc.terminate()
        proc.wait(20)
