"""Figures of `apollo11 export` against a real node process (docs/benchmarks.md,
"Export"):

    .venv/bin/python -m tests.api.measure_export [--tasks 5000] [--rate 100] [--seconds 15]

1. `--tasks` finished tasks of `echo` (tests/api/exportflows.py) are exported by the
   CLI to a file: its tasks/s.
2. The dispatch delay (a task's STEP_STARTED timestamp minus its TASK_SUBMITTED's,
   on the node's clock) of tasks submitted one at a time at `--rate` per second for
   `--seconds`, alone, then with exports of the whole backlog running back to back
   beside it, in another process as a user's would: p50 and p99 of each, and the ratio.
   `--rounds` alternates the two windows that many times (the machine is shared: a
   stall lands in one window, not in the figure); the ratio given is the median's.
3. `--standby`: a primary and a standby (a real etcd; `--nodes 3`: two), the export asking one
   (`--server`, as docs/retention.md advises for a busy primary), the dispatch delay
   measured on the primary. With `--pin`, the primary and this process run on CPU 0,
   the standby and the export on CPU 1: on one 2-core machine the standby would
   otherwise take the primary's CPU, which on a real deployment is another host's.
   `--fine`: each probe timed from just before its submission to the moment its step
   began (the `stamp` workflow returns it), to the microsecond.
   Without `--standby`, `--pin` puts the export alone on CPU 1: what the primary's
   dispatch then loses is its own work serving the export.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from apollo11.lease.local_etcd import LocalEtcd
from apollo11.scheduler.client import Client
from tests.cluster import Cluster
from tests.nodes import APOLLO11, ROOT, start_node

WORKFLOWS = "apollo11.scheduler.examples,tests.api.exportflows"


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return float(xs[min(len(xs) - 1, int(p * len(xs)))]) if xs else 0.0


async def _finished(c: Client, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while True:
        done, token = 0, ""
        while True:
            page = await c.tasks(state="SUCCEEDED", workflow="echo", page_size=1000,
                                 page_token=token)  # fmt: skip
            done += len(page.tasks)
            token = page.next_page_token
            if not token:
                break
        if done >= n or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.5)


async def _delays(c: Client, rate: int, seconds: float, fine: bool = False) -> list[float]:
    """Submit one task at a time at `rate`/s; the dispatch delay of each, in ms: from
    TASK_SUBMITTED to STEP_STARTED on the node's clock (whole milliseconds), or with
    `fine` from just before the submission to the moment its step began (the `stamp`
    workflow's result; one machine, one clock: nanoseconds)."""
    ids: list[tuple[str, int]] = []
    gap = 1 / rate
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i * gap - time.perf_counter()))
        workflow, given = ("stamp", {"i": i}) if fine else ("echo", {"text": f"probe {i}"})
        sent = time.time_ns()
        ids.append(((await c.submit(workflow, given)).task_id, sent))
    delays: list[float] = []
    for task_id, sent in ids:
        if fine:
            began = (await c.result(task_id, timeout=120))["began"]  # by step name
            delays.append((int(began) - sent) / 1e6)
            continue
        await c.wait(task_id, timeout=120)
        events, _ = await c.events(task_id=task_id, limit=10)
        at = {e.event_type: e.timestamp_ms for e in events}
        delays.append(float(at["STEP_STARTED"] - at["TASK_SUBMITTED"]))
    return delays


def _export(address: str, out: Path, *extra: str, cpus: set[int] | None = None) -> str:
    """One `apollo11 export` from `address`; with `cpus` (--pin), run there."""
    out.unlink(missing_ok=True)
    # taskset, not a preexec_fn: forking this process (gRPC's threads) runs no Python
    pin = [] if cpus is None else ["taskset", "-c", ",".join(map(str, cpus))]
    res = subprocess.run(
        [*pin, *APOLLO11, "export", "--server", address, "--output", str(out), *extra],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return res.stderr.strip()


async def _backlog(address: str, tasks: int) -> None:
    async with Client(address) as c:
        for i in range(0, tasks, 1000):
            batch = [{"workflow": "echo", "input": {"text": f"task {j} " * 20}}
                     for j in range(i, min(tasks, i + 1000))]  # fmt: skip
            await c.submit_many(batch)
        await _finished(c, tasks)


async def _measure(
    primary: str, reader: str, root: Path, tasks: int, rate: int, seconds: float,
    export_rate: float, rounds: int, cpus: set[int] | None = None, fine: bool = False,
) -> None:  # fmt: skip
    said = _export(reader, root / "one.jsonl", cpus=cpus)
    size = (root / "one.jsonl").stat().st_size
    print(f"export of {tasks} tasks: {said}; {size / 1e6:.1f} MB")
    assert re.search(r"(\d+) tasks/s", said) is not None
    alone: list[list[float]] = []
    loaded: list[list[float]] = []
    d = 2 if fine else 0  # decimals shown
    runs = 0
    async with Client(primary) as c:
        for _ in range(rounds):
            alone.append(await _delays(c, rate, seconds, fine))
            stop = asyncio.Event()

            async def exporting(stop: asyncio.Event) -> int:
                n = 0
                while not stop.is_set():
                    await asyncio.to_thread(
                        _export, reader, root / "two.jsonl", "--rate", str(export_rate), cpus=cpus
                    )
                    n += 1
                return n

            beside = asyncio.create_task(exporting(stop))
            await asyncio.sleep(1)  # the first export under way
            loaded.append(await _delays(c, rate, seconds, fine))
            stop.set()
            runs += await beside
    ratios = []
    for i, (a, b) in enumerate(zip(alone, loaded, strict=True)):
        a50, a99, l50, l99 = _pct(a, 0.5), _pct(a, 0.99), _pct(b, 0.5), _pct(b, 0.99)
        ratios.append(l99 / a99 if a99 else float("nan"))
        print(f"round {i + 1}: alone p50 {a50:.{d}f} / p99 {a99:.{d}f} ms; with exports p50 "
              f"{l50:.{d}f} / p99 {l99:.{d}f} ms; p99 ratio {ratios[-1]:.2f}x")  # fmt: skip
    where = "a standby" if reader != primary else "the primary"
    print(f"{runs} exports of the backlog beside (from {where}, --rate {export_rate:g}), "
          f"{rate}/s probes for {seconds:g} s a window")  # fmt: skip
    print(f"p99 ratio, median of {rounds}: {sorted(ratios)[len(ratios) // 2]:.2f}x")
    # The node stamps events in whole milliseconds: at a p99 of a few ms one tick is
    # a third of it, so the rounds' samples are pooled too (and the mean given).
    pa, pl = [d for r in alone for d in r], [d for r in loaded for d in r]
    a99, l99 = _pct(pa, 0.99), _pct(pl, 0.99)
    print(f"pooled, {len(pa)} probes each: alone p99 {a99:.{d}f} ms, mean {sum(pa) / len(pa):.2f} "
          f"ms; with exports p99 {l99:.{d}f} ms, mean {sum(pl) / len(pl):.2f} ms; p99 ratio "
          f"{l99 / a99 if a99 else float('nan'):.2f}x")  # fmt: skip


def _pin(pid: int, cpu: str) -> None:
    """Every thread of `pid` on `cpu`."""
    subprocess.run(["taskset", "-a", "-cp", cpu, str(pid)], check=True, capture_output=True)


async def _main(
    tasks: int, rate: int, seconds: float, export_rate: float, rounds: int, standby: bool,
    pin: bool, fine: bool = False, nodes: int = 2,
) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if not standby:
            node = start_node(root / "n1", "--workflows", WORKFLOWS)
            cpus = None
            if pin:  # the export as if from another host: its own CPU, the node the other
                os.sched_setaffinity(0, {0})
                _pin(node.proc.pid, "0")
                cpus = {1}
            try:
                await _backlog(node.address, tasks)
                await _measure(node.address, node.address, root, tasks, rate, seconds,
                               export_rate, rounds, cpus, fine)  # fmt: skip
            finally:
                node.stop()
            return
        etcd = LocalEtcd(root / "etcd").start()
        cluster = Cluster.create(root, etcd.url, "export", nodes, workflows=WORKFLOWS)
        try:
            cluster.start()
            p = cluster.wait_formed()
            s, *others = [m for m in cluster.members if m is not p]
            cpus = None
            if pin:
                assert p.proc is not None and s.proc is not None
                os.sched_setaffinity(0, {0})
                _pin(p.proc.pid, "0")
                _pin(s.proc.pid, "1")
                for o in others:  # the standby that acknowledges, on the primary's CPU
                    assert o.proc is not None
                    _pin(o.proc.pid, "0")
                cpus = {1}  # the export beside the standby it reads, away from the primary
            await _backlog(p.address, tasks)
            cluster.wait_applied(s, cluster.wait_converged(timeout=120), timeout=120)
            await _measure(p.address, s.address, root, tasks, rate, seconds, export_rate, rounds,
                           cpus, fine)  # fmt: skip
        finally:
            cluster.stop()
            etcd.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--export-rate", type=float, default=0, help="the exports' --rate")
    ap.add_argument("--rounds", type=int, default=3, help="alone/beside windows, alternated")
    ap.add_argument("--standby", action="store_true", help="export from a standby")
    ap.add_argument(
        "--pin",
        action="store_true",
        help="a CPU each side: the primary and the probes on CPU 0, the export (and "
        "the standby it reads) on CPU 1",
    )
    ap.add_argument(
        "--fine",
        action="store_true",
        help="time each probe from its submission to its step's start, in microseconds "
        "(the node's events are stamped in whole milliseconds)",
    )
    ap.add_argument(
        "--nodes",
        type=int,
        default=2,
        help="with --standby: the cluster's size. At 3 the other standby acknowledges "
        "the primary's writes (--sync-replicas 1 takes the first), on CPU 0 with --pin",
    )
    a = ap.parse_args()
    args = (a.tasks, a.rate, a.seconds, a.export_rate, a.rounds, a.standby, a.pin, a.fine)
    asyncio.run(_main(*args, nodes=a.nodes))


if __name__ == "__main__":
    main()
