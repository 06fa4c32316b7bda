"""Figures of `apollo11 export` against a real node process (docs/benchmarks.md,
"Export"):

    .venv/bin/python -m tests.api.measure_export [--tasks 5000] [--rate 100] [--seconds 15]

1. `--tasks` finished tasks of `echo` (tests/api/exportflows.py) are exported by the
   CLI to a file: its tasks/s.
2. The dispatch delay (a task's STEP_STARTED timestamp minus its TASK_SUBMITTED's,
   on the node's clock) of tasks submitted one at a time at `--rate` per second for
   `--seconds`, alone, then with exports of the whole backlog running back to back
   beside it, in another process as a user's would: p50 and p99 of each, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import tempfile
import time
from pathlib import Path

from apollo11.scheduler.client import Client
from tests.nodes import APOLLO11, ROOT, start_node

WORKFLOWS = "apollo11.scheduler.examples,tests.api.exportflows"


def _pct(xs: list[int], p: float) -> float:
    xs = sorted(xs)
    return float(xs[min(len(xs) - 1, int(p * len(xs)))]) if xs else 0.0


async def _finished(c: Client, n: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while True:
        done, token = 0, ""
        while True:
            page = await c.tasks(state="SUCCEEDED", workflow="echo", page_size=1000,
                                 page_token=token)  # fmt: skip
            done += len(page.tasks)
            token = page.next_page_token
            if not token:
                break
        if done >= n or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.5)


async def _delays(c: Client, rate: int, seconds: float) -> list[int]:
    """Submit one task at a time at `rate`/s; the dispatch delay of each, in ms."""
    ids: list[str] = []
    gap = 1 / rate
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        await asyncio.sleep(max(0.0, start + i * gap - time.perf_counter()))
        ids.append((await c.submit("echo", {"text": f"probe {i}"})).task_id)
    delays = []
    for task_id in ids:
        await c.wait(task_id, timeout=120)
        events, _ = await c.events(task_id=task_id, limit=10)
        at = {e.event_type: e.timestamp_ms for e in events}
        delays.append(at["STEP_STARTED"] - at["TASK_SUBMITTED"])
    return delays


def _export(address: str, out: Path, *extra: str) -> str:
    out.unlink(missing_ok=True)
    res = subprocess.run(
        [*APOLLO11, "export", "--server", address, "--output", str(out), *extra],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return res.stderr.strip()


async def _main(tasks: int, rate: int, seconds: float, export_rate: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        node = start_node(root / "n1", "--workflows", WORKFLOWS)
        try:
            async with Client(node.address) as c:
                for i in range(0, tasks, 1000):
                    batch = [{"workflow": "echo", "input": {"text": f"task {j} " * 20}}
                             for j in range(i, min(tasks, i + 1000))]  # fmt: skip
                    await c.submit_many(batch)
                await _finished(c, tasks)
                said = _export(node.address, root / "one.jsonl")
                rate_s = re.search(r"(\d+) tasks/s", said)
                size = (root / "one.jsonl").stat().st_size
                print(f"export of {tasks} tasks: {said}; {size / 1e6:.1f} MB")
                assert rate_s is not None

                alone = await _delays(c, rate, seconds)
                stop = asyncio.Event()

                async def exporting() -> int:
                    runs = 0
                    while not stop.is_set():
                        await asyncio.to_thread(
                            _export, node.address, root / "two.jsonl", "--rate", str(export_rate)
                        )
                        runs += 1
                    return runs

                beside = asyncio.create_task(exporting())
                await asyncio.sleep(1)  # the first export under way
                loaded = await _delays(c, rate, seconds)
                stop.set()
                runs = await beside
        finally:
            node.stop()
    a50, a99 = _pct(alone, 0.5), _pct(alone, 0.99)
    l50, l99 = _pct(loaded, 0.5), _pct(loaded, 0.99)
    print(f"dispatch delay alone:         p50 {a50:.0f} ms, p99 {a99:.0f} ms ({len(alone)} tasks)")
    print(f"dispatch delay with exports:  p50 {l50:.0f} ms, p99 {l99:.0f} ms ({len(loaded)} "
          f"tasks, {runs} exports of the backlog beside, --rate {export_rate:g})")  # fmt: skip
    print(f"p99 ratio: {l99 / a99 if a99 else float('nan'):.2f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=5000)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--export-rate", type=float, default=0, help="the exports' --rate")
    a = ap.parse_args()
    asyncio.run(_main(a.tasks, a.rate, a.seconds, a.export_rate))


if __name__ == "__main__":
    main()
