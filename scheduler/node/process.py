"""The node process: serve one node until a signal, and the process around it
(fatal-error stacks, stacks on SIGUSR1, the open-files limit, a subreaper's orphans,
memory given back)."""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import logging
import resource
import signal
import threading
import time

from apollo11.scheduler import childguard, memtrim
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.loop_errors import LoopErrorLog, thread_died
from apollo11.scheduler.node import files, stacks
from apollo11.scheduler.node.node import Node
from apollo11.scheduler.state import merger_pids

log = logging.getLogger("apollo11.scheduler.node")


async def serve(settings: NodeSettings) -> int:
    """Run a node until SIGTERM or SIGINT; exit status 0 on a clean stop."""
    # A fatal error (a crash in C code, an abort) leaves every thread's stack in the
    # log instead of nothing: one primary died silently in a kill loop.
    faulthandler.enable(all_threads=True)
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(LoopErrorLog())
    threading.excepthook = thread_died
    # The connection caps fit the open-files limit, so it is raised before the Node
    # is made; said once the handlers below are in (tests signal at this line).
    raised = raise_open_files_limit()
    settings, shrunk = files.fit_settings(settings, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    node = Node(settings)
    # The handlers before anything else: a SIGHUP (a tokens reload) sent as the node
    # came up, before they were installed, killed it (the default action).
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # SIGHUP re-reads the tokens file: a deleted line's token is refused from then on.
    loop.add_signal_handler(signal.SIGHUP, lambda: log.warning("%s", node.reload_principals()))
    # SIGUSR1 logs every task's and thread's stack: what a node that hangs waits for.
    stacks.install(loop)
    log.info("%s", raised)
    if shrunk is not None:
        log.warning("%s", shrunk)
    # Orphans of a step's subprocesses stay in this process's tree (not PID 1's): they
    # are reaped here, and killed when the node stops. Only the node process does this
    # (not a Node in a test's process). Commands run under scheduler/childguard.py die with
    # the node even by SIGKILL; these orphans do not (docs/workflows.md, "Step processes
    # and fencing").
    orphans = asyncio.create_task(_reap_orphans()) if childguard.make_subreaper() else None
    print(f"apollo11 node {settings.node_id}: {await node.start()}", flush=True)
    trimmer = asyncio.create_task(memtrim.keep_trimmed(), name="apollo11-memtrim")
    await stop.wait()
    print(f"apollo11 node {settings.node_id}: {await node.stop()}", flush=True)
    trimmer.cancel()
    if orphans is not None:
        orphans.cancel()
        killed = childguard.kill_descendants(keep=merger_pids())
        if killed:
            log.warning("killed %d process(es) the steps left behind", killed)
    return 0


def raise_open_files_limit() -> str:
    """Raise the soft RLIMIT_NOFILE to the hard limit: the sentence to log.

    Every connection holds a file descriptor, and so does every log segment: with
    the usual soft limit of 1024, idle connections ran a node out of them, and the
    log then failed to open a segment (EMFILE), at start-up a crash."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # unlimited is refused for NOFILE (the kernel caps it at fs.nr_open)
    want = hard if hard != resource.RLIM_INFINITY else _NR_OPEN_DEFAULT
    if soft != resource.RLIM_INFINITY and soft >= want:
        return f"open files limit {soft}"
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ValueError, OSError) as e:
        return f"open files limit {soft}: could not raise it to {want}: {e}"
    return f"open files limit raised from {soft} to {want}"


_NR_OPEN_DEFAULT = 1 << 20


async def _reap_orphans(period_s: float = 5.0) -> None:
    zombies: dict[int, float] = {}
    while True:
        await asyncio.sleep(period_s)
        with contextlib.suppress(OSError):
            # in a thread: with a child ended, it reads /proc (ms of the loop's time)
            n = await asyncio.to_thread(childguard.reap_orphans, zombies, time.monotonic())
            if n:
                log.info("reaped %d ended process(es) a step left behind", n)
