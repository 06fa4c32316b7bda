"""A node whose event log fails (ENOSPC injected in process; the real full disk is
in tests/cluster_tests/test_full_disk.py): it stops leading, refuses writes with the
reason, and reopens its log by itself once writes work again."""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.errors import LogFailedError
from apollo11.scheduler.log import FsyncPolicy, writer
from apollo11.scheduler.node import Node, logwatch
from apollo11.scheduler.web import scrape


async def _until(ok: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_standalone_node_refuses_writes_while_its_log_fails_and_recovers_by_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logwatch, "LOG_RETRY_S", 0.2)
    node = Node(
        NodeSettings(
            node_id="n1",
            data_dir=tmp_path / "data",
            listen="127.0.0.1:0",
            workflows=["apollo11.scheduler.examples"],
            fsync=FsyncPolicy.UNSAFE_NEVER,
            drain_timeout=0,
        )
    )
    await node.start()
    try:
        assert node.engine is not None
        await node.engine.submit("etl", {"step_seconds": 0})
        write_all, probe = writer._write_all, logwatch.probe_writes
        probes = []

        def no_space(*args: object) -> None:
            probes.append(args)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(writer, "_write_all", no_space)
        monkeypatch.setattr(logwatch, "probe_writes", no_space)
        with pytest.raises(LogFailedError, match="No space left on device"):
            await node.engine.submit("etl", {"step_seconds": 0})
        await _until(lambda: node.role == "failed")
        assert node.log_trouble is not None and "No space left" in node.log_trouble
        assert "No space left on device" in node.views.status().notice
        scrape.refresh(node.views)
        assert metrics.LOG_WRITABLE._value.get() == 0
        refusal = node.not_leader()
        assert isinstance(refusal, LogFailedError), refusal
        assert "free space in" in str(refusal)
        await _until(lambda: len(probes) >= 3)  # the disk is still full: still failed
        assert node.role == "failed"

        monkeypatch.setattr(writer, "_write_all", write_all)
        monkeypatch.setattr(logwatch, "probe_writes", probe)
        # the role is primary a moment before the engine takes writes (the term's
        # first record is written in between)
        await _until(lambda: node.role == "primary" and bool(node.engine and node.engine.leading))
        assert node.engine is not None
        await node.engine.submit("etl", {"step_seconds": 0})
        status = node.views.status()
        assert "reopened" in status.notice, status
        assert status.term == 2, "it leads again in a new term"
        scrape.refresh(node.views)
        assert metrics.LOG_WRITABLE._value.get() == 1
    finally:
        await node.stop()


def test_disk_headroom_is_read_at_scrape_time(tmp_path: Path) -> None:
    metrics.refresh_disk(str(tmp_path))
    st = os.statvfs(tmp_path)
    free = metrics.DISK_FREE_BYTES.labels(str(tmp_path))._value.get()
    assert abs(free - st.f_bavail * st.f_frsize) < 64 << 20  # others write meanwhile
    ratio = metrics.DISK_FREE_RATIO.labels(str(tmp_path))._value.get()
    assert 0 < ratio <= 1
    assert abs(ratio - free / (st.f_blocks * st.f_frsize)) < 0.01
    metrics.refresh_disk(str(tmp_path / "missing"))  # no reading, and no error
