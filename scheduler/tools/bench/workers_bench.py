"""`apollo11 bench workers`: remote execution beside embedded, with real node and
worker processes on 127.0.0.1 (issue 17's figures).

1. throughput: five-step no-op etl tasks/s (etl steps succeeded a second, / 5) by
   a standalone node that runs its steps itself (embedded: the baseline) and by
   one that dispatches them to 1, 2 and 4 `apollo11 worker` processes; over a
   window after a warm-up, a backlog
   of tasks kept topped up by batched submissions (SubmitTasks). Each figure is a
   ratio to the embedded one of the same round, as the machine is shared;
2. dispatch latency at about 1,000 steps/s offered (200 five-step tasks/s, open
   loop, two workers): the node's `apollo11_dispatch_seconds` over the window
   (STARTED committed -> the assignment written to the worker's stream), and from
   each STARTED event's timestamp to the step beginning where it runs (the bench's
   steps return `time.time()`; the log is read once the node has stopped), beside
   the same on an embedded node;
3. fan-out: 2,000 one-second async sleeps submitted at once, on 4 workers of 512
   slots: wall time from the first submission to the last one finished, against
   the ideal of 1 s (and an embedded node with 2,048 slots beside it);
4. lost workers: kill -9 of a worker mid-step (the kill to the STEP_FAILED `lost`
   event's timestamp: the closed socket should tell at once) and SIGSTOP (silence:
   the heartbeat timeout tells, `HEARTBEAT_TIMEOUT_S` with beats every
   `HEARTBEAT_INTERVAL_S`);
5. a CPU-bound pure-Python step (30 s; --quick 8 s) on a two-node cluster (etcd)
   under a steady submit load, embedded and then on a worker: the primary's
   replication ack latency over the step, and over a window without it.

Load generators run in other processes at nice 10 (on a deployment they are other
machines). Every process the bench starts is ended on the way out, on error too.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apollo11.lease import free_port
from apollo11.scheduler.tools.bench.failover_bench import _free_run, _quantile
from apollo11.scheduler.tools.dev import DevCluster

FLOWS = "apollo11.scheduler.tools.bench.workers_flows"
EXAMPLES = "apollo11.scheduler.examples"
WORKFLOWS = f"{EXAMPLES},{FLOWS}"
LOAD_NICE = int(os.environ.get("APOLLO11_BENCH_LOAD_NICE", "10"))
HEARTBEAT_TIMEOUT_S = 3.0
HEARTBEAT_INTERVAL_S = 0.5
# Each side at its best on this machine (docs/bench-history/workers.md, Dec 2): a worker of 64
# slots leaves its node waiting on the slots' round trips (the node's loop 73% busy),
# 256 keeps it busy; an embedded node does best at 256 (512 is slower: more in
# flight, more overhead).
THROUGHPUT_SLOTS = int(os.environ.get("APOLLO11_BENCH_WORKER_SLOTS", "256"))  # per worker
EMBEDDED_CONCURRENCY = int(os.environ.get("APOLLO11_BENCH_EMBEDDED_CONCURRENCY", "256"))
ETL_STEPS = 5  # collect, clean, feature, infer, persist
THROUGHPUT_BACKLOG = 2000  # tasks submitted and not yet finished, kept topped up
DISPATCH_TASKS_PER_S = 200  # five steps each: 1,000 steps/s
FANOUT_STEPS = 2000
FANOUT_SLOTS = 512
SPIN_LOAD_TASKS_PER_S = 150  # five-step no-op etl tasks: about 1,650 events/s

TARGETS = {
    "remote_2_workers_vs_embedded": ("≥", 0.80),
    "dispatch_p99_ms": ("≤", 5.0),
    "kill_detected_s": ("≤", 1.0),
}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _scrape(http: str) -> Samples:
    """Every sample of a node's /metrics, by name and labels."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{http}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name` over the samples that carry `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def _buckets(samples: Samples, name: str) -> list[tuple[float, float]]:
    """A histogram's cumulative buckets (le, count), summed over its other labels."""
    out: dict[float, float] = {}
    for (n, ls), v in samples.items():
        if n == f"{name}_bucket":
            le = float(dict(ls)["le"])
            out[le] = out.get(le, 0.0) + v
    return sorted(out.items())


def _loop_figures(s0: Samples, s1: Samples) -> dict[str, float]:
    """How busy the node's loop was between two scrapes: the p99 of its timer lag and of
    one scheduling pass (ms)."""
    out = {}
    for key, name in (
        ("loop_lag_p99_ms", "apollo11_event_loop_lag_seconds"),
        ("scheduling_pass_p99_ms", "apollo11_scheduler_loop_seconds"),
    ):
        out[key] = round(_quantile(_buckets(s0, name), _buckets(s1, name), 0.99), 2)
    return out


def _succeeded(samples: Samples, workflow: str, step: str) -> float:
    return _value(
        samples, "apollo11_step_outcomes_total", workflow=workflow, step=step, outcome="succeeded"
    )


# ------------------------------------------------------------------ processes


@dataclass(frozen=True, slots=True)
class _Node:
    proc: subprocess.Popen[bytes]
    address: str
    http: str
    data_dir: Path
    log_path: Path


@dataclass
class _Procs:
    """What one section started; `close` ends all of it (workers by SIGKILL, after a
    SIGCONT for a stopped one; nodes by SIGTERM, then SIGKILL)."""

    base: Path
    nodes: list[_Node] = field(default_factory=list)
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def node(
        self, name: str, *args: str, timeout: float = 60, env: Mapping[str, str] | None = None
    ) -> _Node:
        data_dir = self.base / name
        log_path = self.base / f"{name}.log"
        http = f"127.0.0.1:{free_port()}"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "apollo11.scheduler.cli",
                    "node",
                    "--data-dir",
                    str(data_dir),
                    "--listen",
                    "127.0.0.1:0",
                    "--http",
                    http,
                    "--metrics-open",
                    "--workflows",
                    WORKFLOWS,
                    "--node-id",
                    name,
                    *args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            m = re.search(r"serving on port (\d+)", log_path.read_text(errors="replace"))
            if m:
                node = _Node(proc, f"127.0.0.1:{m.group(1)}", http, data_dir, log_path)
                self.nodes.append(node)
                return node
            time.sleep(0.05)
        _end(proc, signal.SIGKILL)
        raise RuntimeError(f"node {name} did not start: see {log_path}")

    def worker(
        self, name: str, server: str, slots: int, *, workflows: str = WORKFLOWS, nice: int = 0
    ) -> subprocess.Popen[bytes]:
        with open(self.base / f"worker-{name}.log", "wb") as log:
            proc = subprocess.Popen(
                [
                    *(["nice", "-n", str(nice)] if nice else []),
                    sys.executable,
                    "-m",
                    "apollo11.scheduler.cli",
                    "worker",
                    "--server",
                    server,
                    "--workflows",
                    workflows,
                    "--slots",
                    str(slots),
                    "--name",
                    name,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers[name] = proc
        return proc

    def stop_node(self, node: _Node) -> None:
        _end(node.proc, signal.SIGTERM)

    def close(self) -> None:
        for proc in self.workers.values():
            _end(proc, signal.SIGKILL)
        for node in self.nodes:
            _end(node.proc, signal.SIGTERM)


def _end(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(sig)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def _section(base: Path, name: str) -> Iterator[_Procs]:
    procs = _Procs(base / name)
    procs.base.mkdir(parents=True)
    try:
        yield procs
    finally:
        procs.close()


def _cpu_s(pid: int) -> float:
    """A process's CPU time so far, user and system (Linux: /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_workers(http: str, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _value(_scrape(http), "apollo11_workers_connected") < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {n} workers connected within {timeout:g}s")
        time.sleep(0.1)


def _wait_count(
    http: str, workflow: str, step: str, n: float, timeout: float, every: float = 0.25
) -> None:
    """Until `n` attempts of the step have succeeded (scraped every `every` s)."""
    deadline = time.monotonic() + timeout
    while _succeeded(_scrape(http), workflow, step) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{workflow}/{step}: not {n:g} done within {timeout:g}s")
        time.sleep(every)


def _remote_node(procs: _Procs, name: str, workers: int, slots: int, *args: str) -> _Node:
    node = procs.node(name, "--execution", "remote", *args)
    for i in range(workers):
        procs.worker(f"{name}-w{i + 1}", node.address, slots)
    _wait_workers(node.http, workers)
    return node


def _log_events(data_dir: Path) -> list[Any]:
    """Every event of a stopped node's log."""
    from apollo11.scheduler.log import EventLog

    log = EventLog.open(data_dir, read_only=True)
    try:
        return list(log.read())
    finally:
        log.close_sync()


# ------------------------------------------------------------ load generators


def _as_load() -> None:
    """A load generator's process: the nodes and workers, not it, get the CPU first."""
    os.nice(LOAD_NICE)


def _keep_backlog(address: str, http: str, stop_path: str, backlog: int, batch: int) -> int:
    """Submit five-step no-op etl tasks, `batch` a call, so that about `backlog` are
    submitted and not finished, until `stop_path` exists; returns how many."""
    from apollo11.scheduler.client import Client

    noop = {"workflow": "etl", "input": {"step_seconds": 0}}

    def look() -> tuple[float, bool]:
        return _succeeded(_scrape(http), "etl", "persist"), os.path.exists(stop_path)

    async def go() -> int:
        submitted = 0
        async with Client(address, retries=3, timeout_s=60) as c:
            deadline = time.monotonic() + 600  # the bench died: do not load forever
            while time.monotonic() < deadline:
                done, stop = await asyncio.to_thread(look)
                if stop:
                    break
                while submitted - done <= backlog - batch:
                    await c.submit_many([noop] * batch)
                    submitted += batch
                await asyncio.sleep(0.2)
        return submitted

    return asyncio.run(go())


def _offer(
    endpoints: str, workflow: str, body: Any, tasks_per_s: float, seconds: float
) -> tuple[float, float, int]:
    """Open loop: what is due every 10 ms in one SubmitTasks call, for `seconds`.
    Returns the wall clock at the start and the end, and the tasks acknowledged."""
    from apollo11.scheduler.client import Client

    item = {"workflow": workflow, "input": body}

    async def go() -> tuple[float, float, int]:
        async with Client(endpoints, retries=3, timeout_s=60) as c:
            await c.status()  # connected before the clock starts
            t0, wall0 = time.perf_counter(), time.time()
            sent = 0
            calls: list[asyncio.Task[Any]] = []
            while (now := time.perf_counter()) - t0 < seconds:
                due = int((now - t0) * tasks_per_s)
                if due > sent:
                    calls.append(asyncio.create_task(c.submit_many([item] * (due - sent))))
                    sent = due
                await asyncio.sleep(0.01)
            wall1 = time.time()
            results = await asyncio.gather(*calls, return_exceptions=True)
        acked = sum(len(r) for r in results if isinstance(r, list))
        return wall0, wall1, acked

    return asyncio.run(go())


# ------------------------------------------------------------- 1. throughput


def _throughput_one(
    procs: _Procs,
    ex: ProcessPoolExecutor,
    name: str,
    workers: int,
    warmup: float,
    window: float,
) -> dict[str, Any]:
    if workers:
        node = _remote_node(procs, name, workers, THROUGHPUT_SLOTS)
    else:
        node = procs.node(name, "--concurrency", str(EMBEDDED_CONCURRENCY))
    stop = procs.base / f"{name}.stop"
    load = ex.submit(_keep_backlog, node.address, node.http, str(stop), THROUGHPUT_BACKLOG, 250)
    try:
        _wait_count(node.http, "etl", "persist", 1, 60, every=0.1)
        time.sleep(warmup)
        pids = [node.proc.pid, *(p.pid for p in procs.workers.values())]
        s0, t0, cpu0 = _scrape(node.http), time.monotonic(), [_cpu_s(p) for p in pids]
        time.sleep(window)
        s1, t1, cpu1 = _scrape(node.http), time.monotonic(), [_cpu_s(p) for p in pids]
    finally:
        stop.touch()
        load.result()
    procs.stop_node(node)

    def failed(s: Samples) -> float:
        return sum(
            _value(s, "apollo11_step_outcomes_total", workflow="etl", outcome=o)
            for o in ("failed", "lost")
        )

    # Steps, not tasks finished: under a backlog every waiting task queues at the
    # back after each step, so tasks advance in waves (all first steps, then all
    # second ones...) and a window may hold no last step at all (0 to 2,500
    # finished a second over 0.25 s slices of one run). Steps done ÷ 5 is a task's
    # worth of work, whatever the window's phase.
    def steps(s: Samples) -> float:
        return _value(s, "apollo11_step_outcomes_total", workflow="etl", outcome="succeeded")

    done = (steps(s1) - steps(s0)) / ETL_STEPS
    # CPU a step: steadier than tasks/s on a shared machine, and it says where the
    # remote path's cost lies (the node's own, or the workers')
    spent = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    per_step = 1e6 / max(steps(s1) - steps(s0), 1)
    gc_s = sum(
        _value(s1, "apollo11_gc_pause_seconds_sum", generation=g)
        - _value(s0, "apollo11_gc_pause_seconds_sum", generation=g)
        for g in "012"
    )
    return {
        "tasks_per_s": round(done / (t1 - t0)),
        "node_cpu_us_per_step": round(spent[0] * per_step, 1),
        "workers_cpu_us_per_step": round(sum(spent[1:]) * per_step, 1),
        **_loop_figures(s0, s1),
        # the node's time in cyclic collections (gctune.py), a second of the window
        "gc_ms_per_s": round(gc_s * 1000 / (t1 - t0), 1),
        "attempts_failed_in_window": int(failed(s1) - failed(s0)),
        "slots_busy_at_end": int(_value(s1, "apollo11_worker_slots", state="busy")),
    }


def _throughput(
    base: Path,
    ex: ProcessPoolExecutor,
    rounds: int,
    warmup: float,
    window: float,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    configs = {"embedded": 0, "remote_1": 1, "remote_2": 2, "remote_4": 4}
    runs: list[dict[str, Any]] = []
    for r in range(rounds):
        one: dict[str, Any] = {}
        for label, workers in configs.items():
            progress(f"throughput, round {r + 1} of {rounds}: {label}, {window:g}s window")
            with _section(base, f"tp{r}-{label}") as procs:
                one[label] = _throughput_one(procs, ex, label, workers, warmup, window)
        embedded = one["embedded"]["tasks_per_s"]
        for label in configs:
            one[label]["vs_embedded"] = round(one[label]["tasks_per_s"] / max(embedded, 1), 3)
        runs.append(one)
    median = {
        label: round(statistics.median(run[label]["vs_embedded"] for run in runs), 3)
        for label in configs
        if label != "embedded"
    }
    return {
        "slots_per_worker": THROUGHPUT_SLOTS,
        "embedded_concurrency": EMBEDDED_CONCURRENCY,
        "backlog_tasks": THROUGHPUT_BACKLOG,
        "window_s": window,
        "rounds": runs,
        "median_vs_embedded": median,
    }


# ------------------------------------------------------ 2. dispatch latency


def _started_to_began(events: Sequence[Any], since: float) -> list[float]:
    """Seconds from each STARTED (its timestamp: ms, floored) to its step's `began`,
    for the attempts STARTED at or after `since` (wall clock)."""
    from apollo11.scheduler.log import EventType

    started: dict[tuple[str, str, int], float] = {}
    out = []
    for e in events:
        key = (e.task_id, e.step_name, e.attempt)
        if e.event_type is EventType.STEP_STARTED:
            started[key] = e.timestamp / 1000
        elif e.event_type is EventType.STEP_SUCCEEDED and key in started:
            result = e.payload.get("result")
            at = started[key]
            if isinstance(result, dict) and "began" in result and at >= since:
                out.append(float(result["began"]) - at)
    return out


def _dispatch_one(
    procs: _Procs, ex: ProcessPoolExecutor, name: str, workers: int, window: float
) -> dict[str, Any]:
    node = _remote_node(procs, name, workers, THROUGHPUT_SLOTS) if workers else procs.node(name)
    body = {"seconds": 0}
    ex.submit(_offer, node.address, "bench_stamp", body, DISPATCH_TASKS_PER_S, 1.0).result()
    s0 = _scrape(node.http)
    wall0, wall1, acked = ex.submit(
        _offer, node.address, "bench_stamp", body, DISPATCH_TASKS_PER_S, window
    ).result()
    s1 = _scrape(node.http)
    _wait_count(node.http, "bench_stamp", "s5", _succeeded(s0, "bench_stamp", "s5") + acked, 120)
    procs.stop_node(node)
    lat = _started_to_began(_log_events(node.data_dir), wall0)
    name_h = "apollo11_dispatch_seconds"
    b0, b1 = _buckets(s0, name_h), _buckets(s1, name_h)
    out = {
        "offered_steps_per_s": 5 * DISPATCH_TASKS_PER_S,
        "achieved_steps_per_s": round(5 * acked / (wall1 - wall0)),
        "started_to_began_p50_ms": round(_pct(lat, 0.5) * 1000, 2),
        "started_to_began_p99_ms": round(_pct(lat, 0.99) * 1000, 2),
        "steps_measured": len(lat),
        **_loop_figures(s0, s1),
    }
    if workers:
        out["dispatch_p50_ms"] = round(_quantile(b0, b1, 0.5), 3)
        out["dispatch_p99_ms"] = round(_quantile(b0, b1, 0.99), 3)
        out["dispatched_in_window"] = int((b1[-1][1] if b1 else 0) - (b0[-1][1] if b0 else 0))
    return out


def _dispatch(
    base: Path, ex: ProcessPoolExecutor, window: float, progress: Callable[[str], None]
) -> dict[str, Any]:
    out = {}
    for label, workers in (("embedded", 0), ("remote_2", 2)):
        progress(f"dispatch latency at {5 * DISPATCH_TASKS_PER_S:,} steps/s: {label}")
        with _section(base, f"dispatch-{label}") as procs:
            out[label] = _dispatch_one(procs, ex, label, workers, window)
    return out


# ---------------------------------------------------------------- 3. fan-out


def _fanout_one(procs: _Procs, name: str, workers: int) -> dict[str, Any]:
    from apollo11.scheduler.client import SyncClient
    from apollo11.scheduler.log import EventType

    if workers:
        node = _remote_node(procs, name, workers, FANOUT_SLOTS)
    else:
        node = procs.node(name, "--concurrency", "2048")
    item = {"workflow": "bench_sleep", "input": {"seconds": 1.0}}
    with SyncClient(node.address, retries=3, timeout_s=60) as c:
        c.status()
        t0 = time.time()
        for _ in range(FANOUT_STEPS // 500):
            c.submit_many([item] * 500)
        submitted = time.time()
    _wait_count(node.http, "bench_sleep", "sleep", FANOUT_STEPS, 120)
    procs.stop_node(node)
    events = _log_events(node.data_dir)
    done = [e.timestamp / 1000 for e in events if e.event_type is EventType.STEP_SUCCEEDED]
    began = [
        float(e.payload["result"]["began"])
        for e in events
        if e.event_type is EventType.STEP_SUCCEEDED
    ]
    failed = sum(1 for e in events if e.event_type is EventType.STEP_FAILED)
    wall = max(done) - t0
    return {
        "wall_s": round(wall, 3),
        "vs_ideal_1s": round(wall / 1.0, 2),
        "submit_s": round(submitted - t0, 3),
        "first_to_last_begin_s": round(max(began) - min(began), 3),
        "attempts_failed": failed,
    }


def _fanout(base: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"steps": FANOUT_STEPS, "slots_per_worker": FANOUT_SLOTS}
    for label, workers in (("remote_4", 4), ("embedded", 0)):
        progress(f"{FANOUT_STEPS:,} one-second sleeps at once: {label}")
        with _section(base, f"fanout-{label}") as procs:
            out[label] = _fanout_one(procs, label, workers)
    return out


# ------------------------------------------------------------ 4. lost workers


def _lost(base: Path, kills: int, stops: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from apollo11.scheduler.client import SyncClient

    progress(f"lost workers: {kills} kill -9, {stops} SIGSTOP, mid-step")
    with _section(base, "lost") as procs:
        node = procs.node(
            "lost",
            "--execution",
            "remote",
            "--worker-heartbeat-timeout",
            str(HEARTBEAT_TIMEOUT_S),
            "--worker-heartbeat-interval",
            str(HEARTBEAT_INTERVAL_S),
        )
        names = [f"k{i + 1}" for i in range(kills)] + [f"s{i + 1}" for i in range(stops)]
        for n in names:
            procs.worker(n, node.address, 1, workflows=FLOWS)
        _wait_workers(node.http, len(names))
        with SyncClient(node.address, retries=3, timeout_s=30) as c:
            ids = [
                s.task_id
                for s in c.submit_many(
                    [{"workflow": "bench_sleep", "input": {"seconds": 600}}] * len(names)
                )
            ]
            where = _running_on(c, ids)
            time.sleep(0.5)  # mid-step
            signalled: dict[str, tuple[str, float]] = {}  # task -> (how, when)
            for task_id, worker in where.items():
                sig = signal.SIGKILL if worker.startswith("k") else signal.SIGSTOP
                signalled[task_id] = (sig.name, time.time())
                procs.workers[worker].send_signal(sig)
                time.sleep(0.3)
            found = _lost_events(c, ids, timeout=4 * HEARTBEAT_TIMEOUT_S + 10)
    detected: dict[str, list[float]] = {"SIGKILL": [], "SIGSTOP": []}
    for task_id, (how, when) in signalled.items():
        detected[how].append(round(found[task_id] - when, 3))
    return {
        "heartbeat_timeout_s": HEARTBEAT_TIMEOUT_S,
        "heartbeat_interval_s": HEARTBEAT_INTERVAL_S,
        "kill_detected_s": sorted(detected["SIGKILL"]),
        "stop_detected_s": sorted(detected["SIGSTOP"]),
    }


def _running_on(c: Any, ids: Sequence[str], timeout: float = 60) -> dict[str, str]:
    """task -> the worker its step was STARTED on ("" on an embedded node), once every
    task's step has STARTED."""
    deadline = time.monotonic() + timeout
    where: dict[str, str] = {}
    while len(where) < len(ids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(where)} of {len(ids)} steps started")
        for t in ids:
            if t not in where:
                events, _ = c.events(task_id=t, limit=100)
                for e in events:
                    if e.event_type == "STEP_STARTED":
                        where[t] = (e.payload or {}).get("worker", "")  # "": embedded
        time.sleep(0.1)
    return where


def _lost_events(c: Any, ids: Sequence[str], timeout: float) -> dict[str, float]:
    """task -> the timestamp (s) of its step's first STEP_FAILED marked lost."""
    deadline = time.monotonic() + timeout
    found: dict[str, float] = {}
    while len(found) < len(ids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(found)} of {len(ids)} lost attempts seen")
        for t in ids:
            if t not in found:
                events, _ = c.events(task_id=t, limit=100)
                for e in events:
                    if e.event_type == "STEP_FAILED" and (e.payload or {}).get("lost"):
                        found[t] = e.timestamp_ms / 1000
                        break
        time.sleep(0.05)
    return found


# ----------------------------------------------------- 5. a CPU-bound step


def _spin(
    base: Path,
    ex: ProcessPoolExecutor,
    spin_s: float,
    calm_s: float,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "spin_s": spin_s,
        "load_tasks_per_s": SPIN_LOAD_TASKS_PER_S,
    }
    for label in ("embedded", "remote"):
        progress(f"a {spin_s:g}s CPU-bound step on a 2-node cluster, {label}")
        extra = ["--execution", "remote"] if label == "remote" else []
        dev = DevCluster(
            base / f"spin-{label}",
            2,
            _free_run(2),
            etcd_port=free_port(),
            http_base_port=_free_run(2),
            workflows=WORKFLOWS,
            extra=extra,
        )
        workers: list[subprocess.Popen[bytes]] = []
        try:
            dev.start()
            primary = int(dev.primary()[0][1:]) - 1
            eps = ",".join(dev.endpoints)
            if label == "remote":
                procs = _Procs(dev.root)
                workers = [
                    procs.worker("etl", eps, 64, workflows=EXAMPLES),
                    # nice 19: the CPU the spin takes from the cluster here would be
                    # another machine's on a deployment (the GIL is the point)
                    procs.worker("spin", eps, 1, workflows=FLOWS, nice=19),
                ]
                _wait_workers(dev.http_endpoints[primary], 2)
            out[label] = _spin_windows(dev, primary, ex, spin_s, calm_s)
        finally:
            for w in workers:
                _end(w, signal.SIGKILL)
            dev.stop()
    return out


def _spin_windows(
    dev: DevCluster, primary: int, ex: ProcessPoolExecutor, spin_s: float, calm_s: float
) -> dict[str, Any]:
    """Ack latency over a window of load alone, then over one with the CPU step."""
    from apollo11.scheduler.client import SyncClient

    eps = ",".join(dev.endpoints)
    ex.submit(_offer, eps, "etl", {"step_seconds": 0}, SPIN_LOAD_TASKS_PER_S, 1.0).result()
    calm, _ = _ack_window(dev, primary, ex, calm_s)
    with SyncClient(eps, retries=3, timeout_s=30) as c:
        spin_id = c.submit("bench_spin", {"seconds": spin_s}).task_id
        _running_on(c, [spin_id])
        spinning, until = _ack_window(dev, primary, ex, max(1.0, spin_s - 2.0))
        spun = c.wait(spin_id, check=False)
        events, _ = c.events(task_id=spin_id, limit=100)
    ended = max(e.timestamp_ms for e in events if e.event_type == "STEP_SUCCEEDED") / 1000
    return {
        "calm": calm,
        "spinning": spinning,
        "spin_state": spun.state,
        "spin_covered_window": ended >= until,
    }


def _ack_window(
    dev: DevCluster, primary: int, ex: ProcessPoolExecutor, seconds: float
) -> tuple[dict[str, Any], float]:
    """The primary's replication ack latency over `seconds` of steady load, and the
    wall clock at the window's end."""
    from apollo11.scheduler.client import SyncClient

    web = dev.http_endpoints[primary]
    eps = ",".join(dev.endpoints)
    with SyncClient(dev.endpoints[primary], retries=0, timeout_s=5) as c:
        e0 = c.status().last_event_id
    s0 = _scrape(web)
    wall0, wall1, _ = ex.submit(
        _offer, eps, "etl", {"step_seconds": 0}, SPIN_LOAD_TASKS_PER_S, seconds
    ).result()
    s1 = _scrape(web)
    with SyncClient(dev.endpoints[primary], retries=0, timeout_s=5) as c:
        e1 = c.status().last_event_id
    name = "apollo11_replication_ack_seconds"
    b0, b1 = _buckets(s0, name), _buckets(s1, name)
    window = {
        "window_s": round(wall1 - wall0, 1),
        "events_per_s": round((e1 - e0) / (wall1 - wall0)),
        "ack_p50_ms": round(_quantile(b0, b1, 0.5), 2),
        "ack_p99_ms": round(_quantile(b0, b1, 0.99), 2),
    }
    return window, wall1


# -------------------------------------------------------------------- run


def run(
    quick: bool,
    workdir: str | None,
    progress: Callable[[str], None],
    *,
    rounds: int | None = None,
    window: float | None = None,
    spin_s: float | None = None,
    kills: int | None = None,
    stops: int | None = None,
    sections: Sequence[str] = ("throughput", "dispatch", "fanout", "lost", "spin"),
) -> dict[str, Any]:
    rounds = rounds or (1 if quick else 3)
    window = window or (3.0 if quick else 10.0)
    spin_s = spin_s or (8.0 if quick else 30.0)
    kills = (2 if quick else 5) if kills is None else kills
    stops = (1 if quick else 3) if stops is None else stops
    base = Path(tempfile.mkdtemp(prefix="apollo11-bench-workers-", dir=workdir or os.getcwd()))
    result: dict[str, Any] = {"quick": quick}
    ctx = multiprocessing.get_context("spawn")
    ok = False
    try:
        with ProcessPoolExecutor(max_workers=2, mp_context=ctx, initializer=_as_load) as ex:
            if "throughput" in sections:
                result["throughput"] = _throughput(
                    base, ex, rounds, 1.5 if quick else 3.0, window, progress
                )
            if "dispatch" in sections:
                result["dispatch"] = _dispatch(base, ex, 3.0 if quick else 15.0, progress)
            if "fanout" in sections:
                result["fanout"] = _fanout(base, progress)
            if "lost" in sections:
                result["lost"] = _lost(base, kills, stops, progress)
            if "spin" in sections:
                result["spin"] = _spin(base, ex, spin_s, 3.0 if quick else 10.0, progress)
        result["targets"] = targets(result)
        ok = True
    finally:
        if ok:
            shutil.rmtree(base, ignore_errors=True)
        else:
            progress(f"logs kept in {base}")
    return result


def targets(r: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Issue 17's targets, each with the measured value and whether it is met."""
    measured: dict[str, float] = {}
    if "throughput" in r:
        measured["remote_2_workers_vs_embedded"] = r["throughput"]["median_vs_embedded"]["remote_2"]
    if "dispatch" in r:
        measured["dispatch_p99_ms"] = r["dispatch"]["remote_2"]["dispatch_p99_ms"]
    if "lost" in r and r["lost"]["kill_detected_s"]:
        measured["kill_detected_s"] = max(r["lost"]["kill_detected_s"])
    out = {}
    for name, value in measured.items():
        op, goal = TARGETS[name]
        met = value >= goal if op == "≥" else value <= goal
        out[name] = {"target": f"{op} {goal:g}", "value": value, "met": met}
    return out


def summary_rows(r: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if "throughput" in r:
        tp = r["throughput"]
        for i, one in enumerate(tp["rounds"]):
            rows.append(
                (
                    f"round {i + 1}: five-step no-op tasks/s, embedded; remote with 1, 2, 4 "
                    f"workers ({tp['slots_per_worker']} slots each)",
                    f"{one['embedded']['tasks_per_s']:,}; "
                    + ", ".join(
                        f"{one[k]['tasks_per_s']:,} (x{one[k]['vs_embedded']})"
                        for k in ("remote_1", "remote_2", "remote_4")
                    ),
                )
            )
        last = tp["rounds"][-1]
        rows.append(
            (
                f"round {len(tp['rounds'])}: node loop lag p99 / scheduling pass p99, "
                "embedded; remote 1, 2, 4",
                "; ".join(
                    f"{last[k]['loop_lag_p99_ms']} / {last[k]['scheduling_pass_p99_ms']} ms"
                    for k in ("embedded", "remote_1", "remote_2", "remote_4")
                ),
            )
        )
        rows.append(
            (
                f"round {len(tp['rounds'])}: CPU a step, the node's (the workers'), "
                "embedded; remote 1, 2, 4",
                "; ".join(
                    f"{last[k].get('node_cpu_us_per_step', '?')} "
                    f"({last[k].get('workers_cpu_us_per_step', '?')}) µs"
                    for k in ("embedded", "remote_1", "remote_2", "remote_4")
                ),
            )
        )
        med = tp["median_vs_embedded"]
        rows.append(
            (
                "median ratio to embedded: 1, 2, 4 workers",
                ", ".join(f"x{med[k]}" for k in ("remote_1", "remote_2", "remote_4")),
            )
        )
    if "dispatch" in r:
        d = r["dispatch"]
        rm, em = d["remote_2"], d["embedded"]
        rows.append(
            (
                f"apollo11_dispatch_seconds at {rm['offered_steps_per_s']:,} steps/s offered "
                f"(achieved {rm['achieved_steps_per_s']:,}), 2 workers",
                f"p50 {rm['dispatch_p50_ms']} ms, p99 {rm['dispatch_p99_ms']} ms "
                f"(node loop lag p99 {rm['loop_lag_p99_ms']} ms; embedded's "
                f"{em['loop_lag_p99_ms']} ms)",
            )
        )
        rows.append(
            (
                "STARTED timestamp to the step beginning: remote (2 workers) vs embedded",
                f"p50 {rm['started_to_began_p50_ms']} vs {em['started_to_began_p50_ms']} ms, "
                f"p99 {rm['started_to_began_p99_ms']} vs {em['started_to_began_p99_ms']} ms",
            )
        )
    if "fanout" in r:
        f = r["fanout"]
        for k, what in (("remote_4", "4 workers x 512 slots"), ("embedded", "embedded")):
            rows.append(
                (
                    f"{f['steps']:,} one-second sleeps at once, {what}: submit to all done",
                    f"{f[k]['wall_s']} s (x{f[k]['vs_ideal_1s']} the ideal; begins spread "
                    f"over {f[k]['first_to_last_begin_s']} s; {f[k]['attempts_failed']} "
                    f"attempts failed)",
                )
            )
    if "lost" in r:
        lo = r["lost"]
        rows.append(
            ("kill -9 of a worker mid-step: to the lost event", _secs(lo["kill_detected_s"]))
        )
        rows.append(
            (
                f"SIGSTOP of a worker: to the lost event (timeout {lo['heartbeat_timeout_s']:g}s, "
                f"beats every {lo['heartbeat_interval_s']:g}s)",
                _secs(lo["stop_detected_s"]),
            )
        )
    if "spin" in r:
        sp = r["spin"]
        for k in ("embedded", "remote"):
            one = sp[k]
            rows.append(
                (
                    f"2-node cluster, {sp['load_tasks_per_s']} tasks/s: ack p50 / p99 without, "
                    f"then with a {sp['spin_s']:g}s CPU step, {k}",
                    f"{one['calm']['ack_p50_ms']} / {one['calm']['ack_p99_ms']} ms, then "
                    f"{one['spinning']['ack_p50_ms']} / {one['spinning']['ack_p99_ms']} ms "
                    f"({one['spinning']['events_per_s']:,} events/s)",
                )
            )
    for name, t in r.get("targets", {}).items():
        rows.append(
            (f"target {name} {t['target']}", f"{t['value']}: {'met' if t['met'] else 'MISSED'}")
        )
    return rows


def _secs(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values) + " s" if values else "-"
