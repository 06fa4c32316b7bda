"""Figures of the archive on a real SeaweedFS (docs/benchmarks.md, "Archive"):

    .venv/bin/python -m tests.scheduler.bucket.measure [--seconds 20] [--rate 2000]

An in-process store written at `--rate` events/s (etl histories) for `--seconds`,
its shipper running as on a primary: the upload lag (a segment sealed -> named by
the bucket's catalog), the lag in events the metric showed, the compression ratio
of what went up, the shipper's share of one CPU, and the restore time.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import resource
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from apollo11.scheduler import metrics
from apollo11.scheduler.bucket import (
    S3Objects,
    build_data_dir,
    load_catalog,
    open_bucket,
    verify_archive,
)
from apollo11.scheduler.log import FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.testing.history import etl_history
from apollo11.scheduler.testing.seaweed import BUCKET, LocalSeaweed
from tests.scheduler.bucket.helpers import Host, shipper


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else 0.0


def archived_store(
    root: Path, name: str, *, segment_kb: int, fsync: FsyncPolicy, snapshot_interval: int
) -> tuple[Store, S3Objects]:
    """An in-process store in `root`/n1 and a fresh prefix of the bucket for it."""
    cfg = StoreConfig(
        log=LogConfig(segment_max_bytes=segment_kb * 1024, fsync=fsync),
        snapshot_interval=snapshot_interval,
    )
    store = Store.open(root / "n1", config=cfg, instance_id="n1")
    return store, open_bucket(bucket_url(name))


def bucket_url(name: str) -> str:
    """A prefix of the bucket no earlier run used."""
    return f"s3://{BUCKET}/{name}-{time.time_ns()}"


def beside_seaweed(run: Callable[[Path], Coroutine[Any, Any, None]]) -> None:
    """`run(dir)` in a temporary directory, a real SeaweedFS serving the bucket."""
    with tempfile.TemporaryDirectory() as d:
        server = LocalSeaweed(Path(d) / "s3").start()
        try:
            os.environ.update(server.env())
            asyncio.run(run(Path(d)))
        finally:
            server.stop()


async def _run(root: Path, seconds: float, rate: int, segment_kb: int) -> None:
    store, objects = archived_store(
        root, "measure", segment_kb=segment_kb, fsync=FsyncPolicy.ALWAYS, snapshot_interval=1000
    )
    s = shipper(Host(store), objects)
    s.poll_s = 0.2
    ship = asyncio.create_task(s.run())
    sealed_at: dict[int, float] = {}
    lags: list[float] = []
    lag_events: list[float] = []

    async def watch() -> None:
        seen = 0
        while True:
            for seg in store.log.segments[:-1]:
                sealed_at.setdefault(seg.last_id, time.perf_counter())
            through = s.catalog.through if s.catalog is not None else 0
            while through > seen:
                done = [last for last in sealed_at if seen < last <= through]
                now = time.perf_counter()
                lags.extend(now - sealed_at[last] for last in done)
                seen = max(done, default=through)
                if not done:
                    break
            lag_events.append(metrics.ARCHIVE_LAG_EVENTS._value.get())
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch())
    it = etl_history(10**7, seed=1, concurrency=50)
    batch = max(1, rate // 100)
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    n = 0
    while (elapsed := time.perf_counter() - t0) < seconds:
        await store.log.append_many(list(itertools.islice(it, batch)))
        n += batch
        ahead = n / rate - elapsed
        if ahead > 0:
            await asyncio.sleep(ahead)
    last_sealed = store.log.segments[-2].last_id
    while s.catalog is None or s.catalog.through < last_sealed:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)
    ship.cancel()
    watcher.cancel()
    await store.close()
    report = await asyncio.to_thread(verify_archive, objects)
    catalog = load_catalog(objects)
    t1 = time.perf_counter()
    said = await asyncio.to_thread(build_data_dir, objects, root / "restored")
    restore_s = time.perf_counter() - t1
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"events written: {n} in {seconds:.0f} s ({n / seconds:.0f}/s), segments of {segment_kb} KB"
    )
    print(
        f"segments uploaded: {len(catalog.segments)}, snapshots: {len(catalog.snapshots)}; "
        f"upload lag (sealed -> in the catalog) p50 {pct(lags, 0.5) * 1000:.0f} ms, "
        f"p99 {pct(lags, 0.99) * 1000:.0f} ms, max {max(lags, default=0) * 1000:.0f} ms"
    )
    print(
        f"apollo11_archive_lag_events: p50 {pct(lag_events, 0.5):.0f}, "
        f"p99 {pct(lag_events, 0.99):.0f}, max {max(lag_events, default=0):.0f}"
    )
    print(
        f"compression: {report.raw_bytes} -> {report.stored_bytes} bytes "
        f"({report.raw_bytes / max(1, report.stored_bytes):.1f}x), {report}"
    )
    cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    print(f"process CPU (writer + shipper + verify + restore): {cpu:.1f} s")
    print(f"restore: {restore_s:.2f} s ({catalog.through / restore_s:.0f} events/s): {said}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--rate", type=int, default=2000)
    p.add_argument("--segment-kb", type=int, default=1024)
    a = p.parse_args()
    beside_seaweed(lambda root: _run(root, a.seconds, a.rate, a.segment_kb))


if __name__ == "__main__":
    main()
