"""`apollo11 bench overload`: a real node flooded at twice what it accepts, for minutes.

The promise under test (docs/failures.md: overload): past its admission
limits a node answers RESOURCE_EXHAUSTED instead of queueing, so its memory
stays bounded however long the flood lasts, and it neither crashes nor answers
anything but the documented codes.

1. capacity: `capacity_clients` closed-loop clients submit five-step etl tasks
   (0.05 s a step, so tasks run and finish as in production) for a few seconds;
   accepted submissions per second is the node's capacity to accept. It runs
   the tasks more slowly than it accepts them, so a backlog builds from here on
   and the admission limits are what bound it;
2. flood: client processes offer `factor` × that rate, open loop (a rate, not a
   number of callers: a flood does not slow down because it is refused, nor
   honour the retry hint), for `duration` seconds, while the node's RSS
   (/proc/PID/status VmRSS) is sampled every `sample_every` seconds;
3. verdict: the RSS slope over the second half (least squares, MB/min), whether
   the node still runs and answers, and every status code the clients saw.
   RESOURCE_EXHAUSTED, CANCELLED (shed by gRPC) and UNAVAILABLE are what an
   overloaded node may answer (each retryable with the same idempotency key);
   anything else fails the run.

The load generators run at nice 10 on the node's own cores (on a deployment
they would be other machines); not under SCHED_IDLE as `bench failover`'s are,
since a saturated node would then starve its own flood.
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
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any

# What an overloaded node may answer a submission, all "retry later, same key":
# RESOURCE_EXHAUSTED from admission control; CANCELLED from gRPC core, which sheds
# calls at random while over 1000 wait for the event loop (the handler never ran;
# the client retries it: tests/api/test_shed.py); UNAVAILABLE.
EXPECTED = frozenset({"OK", "RESOURCE_EXHAUSTED", "CANCELLED", "UNAVAILABLE"})
LOAD_NICE = int(os.environ.get("APOLLO11_BENCH_LOAD_NICE", "10"))
STEP_SECONDS = 0.05  # the etl default: tasks finish, as they do in production
CALL_TIMEOUT_S = 30.0  # a submission left waiting this long is a failure, not a refusal


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The resident set of `pid` in MB (VmRSS; VmHWM: its peak so far), or NaN once it
    is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return float("nan")


def slope_mb_per_min(samples: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) samples, in MB per minute (NaN under 2)."""
    if len(samples) < 2:
        return float("nan")
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if not var:
        return float("nan")
    return sum((t - mt) * (r - mr) for t, r in samples) / var * 60


def _code(e: BaseException) -> str:
    """The gRPC status name behind a client exception."""
    from apollo11.scheduler.client import ApiError, UnavailableError
    from apollo11.scheduler.errors import (
        FailedPreconditionError,
        InvalidArgumentError,
        NotFoundError,
        ResourceExhaustedError,
    )

    if isinstance(e, ApiError):
        return str(e.code.name)
    for cls, name in (
        (ResourceExhaustedError, "RESOURCE_EXHAUSTED"),
        (UnavailableError, "UNAVAILABLE"),
        (InvalidArgumentError, "INVALID_ARGUMENT"),
        (NotFoundError, "NOT_FOUND"),
        (FailedPreconditionError, "FAILED_PRECONDITION"),
    ):
        if isinstance(e, cls):
            return name
    return type(e).__name__


def _submit_load(
    address: str,
    *,
    seconds: float,
    rate: float = 0.0,
    clients: int = 16,
    concurrency: int = 512,
    prefix: str = "",
) -> dict[str, Any]:
    """Submissions for `seconds`: with `rate`, open loop at that many a second (at most
    `concurrency` in flight); else closed loop from `clients` coroutines. Counts every
    answer by status code and keeps the first few unexpected messages."""
    from apollo11.scheduler.client import Client

    os.nice(LOAD_NICE)
    codes: Counter[str] = Counter()
    unexpected: list[str] = []
    body = {"step_seconds": STEP_SECONDS}

    async def go() -> dict[str, Any]:
        async with Client(address, retries=0, timeout_s=CALL_TIMEOUT_S) as c:
            await c.status()  # connected before the clock starts
            t0 = time.perf_counter()

            async def one(key: str) -> None:
                began = time.perf_counter()
                try:
                    await c.submit("etl", body, idempotency_key=key)
                    codes["OK"] += 1
                except Exception as e:  # counted by code: the bench's verdict
                    name = _code(e)
                    codes[name] += 1
                    if name not in EXPECTED and len(unexpected) < 5:
                        at, took = began - t0, time.perf_counter() - began
                        unexpected.append(f"{name} at {at:.1f}s after {took:.2f}s: {e}")

            stop = t0 + seconds
            sent = 0
            if not rate:

                async def caller(k: int) -> None:
                    nonlocal sent
                    while time.perf_counter() < stop:
                        sent += 1
                        await one(f"{prefix}{k}-{sent}")

                await asyncio.gather(*(caller(k) for k in range(clients)))
            else:
                slots = asyncio.Semaphore(concurrency)
                live: set[asyncio.Task[None]] = set()

                async def paced(key: str) -> None:
                    try:
                        await one(key)
                    finally:
                        slots.release()

                while (now := time.perf_counter()) < stop:
                    due = int((now - t0) * rate)
                    while sent < due and time.perf_counter() < stop:
                        await slots.acquire()  # a full window: the offered rate falls short
                        task = asyncio.create_task(paced(f"{prefix}{sent}"))
                        live.add(task)
                        task.add_done_callback(live.discard)
                        sent += 1
                    await asyncio.sleep(0.005)
                await asyncio.gather(*live)
            return {
                "sent": sent,
                "seconds": time.perf_counter() - t0,
                "codes": dict(codes),
                "unexpected": unexpected,
            }

    return asyncio.run(go())


def start_node(
    data_dir: Path,
    log_path: Path,
    node_args: Sequence[str],
    timeout: float = 60,
    *,
    node_id: str = "overload",
) -> tuple[subprocess.Popen[bytes], str]:
    """`apollo11 node` standalone on a free port, its output in `log_path` (a pipe
    nobody drains would stall a node that logs under load)."""
    log = open(log_path, "wb")  # noqa: SIM115 - the node writes it until it exits
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
            "--workflows",
            "apollo11.scheduler.examples",
            "--node-id",
            node_id,
            *node_args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        m = re.search(r"serving on port (\d+)", log_path.read_text(errors="replace"))
        if m:
            return proc, f"127.0.0.1:{m.group(1)}"
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"the node did not start: see {log_path}")


def stop_node(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the node drains), SIGKILL past a minute; nothing if it already ended."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _answers(address: str) -> bool:
    """The node answers a Status call (within a generous time: it may still be busy)."""
    from apollo11.scheduler.client import SyncClient

    try:
        with SyncClient(address, retries=3, timeout_s=10) as c:
            c.status()
        return True
    except Exception:
        return False


def _active_tasks(address: str) -> int | None:
    from apollo11.scheduler.client import SyncClient

    try:
        with SyncClient(address, retries=0, timeout_s=5) as c:
            return c.status().active_tasks
    except Exception:
        return None


def run(
    quick: bool,
    workdir: str | None,
    progress: Callable[[str], None],
    *,
    duration: float | None = None,
    factor: float = 2.0,
    sample_every: float = 10.0,
    capacity_seconds: float | None = None,
    capacity_clients: int = 16,
    processes: int = 2,
    node_args: Sequence[str] = (),
) -> dict[str, Any]:
    duration = duration if duration is not None else (60.0 if quick else 300.0)
    capacity_seconds = capacity_seconds or (5.0 if quick else 10.0)
    base = Path(tempfile.mkdtemp(prefix="apollo11-overload-", dir=workdir or os.getcwd()))
    log_path = base / "node.log"
    proc, address = start_node(base / "data", log_path, node_args)
    ctx = multiprocessing.get_context("spawn")
    samples: list[tuple[float, float]] = []
    active: list[int | None] = []
    try:
        with ProcessPoolExecutor(max_workers=processes, mp_context=ctx) as ex:
            progress(f"capacity: {capacity_clients} closed-loop clients, {capacity_seconds:g}s")
            cap = ex.submit(
                _submit_load,
                address,
                seconds=capacity_seconds,
                clients=capacity_clients,
                prefix="cap-",
            ).result()
            capacity = cap["codes"].get("OK", 0) / cap["seconds"]
            rate = factor * max(capacity, 1.0)
            progress(
                f"accepts {capacity:,.0f} submits/s; flooding at {rate:,.0f}/s "
                f"({processes} processes) for {duration:g}s, RSS every {sample_every:g}s"
            )
            rss0 = rss_mb(proc.pid)
            parts = [
                ex.submit(
                    _submit_load,
                    address,
                    seconds=duration,
                    rate=rate / processes,
                    prefix=f"flood{p}-",
                )
                for p in range(processes)
            ]
            t0 = time.monotonic()
            while True:
                next_at = t0 + (len(samples) + 1) * sample_every
                _, running = wait(parts, timeout=max(0.0, next_at - time.monotonic()))
                if not running:
                    break
                samples.append((round(time.monotonic() - t0, 1), round(rss_mb(proc.pid), 1)))
                active.append(_active_tasks(address))
                progress(f"t={samples[-1][0]:g}s RSS {samples[-1][1]:,.0f} MB")
            flood = [p.result() for p in parts]
        peak = rss_mb(proc.pid, "VmHWM")  # between samples too (a snapshot's buffers)
        alive = proc.poll() is None and _answers(address)
    finally:
        exit_code = proc.poll()
        stop_node(proc)
    codes: Counter[str] = Counter()
    for part in flood:
        codes.update(part["codes"])
    sent = sum(part["sent"] for part in flood)
    flood_s = max(part["seconds"] for part in flood)
    second_half = [(t, r) for t, r in samples if t >= duration / 2]
    unexpected = {k: v for k, v in codes.items() if k not in EXPECTED}
    result: dict[str, Any] = {
        "quick": quick,
        "duration_s": duration,
        "capacity_clients": capacity_clients,
        "capacity_submits_per_s": round(capacity),
        "target_rate_per_s": round(rate),
        "offered_per_s": round(sent / flood_s),
        "accepted_per_s": round(codes.get("OK", 0) / flood_s),
        "codes": dict(codes),
        "capacity_codes": cap["codes"],
        "unexpected_codes": unexpected,
        "unexpected_messages": [m for part in flood for m in part["unexpected"]][:5],
        "rss_start_mb": round(rss0, 1),
        "rss_samples": samples,
        "rss_peak_mb": round(peak, 1),
        "active_tasks": active,
        "rss_slope_second_half_mb_per_min": round(slope_mb_per_min(second_half), 2),
        "node_alive": alive,
        "node_exit_code": exit_code,
        "node_log": str(log_path),
    }
    result["ok"] = bool(alive and not unexpected)
    if result["ok"]:
        shutil.rmtree(base, ignore_errors=True)
        result["node_log"] = None
    return result


def failed(r: dict[str, Any]) -> str | None:
    """Why the run fails (the CLI exits nonzero), or None."""
    if not r["node_alive"]:
        return f"the node died (exit code {r['node_exit_code']}; its log: {r['node_log']})"
    if r["unexpected_codes"]:
        return f"answers other than {'/'.join(sorted(EXPECTED - {'OK'}))}: {r['unexpected_codes']}"
    return None


def summary_rows(r: dict[str, Any]) -> list[tuple[str, str]]:
    series = ", ".join(f"{rss:,.0f}" for _, rss in r["rss_samples"])
    return [
        (
            f"capacity: accepted submits/s, {r['capacity_clients']} clients",
            f"{r['capacity_submits_per_s']:,}",
        ),
        (
            f"flood for {r['duration_s']:g}s: target / offered / accepted per s",
            f"{r['target_rate_per_s']:,} / {r['offered_per_s']:,} / {r['accepted_per_s']:,}",
        ),
        ("answers", ", ".join(f"{k} {v:,}" for k, v in sorted(r["codes"].items()))),
        (
            "node RSS, MB (start, then every sample)",
            f"{r['rss_start_mb']:,.0f}; {series}",
        ),
        ("RSS slope over the second half", f"{r['rss_slope_second_half_mb_per_min']} MB/min"),
        ("peak RSS (VmHWM)", f"{r['rss_peak_mb']:,.0f} MB"),
        ("node alive and answering", "yes" if r["node_alive"] else f"NO: {r['node_exit_code']}"),
    ]
