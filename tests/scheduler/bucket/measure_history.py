"""Reading a task's events from the bucket against reading them from the disk
(docs/benchmarks.md, "Old history from the bucket"):

    .venv/bin/python -m tests.scheduler.bucket.measure_history [--events 200000] [--segment-kb 4096]

An in-process store holds `--events` events of etl histories in segments of
`--segment-kb`; its shipper puts every sealed segment in a real SeaweedFS. Then, for
`--tasks` finished tasks spread over the log, the time to read each task's whole
history: from the disk (`Store.task_page`, the sparse index), from the bucket with
nothing cached (a fresh reader: the catalog, one GET, a zstd decompression and a
check of every record of each segment the task touches), and from the bucket with
the segment already cached (the next page of the same task, or a neighbour's).
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

from apollo11.scheduler.bucket import BucketHistory, load_catalog
from apollo11.scheduler.log import FsyncPolicy
from apollo11.scheduler.testing.history import etl_history
from tests.scheduler.bucket.helpers import Host, ship_all, shipper
from tests.scheduler.bucket.measure import archived_store, beside_seaweed, pct


def _ms(xs: list[float]) -> str:
    return f"p50 {pct(xs, 0.5) * 1000:.2f} ms, p99 {pct(xs, 0.99) * 1000:.2f} ms"


async def _run(root: Path, events: int, segment_kb: int, n_tasks: int) -> None:
    store, objects = archived_store(
        root, "history", segment_kb=segment_kb, fsync=FsyncPolicy.UNSAFE_NEVER,
        snapshot_interval=5000,
    )  # fmt: skip
    it = etl_history(10**7, seed=1, concurrency=50)
    while store.log.durable_id < events:
        await store.log.append_many(list(itertools.islice(it, 500)))
    await store.wait_snapshot()
    await ship_all(shipper(Host(store), objects), max_steps=10_000)
    through = load_catalog(objects).through
    tasks = [
        t
        for t in store.state.iter_tasks()
        if t.event_ids and t.event_ids[-1] <= through and t.quiescent
    ]
    step = max(1, len(tasks) // n_tasks)
    tasks = tasks[::step][:n_tasks]
    disk, cold, warm = [], [], []
    warm_reader = BucketHistory(objects)
    n_events = 0
    for t in tasks:
        assert t.event_ids is not None
        t0 = time.perf_counter()
        page = store.task_page(t)
        disk.append(time.perf_counter() - t0)
        reader = BucketHistory(objects)
        t0 = time.perf_counter()
        got, missing = reader.read_ids(t.event_ids)
        cold.append(time.perf_counter() - t0)
        warm_reader.read_ids(t.event_ids)  # the segment in the cache...
        t0 = time.perf_counter()
        again, _ = warm_reader.read_ids(t.event_ids)  # ...then read from it
        warm.append(time.perf_counter() - t0)
        assert got == page.events == again and not missing
        n_events += len(got)
    await store.close()
    segs = load_catalog(objects).segments
    print(
        f"{through} events in {len(segs)} segments of {segment_kb} KB "
        f"({sum(s.stored for s in segs) / len(segs) / 1024:.0f} KB stored each); "
        f"{len(tasks)} tasks, {n_events / max(1, len(tasks)):.1f} events each"
    )
    print(f"a task's events from the disk:                {_ms(disk)}")
    print(f"from the bucket, nothing cached (fetch+check): {_ms(cold)}")
    print(f"from the bucket, its segment cached:           {_ms(warm)}")
    print(
        f"ratio, p50: bucket cold / disk {pct(cold, 0.5) / pct(disk, 0.5):.0f}x, "
        f"cached / disk {pct(warm, 0.5) / pct(disk, 0.5):.2f}x"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--segment-kb", type=int, default=4096)
    p.add_argument("--tasks", type=int, default=50)
    a = p.parse_args()
    beside_seaweed(lambda root: _run(root, a.events, a.segment_kb, a.tasks))


if __name__ == "__main__":
    main()
