"""`replay --until N` from the bucket: from event 1 against from the newest bucket
snapshot at or before N (docs/benchmarks.md, "replay --until from the bucket"):

    .venv/bin/python -m tests.scheduler.bucket.measure_travel [--events 200000] [--segment-kb 4096]

An in-process store holds `--events` events of etl histories in segments of
`--segment-kb`; its shipper puts every sealed segment and its newest snapshot in a
real SeaweedFS. Then the state as of N (the newest bucket snapshot the sealed
segments reach, plus `--past`) is rebuilt both ways, each with a fresh reader
(nothing cached), `--runs` times; both answers are compared (they must be equal).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import time
from pathlib import Path

from apollo11.scheduler.bucket import (
    BucketHistory,
    load_catalog,
    open_bucket,
    start_for,
    state_from_bucket,
)
from apollo11.scheduler.log import FsyncPolicy
from apollo11.scheduler.testing.history import etl_history
from tests.scheduler.bucket.helpers import Host, ship_all, shipper
from tests.scheduler.bucket.measure import archived_store, beside_seaweed


async def _build(root: Path, events: int, segment_kb: int) -> str:
    """The bucket's URL, once it holds the history and a snapshot its segments reach."""
    store, objects = archived_store(
        root, "travel", segment_kb=segment_kb, fsync=FsyncPolicy.UNSAFE_NEVER,
        snapshot_interval=5000,
    )  # fmt: skip
    url = objects.target.url
    it = etl_history(10**7, seed=1, concurrency=50)
    while store.log.durable_id < events:
        await store.log.append_many(list(itertools.islice(it, 500)))
    await store.wait_snapshot()
    s = shipper(Host(store), objects)
    await ship_all(s, max_steps=10_000)
    # the shipper uploads the newest snapshot, which may lie past the last sealed
    # segment: a little more history until a snapshot the segments reach is listed
    while load_catalog(open_bucket(url)).restorable() is None:
        await store.log.append_many(list(itertools.islice(it, 500)))
        await ship_all(s, max_steps=10_000)
    await store.close()
    return url


def _run(root: Path, url: str, past: int, runs: int) -> None:
    catalog = load_catalog(open_bucket(url))
    newest = catalog.restorable()  # the newest one the sealed segments reach
    assert newest is not None, f"no snapshot the segments reach: {catalog.snapshots}"
    until = min(newest.watermark + past, catalog.through)
    snap = start_for(catalog, until)
    assert snap is not None
    after = [s for s in catalog.segments if s.last > snap.watermark and s.first <= until]
    times: dict[bool, list[float]] = {False: [], True: []}
    answers = {}
    for _ in range(runs):
        for from_snapshot in (False, True):
            reader = BucketHistory(open_bucket(url))
            t0 = time.perf_counter()
            got = state_from_bucket(reader, root, until, from_snapshot=from_snapshot)
            times[from_snapshot].append(time.perf_counter() - t0)
            answers[from_snapshot] = got.state.to_dict()
    assert answers[False] == answers[True], "both starts answer the same state"
    one, snapped = min(times[False]), min(times[True])
    print(
        f"{catalog.through} events in {len(catalog.segments)} segments; N = {until}, the "
        f"bucket snapshot at {snap.watermark} ({len(snap.chunks)} chunks), then "
        f"{len(after)} segment(s)"
    )
    print(f"from event 1:                 best {one:.2f} s of {runs}")
    print(f"from the bucket snapshot:     best {snapped:.2f} s of {runs} ({one / snapped:.1f}x)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--segment-kb", type=int, default=4096)
    p.add_argument("--past", type=int, default=100, help="N: the newest snapshot + this")
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()

    async def both(root: Path) -> None:
        url = await _build(root, a.events, a.segment_kb)
        await asyncio.to_thread(_run, root / "n1", url, a.past, a.runs)

    beside_seaweed(both)


if __name__ == "__main__":
    main()
