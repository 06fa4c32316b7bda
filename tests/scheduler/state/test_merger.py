"""Archive merges run in a process of their own, and in the node when it is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from apollo11.scheduler.state import merger, replay
from apollo11.scheduler.state.archive import (
    Chunk,
    chunk_name,
    encode_entry,
    merge_chunks,
    write_chunk,
)
from apollo11.scheduler.testing.history import etl_history
from tests.nodes import start_node
from tests.scheduler.state.test_fold import events


def _chunks(directory: Path, n: int, per: int, first: int = 0) -> list[Chunk]:
    tasks = list(replay(events(etl_history(n * per, seed=5))).tasks.values())
    out = []
    for i in range(n):
        path = str(directory / chunk_name(first + i + 1, 0))
        write_chunk(path, [encode_entry(t) for t in tasks[i * per : (i + 1) * per]], 0)
        out.append(Chunk(path))
    return out


def _same(a: Chunk, b: Chunk) -> None:
    assert list(a.entries()) == list(b.entries())
    assert list(a.summaries_before(None)) == list(b.summaries_before(None))


def test_a_merge_runs_in_another_process_and_gives_the_same_chunk(tmp_path: Path) -> None:
    chunks = _chunks(tmp_path, 4, 30)
    merged = merger.merge(str(tmp_path), chunks, chunk_name(100, 1))
    assert merger.last_pid not in (0, os.getpid())
    here = merge_chunks(str(tmp_path), chunks, "here.arc")
    assert merged.level == here.level == 1 and len(merged) == 120
    _same(merged, here)


def test_a_lost_merge_process_is_replaced_by_merging_here(tmp_path: Path) -> None:
    chunks = _chunks(tmp_path, 2, 20)
    merger.merge(str(tmp_path), chunks, chunk_name(100, 1))
    os.kill(merger.last_pid, signal.SIGKILL)
    again = merger.merge(str(tmp_path), chunks, chunk_name(101, 1))
    assert merger.last_pid == os.getpid(), "merged here, not lost"
    _same(again, merge_chunks(str(tmp_path), chunks, "here.arc"))
    merger.merge(str(tmp_path), chunks, chunk_name(102, 1))
    assert merger.last_pid != os.getpid(), "a new merge process for the next one"


def test_the_merge_process_dies_with_its_node() -> None:
    node = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from apollo11.scheduler.state import merger; import time; "
            "print(merger.warm().result(), flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert node.stdout is not None
    worker = int(node.stdout.readline())
    assert worker != node.pid
    node.kill()
    node.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(worker):
        time.sleep(0.05)
    assert not _alive(worker), "a merge process outlived its node"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_merge_process_started_from_a_passing_thread_outlives_it(tmp_path: Path) -> None:
    chunks = _chunks(tmp_path, 2, 10)
    merger._drop(merger._executor())  # the next one is started by the thread below
    started = threading.Thread(target=lambda: merger.warm().result())
    started.start()
    started.join()
    time.sleep(0.3)
    merger.merge(str(tmp_path), chunks, chunk_name(100, 1))
    assert merger.last_pid != os.getpid(), "merged by the merge process, not here"


def _warm_the_merger() -> None:
    merger.warm().result(timeout=30)


def test_a_multiprocessing_child_that_used_the_merger_still_exits() -> None:
    # Such a child joins its own children as it ends (`apollo11 bench log` runs its
    # stores in one): the idle merge process must be told to stop first.
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(target=_warm_the_merger)
    child.start()
    child.join(30)
    alive = child.is_alive()
    if alive:
        child.kill()
    assert not alive, "the child hung at exit, waiting for its merge process"
    assert child.exitcode == 0


def test_a_node_stops_without_killing_the_merge_pools_resource_tracker(tmp_path: Path) -> None:
    """The node killed multiprocessing's resource tracker with what steps leave behind;
    the pool's shutdown then started another and every stop logged "killed 1
    process(es) the steps left behind" and five KeyError tracebacks."""
    node = start_node(tmp_path / "d")
    assert node.stop() == 0
    assert node.proc.stdout is not None
    text = "".join(node.lines) + node.proc.stdout.read()
    assert "stopped" in text, text
    assert "Traceback" not in text and "left behind" not in text, text
