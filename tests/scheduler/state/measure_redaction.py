"""Figures of redaction (docs/benchmarks.md, "Redaction"):

    .venv/bin/python -m tests.scheduler.state.measure_redaction [--tasks 20000] [--redact 100]

An in-process store (fsync on, 16 MB segments) holding `--tasks` etl histories (11
events each); `--redact` finished tasks, spread over the log, are redacted one at a
time: the time until every answer hides the task (the TASK_REDACTED appended, durable
and folded) and until its records are rewritten on disk (the redactor's thread), p50
and max; then the pass at start over every redacted task (nothing left to rewrite).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
from pathlib import Path

from apollo11.scheduler.log import EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import TaskStatus
from apollo11.scheduler.state.store import Store, StoreConfig
from apollo11.scheduler.testing.history import etl_history

CFG = StoreConfig(log=LogConfig(segment_max_bytes=16 << 20, fsync=FsyncPolicy.ALWAYS))


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else 0.0


async def _main(root: Path, tasks: int, redact: int) -> None:
    store = Store.open(root, config=CFG, instance_id="n1")
    it = etl_history(tasks, seed=1, concurrency=16, fail_rate=0, cancel_rate=0)
    while chunk := list(itertools.islice(it, 500)):
        await store.log.append_many(chunk)
    done = sorted(t.task_id for t in store.state.iter_tasks() if t.status is TaskStatus.SUCCEEDED)
    chosen = done[:: max(1, len(done) // redact)][:redact]
    shown: list[float] = []
    on_disk: list[float] = []
    for task_id in chosen:
        began = time.perf_counter()
        await store.log.append(
            EventType.TASK_REDACTED, task_id, payload={"operator": "m", "reason": "measure"}
        )
        shown.append(time.perf_counter() - began)
        store.redactor.drain()
        on_disk.append(time.perf_counter() - began)
    segments = len(store.log.segments)
    await store.close()
    began = time.perf_counter()
    again = Store.open(root, config=CFG, instance_id="n1")
    again.redactor.drain()
    reopen = time.perf_counter() - began
    await again.close()
    ms = 1000
    print(f"{tasks} tasks ({tasks * 11} events, {segments} segments); {len(chosen)} redacted")
    print(f"hidden from every answer: p50 {_pct(shown, 0.5) * ms:.1f} ms, "
          f"max {max(shown) * ms:.1f} ms")  # fmt: skip
    print(f"records rewritten on disk: p50 {_pct(on_disk, 0.5) * ms:.1f} ms, "
          f"max {max(on_disk) * ms:.1f} ms")  # fmt: skip
    print(f"reopen with the pass over every redacted task: {reopen:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--redact", type=int, default=100)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_main(Path(tmp), a.tasks, a.redact))


if __name__ == "__main__":
    main()
