"""Archive merges, run in a process of their own.

A level-1 merge (8 chunks of ~900 tasks at 10k events/s) is ~170 ms of CPU
every 8 snapshots, a level-2 one ~1.4 s every 64. On the snapshot writer
thread that work held the GIL against the node's event loop, on every node
at about the same time. In a separate process at nice 10 the event loop never
waits for it, and on a busy machine the OS runs the node's threads first.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.util
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import resource_tracker

from apollo11.scheduler.state.archive import Chunk, merge_chunks, merge_files

log = logging.getLogger(__name__)

NICE = 10
PARENT_CHECK_S = 1.0  # how often the merge process checks that its node is alive

_pool: ProcessPoolExecutor | None = None
_lock = threading.Lock()
last_pid = 0  # the process that did the last merge (for tests and logs)


def _init_worker(node_pid: int) -> None:
    os.nice(NICE)
    # Die with the node: a node killed with SIGKILL must not leave it behind (an idle
    # worker does not notice that its parent is gone). Not PR_SET_PDEATHSIG: that
    # fires when the *thread* that started the worker ends, and a replacement worker
    # is started from whichever thread needs it.
    threading.Thread(target=_watch_node, args=(node_pid,), daemon=True).start()


def _watch_node(node_pid: int) -> None:
    while os.getppid() == node_pid:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _executor() -> ProcessPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            # spawn, not fork: the node has gRPC's threads, which a fork does not survive
            _pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(os.getpid(),),
            )
            # A process started by multiprocessing (a benchmark's worker) joins its
            # children when it ends, before the executor's own exit hook could run:
            # without this it waits for the idle merge process forever. Before the
            # executor's queues close their feeders (exit priority 10), or the
            # workers never get the word to stop.
            multiprocessing.util.Finalize(_pool, _pool.shutdown, exitpriority=100)
        return _pool


def warm() -> Future[int]:
    """Start the merge process now (a node at startup), not in the middle of a load:
    starting an interpreter is ~0.2 s of CPU. The future gives its process id."""
    return _executor().submit(os.getpid)


def pids() -> set[int]:
    """The merge processes running now, and the resource tracker that spawning them
    started (a node stopping leaves them to end by themselves: killing the tracker
    made every stop log its KeyError tracebacks)."""
    with _lock:
        pool = _pool
    procs = getattr(pool, "_processes", None) or {}
    tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
    return set(procs) | ({tracker} if isinstance(tracker, int) else set())


def _drop(pool: ProcessPoolExecutor) -> None:
    global _pool
    with _lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


def merge(directory: str, chunks: Sequence[Chunk], name: str) -> Chunk:
    """`merge_chunks`, done by the merge process; here if that process cannot be
    had (it died, or cannot start), so that a snapshot never depends on it. An
    error of the merge itself (a full disk, a damaged chunk) is raised as is."""
    global last_pid
    pool = _executor()
    try:
        fut = pool.submit(merge_files, directory, [c.name for c in chunks], name)
    except (OSError, RuntimeError) as e:  # it cannot be started
        return _merge_here(pool, e, directory, chunks, name)
    try:
        last_pid = fut.result()
    except BrokenProcessPool as e:  # it died (killed, out of memory)
        return _merge_here(pool, e, directory, chunks, name)
    return Chunk(os.path.join(directory, name))


def _merge_here(
    pool: ProcessPoolExecutor, why: Exception, directory: str, chunks: Sequence[Chunk], name: str
) -> Chunk:
    global last_pid
    log.warning("the archive merge process failed (%s); merging in the node", why)
    _drop(pool)
    last_pid = os.getpid()
    return merge_chunks(directory, chunks, name)
