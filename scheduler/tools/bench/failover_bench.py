"""`apollo11 bench failover`: a real etcd and three node processes, killed for real.

* failover time: from SIGKILL of the primary to the first write acknowledged
  by the new one, over N kills, with tasks being submitted all along;
* acknowledged writes lost (with the default --sync-replicas 1: must be 0);
* replication lag (durable on the primary -> acknowledged by a standby) under
  an offered load of 5k and 20k events/s;
* end to end: five-step tasks per second through gRPC with two synchronous
  standbys (--sync-replicas 2).

`apollo11 bench lag` runs the 10k events/s window alone, on several fresh clusters.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import signal
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from apollo11.lease import free_port
from apollo11.scheduler.tools.dev import DevCluster

CLIENTS = int(os.environ.get("E2E_CLIENTS", "32"))
# The load generators share two cores with the three nodes and etcd; in a deployment
# they run elsewhere. At nice 10 they, not the nodes, wait when the CPU is short
# (docs/benchmarks.md, "Figures behind the knobs").
LOAD_NICE = int(os.environ.get("APOLLO11_BENCH_LOAD_NICE", "10"))
# ...and, by default, under SCHED_IDLE: they run only on CPU time that no node wants,
# as clients on other machines would (0: nice alone, as before Nov 30 16:00).
LOAD_IDLE = os.environ.get("APOLLO11_BENCH_LOAD_IDLE", "1") != "0"


def _as_remote_client() -> None:
    """Called in a load generator process: keep it from taking CPU from the nodes."""
    os.nice(LOAD_NICE)
    if LOAD_IDLE and hasattr(os, "SCHED_IDLE"):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


PUBLISHED = {  # published failover defaults of the systems people compare with
    "Patroni (ttl)": 30.0,
    "Kubernetes leader election (lease duration)": 15.0,
    "Redis Sentinel (down-after-milliseconds)": 30.0,
}


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _cluster(
    base: Path, ttl: float, env: dict[str, str] | None = None, http: bool = False
) -> DevCluster:
    port, web = _free_run(), _free_run() if http else 0
    dev = DevCluster(
        base, 3, port, etcd_port=free_port(), lease_ttl=ttl, env=env or {}, http_base_port=web
    )
    dev.start()
    return dev


def _free_run(n: int = 3) -> int:
    """The first of n free consecutive ports."""
    port = free_port()
    while any(_busy(port + i) for i in range(n)):
        port = free_port()
    return port


def _scrape(address: str) -> dict[str, list[tuple[float, float]]]:
    """Cumulative buckets of the ack-latency histogram, per standby; and of the
    submission commit latency, under "submit"."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[float, float]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in (
            "apollo11_replication_ack_seconds",
            "apollo11_submit_commit_seconds",
        ):
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                key = sample.labels.get("standby", "submit")
                out.setdefault(key, []).append((le, sample.value))
    return {k: sorted(v) for k, v in out.items()}


def _quantile(
    before: list[tuple[float, float]], after: list[tuple[float, float]], q: float
) -> float:
    """histogram_quantile over what was observed between two scrapes (ms)."""
    old = dict(before)
    counts = [(le, c - old.get(le, 0.0)) for le, c in after]
    total = counts[-1][1] if counts else 0
    if not total:
        return float("nan")
    rank, lo, below = q * total, 0.0, 0.0
    for le, c in counts:
        if c >= rank:
            if le == float("inf"):
                return lo * 1000
            return (lo + (le - lo) * (rank - below) / max(c - below, 1e-9)) * 1000
        lo, below = le, c
    return lo * 1000


def _busy(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _status(address: str) -> dict[str, Any] | None:
    from apollo11.scheduler.client import SyncClient

    try:
        with SyncClient(address, retries=0, timeout_s=1) as c:
            return c.status().to_json()
    except Exception:
        return None


def _primary(dev: DevCluster, timeout: float = 60, exclude: str | None = None) -> str:
    return dev.primary(exclude=exclude, timeout=timeout)[0]


class _Load(threading.Thread):
    def __init__(self, endpoints: str) -> None:
        super().__init__(daemon=True)
        self.endpoints = endpoints
        self.acked: list[str] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        from apollo11.scheduler.client import SyncClient

        with SyncClient(self.endpoints, retries=2, timeout_s=3) as c:
            while not self.stop_flag.is_set():
                try:
                    self.acked.append(c.submit("etl", {"step_seconds": 0.02}).task_id)
                except Exception:
                    time.sleep(0.02)
                time.sleep(0.01)


def _failovers(dev: DevCluster, cycles: int, progress: Callable[[str], None]) -> dict[str, Any]:
    from apollo11.scheduler.client import SyncClient

    eps = ",".join(dev.endpoints)
    load = _Load(eps)
    load.start()
    times: list[float] = []
    # the same failover, as an application's default client sees it: (its, the probe's)
    seen: list[tuple[float, float]] = []
    deaths: list[str] = []
    app = SyncClient(eps)  # defaults: what an application gets
    app.status()
    try:
        time.sleep(1.0)
        for n in range(cycles):
            deaths += _restart_the_dead(dev, progress)
            old = _primary(dev)
            i = int(old[1:]) - 1
            app.submit("etl", {"step_seconds": 0})  # it knows the primary it will lose
            done: list[float] = []

            def call(done: list[float] = done) -> None:
                app.submit("etl", {"step_seconds": 0})
                done.append(time.monotonic())

            dev.kill(old, signal.SIGKILL)
            t0 = time.monotonic()
            caller = threading.Thread(target=call, daemon=True)
            caller.start()
            live = ",".join(ep for k, ep in enumerate(dev.endpoints) if k != i)
            with SyncClient(live, retries=0, timeout_s=1) as probe:
                while True:
                    try:
                        probe.submit("etl", {"step_seconds": 0})
                        break
                    except Exception:
                        time.sleep(0.01)
            times.append(time.monotonic() - t0)
            caller.join(30)
            if done:
                seen.append((done[0] - t0, times[-1]))
            progress(
                f"kill {n + 1}/{cycles}: {old} -> new primary acknowledged after {times[-1]:.2f}s"
                + (f", the default client's call after {seen[-1][0]:.2f}s" if done else "")
            )
            dev.start_node(i)
            # let the old primary rejoin and catch up before the next kill
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                s = _status(dev.endpoints[i])
                if (
                    s
                    and s["role"] == "standby"
                    and all(m["lag_events"] == 0 for m in s["members"] if m["node_id"] == old)
                ):
                    break
                time.sleep(0.1)
    finally:
        app.close()
        load.stop_flag.set()
        load.join(30)
    with SyncClient(eps, timeout_s=10) as c:
        for t in load.acked:
            c.wait(t)
    deaths += _restart_the_dead(dev, progress)
    return {
        "failover_s": times,
        "client_failover_s": seen,
        "acked": load.acked,
        "unexpected_exits": deaths,
    }


def _restart_the_dead(dev: DevCluster, progress: Callable[[str], None]) -> list[str]:
    """Nodes that ended although the bench did not kill them (each a finding: the node's
    log should say why), started again so that the loop goes on."""
    found = dev.unexpected_exits()
    for node_id, line in found.items():
        progress(f"a node exited on its own: {line}")
        dev.start_node(int(node_id[1:]) - 1)
    return list(found.values())


def _acked_lost(dev: DevCluster, acked: list[str]) -> int:
    from apollo11.scheduler.log import EventLog, EventType

    primary = _primary(dev)
    dev.stop()
    log = EventLog.open(dev.root / primary, read_only=True)
    submitted = {e.task_id for e in log.read() if e.event_type is EventType.TASK_SUBMITTED}
    log.close_sync()
    return sum(1 for t in acked if t not in submitted)


def _offered(endpoints: str, tasks_per_s: float, seconds: float, batched: bool = False) -> int:
    """Open-loop submissions at a fixed rate; returns how many were acknowledged.
    Batched: what is due every 10 ms goes in one SubmitTasks call."""
    from apollo11.scheduler.client import Client

    _as_remote_client()
    noop = {"workflow": "etl", "input": {"step_seconds": 0}}

    async def go() -> int:
        async with Client(endpoints, retries=2) as c:
            await c.status()  # connected before the clock starts
            t0 = time.perf_counter()
            sent = 0
            tasks: list[asyncio.Task[Any]] = []
            while (now := time.perf_counter()) - t0 < seconds:
                due = int((now - t0) * tasks_per_s)
                if batched and due > sent:
                    tasks.append(asyncio.create_task(c.submit_many([noop] * (due - sent))))
                    sent = due
                while sent < due:
                    tasks.append(asyncio.create_task(c.submit("etl", {"step_seconds": 0})))
                    sent += 1
                await asyncio.sleep(0.01 if batched else 0.002)
            results = await asyncio.gather(*tasks, return_exceptions=True)
        return sum(
            len(r) if isinstance(r, list) else 1
            for r in results
            if not isinstance(r, BaseException)
        )

    return asyncio.run(go())


def _lag_at(
    dev: DevCluster, events_per_s: int, seconds: float, batched: bool = False
) -> dict[str, Any]:
    """Open-loop load at a rate; ack latency of the standbys over that window only."""
    ctx = multiprocessing.get_context("spawn")
    primary = int(_primary(dev)[1:]) - 1
    web = dev.http_endpoints[primary]
    eps = ",".join(dev.endpoints)
    before = _status(dev.endpoints[primary]) or {}
    hist0 = _scrape(web)
    t0 = time.monotonic()
    per_proc = events_per_s / 11 / 2  # a five-step task is 11 events
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        list(ex.map(_offered, [eps, eps], [per_proc] * 2, [seconds] * 2, [batched] * 2))
    hist1 = _scrape(web)
    s = _status(dev.endpoints[primary]) or {}
    elapsed = time.monotonic() - t0  # spawning the load processes included: a low bound
    q = {
        name: (_quantile(hist0.get(name, []), h, 0.5), _quantile(hist0.get(name, []), h, 0.99))
        for name, h in hist1.items()
    }
    submit = q.pop("submit", (float("nan"), float("nan")))
    return {
        "offered_events_per_s": events_per_s,
        "achieved_events_per_s": round(
            (int(s.get("last_event_id", 0)) - int(before.get("last_event_id", 0))) / elapsed
        ),
        "p50_ms": round(max((p50 for p50, _ in q.values()), default=float("nan")), 2),
        "p99_ms": round(max((p99 for _, p99 in q.values()), default=float("nan")), 2),
        # what a submission waited for on the primary: its fsync, then the standby's ack
        "submit_commit_p50_ms": round(submit[0], 2),
        "submit_commit_p99_ms": round(submit[1], 2),
    }


def _submit_many(
    endpoints: str, n: int, concurrency: int, batch: int = 0
) -> tuple[float, list[str]]:
    """Submit n tasks from `concurrency` coroutines; returns (wall time of the first
    submission, task ids). The clock starts once connected, so that starting this
    process and importing grpc are not counted against the cluster."""
    from apollo11.scheduler.client import Client

    _as_remote_client()

    async def go() -> tuple[float, list[str]]:
        ids: list[str] = []
        async with Client(endpoints, retries=3) as c:
            await c.status()
            t0 = time.time()

            async def worker() -> None:
                if batch:
                    noop = {"workflow": "etl", "input": {"step_seconds": 0}}
                    for _ in range(n // concurrency // batch):
                        ids.extend(s.task_id for s in await c.submit_many([noop] * batch))
                    return
                for _ in range(n // concurrency):
                    ids.append((await c.submit("etl", {"step_seconds": 0})).task_id)

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return t0, ids

    return asyncio.run(go())


def _e2e(dev: DevCluster, n: int, batch: int = 0) -> float:
    """Five-step tasks per second, from the first submission to the last task finished
    (batch: SubmitTasks calls of that many tasks, from 4 coroutines per process)."""
    ctx = multiprocessing.get_context("spawn")
    eps = ",".join(dev.endpoints)
    primary = dev.endpoints[int(_primary(dev)[1:]) - 1]
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        clients = 4 if batch else CLIENTS
        parts = list(ex.map(_submit_many, [eps] * 2, [n // 2] * 2, [clients] * 2, [batch] * 2))
    t0 = min(t for t, _ in parts)
    ids = [t for _, part in parts for t in part]
    while True:  # all of them finished: nothing active on the primary
        s = _status(primary)
        if s is not None and s["active_tasks"] == 0:
            break
        # Not faster: a status call counts the tasks in memory, on the primary's loop,
        # and polling at 100 Hz took several percent of it (the clock is off by < 50 ms).
        time.sleep(0.05)
    return len(ids) / (time.time() - t0)


def run(
    quick: bool,
    workdir: str | None,
    progress: Callable[[str], None],
    cycles: int | None = None,
    ttl: float = 5.0,
) -> dict[str, Any]:
    cycles = cycles if cycles is not None else (3 if quick else 20)
    lag_seconds = _lag_window_s(quick)
    base = Path(tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd()))
    result: dict[str, Any] = {"quick": quick, "lease_ttl_s": ttl, "cycles": cycles}
    try:
        progress(f"three nodes, TTL {ttl:g}s, {cycles} kills of the primary under load")
        dev = _cluster(base / "failover", ttl)
        try:
            _primary(dev)
            fo = _failovers(dev, cycles, progress)
            result["unexpected_exits"] = fo["unexpected_exits"]
            result["acked_writes"] = len(fo["acked"])
            result["acked_lost"] = _acked_lost(dev, fo["acked"])
        finally:
            dev.stop()
        ms = [t * 1000 for t in fo["failover_s"]]
        result["failover_ms"] = {
            "p50": round(_pct(ms, 0.5)),
            "p99": round(_pct(ms, 0.99)),
            "max": round(max(ms)),
        }
        # the same kills, as an application's default Client sees them: its call made
        # at the kill, acknowledged; and how long after the probe's (the new primary
        # taking writes, seen by a client asking every 10 ms)
        seen = [c * 1000 for c, _ in fo["client_failover_s"]]
        late = [(c - p) * 1000 for c, p in fo["client_failover_s"]]
        if seen:
            result["client_failover_ms"] = {
                "p50": round(_pct(seen, 0.5)),
                "p99": round(_pct(seen, 0.99)),
                "after_the_new_primary_p50": round(_pct(late, 0.5)),
                "after_the_new_primary_max": round(max(late)),
            }
        progress("replication lag under offered load")
        dev = _lag_cluster(base / "lag", ttl)
        try:
            result["lag_ms"] = {
                f"at_{r // 1000}k_events_per_s": _lag_at(dev, r, lag_seconds)
                for r in (5_000, 10_000, 20_000)
            }
            # The same 10k events/s submitted in batches (SubmitTasks every 10 ms): the
            # primary's CPU is not spent on a gRPC call per task.
            result["lag_ms"]["at_10k_events_per_s_batched"] = _lag_at(
                dev, 10_000, lag_seconds, batched=True
            )
        finally:
            dev.stop()
        progress("end to end with two synchronous standbys (--sync-replicas 2)")
        # No-op steps: a high step concurrency, so that steps waiting for their STARTED
        # to reach both standbys do not hold every slot.
        dev = _cluster(
            base / "e2e", ttl, env={"APOLLO11_SYNC_REPLICAS": "2", "APOLLO11_CONCURRENCY": "512"}
        )
        try:
            _primary(dev)
            time.sleep(1)
            result["e2e_tasks_per_s_sync2"] = round(_e2e(dev, 1000 if quick else 4000))
            result["e2e_tasks_per_s_sync2_batched"] = round(
                _e2e(dev, 1600 if quick else 4800, batch=100)
            )
        finally:
            dev.stop()
        result["published_defaults_s"] = PUBLISHED
    finally:
        if result.get("unexpected_exits"):
            result["logs_kept"] = str(base / "failover")  # the evidence
        else:
            shutil.rmtree(base, ignore_errors=True)
    return result


def _lag_window_s(quick: bool) -> float:
    """Each offered-load window (`bench lag` runs the same one as `bench failover`)."""
    return 3.0 if quick else 6.0


def _lag_cluster(base: Path, ttl: float) -> DevCluster:
    """Three nodes with a primary, serving HTTP for the ack-latency histograms. No-op
    steps, so a high step concurrency: the offered rate is then what the engine runs,
    rather than what 32 slots waiting on commits can."""
    dev = _cluster(base, ttl, env={"APOLLO11_CONCURRENCY": "512"}, http=True)
    try:
        _primary(dev)
    except BaseException:
        dev.stop()
        raise
    time.sleep(1)
    return dev


def run_lag(
    quick: bool,
    workdir: str | None,
    progress: Callable[[str], None],
    rounds: int = 5,
    ttl: float = 5.0,
) -> dict[str, Any]:
    """The 10k events/s window of `bench failover`, on `rounds` fresh clusters: one
    window's p99 swings with the machine, and this shows by how much."""
    seconds = _lag_window_s(quick)
    base = Path(tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd()))
    windows: list[dict[str, Any]] = []
    try:
        for i in range(rounds):
            progress(f"round {i + 1} of {rounds}: a fresh cluster, 5k then 10k events/s")
            dev = _lag_cluster(base / f"lag-{i}", ttl)
            try:
                _lag_at(dev, 5_000, seconds)  # as in `bench failover`: the same history
                windows.append(_lag_at(dev, 10_000, seconds))
            finally:
                dev.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    p99 = sorted(w["p99_ms"] for w in windows)
    return {
        "quick": quick,
        "rounds": rounds,
        "window_s": seconds,
        "at_10k_events_per_s": windows,
        "p99_ms": {"min": p99[0], "median": round(statistics.median(p99), 2), "max": p99[-1]},
        "rounds_within_10_ms": sum(1 for v in p99 if v <= 10.0),
    }


def lag_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        (
            f"round {i + 1}: replication ack latency at 10k events/s",
            f"p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms "
            f"(achieved {w['achieved_events_per_s']:,} events/s)",
        )
        for i, w in enumerate(r["at_10k_events_per_s"])
    ]
    p = r["p99_ms"]
    rows.append(
        (
            f"p99 over {r['rounds']} rounds of {r['window_s']:g} s",
            f"min {p['min']} ms, median {p['median']} ms, max {p['max']} ms; "
            f"{r['rounds_within_10_ms']} of {r['rounds']} within 10 ms",
        )
    )
    return rows


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    fo = r["failover_ms"]
    rows = [
        (
            f"failover, kill -9 of the primary ({r['cycles']} times, TTL {r['lease_ttl_s']:g}s)",
            f"p50 {fo['p50']} ms, p99 {fo['p99']} ms, max {fo['max']} ms",
        ),
        *(
            [
                (
                    "  the same, as the Python client sees it (its call made at the kill)",
                    f"p50 {c['p50']} ms, p99 {c['p99']} ms; after the new primary: "
                    f"p50 {c['after_the_new_primary_p50']} ms, max "
                    f"{c['after_the_new_primary_max']} ms",
                )
            ]
            if (c := r.get("client_failover_ms"))
            else []
        ),
        ("acknowledged writes lost", f"{r['acked_lost']} of {r['acked_writes']}"),
        (
            "nodes that exited without being killed",
            f"{len(r['unexpected_exits'])}"
            + (f" (logs kept in {r['logs_kept']})" if r["unexpected_exits"] else ""),
        ),
    ]
    for name, lag in r["lag_ms"].items():
        rows.append(
            (
                f"replication ack latency {name.replace('_', ' ')}",
                f"p50 {lag['p50_ms']} ms, p99 {lag['p99_ms']} ms "
                f"(achieved {lag['achieved_events_per_s']:,} events/s; a submission's "
                f"commit p50 {lag['submit_commit_p50_ms']} ms, "
                f"p99 {lag['submit_commit_p99_ms']} ms)",
            )
        )
    rows.append(
        ("five-step tasks/s end to end, 2 sync standbys", f"{r['e2e_tasks_per_s_sync2']:,}")
    )
    rows.append(
        (
            "same, submitted 100 at a time (SubmitTasks)",
            f"{r['e2e_tasks_per_s_sync2_batched']:,}",
        )
    )
    for name, secs in r["published_defaults_s"].items():
        rows.append((f"for comparison: {name}", f"{secs:g} s"))
    return rows
