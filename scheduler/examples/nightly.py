"""The examples' nightly schedule: the `etl` pipeline at 03:00 in Berlin, declared in
code (docs/schedules.md, "In code"), which a primary reconciles into the log as it
starts leading.

A module of its own, so that a node fires it only when asked
(`--workflows apollo11.scheduler.examples,apollo11.scheduler.examples.nightly`, as
the compose deployment does): the many test clusters that load the examples keep a
log with no schedule in it, and none of them runs an etl at 03:00.
"""

from __future__ import annotations

from apollo11 import Schedule
from apollo11.scheduler.examples import etl

nightly_etl = Schedule(
    "nightly-etl",
    workflow=etl,
    cron="0 3 * * *",
    tz="Europe/Berlin",
    input={"step_seconds": 1},
    # a node down at 03:00 (an upgrade, a failover) still runs it until 09:00
    catchup_window="6h",
    note="the examples' nightly run (apollo11.scheduler.examples.nightly)",
)
