"""Snapshots, the archive and recovery: snapshot + tail must equal a full replay."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apollo11.scheduler import metrics
from apollo11.scheduler.log import EventLog, EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import State, TaskStatus, apply_all, replay
from apollo11.scheduler.state.archive import encode_entry
from apollo11.scheduler.state.snapshot import (
    ENCODE_SLICE,
    HEADER,
    MAGIC,
    SNAPSHOT_FORMAT,
    Snapshots,
    _encode_paced,
    capture,
)
from apollo11.scheduler.state.store import EVICT_PAUSE_S, EVICT_SLICE, Store, StoreConfig
from apollo11.scheduler.testing.history import etl_history

LOG = LogConfig(segment_max_bytes=16 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)


async def _write_history(root: Path, n_tasks: int, seed: int = 1, batch: int = 25) -> int:
    log = EventLog.open(root, config=LOG, instance_id="n1")
    it = etl_history(n_tasks, seed=seed, concurrency=6)
    while chunk := list(itertools.islice(it, batch)):
        await log.append_many(chunk)
    n = log.durable_id
    await log.close()
    return n


def _full(root: Path) -> State:
    state = State()
    log = EventLog.open(
        root, config=LOG, read_only=True, on_events=lambda evs: apply_all(state, evs)
    )
    log.close_sync()
    return state


def test_snapshot_at_every_k_plus_tail_equals_full_replay(tmp_path: Path) -> None:
    root = tmp_path / "d"
    n = asyncio.run(_write_history(root, 12))
    full = _full(root).to_dict()
    log = EventLog.open(root, config=LOG, read_only=True)
    events = list(log.read())
    snaps = Snapshots(str(tmp_path / "snaps"), keep=1000)
    (tmp_path / "snaps").mkdir()
    state = State()
    for k in range(n + 1):
        if k:
            apply_all(state, [events[k - 1]])
        written = snaps.write(capture(state, log.position_after(k)))
        # Eviction, as the store does after a snapshot: later events must fault tasks back in.
        _, loaded = snaps.load(k)
        assert written.info.watermark == k
        got = EventLog.open(
            root,
            config=LOG,
            read_only=True,
            replay_from=k + 1,
            hint=log.position_after(k),
            hint_term=loaded.term,
            on_events=lambda evs, s=loaded: apply_all(s, evs),  # type: ignore[misc]
        )
        got.close_sync()
        assert loaded.to_dict() == full, f"snapshot at {k} + tail differs from full replay"
    log.close_sync()


def test_a_snapshot_file_is_written_in_parts_byte_for_byte_as_before(tmp_path: Path) -> None:
    """The body is no longer dumped whole and joined to its header (two copies of a
    ~90 MB state under a flood): the file is the same, byte for byte."""
    root = tmp_path / "d"
    n = asyncio.run(_write_history(root, 12))
    log = EventLog.open(root, config=LOG, read_only=True)
    state = apply_all(State(), list(log.read()))
    (tmp_path / "snaps").mkdir()
    cap = capture(state, log.position_after(n))
    written = Snapshots(str(tmp_path / "snaps")).write(cap)
    log.close_sync()
    body = orjson.dumps(
        {
            "format": SNAPSHOT_FORMAT,
            "watermark": cap.watermark,
            "term": cap.term,
            "position": list(cap.position),
            "chunks": written.info.chunks,
            "state": orjson.Fragment(cap.state_json),
        }
    )
    # format 2: the active tasks after the document, one JSON object a line
    assert all(b"\n" not in t for t in cap.tasks_json)
    if cap.tasks_json:
        body += b"\n" + b"\n".join(cap.tasks_json)
    before = HEADER.pack(MAGIC, zlib.crc32(body), len(body)) + body
    assert Path(written.info.path).read_bytes() == before


def test_a_format_1_snapshot_still_loads_and_format_2_holds_a_task_a_line(
    tmp_path: Path,
) -> None:
    """Format 2 writes the active tasks one a line after the document (loaded one at a
    time); a snapshot written before (format 1: the tasks inside the document) loads."""
    from apollo11.scheduler.state.snapshot import snapshot_name

    root = tmp_path / "d"
    asyncio.run(_write_history(root, 12))
    log = EventLog.open(root, config=LOG, read_only=True)
    events = list(log.read())
    half = events[: len(events) // 2]  # tasks mid-run: active ones
    state = apply_all(State(), half)
    position = log.position_after(half[-1].event_id)
    log.close_sync()
    cap = capture(state, position)
    assert cap.tasks_json, "the history leaves tasks active"
    snaps = Snapshots(str(tmp_path / "new"))
    (tmp_path / "new").mkdir()
    written = snaps.write(cap)
    raw = Path(written.info.path).read_bytes()[HEADER.size :]
    assert raw.count(b"\n") == len(cap.tasks_json)
    _, loaded = snaps.load(cap.watermark)
    assert loaded.to_dict() == state.to_dict()
    # the same state, as format 1 wrote it
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    meta = orjson.loads(cap.state_json)
    meta["tasks"] = [orjson.Fragment(t) for t in cap.tasks_json]
    body = orjson.dumps(
        {
            "format": 1,
            "watermark": cap.watermark,
            "term": cap.term,
            "position": list(cap.position),
            "chunks": list(written.info.chunks),
            "state": meta,
        }
    )
    for chunk in written.info.chunks:  # the quiet tasks' archive, as it was
        shutil.copy(tmp_path / "new" / chunk, old_dir / chunk)
    framed = HEADER.pack(MAGIC, zlib.crc32(body), len(body)) + body
    (old_dir / snapshot_name(cap.watermark)).write_bytes(framed)
    _, old = Snapshots(str(old_dir)).load(cap.watermark)
    assert old.to_dict() == state.to_dict()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_tasks=st.integers(1, 30), seed=st.integers(0, 10_000), data=st.data())
def test_snapshot_equivalence_on_random_histories(
    n_tasks: int, seed: int, data: st.DataObject
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "d"
        n = asyncio.run(_write_history(root, n_tasks, seed=seed, batch=7))
        log = EventLog.open(root, config=LOG, read_only=True)
        events = list(log.read())
        full = replay(events).to_dict()
        ks = data.draw(st.lists(st.integers(0, n), min_size=1, max_size=4, unique=True))
        snaps_dir = Path(tmp) / "s"
        snaps_dir.mkdir()
        snaps = Snapshots(str(snaps_dir), keep=100)
        for k in sorted(ks):
            state = replay(events[:k])
            snaps.write(capture(state, log.position_after(k)))
            _, loaded = snaps.load(k)
            assert apply_all(loaded, events[k:]).to_dict() == full
        log.close_sync()


def _store(root: Path, interval: int = 50, keep: int = 3) -> Store:
    return Store.open(
        root,
        config=StoreConfig(log=LOG, snapshot_interval=interval, snapshots_keep=keep),
        instance_id="n1",
    )


async def _drive(store: Store, n_tasks: int, seed: int = 3) -> None:
    it = etl_history(n_tasks, seed=seed, concurrency=8)
    while chunk := list(itertools.islice(it, 20)):
        await store.log.append_many(chunk)
        await store.wait_snapshot()  # let eviction happen as it would between batches


async def test_store_snapshots_archive_and_recovers(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = _store(root)
    assert store.recovery.snapshot is None
    await _drive(store, 400)
    live = store.state.to_dict()
    in_memory = len(store.state.tasks)
    await store.close()
    assert in_memory < 50, "finished tasks are evicted to the archive"

    snaps = sorted((root / "snapshots").glob("snapshot-*.snap"))
    assert len(snaps) == 3, "only the newest three are kept"
    chunks = list((root / "snapshots").glob("*.arc"))
    n_snapshots = store.log.durable_id // 50
    assert len(chunks) < 25 < n_snapshots, "chunks are merged, not one per snapshot forever"

    again = _store(root)
    assert again.recovery.snapshot is not None
    assert again.recovery.replayed < 50 + 20
    assert again.state.to_dict() == live == _full(root).to_dict()
    await again.close()


async def test_archived_tasks_leave_memory_a_slice_at_a_time(tmp_path: Path) -> None:
    store = _store(tmp_path / "d", interval=10**9)
    await _drive(store, 4 * EVICT_SLICE)
    before = store.state.to_dict()
    n = len(store.state.tasks)
    written = await store.snapshot_now()
    assert len(written.archived) > 2 * EVICT_SLICE
    assert len(store.state.tasks) == n, "nothing is evicted in the callback itself"
    await asyncio.sleep(0)
    assert len(store.state.tasks) == n - EVICT_SLICE, "one slice at a time"
    await asyncio.sleep(0)
    assert len(store.state.tasks) == n - EVICT_SLICE, "the loop's other work in between"
    await asyncio.sleep(EVICT_PAUSE_S * 2)
    assert len(store.state.tasks) < n - EVICT_SLICE
    assert store.state.to_dict() == before

    second = await store.snapshot_now()
    assert all(t not in store.state.tasks for t in written.archived), "drained first"
    assert not set(second.archived) & set(written.archived), "none archived twice"
    await store.wait_snapshot()
    assert store.state.to_dict() == before
    await store.close()


async def test_the_writer_encodes_every_quiet_task_in_slices(tmp_path: Path) -> None:
    await _write_history(tmp_path, 3 * ENCODE_SLICE + 5)
    tasks = list(_full(tmp_path).tasks.values())
    assert len(tasks) > 3 * ENCODE_SLICE
    assert _encode_paced(tasks) == [encode_entry(t) for t in tasks]


async def test_an_archived_task_comes_back_when_an_operator_acts(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = _store(root, interval=5)
    log = store.log
    await log.append(EventType.TASK_SUBMITTED, "t1", payload={"workflow": "w", "steps": {"a": []}})
    await log.append(EventType.STEP_STARTED, "t1", "a", attempt=1)
    await log.append(EventType.STEP_FAILED, "t1", "a", {"error": "x", "final": True}, attempt=1)
    for i in range(10):
        await log.append(
            EventType.TASK_SUBMITTED, f"o{i}", payload={"workflow": "w", "steps": {"a": []}}
        )
    await store.wait_snapshot()
    await log.append(
        EventType.TASK_SUBMITTED, "last", payload={"workflow": "w", "steps": {"a": []}}
    )
    await store.wait_snapshot()
    assert "t1" not in store.state.tasks, "the failed task went to the archive"
    assert store.state.peek("t1") is not None and store.state.peek("t1").status is TaskStatus.FAILED  # type: ignore[union-attr]
    await log.append(
        EventType.MANUAL_OVERRIDE, "t1", "a", {"action": "retry", "operator": "o", "reason": "r"}
    )
    assert store.state.tasks["t1"].status is TaskStatus.RUNNING
    await store.close()
    again = _store(root, interval=5)
    assert again.state.peek("t1").status is TaskStatus.RUNNING  # type: ignore[union-attr]
    await again.close()


async def test_corrupt_snapshots_fall_back_then_full_replay(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = _store(root)
    await _drive(store, 100)
    expected = store.state.to_dict()
    await store.close()
    snaps = sorted((root / "snapshots").glob("snapshot-*.snap"))
    newest = snaps[-1]
    raw = bytearray(newest.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    newest.write_bytes(bytes(raw))
    before = metrics.SNAPSHOT_FALLBACKS._value.get()
    again = _store(root)
    assert again.recovery.snapshot == int(snaps[-2].name[9:29])
    assert again.state.to_dict() == expected
    assert metrics.SNAPSHOT_FALLBACKS._value.get() == before + 1
    await again.close()

    for s in (root / "snapshots").glob("snapshot-*.snap"):
        s.write_bytes(b"garbage")
    third = _store(root, interval=10**9)
    assert third.recovery.snapshot is None
    assert third.state.to_dict() == expected
    await third.close()


async def test_a_missing_archive_chunk_makes_that_snapshot_unusable(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = _store(root)
    await _drive(store, 100)
    expected = store.state.to_dict()
    await store.close()
    for c in (root / "snapshots").glob("*.arc"):
        c.unlink()
    again = _store(root, interval=10**9)
    assert again.recovery.snapshot is None, "no snapshot is usable without its chunks"
    assert again.state.to_dict() == expected
    await again.close()


def test_store_config_is_validated() -> None:
    with pytest.raises(ValueError, match="snapshot_interval"):
        StoreConfig(snapshot_interval=0)
    with pytest.raises(ValueError, match="segment_max_bytes"):
        LogConfig(segment_max_bytes=10)


async def test_a_snapshot_pointing_past_the_end_of_the_log_is_not_trusted(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = _store(root)
    await _drive(store, 60)
    await store.close()
    expected_tasks = {t.task_id for t in _full(root).iter_tasks()}
    # Lose the tail of the log after the newest snapshot was taken (what a crash in the
    # middle of cutting a divergent tail could leave).
    segs = sorted((root / "log").glob("*.seg"))
    last = segs[-1]
    # A cut writes the shorter end into the manifest before it cuts (a crash between
    # leaves the log longer than the manifest): as far as the manifest goes, this log
    # ends where it was cut.
    (root / "log" / "MANIFEST").unlink()
    with open(last, "r+b") as f:
        f.truncate(max(0, last.stat().st_size // 3))
    again = _store(root, interval=10**9)
    # Whatever snapshot is used, the state must match a full replay of what is left.
    assert again.state.to_dict() == _full(root).to_dict()
    assert {t.task_id for t in again.state.iter_tasks()} <= expected_tasks
    await again.close()


async def test_a_tasks_events_are_read_by_id_even_once_archived(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = _store(root)
    await _drive(store, 300)
    everything = list(store.log.read())
    await store.close()
    store = _store(root)  # tasks come back from snapshots and archive chunks
    by_task: dict[str, list[int]] = {}
    for e in everything:
        if e.task_id:
            by_task.setdefault(e.task_id, []).append(e.event_id)
    archived = [t for t in by_task if t not in store.state.tasks]
    assert len(archived) > 200
    for task_id in archived[:20] + list(store.state.tasks)[:20]:
        task = store.state.peek(task_id)
        assert task is not None and task.event_ids == by_task[task_id]
        events, nxt = store.task_events(task)
        assert [e.event_id for e in events] == by_task[task_id] and nxt == 0
        # pages: a limit, and where the next page starts
        ids = by_task[task_id]
        page, nxt = store.task_events(task, ids[2], None, 3)
        assert [e.event_id for e in page] == ids[2:5]
        assert nxt == (ids[5] if len(ids) > 5 else 0)
        assert store.task_events(task, 0, ids[1])[0] == events[:2]
    await store.close()


async def test_tasks_from_older_snapshots_without_event_ids_scan_their_span(
    tmp_path: Path,
) -> None:
    root = tmp_path / "d"
    store = _store(root)
    await _drive(store, 40)
    task = next(iter(store.state.tasks.values()))
    expected, _ = store.task_events(task)
    task.event_ids = None  # as a snapshot written before the ids were kept loads it

    events, nxt = store.task_events(task)
    page, after = store.task_events(task, 0, None, 2)

    assert events == expected and nxt == 0 and len(events) > 2
    assert page == expected[:2] and after == expected[2].event_id
    await store.close()


async def test_keys_of_archived_tasks_leave_the_snapshot_and_are_found_in_the_archive(
    tmp_path: Path,
) -> None:
    root = tmp_path / "d"
    store = _store(root, interval=20)
    log = store.log

    async def run(task_id: str, key: str) -> None:
        payload = {"workflow": "w", "steps": {"a": []}, "idempotency_key": key}
        await log.append(EventType.TASK_SUBMITTED, task_id, payload=payload)
        await log.append(EventType.STEP_STARTED, task_id, "a", attempt=1)
        await log.append(EventType.STEP_SUCCEEDED, task_id, "a", {"result": 1}, attempt=1)
        await store.wait_snapshot()

    for i in range(300):
        await run(f"t{i:04d}", f"key-{i}")
    await run("t9000", "key-5")  # the key used again, as once its TTL has passed
    for i in range(300, 330):
        await run(f"t{i:04d}", f"key-{i}")
    store.state.task("t0005")  # the key's older holder back in memory must not win

    assert len(store.state.idempotency) < 60, "only the keys of tasks in memory are kept"
    assert store.state.task_for_key("key-7").task_id == "t0007"  # type: ignore[union-attr]
    assert store.state.task_for_key("key-5").task_id == "t9000"  # type: ignore[union-attr]
    assert store.state.task_for_key("nope") is None
    newest = sorted((root / "snapshots").glob("snapshot-*.snap"))[-1].read_bytes()
    assert b'"key-7"' not in newest and b'"key-250"' not in newest
    live = store.state.to_dict()
    assert len(live["idempotency"]) == 330 and live["idempotency"]["key-5"] == "t9000"
    await store.close()

    again = _store(root, interval=20)
    assert again.state.to_dict() == live == _full(root).to_dict()
    assert again.state.task_for_key("key-5").task_id == "t9000"  # type: ignore[union-attr]
    assert again.state.task_for_key("key-100").task_id == "t0100"  # type: ignore[union-attr]
    await again.close()


async def test_time_travel_for_one_task_equals_rebuilding_the_whole_state(tmp_path: Path) -> None:
    import random

    from apollo11.scheduler.state.store import NeedsFullReplay, state_at

    root = tmp_path / "d"
    store = _store(root)
    await _drive(store, 120, seed=11)
    end = store.log.durable_id
    rng = random.Random(5)
    everything = list(store.log.read())
    checked = 0
    for at in [*sorted(rng.sample(range(1, end + 1), 12)), end]:
        whole = state_at(root, at)
        for e in rng.sample(everything, 15):
            past = store.task_at(e.task_id, at) if e.task_id else None
            expected = whole.peek(e.task_id) if e.task_id else None
            assert (past and past.to_dict()) == (expected and expected.to_dict()), (e, at)
            checked += past is not None
    assert checked > 50
    task = store.state.task(everything[-1].task_id)  # in memory, so the change below stays
    assert task is not None
    task.event_ids = None  # as a task loaded from a snapshot written before they were kept
    with pytest.raises(NeedsFullReplay):
        store.task_at(task.task_id, end)
    await store.close()


async def test_snapshots_are_not_taken_more_often_than_the_minimum_interval(
    tmp_path: Path,
) -> None:
    store = Store.open(
        tmp_path / "d",
        config=StoreConfig(log=LOG, snapshot_interval=10, snapshot_min_interval_s=3600),
        instance_id="n1",
    )
    await _drive(store, 40)
    assert len(store.snapshots.watermarks()) == 1, "the first, then none for an hour"
    await store.close()
    with pytest.raises(ValueError, match="snapshot_min_interval_s must not be negative"):
        StoreConfig(snapshot_min_interval_s=-1)


async def test_a_quiet_task_changed_while_its_snapshot_is_written_cancels_that_snapshot(
    tmp_path: Path,
) -> None:
    from apollo11.scheduler.state.snapshot import SnapshotRaced

    root = tmp_path / "d"
    store = _store(root, interval=10**9)  # snapshots by hand only
    await _drive(store, 30)
    quiet = [t for t in store.state.tasks.values() if t.quiescent]
    assert quiet
    cap = capture(store.state, store.log.position(), store.snapshots.task_json)
    before = sorted(p.name for p in (root / "snapshots").iterdir())
    quiet[0].last_event_id = cap.watermark + 1  # as an operator's event, applied meanwhile

    with pytest.raises(SnapshotRaced, match=f"task {quiet[0].task_id} changed"):
        store.snapshots.write(cap)

    assert sorted(p.name for p in (root / "snapshots").iterdir()) == before, "nothing written"
    quiet[0].last_event_id = cap.watermark
    written = store.snapshots.write(cap)
    assert set(written.archived) == {t.task_id for t in quiet}
    await store.close()


async def test_a_log_cut_before_its_first_snapshot_is_refused_not_half_replayed(
    tmp_path: Path,
) -> None:
    """Review finding: with every snapshot refused (or gone) the store replayed a log
    whose first segment no longer starts at event 1 without a word, and came up without
    the tasks before it (a node under --log-retention, a seeded standby, a restore)."""
    from apollo11.scheduler.errors import SnapshotError

    root = tmp_path / "d"
    store = Store.open(
        root,
        config=StoreConfig(log=LOG, snapshot_interval=50),
        instance_id="n1",
    )
    await _drive(store, 100)
    await store.close()
    segments = sorted((root / "log").glob("*.seg"))
    assert len(segments) > 2
    segments[0].unlink()  # what log retention deletes once a snapshot covers it
    for s in (root / "snapshots").glob("snapshot-*.snap"):
        s.write_bytes(b"garbage")
    with pytest.raises(SnapshotError, match="no snapshot covers the events before it"):
        _store(root)


def test_a_snapshot_leaves_a_file_being_written_beside_it(tmp_path: Path) -> None:
    """Found in make check: a GetTask that met a damaged chunk rebuilt it (temp file,
    rename) while a snapshot's retention deleted every `.tmp` in the directory; the
    rename failed and the read answered INTERNAL. Retention leaves them: only the
    store, opening its directory, deletes what a crash left."""
    root = tmp_path / "d"
    n = asyncio.run(_write_history(root, 12))
    log = EventLog.open(root, config=LOG, read_only=True)
    state = apply_all(State(), list(log.read()))
    snaps_dir = tmp_path / "snaps"
    snaps_dir.mkdir()
    in_progress = snaps_dir / "00000000000000000005-0.arc.tmp"
    in_progress.write_bytes(b"a chunk being rebuilt")
    Snapshots(str(snaps_dir)).write(capture(state, log.position_after(n)))
    log.close_sync()
    assert in_progress.exists()


async def test_the_store_opening_deletes_what_a_crash_left_half_written(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = _store(root, interval=20)
    await _drive(store, 10)
    await store.close()
    left = [root / "snapshots" / "00000000000000000005-0.arc.tmp", root / "snapshots" / "x.tmp"]
    for p in left:
        p.write_bytes(b"half")
    store = _store(root, interval=20)
    await store.close()
    assert not any(p.exists() for p in left)


def test_a_chunk_write_that_fails_leaves_no_half_behind(tmp_path: Path) -> None:
    """Retention no longer deletes `.tmp` files (above): a write that fails part way
    (a full disk) deletes its own."""
    from apollo11.scheduler.state.archive import write_chunk

    def records() -> Iterator[tuple[str, bytes, bytes, str]]:
        yield "t1", b"{}", b"{}", ""
        raise OSError(28, "No space left on device")

    path = tmp_path / "00000000000000000005-0.arc"
    with pytest.raises(OSError, match="No space"):
        write_chunk(str(path), records(), 0)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.timeout(30)
async def test_waiting_for_redactions_returns_when_a_snapshot_has_just_ended(
    tmp_path: Path,
) -> None:
    """Found as a test that hung one run in four: `redactions_written` awaited a
    snapshot future already done, which does not yield, so its done callback (which
    clears it) never ran and the loop spun for ever."""
    store = _store(tmp_path / "d")
    ended: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    ended.add_done_callback(store._snapshot_done)
    store._snapshot_task = ended
    ended.set_exception(OSError(28, "No space left on device"))  # its callback: soon
    await store.redactions_written()
    assert store._snapshot_task is None
    await store.close()
