"""Next times and catch-up decisions for 10,000 schedules: what the pure part costs.

The firing loop of issue 30 asks each schedule for its next nominal time when
one fires, and decides each due one; with 10,000 schedules firing every minute
that is 10,000 of each a minute. Measured here on their own, in one process,
for a few mixes of schedules (each mix 10,000 specs):

* every:       `every 1m`, UTC (arithmetic only)
* cron UTC:    `* * * * *` in UTC
* cron zoned:  `* * * * *` in Europe/Berlin
* mixed:       distinct crons (minute and hour drawn; hourly, daily, weekdays,
               monthly, every n minutes) over five zones
* decide:      `decide` on `* * * * *` in UTC, one occurrence due each

"cold" is the first pass, "warm" the best of five after it: the steady state
of a running primary. Neither includes parsing: cronsim parses an expression
when its spec is made (a create, or a primary reading the log), ~20 µs, once.
`after` is mid-June, away from DST; `--dst-eve` puts it an hour before
Berlin's spring-forward, where the walk takes its slow path.

    python -m apollo11.scheduler.tools.bench.schedules_bench [--dst-eve] [--json]
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from apollo11.scheduler.schedules import ScheduleSpec, decide, next_time

N = 10_000
ZONES = ("UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "America/Sao_Paulo")
AFTER = datetime(2025, 6, 15, 10, 20, 30, tzinfo=UTC)
DST_EVE = datetime(2025, 3, 30, 0, 0, 30, tzinfo=UTC)  # 01:00:30 CET, an hour before the gap


def mixes() -> dict[str, list[ScheduleSpec]]:
    draw = random.Random(7)  # the same mix every run

    def mixed() -> ScheduleSpec:
        m, h, n = draw.randrange(60), draw.randrange(24), draw.randrange(2, 30)
        forms = (f"{m} * * * *", f"{m} {h} * * *", f"{m} {h} * * 1-5", f"{m} {h} 1 * *")
        expr = draw.choice((*forms, f"*/{n} * * * *"))
        return ScheduleSpec(cron=expr, tz=draw.choice(ZONES))

    return {
        "every": [ScheduleSpec(every="1m")] * N,
        "cron UTC": [ScheduleSpec(cron="* * * * *")] * N,
        "cron zoned": [ScheduleSpec(cron="* * * * *", tz="Europe/Berlin")] * N,
        "mixed": [mixed() for _ in range(N)],
    }


def _passes(work: Callable[[], object]) -> tuple[float, float]:
    start = time.perf_counter()
    work()
    cold = time.perf_counter() - start
    warm = []
    for _ in range(5):
        start = time.perf_counter()
        work()
        warm.append(time.perf_counter() - start)
    return cold * 1000, min(warm) * 1000


def run(after: datetime = AFTER) -> dict[str, dict[str, float]]:
    """Milliseconds for N next times (or decisions) per mix: cold and warm."""
    results = {}
    for name, specs in mixes().items():

        def next_times(specs: list[ScheduleSpec] = specs) -> object:
            return [next_time(s, after) for s in specs]

        cold, warm = _passes(next_times)
        results[name] = {"cold_ms": cold, "warm_ms": warm, "each_us": warm * 1000 / N}
    spec = ScheduleSpec(cron="* * * * *")
    minute = after.replace(second=0, microsecond=0)
    now = minute + timedelta(minutes=1, milliseconds=200)
    ids = [f"s{i}" for i in range(N)]

    def decisions() -> object:
        return [decide(spec, schedule_id=i, watermark=minute, now=now, running=False) for i in ids]

    cold, warm = _passes(decisions)
    results["decide"] = {"cold_ms": cold, "warm_ms": warm, "each_us": warm * 1000 / N}
    return results


def main(argv: list[str]) -> None:
    results = run(DST_EVE if "--dst-eve" in argv else AFTER)
    if "--json" in argv:
        print(json.dumps(results, indent=2))
        return
    print(f"{N:,} schedules each   cold ms   warm ms   µs each (warm)")
    for name, row in results.items():
        print(f"{name:<20} {row['cold_ms']:8.1f}  {row['warm_ms']:8.1f}  {row['each_us']:8.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
