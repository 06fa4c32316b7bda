"""What a remote step costs the node, apart from the VM's speed (issue 17).

The engine, its store and a `RemoteExecutor` in one process, with simulated workers
in the same event loop: every assignment, result and acknowledgement crosses the
wire format (serialized by the node, parsed by the worker's own codec, and back),
but no socket and no gRPC. The same tasks with the in-process executor are the
baseline. Counted in instructions, the difference of two trees does not depend on
how fast the shared VM is this hour (docs/benchmarks.md):

    valgrind --tool=callgrind --separate-threads=yes --toggle-collect=functools_reduce \
        python -m apollo11.scheduler.tools.bench.remote_cost remote 2000

then the event loop's thread (the file ending -01), minus a run with 0 tasks
(start-up), divided by the steps. The workers' share (parsing assignments, building
results) runs inside functools.reduce, which that toggle leaves uncounted: the count
is the node's alone. One thread, so the count does not depend on how threads
interleave (workers on threads of their own moved it by 5%)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import resource
import shutil
import tempfile
import time
from typing import Any

from apollo11.scheduler.dispatch.conn import WorkerConn
from apollo11.scheduler.dispatch.remote import RemoteExecutor
from apollo11.scheduler.engine import Engine, SubmitItem
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.tools.bench.engine_bench import noop_workflow
from apollo11.scheduler.worker import _codec as codec
from apollo11.scheduler.worker._records import Assign, Result, Succeeded
from apollo11.scheduler.workflow import Registry

STEPS = 5  # noop_workflow's
BATCH = 250  # tasks a submission
NULL = b"null"


def _uncounted(wire: list[bytes]) -> list[bytes]:
    """`_answer(wire)`, called from inside functools.reduce: under callgrind
    --toggle-collect=functools_reduce it is not counted (the node never runs it)."""
    return functools.reduce(lambda _, w: _answer(w), (wire,), [])


def _answer(wire: list[bytes]) -> list[bytes]:
    """What a worker does with the node's messages: each assignment answered at once
    with a null result."""
    out: list[bytes] = []
    for data in wire:
        d = codec.dispatch(codec.DispatchMessage.FromString(data))
        if type(d) is Assign:
            answered = [Result.of(a, Succeeded(NULL), 0.0) for a in d.assignments]
            out += (m.SerializeToString() for m in codec.results(answered, packed=True))
    return out


async def _worker(ex: RemoteExecutor, conn: WorkerConn, done: asyncio.Event) -> None:
    """A stream: the node's side counted (what the executor queued, serialized; the
    results parsed and taken), the worker's not. In one thread, so that the count
    does not depend on how threads interleave."""
    while not done.is_set():
        await conn.work()
        if done.is_set() or conn.closed is not None:
            return
        messages, _ = conn.drain()
        wire = [m.SerializeToString() for m in messages]
        for data in _uncounted(wire):
            ex.results(conn, codec.WorkerMessage.FromString(data).results)


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
            sims.append(asyncio.create_task(_worker(ex, conn, done)))
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
