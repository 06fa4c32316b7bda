"""`apollo11 bench archive --restore-events` (scheduler/tools/bench/restore_bench.py):
its bucket builder at a small size, restored with and without a snapshot, holds
every task the history submitted; and the pure parts of its load figures."""

from __future__ import annotations

import asyncio
from pathlib import Path

from apollo11.scheduler.bucket import build_data_dir, load_catalog, open_bucket
from apollo11.scheduler.log import EventLog, EventType
from apollo11.scheduler.state import Store, state_at
from apollo11.scheduler.tools.bench import restore_bench as rb

PSI = """some avg10=55.65 avg60=15.45 avg300=9.71 total=8116047905
full avg10=0.00 avg60=0.00 avg300=0.00 total=0
"""


def test_cpu_pressure_reads_some_avg10() -> None:
    assert rb.cpu_pressure(PSI) == 55.65
    assert rb.cpu_pressure("") == -1.0


def test_load_summary_leaves_out_missing_pressure() -> None:
    s = rb.summarize_load([(1.0, -1.0), (3.0, -1.0)])
    assert s == {"samples": 2, "load1_min": 1.0, "load1_mean": 2.0, "load1_max": 3.0}
    s = rb.summarize_load([(1.0, 10.0), (3.0, 30.0)])
    assert s["cpu_some_avg10_mean"] == 20.0 and s["cpu_some_avg10_max"] == 30.0
    assert rb.summarize_load([]) == {}


def _submitted(data_dir: Path, through: int) -> set[str]:
    ids: set[str] = set()

    def keep(events) -> None:  # type: ignore[no-untyped-def]
        ids.update(e.task_id for e in events if e.event_type == EventType.TASK_SUBMITTED)

    EventLog.open(data_dir, read_only=True, on_events=keep, until=through).close_sync()
    return ids


async def _restored(data_dir: Path) -> tuple[int, dict[str, str]]:
    store = Store.open(data_dir, instance_id="check")
    try:
        return store.log.durable_id, {t.task_id: t.status.value for t in store.state.iter_tasks()}
    finally:
        await store.close()


def test_the_built_bucket_restores_every_task_with_and_without_a_snapshot(
    tmp_path: Path, archive_url: str
) -> None:
    built = asyncio.run(
        rb.build_history(
            tmp_path / "primary",
            archive_url,
            10_000,
            segment_bytes=64 * 1024,
            snapshot_min_interval_s=0,
        )
    )
    catalog = load_catalog(open_bucket(archive_url))
    through = catalog.through
    assert through >= 10_000 and catalog.restorable() is not None
    first, last = built["check_tasks"]
    submitted = _submitted(tmp_path / "primary", through)
    assert {first, last} <= submitted
    truth = state_at(tmp_path / "primary", through)
    expected = {t.task_id: t.status.value for t in truth.iter_tasks()}
    assert set(expected) == submitted

    bare = rb.without_snapshots(archive_url, archive_url + "-bare")
    assert bare.snapshots == () and bare.segments == catalog.segments
    for url, name in ((archive_url, "snap"), (archive_url + "-bare", "bare")):
        build_data_dir(open_bucket(url), tmp_path / name)
        end, statuses = asyncio.run(_restored(tmp_path / name))
        assert end == through, name
        assert statuses == expected, name
