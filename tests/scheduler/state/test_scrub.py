"""The background scrub (issue 15, item 3): damage in sealed segments and archive
chunks is found without any read needing that range, and a damaged chunk is
rebuilt from the log."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from apollo11.scheduler.client import Client
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.errors import ArchiveLostError
from apollo11.scheduler.log import FsyncPolicy, LogConfig
from apollo11.scheduler.node import Node
from apollo11.scheduler.state import scrub
from apollo11.scheduler.state.archive import Chunk
from apollo11.scheduler.state.store import Store, StoreConfig
from apollo11.scheduler.testing.history import etl_history

LOG = LogConfig(segment_max_bytes=16 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)


def _found(kind: str) -> float:
    return REGISTRY.get_sample_value("apollo11_log_damage_found_total", {"kind": kind}) or 0.0


def _store(root: Path, *, keep_all: bool = True) -> Store:
    cfg = StoreConfig(log=LOG, snapshot_interval=50, snapshots_keep=2, keep_all_segments=keep_all)
    return Store.open(root, config=cfg, instance_id="n1")


async def _drive(store: Store, n_tasks: int) -> None:
    it = etl_history(n_tasks, seed=3, concurrency=8)
    while chunk := list(itertools.islice(it, 20)):
        await store.log.append_many(chunk)
        await store.wait_snapshot()


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def _scrubber(store: Store, found: list[scrub.Damage], **kw: object) -> scrub.Scrubber:
    def targets() -> scrub.Targets:
        archive = store.state.archive
        chunks = [c.path for c in archive.chunks] if archive is not None else []  # type: ignore[attr-defined]
        return scrub.Targets(store.log.segments[:-1], chunks)

    return scrub.Scrubber(
        targets=targets,
        report=found.append,
        mb_per_s=1000,
        interval_s=3600,
        first_delay_s=0,
        **kw,  # type: ignore[arg-type]
    )


def _archived_chunk(store: Store) -> tuple[Chunk, str, int]:
    """The oldest chunk, one of its tasks (not in memory), and its entry offset."""
    chunk = store.state.archive.chunks[0]  # type: ignore[union-attr]
    hashes = chunk._load_index()
    for i in range(len(hashes)):
        task_id, _ = chunk._read_entry(chunk._offsets[i])
        if task_id not in store.state.tasks:
            return chunk, task_id, int(chunk._offsets[i])
    raise AssertionError("no archived task")


async def test_a_flipped_byte_before_the_newest_snapshot_is_found_without_a_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _store(tmp_path / "d")
    await _drive(store, 120)
    assert store.recovery.snapshot is None and store.snapshots.watermarks()
    sealed = store.log.segments[:-1]
    assert len(sealed) >= 3
    newest = store.snapshots.watermarks()[-1]
    seg = sealed[1]
    assert seg.last_id < newest, "the damage is in a range recovery never reads"
    found: list[scrub.Damage] = []
    scrubber = _scrubber(store, found)
    assert scrubber.run_pass().endswith("no damage")
    _flip(seg.path, 5000)
    before = _found("segment")
    caplog.set_level(logging.ERROR, logger="apollo11.scheduler.state.scrub")
    sentence = scrubber.run_pass()
    assert sentence.endswith("1 damaged"), sentence
    assert [(d.kind, d.path) for d in found] == [("segment", seg.path)]
    assert 0 < found[0].offset <= 5000 and "checksum" in found[0].reason
    assert _found("segment") == before + 1
    line = f"{seg.path} is damaged at offset {found[0].offset}"
    assert any(line in r.getMessage() for r in caplog.records), caplog.text
    await store.close()


async def test_the_scrub_paces_itself(tmp_path: Path) -> None:
    store = _store(tmp_path / "d")
    await _drive(store, 60)
    size = sum(s.size for s in store.log.segments[:-1])
    mb_per_s = size / (1024 * 1024) / 0.3  # a pass should take ~0.3 s
    t0 = time.monotonic()
    found: list[scrub.Damage] = []
    s = _scrubber(store, found)
    s.rate = mb_per_s * 1024 * 1024
    s.run_pass()
    assert time.monotonic() - t0 >= 0.25
    await store.close()


async def test_a_damaged_chunk_is_rebuilt_from_the_log_and_the_task_read(tmp_path: Path) -> None:
    store = _store(tmp_path / "d")
    await _drive(store, 150)
    chunk, task_id, at = _archived_chunk(store)
    want = store.state.peek(task_id)
    assert want is not None
    _flip(chunk.path, at + 20)
    with pytest.raises(Exception, match="bad entry"):
        store.state.peek(task_id)
    got = await store.lookup(task_id)
    assert got is not None and got.to_dict() == want.to_dict()
    assert store.state.peek(task_id) == got, "the rebuilt chunk is in use"
    for _ in Chunk(chunk.path).verify():
        pass  # the file on disk reads well again
    await store.close()
    again = _store(tmp_path / "d")  # and recovery uses it
    assert again.state.peek(task_id).to_dict() == want.to_dict()  # type: ignore[union-attr]
    await again.close()


async def test_the_scrub_finds_and_rebuilds_a_damaged_chunk(tmp_path: Path) -> None:
    store = _store(tmp_path / "d")
    await _drive(store, 150)
    chunk, task_id, at = _archived_chunk(store)
    want = store.state.peek(task_id)
    everyone = {t.task_id: t.to_dict() for t in store.state.iter_tasks()}
    _flip(chunk.path, at + 20)
    found: list[scrub.Damage] = []
    rebuilt: list[Chunk] = []

    def repair(d: scrub.Damage) -> str:
        new, sentence = store.rebuild_chunk(d.path)
        rebuilt.append(new)
        return sentence

    before = _found("chunk")
    _scrubber(store, found, repair=repair).run_pass()
    assert [(d.kind, d.path) for d in found] == [("chunk", chunk.path)]
    assert _found("chunk") == before + 1
    store.install_chunk(rebuilt[0])
    assert store.state.peek(task_id).to_dict() == want.to_dict()  # type: ignore[union-attr]
    assert {t.task_id: t.to_dict() for t in store.state.iter_tasks()} == everyone
    await store.close()


async def test_a_damaged_chunk_the_log_no_longer_holds_is_reported_by_name(
    tmp_path: Path,
) -> None:
    store = _store(tmp_path / "d", keep_all=False)
    await _drive(store, 150)
    assert store.log.first_id > 1
    chunk, task_id, at = _archived_chunk(store)
    _flip(chunk.path, at + 20)
    with pytest.raises(ArchiveLostError, match=chunk.name) as e:
        await store.lookup(task_id)
    assert "log starts at event" in str(e.value)
    await store.close()


async def _until(ok: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


def _settings(tmp_path: Path, **kw: object) -> NodeSettings:
    return NodeSettings(
        node_id="n1",
        data_dir=tmp_path / "data",
        listen="127.0.0.1:0",
        workflows=["apollo11.scheduler.examples"],
        fsync=FsyncPolicy.UNSAFE_NEVER,
        drain_timeout=0,
        segment_max_bytes=4096,
        **kw,  # type: ignore[arg-type]
    )


async def test_a_node_scrubs_and_says_so_in_its_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scrub, "FIRST_PASS_DELAY_S", 0.0)
    node = Node(_settings(tmp_path, scrub_mb_per_s=100, scrub_interval=0.1))
    await node.start()
    try:
        assert node.engine is not None and node.store is not None
        store = node.store
        while len(store.log.segments) < 3:
            await node.engine.submit("etl", {"step_seconds": 0})
        seg = store.log.segments[0]
        await _until(lambda: node.upkeep.scrubber.passes >= 1)
        assert node.views.status().notice == ""
        before = _found("segment")
        _flip(seg.path, seg.size // 2)
        await _until(lambda: seg.path in node.views.status().notice)
        assert "offset" in node.views.status().notice
        assert _found("segment") > before
    finally:
        await node.stop()
    assert not node.upkeep.scrubber._thread.is_alive()  # type: ignore[union-attr]


async def test_the_scrub_is_off_at_zero_mb_per_s(tmp_path: Path) -> None:
    node = Node(_settings(tmp_path, scrub_mb_per_s=0))
    await node.start()
    try:
        assert not node.upkeep.scrubber.enabled and node.upkeep.scrubber._thread is None
        assert not any(t.name == "apollo11-scrub" for t in threading.enumerate())
    finally:
        await node.stop()


async def test_get_task_answers_from_a_rebuilt_chunk(tmp_path: Path) -> None:
    node = Node(
        _settings(tmp_path, scrub_mb_per_s=0, snapshot_interval=10, snapshot_min_interval=0)
    )
    await node.start()
    try:
        assert node.engine is not None and node.store is not None
        store = node.store
        ids = [(await node.engine.submit("etl", {"step_seconds": 0})).task_id for _ in range(8)]
        deadline = time.monotonic() + 10
        while any(t in store.state.tasks for t in ids[:4]):  # finished, then archived
            assert time.monotonic() < deadline, "timed out"
            await node.engine.submit("etl", {"step_seconds": 0})  # snapshots need events
            await asyncio.sleep(0.05)
        chunk, task_id, at = _archived_chunk(store)
        want = store.state.peek(task_id)
        _flip(chunk.path, at + 20)
        async with Client(node.address, retries=0) as c:
            got = await c.task(task_id)
        assert want is not None and got.state == "SUCCEEDED" and got.task_id == task_id
        assert store.state.peek(task_id) == want
    finally:
        await node.stop()
