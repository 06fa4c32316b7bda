"""How long a redaction takes to leave no copy of the task's data, on the node's disk
and in the bucket (docs/benchmarks.md, "Redaction"):

    .venv/bin/python -m tests.scheduler.bucket.measure_redaction [--events 200000] \\
        [--rate 2000] [--segment-kb 4096] [--redact 5]

An in-process store (fsync on) holds `--events` events of etl histories; its shipper
runs as a node's does (a cycle a second when idle) against a real SeaweedFS and has
put the history, snapshots and chunks in the bucket. Writes go on at `--rate`
events/s while `--redact` finished tasks, each archived in a chunk before, are
redacted one at a time. For each, from the append of its TASK_REDACTED: the node's
snapshots and chunks rewritten (`Store.snapshots_redacted`), the segment holding the
TASK_REDACTED sealed, and the bucket rewritten (the shipper's `redacted`: segments,
snapshots, chunks, the catalog written, the old objects deleted). At the end every
object of the bucket is read (decompressed) and must not hold any of the tasks' step
results (each names its task: `s3://bucket/<task>/<step>`).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from pathlib import Path

import zstandard

from apollo11.scheduler.bucket import packing
from apollo11.scheduler.log import EventType, FsyncPolicy
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.testing.history import etl_history
from tests.scheduler.bucket.helpers import Host, ship_all, shipper
from tests.scheduler.bucket.measure import archived_store, beside_seaweed, pct


async def _main(root: Path, events: int, rate: int, segment_kb: int, redact: int) -> None:
    store, objects = archived_store(
        root, "redaction", segment_kb=segment_kb, fsync=FsyncPolicy.ALWAYS,
        snapshot_interval=5000,
    )  # fmt: skip
    it = etl_history(10**7, seed=1, concurrency=50)
    while store.log.durable_id < events:
        await store.log.append_many(list(itertools.islice(it, 500)))
    await store.wait_snapshot()
    s = shipper(Host(store), objects)
    s.poll_s = 1.0  # as a node's (bucket/shipper.py, POLL_S)
    await ship_all(s, max_steps=10_000)
    archived = store.state.archive
    chosen = [
        t.task_id
        for t in store.state.iter_tasks()
        if t.status is TaskStatus.SUCCEEDED and archived is not None and t.task_id in archived
    ][:: max(1, events // 11 // max(1, redact) // 2)][:redact]
    assert len(chosen) == redact, f"only {len(chosen)} archived finished tasks"
    ship = asyncio.create_task(s.run())
    stop = asyncio.Event()

    async def load() -> None:
        batch = max(1, rate // 100)
        t0, n = time.perf_counter(), 0
        while not stop.is_set():
            await store.log.append_many(list(itertools.islice(it, batch)))
            n += batch
            ahead = n / rate - (time.perf_counter() - t0)
            if ahead > 0:
                await asyncio.sleep(ahead)

    writer = asyncio.create_task(load())
    local: list[float] = []
    sealed: list[float] = []
    bucket: list[float] = []
    after_seal: list[float] = []
    for task_id in chosen:
        began = time.perf_counter()
        red = await store.log.append(
            EventType.TASK_REDACTED, task_id, payload={"operator": "m", "reason": "measure"}
        )
        rid = red.event_id
        at_local = at_sealed = at_bucket = 0.0
        while not at_bucket:
            now = time.perf_counter() - began
            if not at_local and store.snapshots_redacted(task_id, rid):
                at_local = now
            if not at_sealed and any(g.last_id >= rid for g in store.log.segments[:-1]):
                at_sealed = now
            if s.redacted(task_id, rid):
                at_bucket = now
            await asyncio.sleep(0.005)
        local.append(at_local)
        sealed.append(at_sealed)
        bucket.append(at_bucket)
        after_seal.append(at_bucket - at_sealed)
    stop.set()
    await writer
    ship.cancel()
    await store.close()

    needles = [f"s3://bucket/{t}/".encode() for t in chosen]
    held, read = [], 0
    for under in (packing.SEGMENTS, packing.SNAPSHOTS, packing.CHUNKS):
        for key in objects.list(under):
            data = objects.get(key)
            raw = zstandard.ZstdDecompressor().decompress(data or b"", max_output_size=1 << 32)
            read += 1
            if any(n in raw for n in needles):
                held.append(key)
    assert not held, f"objects still holding a redacted task's data: {held}"

    def fig(xs: list[float]) -> str:
        return f"p50 {pct(xs, 0.5) * 1000:.0f} ms, max {max(xs) * 1000:.0f} ms"

    print(
        f"{events} events, segments of {segment_kb} KB, writes at {rate}/s; "
        f"{len(chosen)} archived tasks redacted one at a time"
    )
    print(f"node's snapshots and chunks rewritten: {fig(local)}")
    print(f"the TASK_REDACTED's segment sealed:     {fig(sealed)}")
    print(f"bucket holds no copy:                  {fig(bucket)}")
    print(f"  of which after the seal:             {fig(after_seal)}")
    print(f"bucket objects read back, none holding the data: {read}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--segment-kb", type=int, default=4096)
    ap.add_argument("--redact", type=int, default=5)
    a = ap.parse_args()
    beside_seaweed(lambda root: _main(root, a.events, a.rate, a.segment_kb, a.redact))


if __name__ == "__main__":
    main()
