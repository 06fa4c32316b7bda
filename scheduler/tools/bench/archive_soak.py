"""`apollo11 bench archive`'s soak: is the disk kept flat with retention on (issue 34)?

A real engine on a real store (fsync on) with the archive's shipper, task retention
(`*=RETAIN`, the sweep every SWEEP_S) and log retention (`--log-retention` other than
"all": segments the oldest kept snapshot covers, and the bucket holds, are deleted),
fed tasks of one step at a steady rate. The data directory's size is sampled every
SAMPLE_S: where it starts, its peak, where it ends, and its steady level (the median
of the second half of the samples, once retention has caught up with the warm-up).
Flat: the end within FLAT_TOLERANCE of the steady level, and the last quarter's
median not above the steady level by more than that (a slow growth shows there
first). Tasks purged along the way are counted, so a flat disk is not a silent sweep.
With the archive, the bucket's size under the prefix (one listing) is sampled beside
the disk and judged by `bucket_flatness` (`bucket_flat`), with the segments it dropped.

The judgements are pure (`flatness`, `bucket_flatness`;
tests/scheduler/tools/test_archive_bench.py).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from apollo11.scheduler import retention
from apollo11.scheduler.bucket import Shipper
from apollo11.scheduler.engine import Engine, RetentionOptions
from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.workflow import Idempotent, Registry, StepContext, Workflow

RETAIN = "2s"  # every finished task, counted from its finish
SWEEP_S = 1.0
SAMPLE_S = 1.0
SEGMENT_BYTES = 128 * 1024  # small, so segments seal (and go) within the soak
SNAPSHOT_EVERY = 1000
FLAT_TOLERANCE = 0.25  # the end within 25 % of the steady level


def dir_bytes(root: Path) -> int:
    """The bytes of every file under `root` (a file deleted meanwhile counts 0)."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                continue
    return total


def flatness(samples: list[int], tolerance: float = FLAT_TOLERANCE) -> dict[str, Any]:
    """Start, peak, end and steady level (the median of the second half) of the size
    samples, in order; flat when the end and the last quarter's median are within
    `tolerance` of the steady level."""
    if len(samples) < 4:
        return {"samples": len(samples), "flat": False}
    half = samples[len(samples) // 2 :]
    last = samples[len(samples) * 3 // 4 :]
    steady = statistics.median(half)
    tail = statistics.median(last)
    end = samples[-1]
    within = steady > 0 and abs(end - steady) <= tolerance * steady
    return {
        "samples": len(samples),
        "start_bytes": samples[0],
        "max_bytes": max(samples),
        "end_bytes": end,
        "steady_bytes": round(steady),
        "end_over_steady": round(end / steady, 3) if steady else None,
        "tail_over_steady": round(tail / steady, 3) if steady else None,
        "flat": within and tail <= (1 + tolerance) * steady,
    }


def bucket_flatness(
    samples: list[int], expired: int, tolerance: float = FLAT_TOLERANCE
) -> dict[str, Any]:
    """`flatness` of the bucket's size samples, judged one way: the end and the last
    quarter's median not above the steady level by more than `tolerance` (a drop below
    it is retention at work: the bucket falls in steps, a segment run and a snapshot at
    a time), and segments were dropped at all (`expired`): without that, a bucket
    growing slowly over a short soak can pass for flat."""
    r = flatness(samples, tolerance)
    if "steady_bytes" not in r:
        return r
    steady = r["steady_bytes"]
    tail = steady * r["tail_over_steady"]
    r["flat"] = (
        expired > 0
        and r["end_bytes"] <= (1 + tolerance) * steady
        and tail <= (1 + tolerance) * steady
    )
    return r


def _workflow() -> Workflow:
    wf = Workflow("soak")

    @wf.step(idempotency=Idempotent())
    async def work(ctx: StepContext) -> dict[str, Any]:
        return {"n": ctx.input, "note": "x" * 200}  # a small result, as a real step's

    return wf


async def soak(
    root: Path, shipper_for: Callable[[Store], Shipper] | None, seconds: float, rate: int
) -> dict[str, Any]:
    """Submit `rate` tasks a second for `seconds` with retention on; the size samples
    and what became of the tasks. `shipper_for`: the archive's shipper on the store,
    as a primary runs it (None: log retention alone)."""
    cfg = StoreConfig(
        log=LogConfig(segment_max_bytes=SEGMENT_BYTES, fsync=FsyncPolicy.ALWAYS),
        snapshot_interval=SNAPSHOT_EVERY,
        keep_all_segments=False,
    )
    store = Store.open(root, config=cfg, instance_id="n1")
    registry = Registry()
    registry.register(_workflow())
    store.log.term = store.log.last_term + 1
    await store.log.append(EventType.TERM_STARTED, "", payload={"node_id": "n1"})
    running: list[asyncio.Task[None]] = []
    shipper: Shipper | None = None
    if shipper_for is not None:
        shipper = shipper_for(store)
        store.retention_floor = shipper.retention_floor
        store.bucket_redacted = shipper.redacted
        running.append(asyncio.create_task(shipper.run()))
    options = RetentionOptions(rules=retention.parse(f"*={RETAIN}"), interval_s=SWEEP_S)
    engine = Engine(store, registry, node_id="n1", concurrency=256, retention=options)
    await engine.start()
    samples: list[int] = []
    bucket: list[int] = []  # the bucket's stored bytes under the prefix, with the archive
    submitted = 0

    def bucket_bytes() -> int:
        return 0 if shipper is None else shipper.objects.usage()[1]

    async def sample() -> None:
        while True:
            samples.append(await asyncio.to_thread(dir_bytes, root))
            if shipper is not None:
                bucket.append(await asyncio.to_thread(bucket_bytes))
            await asyncio.sleep(SAMPLE_S)

    running.append(asyncio.create_task(sample()))
    t0 = time.perf_counter()
    try:
        while (elapsed := time.perf_counter() - t0) < seconds:
            due = int(elapsed * rate) - submitted
            for _ in range(max(0, due)):
                await engine.submit("soak", submitted)
                submitted += 1
            await asyncio.sleep(0.02)
        samples.append(await asyncio.to_thread(dir_bytes, root))
        if shipper is not None:
            bucket.append(await asyncio.to_thread(bucket_bytes))
    finally:
        for t in running:
            t.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        purged = engine.retention.purged
        expired = shipper.expired if shipper is not None else 0
        catalog = shipper.catalog if shipper is not None else None
        held = (
            {
                "segments_held": len(catalog.segments),
                "first_event_in_bucket": catalog.segments[0].first,
            }
            if catalog is not None and catalog.segments
            else {}
        )
        in_state = len(store.state.tasks)
        first_kept = store.log.first_id
        last = store.log.durable_id
        await engine.stop()
        await store.close()
    took = time.perf_counter() - t0
    return {
        "seconds": round(took, 1),
        "tasks": submitted,
        "tasks_per_s": round(submitted / took),
        "purged": purged,
        "tasks_in_memory_at_end": in_state,
        "events": last,
        "first_event_kept": first_kept,
        "sizes": samples,
        **flatness(samples),
        # the bucket beside the disk: segments every task of which was purged leave it
        # (scheduler/bucket/expiry.py), superseded snapshots too
        **(
            {
                "bucket": {
                    "segments_expired": expired,
                    **held,
                    "sizes": bucket,
                    **bucket_flatness(bucket, expired),
                }
            }
            if shipper is not None
            else {}
        ),
    }
