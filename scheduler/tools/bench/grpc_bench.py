"""`apollo11 bench grpc`: submissions through gRPC against one node, fsync on.

A real node process, and load generators in other processes: many
concurrent clients for throughput, then one client alone for the latency a
single caller sees. Submitted tasks park on a long first step so the
measurement is the API and the log, not the steps.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _load(
    address: str,
    clients: int,
    seconds: float,
    batch: int = 0,
    creds: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Submissions from `clients` coroutines; with `batch`, SubmitTasks calls of that many
    tasks (n counts tasks, lat is per call); `creds`: the Client's ca and token."""
    from apollo11.scheduler.client import Client

    async def go() -> dict[str, Any]:
        lat: list[float] = []
        n = 0
        stop = time.perf_counter() + seconds
        async with Client(address, retries=0, **(creds or {})) as c:
            await c.submit("etl", {"step_seconds": 3600})  # warm the channel

            async def one(k: int) -> None:
                nonlocal n
                park = {"workflow": "etl", "input": {"step_seconds": 3600, "k": k}}
                while time.perf_counter() < stop:
                    t0 = time.perf_counter()
                    if batch:
                        await c.submit_many([park] * batch)
                    else:
                        await c.submit("etl", {"step_seconds": 3600, "k": k})
                    lat.append(time.perf_counter() - t0)
                    n += batch or 1

            t0 = time.perf_counter()
            await asyncio.gather(*(one(k) for k in range(clients)))
            dt = time.perf_counter() - t0
        return {"n": n, "seconds": dt, "lat": lat}

    return asyncio.run(go())


def _start_node(data_dir: str, *extra: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "apollo11.scheduler.cli",
            "node",
            "--data-dir",
            data_dir,
            "--listen",
            "127.0.0.1:0",
            "--workflows",
            "apollo11.scheduler.examples",
            "--node-id",
            "bench",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        m = re.search(r"serving on port (\d+)", line)
        if m:
            return proc, f"127.0.0.1:{m.group(1)}"
    raise RuntimeError("the node did not start")


def _secure_node(base: str) -> tuple[subprocess.Popen[str], str, dict[str, Any]]:
    """A node with TLS and tokens, and the credentials of a submitter."""
    from pathlib import Path

    from apollo11.scheduler.security import Role, create_cluster_certs, create_token

    pki = Path(base) / "pki"
    create_cluster_certs(pki, ["bench"], days=1)
    token = create_token(pki / "tokens", "bench", Role.SUBMITTER)
    proc, address = _start_node(
        os.path.join(base, "secure"),
        "--tls-cert",
        str(pki / "bench.pem"),
        "--tls-key",
        str(pki / "bench-key.pem"),
        "--tokens-file",
        str(pki / "tokens"),
    )
    return proc, address, {"ca": str(pki / "ca.pem"), "token": token}


def _security_cost(
    ex: ProcessPoolExecutor, plain: str, secure: str, creds: dict[str, Any], seconds: float
) -> dict[str, Any]:
    """One client alone against a plaintext node and a TLS + token node, alternating
    (the machine's noise falls on both), then 64 clients against each."""
    lat: dict[str, list[float]] = {"plain": [], "secure": []}
    for _ in range(2):
        for name, address, c in (("plain", plain, None), ("secure", secure, creds)):
            lat[name] += ex.submit(_load, address, 1, seconds / 4, 0, c).result()["lat"]
    loaded = {}
    for name, address, c in (("plain", plain, None), ("secure", secure, creds)):
        parts = [ex.submit(_load, address, 32, seconds / 2, 0, c) for _ in range(2)]
        rs = [p.result() for p in parts]
        loaded[name] = sum(r["n"] for r in rs) / max(r["seconds"] for r in rs)
    p50 = {k: _pct(v, 0.5) * 1000 for k, v in lat.items()}
    return {
        "plain_submit_p50_ms": round(p50["plain"], 3),
        "secure_submit_p50_ms": round(p50["secure"], 3),
        "secure_p50_ratio": round(p50["secure"] / p50["plain"], 3),
        "plain_loaded_submits_per_s": round(loaded["plain"]),
        "secure_loaded_submits_per_s": round(loaded["secure"]),
        "secure_throughput_ratio": round(loaded["secure"] / loaded["plain"], 3),
    }


def run(quick: bool, workdir: str | None, progress: Callable[[str], None]) -> dict[str, Any]:
    seconds = 3.0 if quick else 8.0
    clients = 64
    base = tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd())
    proc, address = _start_node(os.path.join(base, "data"))
    ctx = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as ex:
            progress(f"{clients} concurrent clients in 2 processes, {seconds:g}s")
            parts = [ex.submit(_load, address, clients // 2, seconds) for _ in range(2)]
            results = [p.result() for p in parts]
            progress("one client alone (latency)")
            alone = ex.submit(_load, address, 1, seconds / 2).result()
            progress("SubmitTasks, 100 tasks a call, 4 clients in 2 processes")
            parts = [ex.submit(_load, address, 2, seconds / 2, 100) for _ in range(2)]
            batched = [p.result() for p in parts]
            progress("TLS + bearer token against plaintext, side by side")
            # Two fresh nodes: the first one's state is full of the parked tasks above.
            pproc, plain = _start_node(os.path.join(base, "plain"))
            sproc, secure, creds = _secure_node(base)
            try:
                security = _security_cost(ex, plain, secure, creds, seconds)
            finally:
                for p in (pproc, sproc):
                    p.send_signal(signal.SIGTERM)
                    p.wait(30)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(base, ignore_errors=True)
    n = sum(r["n"] for r in results)
    dt = max(r["seconds"] for r in results)
    lat = [x for r in results for x in r["lat"]]
    return {
        "quick": quick,
        "clients": clients,
        "submits_per_s": round(n / dt),
        "loaded_p50_ms": round(_pct(lat, 0.5) * 1000, 3),
        "loaded_p99_ms": round(_pct(lat, 0.99) * 1000, 3),
        "single_client_submits_per_s": round(alone["n"] / alone["seconds"]),
        "submit_p50_ms": round(_pct(alone["lat"], 0.5) * 1000, 3),
        "submit_p99_ms": round(_pct(alone["lat"], 0.99) * 1000, 3),
        "batched_submits_per_s": round(
            sum(r["n"] for r in batched) / max(r["seconds"] for r in batched)
        ),
        "batched_call_p50_ms": round(_pct([x for r in batched for x in r["lat"]], 0.5) * 1000, 3),
        **security,
    }


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (f"submits/s, {r['clients']} concurrent clients (fsync on)", f"{r['submits_per_s']:,}"),
        (
            "submit-to-ack latency under that load",
            f"p50 {r['loaded_p50_ms']} ms, p99 {r['loaded_p99_ms']} ms",
        ),
        (
            "one client alone",
            f"{r['single_client_submits_per_s']:,}/s, "
            f"p50 {r['submit_p50_ms']} ms, p99 {r['submit_p99_ms']} ms",
        ),
        (
            "tasks/s through SubmitTasks, 100 a call, 4 clients",
            f"{r['batched_submits_per_s']:,} (a call: p50 {r['batched_call_p50_ms']} ms)",
        ),
        (
            "TLS + bearer token vs plaintext, one client (p50)",
            f"{r['secure_submit_p50_ms']} vs {r['plain_submit_p50_ms']} ms "
            f"(x{r['secure_p50_ratio']})",
        ),
        (
            "TLS + bearer token vs plaintext, 64 clients (submits/s)",
            f"{r['secure_loaded_submits_per_s']:,} vs {r['plain_loaded_submits_per_s']:,} "
            f"(x{r['secure_throughput_ratio']})",
        ),
    ]
