"""A page of the task listing read in process (`State.list_summaries`), by how many
tasks are in memory (docs/benchmarks.md, "Export"):

    .venv/bin/python -m tests.scheduler.state.measure_listing
"""

from __future__ import annotations

import statistics
import time

from apollo11.scheduler.state import State, TaskState, TaskStatus


def _state(n: int) -> State:
    state = State()
    for i in range(n):
        t = TaskState(f"t{i:07d}", "etl", 1, None, {}, {}, status=TaskStatus.SUCCEEDED,
                      submitted_ms=i, updated_ms=i, done=1)  # fmt: skip
        state.tasks[t.task_id] = t
    return state


def main() -> None:
    for n in (2_000, 20_000, 100_000):
        state = _state(n)
        for limit in (50, 1000):
            took = []
            for _ in range(7):
                t0 = time.perf_counter()
                state.list_summaries(None, None, limit)
                took.append(time.perf_counter() - t0)
            ms = statistics.median(took) * 1000
            print(f"{n:>7} tasks in memory, a page of {limit:>4}: {ms:7.2f} ms (median of 7)")


if __name__ == "__main__":
    main()
