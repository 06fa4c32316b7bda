"""Retention's events in the state: TASK_HELD and TASK_PURGED folded the same way on
every replay, purged tasks gone from memory, the archive and the snapshot."""

from __future__ import annotations

import threading
from pathlib import Path

from apollo11.scheduler.clock import FakeClock
from apollo11.scheduler.log import EventLog, EventType, FsyncPolicy, LogConfig
from apollo11.scheduler.state import Archive, State, apply_all
from apollo11.scheduler.state.store import Store, StoreConfig

LOG = LogConfig(segment_max_bytes=64 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)


def _store(root: Path, interval: int = 40, clock: FakeClock | None = None) -> Store:
    return Store.open(
        root,
        config=StoreConfig(log=LOG, snapshot_interval=interval, snapshots_keep=3),
        instance_id="n1",
        clock=None if clock is None else clock.now_ms,
    )


def _full(root: Path) -> State:
    state = State()
    log = EventLog.open(
        root, config=LOG, read_only=True, on_events=lambda evs: apply_all(state, evs)
    )
    log.close_sync()
    return state


async def _run(store: Store, task_id: str, key: str, *, fail: bool = False) -> None:
    log = store.log
    payload = {"workflow": "w", "steps": {"a": []}, "idempotency_key": key, "input": "x" * 400}
    await log.append(EventType.TASK_SUBMITTED, task_id, payload=payload)
    await log.append(EventType.STEP_STARTED, task_id, "a", attempt=1)
    if fail:
        await log.append(EventType.STEP_FAILED, task_id, "a", {"error": "e", "final": True}, 1)
    else:
        await log.append(EventType.STEP_SUCCEEDED, task_id, "a", {"result": 1}, attempt=1)
    await store.wait_snapshot()


def _stored_bytes(root: Path) -> int:
    """What the newest snapshot needs: its file and the chunks it names."""
    snaps = root / "snapshots"
    newest = sorted(snaps.glob("snapshot-*.snap"))[-1]
    return newest.stat().st_size + sum(p.stat().st_size for p in snaps.glob("*.arc"))


async def test_purged_tasks_leave_memory_archive_and_snapshot(tmp_path: Path) -> None:
    root = tmp_path / "d"
    store = _store(root, interval=60)  # fewer than 8 chunks: no merge (a process of its own)
    for i in range(80):
        await _run(store, f"t{i:04d}", f"key-{i}")
    before = _stored_bytes(root)
    # a hold on one that is due, then a purge of the first 60 (t0001 is held)
    await store.log.append(EventType.TASK_HELD, "t0001", payload={"held": True, "by": "ann"})
    doomed = [f"t{i:04d}" for i in range(60)]
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": doomed})
    state = store.state
    assert state.peek("t0000") is None and state.peek("t0059") is None
    assert state.peek("t0001") is not None, "a held task is never purged"
    assert state.peek("t0060") is not None
    assert "purged by retention" in state.not_found("t0000")
    assert state.not_found("t9999") == "no task 't9999'"
    assert state.task_for_key("key-3") is None, "the key went with its task"
    listed, _ = state.list_summaries(limit=1000)
    assert {s.task_id for s in listed} == {"t0001"} | {f"t{i:04d}" for i in range(60, 80)}
    assert state.count_tasks() == 21
    assert any("refused: held" in a for a in state.anomalies)
    live = state.to_dict()
    assert live == _full(root).to_dict(), "the same state as a replay of the whole log"

    for i in range(3):  # the older snapshots, and the chunks only they name, go
        await _run(store, f"u{i}", f"ukey-{i}")
        await store.snapshot_now()
        await store.wait_snapshot()
    assert not state.tombstones, "no chunk holds a purged task any more"
    after = _stored_bytes(root)
    assert after < before * 0.7, (before, after)  # three tasks in four went
    live = state.to_dict()
    await store.close()

    again = _store(root, interval=60)
    assert again.recovery.snapshot is not None
    assert again.state.to_dict() == live == _full(root).to_dict()
    assert "purged by retention" in again.state.not_found("t0030")
    assert again.state.peek("t0030") is None
    await again.close()


async def test_a_release_lets_a_task_be_purged_and_keeps_its_finish_time(tmp_path: Path) -> None:
    store = _store(tmp_path / "d", interval=10**6)
    await _run(store, "t1", "k1", fail=True)
    finished = store.state.peek("t1").updated_ms  # type: ignore[union-attr]
    await store.log.append(EventType.TASK_HELD, "t1", payload={"held": True, "by": "ann"})
    assert store.state.holds["t1"]["by"] == "ann"
    await store.log.append(EventType.TASK_HELD, "t1", payload={"held": False, "by": "bob"})
    assert "t1" not in store.state.holds
    assert store.state.peek("t1").updated_ms == finished  # type: ignore[union-attr]
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": ["t1"]})
    assert store.state.peek("t1") is None
    await store.close()


async def test_an_unfinished_task_is_not_purged(tmp_path: Path) -> None:
    store = _store(tmp_path / "d", interval=10**6)
    log = store.log
    await log.append(EventType.TASK_SUBMITTED, "t1", payload={"workflow": "w", "steps": {"a": []}})
    await log.append(EventType.TASK_PURGED, "", payload={"tasks": ["t1"]})
    assert store.state.peek("t1") is not None
    assert any("not finished" in a for a in store.state.anomalies)
    await store.close()


async def test_a_purge_forgets_event_keys_past_their_ttl(tmp_path: Path) -> None:
    clock = FakeClock()
    store = _store(tmp_path / "d", interval=10**6, clock=clock)
    log = store.log
    await log.append(EventType.EVENT, "", payload={"key": "k", "idempotency_key": "i", "ttl_ms": 5})
    await log.append(EventType.TASK_PURGED, "", payload={"tasks": []})
    assert "i" in store.state.event_keys, "within its TTL"
    clock.advance(0.005)
    await log.append(EventType.TASK_PURGED, "", payload={"tasks": []})
    assert "i" not in store.state.event_keys, "the sweep's time is the log's clock"
    await store.close()


async def test_a_rewritten_chunk_rebuilt_from_the_log_holds_its_tasks_but_the_purged(
    tmp_path: Path,
) -> None:
    root = tmp_path / "d"
    store = _store(root)
    for i in range(80):
        await _run(store, f"t{i:04d}", f"key-{i}")
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": ["t0000", "t0002"]})
    await _run(store, "u0", "ukey-0")
    await store.snapshot_now()
    await store.wait_snapshot()
    archive = store.state.archive
    assert isinstance(archive, Archive)
    rewritten = next(c for c in archive.chunks if ".p" in c.name)
    kept = sorted(set(rewritten.task_ids()))
    assert "t0001" in kept and "t0000" not in kept
    everyone = {t.task_id: t.to_dict() for t in store.state.iter_tasks()}
    size = Path(rewritten.path).stat().st_size
    Path(rewritten.path).write_bytes(b"\xff" * size)  # every byte of it lost
    new, _ = store.rebuild_chunk(rewritten.path)
    assert sorted(set(new.task_ids())) == kept
    store.install_chunk(new)
    assert {t.task_id: t.to_dict() for t in store.state.iter_tasks()} == everyone
    await store.close()


async def test_a_purge_during_the_first_snapshot_does_not_bring_the_task_back(
    tmp_path: Path,
) -> None:
    """The first snapshot archives a quiet task; a purge of it lands while that snapshot
    is written, when the state has no archive yet to hide it from: once the snapshot is
    in place, the task must still read as purged."""
    store = _store(tmp_path / "d", interval=10_000)
    await _run(store, "t0", "key-0")
    assert store.state.archive is None  # no snapshot yet
    gate = threading.Event()
    store._snap_io.submit(gate.wait)  # the writer thread held until the purge is in
    written = store.snapshot_now()  # captures t0, quiet: archived by this snapshot
    await store.log.append(EventType.TASK_PURGED, "", payload={"tasks": ["t0"]})
    assert store.state.peek("t0") is None
    gate.set()
    await written
    assert "t0" in written.result().archived
    assert store.state.peek("t0") is None
    assert "t0" not in {t.task_id for t in store.state.iter_tasks()}
    await store.close()
