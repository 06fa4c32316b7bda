"""`apollo11 bench overload --connections`: connection floods with no credential,
on each port of a secure node, beside a legitimate client (issue 28).

For each port (gRPC client port, replication port, HTTPS) and each pattern of
flood.py (idle, half, churn, halfclose), on a fresh secure node (TLS, tokens,
peer mTLS, as docs/security.md sets one up):

1. a legitimate client (a submitter token, its connection open from 127.0.0.1)
   submits closed loop for `measure_s`: its submissions/s without a flood;
2. a flood process offers the pattern from FLOOD_SOURCES loopback addresses
   (re-opening what the node closes, as an attacker would) while the same
   client, on the same connection, goes on: its submissions/s during the
   flood, as a ratio to before (the target is ≥ 0.8, both measured on the same
   node seconds apart). A client that connects during the flood is tried once
   too: on the gRPC ports, which have no cap per source, a flood can fill the
   cap and keep it out (reported, not a failure: docs/security.md, "Connections");
3. first, on the same node, the flood alone (a client's submissions would grow
   the state too): the node's RSS and open files are sampled every second,
   during and for `settle_s` after; the RSS must come back within 20 % of
   where it was before the flood. The node's CPU over it is reported, in all and
   by thread (the event loop; gRPC core's pool, where its TLS handshakes run),
   and the flood process's own.

How the flood shares the machine (`flood_idle`): by default at nice 10, the method
of Dec 3, where its own CPU (a third of a core and more at thousands of connections
a second) comes off the two cores the node and the client share too. With
`flood_idle` it runs under SCHED_IDLE as well, as `bench failover`'s load
generators do: only on CPU time nobody else wants, as a flood from other machines
would cost this one only the node's work. Both are kept; the target is the same.
Each flood runs in a process of its own, never in the pool that runs the clients:
until Dec 6 a pool's process that had run a flood ran the client next under the
flood's SCHED_IDLE, and the client, not the flood, got the leftover CPU time
(docs/bench-history/overload.md, Dec 6 evening).

The client's rate before and during one flood, seconds apart, moves with whatever
else the machine runs: on the shared 2-core VM here a flood that cost the node 6 % of
a core gave x0.59 and x1.46 in two cells. With `interleave` each cell measures it a
second way too: one flood process, stopped and continued (SIGSTOP, SIGCONT) every
INTERLEAVE_S for INTERLEAVE_PAIRS pairs while the client goes on, and the client's
rate over the flood's halves against its rate over the quiet ones (the first
SETTLE_S after each switch left out): what the machine does meanwhile falls on both
alike.

A churn is closed loop unless `churn_rate` is given: each of 2 lanes per source
opens the next connection when the last has ended, in rounds of 8 per source. With
`churn_rate` it is open loop: connections start on schedule, up to 64 in flight per
source, whether or not those before have ended, so a flood whose SYNs the node
drops (api/connshed.py) keeps its offered rate instead of waiting out the retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from apollo11.scheduler.tools.bench import flood
from apollo11.scheduler.tools.bench.overload_bench import rss_mb, start_node, stop_node

PORTS = ("grpc", "peer", "http")
FLOOD_SOURCES = 40
PER_SOURCE = 100  # idle/half: what each source tries to hold
# churn/halfclose: `churn_rate` new connections a second from all sources, or as
# many as the flood process can make (the default: thousands a second). The flood
# shares the machine's 2 cores with the node and the client here, so part of what
# it takes from the client is its own CPU; the node's share is reported apart.
# Not pinned to cores: with the node on one core and the client and flood on the
# other, a churn of 284 connections/s took the client to x0.11 while it cost the
# node 6 % of a core (gRPC core's threads and the event loop on one core), where
# unpinned it was x0.85 (docs/benchmarks.md). The flood runs at nice 10.
INTERLEAVE_S = 2.0
INTERLEAVE_PAIRS = 6
SETTLE_S = 0.4
GRPC_POOL = "event_engine"  # gRPC core's thread pool: its TLS handshakes (api/connshed.py)
RSS_TARGET = 1.2
RATE_TARGET = 0.8


def _pki(d: Path) -> dict[str, str]:
    from apollo11.scheduler.security import Role, create_cluster_certs, create_token

    create_cluster_certs(d, ["n1"], days=1)
    token = create_token(d / "tokens", "bench", Role.SUBMITTER)
    return {"ca": str(d / "ca.pem"), "token": token, "tokens": str(d / "tokens")}


def _start(base: Path, pki: dict[str, str]) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    from apollo11.lease import free_port

    d = base / "pki"
    http = free_port()
    log_path = base / "node.log"
    cert, key = str(d / "n1.pem"), str(d / "n1-key.pem")
    args = ["--tls-cert", cert, "--tls-key", key, "--tokens-file", pki["tokens"]]
    args += ["--peer-listen", "127.0.0.1:0", "--peer-ca", pki["ca"]]
    args += ["--peer-cert", cert, "--peer-key", key, "--http", f"127.0.0.1:{http}"]
    # the client's 1,000+ submissions a second over a cell's minute (with --interleave)
    # would reach the default 50,000 tasks in memory and be refused
    args += ["--max-tasks-in-memory", "500000"]
    # the node as it is two minutes after a start or takeover: it sheds strangers up to
    # DROP_MAX at once (within the window, up to DROP_MAX_WELCOMING: api/connshed.py)
    args += ["--grpc-welcome-s", "0"]
    proc, address = start_node(base / "data", log_path, args, node_id="n1")
    # on the line that gave the client port
    peer = re.search(r"replication on port (\d+)", log_path.read_text(errors="replace"))
    assert peer is not None, f"no replication port in {log_path}"
    grpc = int(address.rpartition(":")[2])
    return proc, {"grpc": grpc, "peer": int(peer.group(1)), "http": http}


def _until_not_shedding(log_path: Path, within_s: float = 90.0) -> None:
    """Until the node no longer drops new connections' SYNs (api/connshed.py logs each
    episode's start and end): a client that connects meanwhile waits seconds for
    its SYN, which the client's own measurement would count as the flood's."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if text.count(SHED_BEGINS) <= text.count(SHED_ENDS):
            return
        time.sleep(0.5)
    raise RuntimeError(f"the node still sheds new connections after {within_s:.0f} s")


SHED_BEGINS = "of new connections (their clients retry)"
SHED_ENDS = "no longer dropping new connections"


def _legit(address: str, ca: str, token: str, seconds: float, clients: int = 8) -> list[float]:
    """Closed-loop submissions for `seconds` over one connection, opened first and
    kept: the wall-clock time of each accepted one."""
    from apollo11.scheduler.client import Client

    async def go() -> list[float]:
        done: list[float] = []
        async with Client(address, ca=ca, token=token, timeout_s=30, retries=6) as c:
            await c.status()
            stop = time.perf_counter() + seconds

            async def caller() -> None:
                while time.perf_counter() < stop:
                    await c.submit("etl", {"step_seconds": 0.0})
                    done.append(time.time())

            await asyncio.gather(*(caller() for _ in range(clients)))
        return done

    return asyncio.run(go())


def _new_client_answers(address: str, ca: str, token: str) -> bool:
    """Whether a client that connects now is answered (within the client's 2 s)."""
    from apollo11.scheduler.client import SyncClient

    try:
        with SyncClient(address, ca=ca, token=token, retries=0) as c:
            c.status()
        return True
    except Exception:
        return False


def _rate(times: Sequence[float], start: float, end: float) -> float:
    return sum(1 for t in times if start <= t < end) / (end - start) if end > start else 0.0


def _flood(
    port: int,
    pattern: flood.Pattern,
    seconds: float,
    rate: float | None = None,
    idle: bool = False,
    cpu: int | None = None,
) -> tuple[int, float]:
    """Offer `pattern` to `port` for `seconds` from a process of its own; returns
    connections attempted and the CPU seconds that process used for them.

    Its own process, not one of the bench's pool: the flood's nice 10 and SCHED_IDLE
    stay with the process that took them, and the pool's process went on to run the
    legitimate client under them (which nice 0 set back but SCHED_IDLE did not, and
    which an unprivileged process cannot set back at all)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    attack = ctx.Process(target=_flood_to, args=(out, port, pattern, seconds, rate, idle, cpu))
    attack.start()
    try:
        # read before the join: a child whose queue is unread may not exit
        result: tuple[int, float] = out.get(timeout=seconds + 120)
    finally:
        attack.join(30)
        if attack.is_alive():
            attack.kill()
    return result


def _flood_here(
    port: int,
    pattern: flood.Pattern,
    seconds: float,
    rate: float | None,
    idle: bool,
    cpu: int | None,
) -> tuple[int, float]:
    # A session of its own: where the kernel groups each session's processes for
    # fair shares (sched_autogroup_enabled, on by default), a flood in the bench's
    # session took its CPU out of that session's share, the node's and the client's,
    # SCHED_IDLE or not: a churn of 3,000 a second took 0.2 to 0.3 of a core from
    # them (docs/bench-history/overload.md, Dec 6 evening). In its own it competes
    # with the machine's other work as a flood from elsewhere would not compete at
    # all, and takes from the node and the client only their share of that.
    os.setsid()
    # beside the client: this process is the flood's alone (see _flood)
    os.setpriority(os.PRIO_PROCESS, 0, 10)
    if idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    if cpu is not None:  # as if from another host: see run()
        os.sched_setaffinity(0, {cpu})
    sources = [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(FLOOD_SOURCES)]
    cpu0 = sum(os.times()[:2])
    tried = asyncio.run(_offer(port, pattern, seconds, rate, sources))
    return tried, sum(os.times()[:2]) - cpu0


async def _offer(
    port: int,
    pattern: flood.Pattern,
    seconds: float,
    rate: float | None,
    sources: Sequence[str],
) -> int:
    stop = time.monotonic() + seconds
    tried = 0
    if pattern in ("idle", "half"):
        helds: list[flood.Held] = []
        while time.monotonic() < stop:
            for h in helds:
                h.close()
            helds = list(
                await asyncio.gather(
                    *(flood.hold("127.0.0.1", port, PER_SOURCE, pattern, source=s) for s in sources)
                )
            )
            tried += PER_SOURCE * len(sources)
            # held until the node closes them, then again
            while time.monotonic() < stop and any(h.open() for h in helds):
                await asyncio.sleep(1)
                for h in helds:
                    await h.drain_reads()
        for h in helds:
            h.close()
        return tried
    if rate is not None:
        started = await asyncio.gather(
            *(
                flood.churn_open(
                    "127.0.0.1", port, pattern, source=s, rate=rate / len(sources), seconds=seconds
                )
                for s in sources
            )
        )
        return sum(started)
    while time.monotonic() < stop:
        await asyncio.gather(
            *(flood.churn("127.0.0.1", port, 8, pattern, source=s, concurrency=2) for s in sources)
        )
        tried += 8 * len(sources)
    return tried


def _flood_to(out: Any, *args: Any) -> None:
    out.put(_flood_here(*args))


def _interleaved(
    ex: ProcessPoolExecutor,
    address: str,
    pki: dict[str, str],
    args: tuple[Any, ...],
    node_pid: int,
) -> dict[str, Any]:
    """The client's rate while one flood process runs against while it is stopped,
    alternating every INTERLEAVE_S (see the module's docstring); and the node's cores
    used and its threads' time waiting for a core, per second of each (schedstat):
    whether the node got less CPU with the flood on, or spent it otherwise."""
    ctx = multiprocessing.get_context("spawn")
    span = 2 * INTERLEAVE_PAIRS * INTERLEAVE_S
    legit = ex.submit(_legit, address, pki["ca"], pki["token"], span + 6)
    out = ctx.Queue()
    attack = ctx.Process(target=_flood_to, args=(out, *args[:2], span + 4, *args[3:]))
    time.sleep(2)  # the client connected and going
    attack.start()
    on: list[tuple[float, float]] = []
    off: list[tuple[float, float]] = []
    node = {True: [0.0, 0.0], False: [0.0, 0.0]}  # flood on: [CPU s, waiting s]

    def half(flood_on: bool) -> None:
        os.kill(attack.pid, signal.SIGCONT if flood_on else signal.SIGSTOP)  # type: ignore[arg-type]
        time.sleep(SETTLE_S)
        began, (cpu0, wait0) = time.time(), flood.schedstat(node_pid)
        time.sleep(INTERLEAVE_S - SETTLE_S)
        cpu1, wait1 = flood.schedstat(node_pid)
        (on if flood_on else off).append((began, time.time()))
        node[flood_on][0] += cpu1 - cpu0
        node[flood_on][1] += wait1 - wait0

    try:
        time.sleep(1.5)  # the flood up to speed
        for _ in range(INTERLEAVE_PAIRS):
            half(False)
            half(True)
    finally:
        with contextlib.suppress(OSError):
            os.kill(attack.pid, signal.SIGCONT)  # type: ignore[arg-type]
        attack.join(span + 30)
        if attack.is_alive():
            attack.kill()
    times = legit.result()

    def rate(windows: list[tuple[float, float]]) -> float:
        n = sum(sum(1 for t in times if a <= t < b) for a, b in windows)
        return n / sum(b - a for a, b in windows)

    quiet = rate(off)
    span_on, span_off = sum(b - a for a, b in on), sum(b - a for a, b in off)
    return {
        "legit_ratio_interleaved": round(rate(on) / quiet, 3) if quiet else None,
        "node_cpu_share_flood_off": round(node[False][0] / span_off, 2),
        "node_cpu_share_flood_on": round(node[True][0] / span_on, 2),
        "node_waiting_flood_off": round(node[False][1] / span_off, 2),
        "node_waiting_flood_on": round(node[True][1] / span_on, 2),
    }


def _cell(
    base: Path,
    port_name: str,
    pattern: flood.Pattern,
    measure_s: float,
    settle_s: float,
    ex: ProcessPoolExecutor,
    progress: Callable[[str], None],
    churn_rate: float | None,
    flood_idle: bool,
    interleave: bool,
    flood_on: int | None = None,
) -> dict[str, Any]:
    base.mkdir(parents=True)
    pki = _pki(base / "pki")
    proc, ports = _start(base, pki)
    address = f"127.0.0.1:{ports['grpc']}"
    samples: list[tuple[float, float, int]] = []
    t0 = time.monotonic()

    def sample() -> None:
        at = round(time.monotonic() - t0, 1)
        samples.append((at, rss_mb(proc.pid), flood.open_fds(proc.pid)))

    # a flood waits on its own process from a thread here; the pool runs the clients
    floods = ThreadPoolExecutor(max_workers=1)
    try:
        _new_client_answers(address, pki["ca"], pki["token"])  # the node has served once
        # memory and files: the flood alone (a client's tasks would grow the state too)
        time.sleep(1)
        rss0, fds0 = rss_mb(proc.pid), flood.open_fds(proc.pid)
        cpu0, began = flood.cpu_seconds(proc.pid), time.monotonic()
        threads0 = flood.thread_cpu(proc.pid)
        args = (ports[port_name], pattern, measure_s + 3, churn_rate, flood_idle, flood_on)
        attack = floods.submit(_flood, *args)
        while not attack.done():
            sample()
            time.sleep(1)
        tried, flood_cpu = attack.result()
        flood_s = time.monotonic() - began
        node_cpu = flood.cpu_seconds(proc.pid) - cpu0
        threads = flood.thread_cpu(proc.pid)
        loop_cpu = threads.get("main", 0.0) - threads0.get("main", 0.0)
        # its threads come and go: those that ended are missing from both sides
        pool_cpu = max(0.0, threads.get(GRPC_POOL, 0.0) - threads0.get(GRPC_POOL, 0.0))
        end_of_flood = len(samples)
        settled = time.monotonic() + settle_s
        while time.monotonic() < settled:
            sample()
            time.sleep(1)
        # the legitimate client: one connection throughout, measure_s before, the flood
        _until_not_shedding(base / "node.log")
        t_start = time.time()
        legit = ex.submit(_legit, address, pki["ca"], pki["token"], 2 + 2 * measure_s + 5)
        time.sleep(2 + measure_s)
        flood_start = time.time()
        attack = floods.submit(_flood, *args)
        time.sleep(3)
        newcomer = _new_client_answers(address, pki["ca"], pki["token"])
        tried_beside, flood_cpu_beside = attack.result()
        flood_end = time.time()
        times = legit.result()
        before = _rate(times, t_start + 2, flood_start)
        during = _rate(times, flood_start + 1.5, min(flood_end, max(times, default=0)))
        if interleave:
            _until_not_shedding(base / "node.log")
        interleaved = _interleaved(ex, address, pki, args, proc.pid) if interleave else {}
        alive = proc.poll() is None
    finally:
        floods.shutdown()
        stop_node(proc)
    cell = {
        "port": port_name,
        "pattern": pattern,
        "connections_offered": tried,
        "offered_per_s": round(tried / flood_s),
        "node_cpu_share": round(node_cpu / flood_s, 2),
        "node_cpu_ms_per_connection": round(1000 * node_cpu / tried, 3) if tried else None,
        "node_loop_cpu_share": round(loop_cpu / flood_s, 2),
        "node_grpc_pool_cpu_share": round(pool_cpu / flood_s, 2),
        "flood_cpu_share": round(flood_cpu / flood_s, 2),
        "offered_beside_client_per_s": round(tried_beside / (flood_end - flood_start)),
        "flood_cpu_share_beside_client": round(flood_cpu_beside / (flood_end - flood_start), 2),
        "rss_start_mb": round(rss0, 1),
        "rss_peak_mb": round(max(r for _, r, _ in samples), 1),
        "rss_end_of_flood_mb": round(samples[end_of_flood - 1][1], 1),
        "rss_after_mb": round(samples[-1][1], 1),
        "fds_start": fds0,
        "fds_peak": max(f for _, _, f in samples),
        "fds_after": samples[-1][2],
        "legit_before_per_s": round(before, 1),
        "legit_during_per_s": round(during, 1),
        "legit_ratio": round(during / before, 3) if before else 0.0,
        "legit_ratio_interleaved": interleaved.get("legit_ratio_interleaved"),
        **interleaved,
        "new_client_answered_during_flood": newcomer,
        "samples": [(t, round(r, 1), f) for t, r, f in samples],
        "node_alive": alive,
    }
    progress(
        f"{port_name} {pattern} ({cell['offered_per_s']}/s, node CPU "
        f"{cell['node_cpu_share']:.0%}, loop {cell['node_loop_cpu_share']:.0%}, gRPC pool "
        f"{cell['node_grpc_pool_cpu_share']:.0%}; flood {cell['flood_cpu_share']:.0%}): "
        f"RSS {cell['rss_start_mb']:.0f} -> peak "
        f"{cell['rss_peak_mb']:.0f} "
        f"-> {cell['rss_after_mb']:.0f} MB; files {fds0} -> {cell['fds_peak']} -> "
        f"{cell['fds_after']}; legit {before:.0f} -> {during:.0f}/s (x{cell['legit_ratio']:.2f}) "
        f"beside {cell['offered_beside_client_per_s']}/s; {_interleaved_text(cell)}"
    )
    return cell


def run(
    quick: bool,
    workdir: str | None,
    progress: Callable[[str], None],
    *,
    ports: Sequence[str] = PORTS,
    patterns: Sequence[flood.Pattern] = flood.PATTERNS,
    churn_rate: float | None = None,
    flood_idle: bool = False,
    interleave: bool = False,
    flood_cpu: int | None = None,
) -> dict[str, Any]:
    """With `flood_cpu`, the flood runs on that CPU alone and this process, the node and
    the client on the others (the affinity is inherited): a flood from another host
    costs this one only the node's work, where on one machine the flood's own system
    calls (a loopback connect carries both ends of the handshake) take the cores the
    node and the client run on, whatever its priority."""
    previous = os.sched_getaffinity(0)
    if flood_cpu is not None:
        rest = previous - {flood_cpu}
        if flood_cpu not in previous or not rest:
            raise ValueError(
                f"--flood-cpu {flood_cpu}: one of this process's CPUs "
                f"({', '.join(map(str, sorted(previous)))}) and not the only one"
            )
        os.sched_setaffinity(0, rest)
    try:
        return _run(quick, workdir, progress, ports, patterns, churn_rate, flood_idle,
                    interleave, flood_cpu)  # fmt: skip
    finally:
        os.sched_setaffinity(0, previous)


def _run(
    quick: bool,
    workdir: str | None,
    progress: Callable[[str], None],
    ports: Sequence[str],
    patterns: Sequence[flood.Pattern],
    churn_rate: float | None,
    flood_idle: bool,
    interleave: bool,
    flood_cpu: int | None,
) -> dict[str, Any]:
    measure_s = 5.0 if quick else 10.0
    settle_s = 20.0 if quick else 30.0
    base = Path(tempfile.mkdtemp(prefix="apollo11-connflood-", dir=workdir or os.getcwd()))
    ctx = multiprocessing.get_context("spawn")
    cells = []
    try:
        with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
            for port_name in ports:
                for pattern in patterns:
                    cells.append(
                        _cell(
                            base / f"{port_name}-{pattern}",
                            port_name,
                            pattern,
                            measure_s,
                            settle_s,
                            ex,
                            progress,
                            churn_rate,
                            flood_idle,
                            interleave,
                            flood_cpu,
                        )
                    )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "quick": quick,
        "measure_s": measure_s,
        "settle_s": settle_s,
        "churn_rate": churn_rate,
        "flood_sched": "SCHED_IDLE, nice 10" if flood_idle else "nice 10",
        "interleave": interleave,
        "flood_cpu": flood_cpu,
        "cells": cells,
    }


def failed(r: dict[str, Any]) -> str | None:
    """Why the run fails (the CLI exits nonzero), or None."""
    for c in r["cells"]:
        name = f"{c['port']} {c['pattern']}"
        if not c["node_alive"]:
            return f"{name}: the node died"
        if c["rss_after_mb"] > c["rss_start_mb"] * RSS_TARGET:
            return f"{name}: RSS {c['rss_start_mb']} MB before, {c['rss_after_mb']} after"
        # interleaved (the flood stopped and continued every 2 s), the client's rate
        # with and without it shares the machine's other load: the ratio to judge
        ratio = c.get("legit_ratio_interleaved") or c["legit_ratio"]
        if ratio < RATE_TARGET:
            return f"{name}: the legitimate client got x{ratio} of its rate"
    return None


def _interleaved_text(c: dict[str, Any]) -> str:
    x = c.get("legit_ratio_interleaved")
    if x is None:
        return ""
    return (
        f"x{x:.2f} interleaved (node cores {c['node_cpu_share_flood_off']:.2f} -> "
        f"{c['node_cpu_share_flood_on']:.2f}, its threads waiting for one "
        f"{c['node_waiting_flood_off']:.2f} -> {c['node_waiting_flood_on']:.2f}), "
    )


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [
        ("port pattern (connections offered)", "start/peak/after; the client's x during/before")
    ]
    for c in r["cells"]:
        newcomer = {True: "a new client served", False: "a new client kept out", None: "-"}
        rows.append(
            (
                f"{c['port']} {c['pattern']} ({c['offered_per_s']:,}/s offered, node CPU "
                f"{c['node_cpu_share']:.0%}, gRPC pool {c['node_grpc_pool_cpu_share']:.0%}, "
                f"flood {c['flood_cpu_share']:.0%})",
                f"RSS {c['rss_start_mb']:.0f}/{c['rss_peak_mb']:.0f}/{c['rss_after_mb']:.0f} MB, "
                f"files {c['fds_start']}/{c['fds_peak']}/{c['fds_after']}, "
                f"legit x{c['legit_ratio']:.2f} ({c['legit_before_per_s']:.0f} -> "
                f"{c['legit_during_per_s']:.0f}/s beside {c['offered_beside_client_per_s']:,}/s), "
                + _interleaved_text(c)
                + newcomer[c["new_client_answered_during_flood"]],
            )
        )
    return rows
