"""What a remote step costs the node, apart from the VM's speed (issue 17).

The engine, its store and a `RemoteExecutor` in one process, with simulated workers
in the same event loop: every assignment, result and acknowledgement crosses the
wire format (serialized by one side, parsed by the other through the worker's own
codec), but no socket and no gRPC. The same tasks with the in-process executor are
the baseline. Run under an instruction counter, the difference of two trees does not
depend on how fast the shared VM is this hour:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        python -m apollo11.scheduler.tools.bench.remote_cost remote 2000

minus a run with 0 tasks (start-up), divided by the steps. The simulated workers'
share (parsing assignments, building results) is counted too: a change of the wire
form moves both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import queue
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from apollo11.scheduler.dispatch.conn import WorkerConn
from apollo11.scheduler.dispatch.remote import RemoteExecutor
from apollo11.scheduler.engine import Engine
from apollo11.scheduler.engine.requests import SubmitItem
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.store import Store, StoreConfig
from apollo11.scheduler.tools.bench.engine_bench import noop_workflow
from apollo11.scheduler.worker import _codec as codec
from apollo11.scheduler.worker._records import Assign, Result, Succeeded
from apollo11.scheduler.workflow import Registry

STEPS = 5  # noop_workflow's
BATCH = 250  # tasks a submission
NULL = b"null"


def _answer(inbox: queue.Queue[bytes | None], deliver: Callable[[bytes], None]) -> None:
    """A worker, on a thread of its own (an instruction counter tells its share from the
    node's): each assignment answered at once with a null result."""
    while (data := inbox.get()) is not None:
        d = codec.dispatch(codec.DispatchMessage.FromString(data))
        if type(d) is Assign:
            answered = [Result.of(a, Succeeded(NULL), 0.0) for a in d.assignments]
            for out in codec.results(answered):
                deliver(out.SerializeToString())


async def _writer(conn: WorkerConn, inbox: queue.Queue[bytes | None], done: asyncio.Event) -> None:
    """The node's side of a stream: what the executor queued, as bytes on the wire."""
    while not done.is_set():
        await conn.work()
        if done.is_set() or conn.closed is not None:
            return
        messages, _ = conn.drain()
        for m in messages:
            inbox.put(m.SerializeToString())


async def _run(root: str, remote: bool, tasks: int, workers: int, slots: int) -> dict[str, Any]:
    store = Store.open(
        root,
        config=StoreConfig(log=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER)),
        instance_id="bench",
    )
    reg = Registry()
    reg.register(noop_workflow())
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node_id": "bench"})
    ex: RemoteExecutor | None = None
    done = asyncio.Event()
    sims: list[asyncio.Task[None]] = []
    inboxes: list[queue.Queue[bytes | None]] = []
    threads: list[threading.Thread] = []
    if remote:
        ex = RemoteExecutor(node_id="bench")
        ex.start(store.log.term, lambda task_id, step, token, worker: False)
    engine = Engine(store, reg, node_id="bench", executor=ex, concurrency=workers * slots)
    await engine.start()
    if ex is not None:
        for i in range(workers):
            conn = WorkerConn(
                name=f"w{i}",
                instance=f"w{i}",
                slots=slots,
                workflows=frozenset({("noop5", 1)}),
                labels={},
                address="in-process",
                version="bench",
            )
            ex.connect(conn, [])
            inbox: queue.Queue[bytes | None] = queue.Queue()
            inboxes.append(inbox)
            sims.append(asyncio.create_task(_writer(conn, inbox, done)))
            threads.append(
                threading.Thread(target=_answer, args=(inbox, _deliverer(ex, conn)), daemon=True)
            )
            threads[-1].start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    ids: list[str] = []
    for start in range(0, tasks, BATCH):
        n = min(BATCH, tasks - start)
        ids += [s.task_id for s in await engine.submit_many([SubmitItem("noop5")] * n)]
    states = [t.status for t in await asyncio.gather(*(engine.wait(t) for t in ids))]
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    done.set()
    if ex is not None:
        for c in ex.workers.values():
            c.wake()
        await asyncio.gather(*sims)
        for inbox in inboxes:
            inbox.put(None)
        for t in threads:
            t.join()
        await ex.stop("bench over")
    await engine.stop()
    await store.close()
    steps = tasks * STEPS
    return {
        "execution": "remote" if remote else "embedded",
        "tasks": tasks,
        "tasks_succeeded": sum(1 for s in states if s.name == "SUCCEEDED"),
        "steps": steps,
        "seconds": round(wall, 3),
        "cpu_us_per_step": round(cpu / max(1, steps) * 1e6, 1),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _deliverer(ex: RemoteExecutor, conn: WorkerConn) -> Callable[[bytes], None]:
    """How a worker thread hands the node a message: on the node's loop, parsed there
    (as gRPC does)."""
    loop = asyncio.get_running_loop()

    def on_loop(data: bytes) -> None:
        ex.results(conn, codec.WorkerMessage.FromString(data).results)

    def deliver(data: bytes) -> None:
        loop.call_soon_threadsafe(on_loop, data)

    return deliver


def measure(remote: bool, tasks: int, workers: int = 2, slots: int = 256) -> dict[str, Any]:
    """`tasks` five-step no-op tasks, embedded (concurrency workers × slots) or on
    `workers` simulated workers of `slots` slots each."""
    root = tempfile.mkdtemp(prefix="apollo11-remote-cost-")
    try:
        return asyncio.run(_run(os.path.join(root, "data"), remote, tasks, workers, slots))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("execution", choices=["embedded", "remote"])
    p.add_argument("tasks", type=int, help="five-step no-op tasks (0: start-up only)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--slots", type=int, default=256, help="a worker's (embedded: × workers)")
    a = p.parse_args(argv)
    print(json.dumps(measure(a.execution == "remote", a.tasks, a.workers, a.slots)))


if __name__ == "__main__":
    main()
