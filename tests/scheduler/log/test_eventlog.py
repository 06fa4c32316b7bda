from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from pathlib import Path

import pytest

from apollo11.scheduler import metrics
from apollo11.scheduler.errors import (
    CorruptLogError,
    FormatVersionError,
    InvalidEventError,
    LogError,
    LogFailedError,
    PayloadTooLargeError,
    StaleTermError,
)
from apollo11.scheduler.log import Draft, EventLog, EventType, FsyncPolicy, LogConfig, writer
from apollo11.scheduler.log.eventlog import INLINE_WRITE_MAX_S
from apollo11.scheduler.log.segment import segment_name
from tests.logs import hold_writes

S = EventType.STEP_STARTED


async def _fill(log: EventLog, n: int, task: str = "t") -> list[int]:
    events = await log.append_many(
        [Draft(S, f"{task}{i}", "collect", {"i": i, "pad": "p" * 40}, attempt=1) for i in range(n)]
    )
    return [e.event_id for e in events]


def _seg_files(root: Path) -> list[Path]:
    return sorted((root / "log").glob("*.seg"))


async def test_ids_strictly_increase_across_restart_and_rotation(open_log, tmp_path) -> None:
    log = open_log()
    ids = await _fill(log, 150)
    assert ids == list(range(1, 151))
    assert len(log.segments) > 3, "small segments must rotate"
    await log.close()

    log2 = open_log()
    assert log2.next_id == 151
    more = await _fill(log2, 70)
    assert more == list(range(151, 221))
    await log2.close()

    files = _seg_files(tmp_path / "data")
    # Segment files are named by their first event id, and really start with it.
    log3 = open_log()
    for seg in log3.segments:
        assert os.path.basename(seg.path) == segment_name(seg.first_id)
        first = next(log3.read(seg.first_id, seg.first_id))
        assert first.event_id == seg.first_id
    assert len(files) == len(log3.segments)
    assert [e.event_id for e in log3.read()] == list(range(1, 221))
    await log3.close()


async def test_append_returns_only_once_durable(open_log) -> None:
    log = open_log()
    seen: list[int] = []
    log.add_listener(lambda evs: seen.extend(e.event_id for e in evs))
    e = await log.append(EventType.TASK_SUBMITTED, "t1", payload={"workflow": "etl"})
    assert log.durable_id >= e.event_id
    assert e.event_id in seen, "listeners run before the appender resumes"
    await log.close()


async def test_concurrent_appenders_share_batches(tmp_path) -> None:
    cfg = LogConfig(fsync=FsyncPolicy.ALWAYS)
    log = EventLog.open(tmp_path / "d", config=cfg, instance_id="n1")
    batches: list[int] = []
    log.add_listener(lambda evs: batches.append(len(evs)))
    results = await asyncio.gather(*[log.append(S, f"t{i}", "s", attempt=1) for i in range(500)])
    assert sorted(e.event_id for e in results) == list(range(1, 501))
    # 500 appenders, far fewer write+fsync rounds: that is group commit.
    assert len(batches) < 50
    assert sum(batches) == 500
    await log.close()


async def test_batch_api_is_all_or_nothing(open_log) -> None:
    log = open_log()
    await _fill(log, 3)
    with pytest.raises(PayloadTooLargeError):
        await log.append_many(
            [Draft(S, "a", "s", {"ok": 1}), Draft(S, "b", "s", {"x": "y" * 5000})]
        )
    with pytest.raises(InvalidEventError):
        await log.append_many([Draft(S, "a", "s", {"ok": 1}), Draft(S, "b", "s", {"x": {1}})])
    assert log.next_id == 4
    e = await log.append(S, "c", "s")
    assert e.event_id == 4
    assert [x.task_id for x in log.read()] == ["t0", "t1", "t2", "c"]
    await log.close()


async def test_payload_cap_is_configurable(tmp_path) -> None:
    log = EventLog.open(tmp_path / "d", config=LogConfig(payload_max_bytes=128))
    with pytest.raises(PayloadTooLargeError, match="128-byte limit"):
        await log.append(S, "t", "s", {"x": "y" * 200})
    await log.append(S, "t", "s", {"x": "y" * 100})
    await log.close()


async def _five_thousand(root: Path) -> LogConfig:
    """5000 events of ~250 bytes in 1 MiB segments (a sparse index entry per 64 KiB)."""
    cfg = LogConfig(segment_max_bytes=1 << 20, fsync=FsyncPolicy.UNSAFE_NEVER)
    log = EventLog.open(root, config=cfg)
    for _ in range(10):
        await log.append_many([Draft(S, "t", "s", {"pad": "x" * 200}) for _ in range(500)])
    await log.close()
    return cfg


async def test_read_from_any_id_uses_the_index(tmp_path) -> None:
    cfg = await _five_thousand(tmp_path / "d")
    log = EventLog.open(tmp_path / "d", config=cfg)
    seg = log.segments[0]
    seg.load_index()
    assert len(seg.index) > 10, "sparse index entries were persisted"
    for start in (1, 2, 777, 2500, 4999, 5000):
        got = [e.event_id for e in log.read(start, start + 2)]
        assert got == [x for x in range(start, start + 3) if x <= 5000]
    # A damaged index file only costs speed: the walk from the start still finds it.
    Path(seg.index_path).write_bytes(b"\x01" * 64)
    log2 = EventLog.open(tmp_path / "d", config=cfg, read_only=True)
    assert next(log2.read(3333, 3333)).event_id == 3333
    log2.close_sync()
    await log.close()


async def test_read_raw_is_byte_identical_and_replicates(open_log, tmp_path, fast_config) -> None:
    primary = open_log()
    await _fill(primary, 120)
    primary.term = 5
    await primary.append(EventType.TERM_STARTED, "", payload={"node": "n1"})
    await _fill(primary, 30, task="u")

    replica = EventLog.open(tmp_path / "replica", config=fast_config, instance_id="n2")
    pos = 1
    while pos <= primary.durable_id:
        batch = primary.read_raw(pos, max_bytes=700)
        assert batch.first_id == pos and batch.last_id >= pos
        events = await replica.append_raw(batch.data)
        assert [e.event_id for e in events] == list(range(batch.first_id, batch.last_id + 1))
        pos = batch.last_id + 1
    assert replica.durable_id == primary.durable_id == 151
    assert replica.last_term == 5
    # Same records, same rotation points: the segment files are byte-identical.
    a = [(p.name, p.read_bytes()) for p in _seg_files(tmp_path / "data")]
    b = [(p.name, p.read_bytes()) for p in _seg_files(tmp_path / "replica")]
    assert a == b
    await replica.close()
    await primary.close()


async def test_replica_refuses_gaps_lower_terms_and_bad_crcs(open_log, tmp_path) -> None:
    primary = open_log()
    primary.term = 3
    await _fill(primary, 10)
    replica = EventLog.open(tmp_path / "r", config=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER))
    with pytest.raises(LogError, match="expected event 1, found 5"):
        await replica.append_raw(primary.read_raw(5).data)
    raw = bytearray(primary.read_raw(1).data)
    raw[50] ^= 1
    with pytest.raises(CorruptLogError):
        await replica.append_raw(bytes(raw))
    assert replica.durable_id == 0 and replica.next_id == 1, "nothing half-written"

    await replica.append_raw(primary.read_raw(1).data)
    stale = EventLog.open(tmp_path / "stale", config=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER))
    stale.term = 2
    for _ in range(10):
        await stale.append(S, "x", "s")
    old = stale.read_raw(11 - 10).data  # ids 1..10 in term 2
    replica2 = EventLog.open(tmp_path / "r2", config=LogConfig(fsync=FsyncPolicy.UNSAFE_NEVER))
    await replica2.append_raw(primary.read_raw(1, max_bytes=1).data)  # event 1, term 3
    with pytest.raises(LogError, match="expected event 2"):
        await replica2.append_raw(old)
    with pytest.raises(StaleTermError, match="term 2 after term 3"):
        await replica2.append_raw(stale.read_raw(2).data[: len(stale.read_raw(2, 1).data)])
    for log in (replica, stale, replica2):
        await log.close()
    await primary.close()


async def test_writer_with_an_older_term_is_fenced(open_log) -> None:
    log = open_log()
    log.term = 7
    await log.append(EventType.TERM_STARTED, "")
    log.term = 6
    with pytest.raises(StaleTermError, match=r"term 6.*term 7"):
        await log.append(S, "t", "s")
    await log.close()
    log2 = open_log()
    assert log2.last_term == 7
    await log2.close()


async def test_follow_wakes_on_new_durable_events(open_log) -> None:
    log = open_log()
    await _fill(log, 2)

    async def follower() -> list[int]:
        got: list[int] = []
        pos = 3
        while len(got) < 5:
            await log.wait_durable(pos - 1)
            for e in log.read(pos):
                got.append(e.event_id)
                pos = e.event_id + 1
        return got

    task = asyncio.create_task(follower())
    await asyncio.sleep(0.01)
    assert not task.done()
    for _ in range(5):
        await log.append(S, "t", "s")
    assert await asyncio.wait_for(task, 5) == [3, 4, 5, 6, 7]
    await log.close()


async def test_unknown_format_version_is_refused(tmp_path) -> None:
    root = tmp_path / "d"
    log = EventLog.open(root)
    await log.close()
    (root / "FORMAT").write_text('{"format": "apollo11-data", "version": 99}')
    with pytest.raises(FormatVersionError, match=r"version 99.*reads version 1"):
        EventLog.open(root)
    (root / "FORMAT").unlink()
    with pytest.raises(FormatVersionError, match="no FORMAT"):
        EventLog.open(root)


# ------------------------------------------------------------ corruption


async def _written(open_log, n: int) -> Path:  # type: ignore[no-untyped-def]
    log = open_log()
    await _fill(log, n)
    await log.close()
    return Path(log.data_dir.root)


async def test_bad_crc_in_a_sealed_segment_is_refused(open_log) -> None:
    root = await _written(open_log, 100)
    first = _seg_files(root)[0]
    data = bytearray(first.read_bytes())
    data[200] ^= 0xFF
    first.write_bytes(bytes(data))
    # Opened as after a snapshot, recovery scans only the tail; reading the range refuses it.
    tail = int(_seg_files(root)[-1].name[:20])
    log = open_log(replay_from=tail)
    with pytest.raises(CorruptLogError) as exc:
        list(log.read(1))
    assert exc.value.path == str(first)
    assert 0 < exc.value.offset <= 200
    with pytest.raises(CorruptLogError):
        log.read_raw(1, max_bytes=1 << 20)
    with pytest.raises(CorruptLogError, match=first.name):
        log.read_ids([1, 2, 3])  # a task's history, read by id
    await log.close()
    # A full replay refuses to open at all.
    with pytest.raises(CorruptLogError, match=first.name):
        EventLog.open(root, replay_from=1)


async def test_damage_inside_the_tail_is_not_mistaken_for_a_torn_write(open_log) -> None:
    root = await _written(open_log, 100)
    last = _seg_files(root)[-1]
    data = bytearray(last.read_bytes())
    assert len(data) > 300
    data[60] ^= 0x01  # first record of the tail; valid records follow it
    last.write_bytes(bytes(data))
    before = last.stat().st_size
    with pytest.raises(CorruptLogError, match=last.name):
        open_log()
    assert last.stat().st_size == before, "nothing was cut"


async def _crashed(open_log, marked: int, n: int) -> Path:  # type: ignore[no-untyped-def]
    """`n` events written and the node dead, its last manifest written at event `marked`."""
    log = open_log()
    await _fill(log, marked)
    log.mark_end("a test")
    await log.wait_manifest()
    manifest = (Path(log.data_dir.root) / "log" / "MANIFEST").read_bytes()
    await _fill(log, n - marked)
    await log.close()
    (Path(log.data_dir.root) / "log" / "MANIFEST").write_bytes(manifest)  # as it was
    return Path(log.data_dir.root)


async def test_torn_tail_is_cut_and_counted(open_log, caplog) -> None:
    root = await _crashed(open_log, 90, 100)
    last = _seg_files(root)[-1]
    size = last.stat().st_size
    with open(last, "r+b") as f:
        f.truncate(size - 7)
    torn_before = metrics.LOG_TORN_TAILS._value.get()
    log = open_log()
    assert log.durable_id == 99
    assert metrics.LOG_TORN_TAILS._value.get() == torn_before + 1
    assert last.stat().st_size < size - 7
    # What is known, not what is hoped: event 100 may well have been acknowledged.
    assert "events past 90, not known to have been acknowledged" in caplog.text
    assert "had not been acknowledged" not in caplog.text
    e = await log.append(S, "again", "s")
    assert e.event_id == 100, "the cut event is not in the log; its id is free"
    await log.close()


async def test_zeroed_tail_is_a_torn_tail(open_log) -> None:
    root = await _written(open_log, 20)
    last = _seg_files(root)[-1]
    with open(last, "ab") as f:
        f.write(b"\0" * 4096)
    log = open_log()
    assert log.durable_id == 20
    await log.close()


async def test_read_only_open_cuts_nothing(open_log) -> None:
    root = await _written(open_log, 30)
    last = _seg_files(root)[-1]
    with open(last, "ab") as f:
        f.write(b"\x05garbage")
    size = last.stat().st_size
    ro = EventLog.open(root, read_only=True)
    assert ro.durable_id == 30
    assert last.stat().st_size == size
    with pytest.raises(LogError, match="read-only"):
        await ro.append(S, "t", "s")
    ro.close_sync()


async def test_cancelling_one_appender_does_not_cancel_its_batch(open_log) -> None:
    log = open_log()
    tasks = [asyncio.create_task(log.append(S, f"t{i}", "s")) for i in range(10)]
    await asyncio.sleep(0)
    tasks[3].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[3], asyncio.CancelledError)
    assert all(not isinstance(d, BaseException) for i, d in enumerate(done) if i != 3)
    assert log.durable_id == 10, "the cancelled appender's event was written with its batch"
    await log.close()


async def test_reads_while_writing_across_rotations(tmp_path) -> None:
    """A batch whose first record opens a new segment must not corrupt the old one's range."""
    log = EventLog.open(
        tmp_path / "d", config=LogConfig(segment_max_bytes=4096, fsync=FsyncPolicy.UNSAFE_NEVER)
    )
    for round_ in range(60):
        await log.append_many([Draft(S, f"t{round_}", "s", {"pad": "x" * 300}) for _ in range(3)])
        got = [e.event_id for e in log.read()]
        assert got == list(range(1, log.durable_id + 1))
        for seg in log.segments:
            if not seg.empty:
                assert next(log.read(seg.last_id, seg.last_id)).event_id == seg.last_id
    assert len(log.segments) > 5
    await log.close()


async def test_cut_after_quarantines_a_divergent_tail(open_log, tmp_path) -> None:
    from apollo11.scheduler.log.eventlog import cut_after

    log = open_log()
    await _fill(log, 120)  # several 4 KiB segments
    n_segments = len(log.segments)
    original = {e.event_id: log.read_raw(e.event_id, 1).data for e in log.read()}
    await log.close()
    root = tmp_path / "data"
    q = tmp_path / "quarantine" / "tail.log"
    assert cut_after(root, 57, str(q)) == 63
    assert q.read_bytes() == b"".join(original[i] for i in range(58, 121)), "kept byte for byte"
    again = EventLog.open(root, config=log.config, instance_id="n1")
    assert again.durable_id == 57 and len(again.segments) < n_segments
    assert [e.event_id for e in again.read()] == list(range(1, 58))
    e = await again.append(S, "new", "s")
    assert e.event_id == 58
    await again.close()
    with pytest.raises(LogError, match="nothing to keep"):
        # a log that starts later than what should be kept cannot be cut to it
        cut_after(root, -5, str(q))


async def test_a_failing_listener_fails_appends_instead_of_hanging(open_log) -> None:
    log = open_log()

    def broken(events) -> None:  # type: ignore[no-untyped-def]
        raise OSError("EIO reading an archive chunk")

    log.add_listener(broken)
    with pytest.raises(LogError, match="durable, but not applied"):
        await asyncio.wait_for(log.append(S, "t", "s"), 5)
    with pytest.raises(LogError):
        await asyncio.wait_for(log.append(S, "t", "s"), 5)
    await log.close()


async def test_read_raw_with_position_hints(open_log) -> None:
    log = open_log()
    await _fill(log, 150)
    plain, hinted = [], []
    pos, at = 1, None
    while pos <= log.durable_id:
        b = log.read_raw(pos, 300)
        plain.append(b.data)
        h = log.read_raw(pos, 300, at)
        hinted.append(h.data)
        assert (h.first_id, h.last_id) == (b.first_id, b.last_id)
        at = (h.segment_id, h.end_offset)
        pos = b.last_id + 1
    assert plain == hinted
    # A wrong hint is caught (the record there is not the one asked for) and ignored.
    seg = log.segments[0]
    assert log.read_raw(5, 300, (seg.first_id, 0)).data == log.read_raw(5, 300).data
    await log.close()


async def test_shipping_from_memory_gives_the_bytes_on_disk(open_log, tmp_path) -> None:
    log = open_log()
    for n in (3, 1, 7, 2, 40, 5, 1, 12):  # batches of several sizes, across rotations
        await _fill(log, n)
        await asyncio.gather(*(log.append(S, f"c{i}", "s") for i in range(4)))
    assert len(log.segments) > 2 and log._ship, "the newest runs are kept in memory"
    disk = EventLog.open(tmp_path / "data", read_only=True)  # nothing cached: reads files

    def follow(source: EventLog, max_bytes: int) -> list[tuple[int, int, bytes]]:
        got, nxt, at = [], 1, None
        while nxt <= source.durable_id:
            b = source.read_raw(nxt, max_bytes, at)
            at = (b.segment_id, b.end_offset)
            got.append((b.first_id, b.last_id, b.data))
            nxt = b.last_id + 1
        return got

    for max_bytes in (1, 300, 1 << 20):
        mem, files = follow(log, max_bytes), follow(disk, max_bytes)
        assert b"".join(d for *_, d in mem) == b"".join(d for *_, d in files)
        assert all(len(d) <= max(max_bytes, 200) for *_, d in mem if max_bytes == 1)
    for first in list(log._ship):  # every run, and everything after it, byte for byte
        assert log.read_raw(first).data == disk.read_raw(first).data
    disk.close_sync()


async def test_read_ids_gives_exactly_those_events_across_segments(tmp_path) -> None:
    cfg = LogConfig(
        segment_max_bytes=256 * 1024,
        payload_max_bytes=128 * 1024,
        submit_max_bytes=128 * 1024,
        fsync=FsyncPolicy.UNSAFE_NEVER,
    )
    log = EventLog.open(tmp_path / "d", config=cfg)
    for k in range(8):
        await log.append_many([Draft(S, f"t{i % 7}", "s", {"pad": "x" * 200}) for i in range(500)])
        if k == 3:  # one record far bigger than the read window, in the middle of it all
            await log.append(S, "big", "s", payload={"pad": "y" * 60_000})
    await log.close()
    log = EventLog.open(tmp_path / "d", config=cfg, read_only=True)
    assert len(log.segments) > 3
    everything = list(log.read())
    big = next(e.event_id for e in everything if e.task_id == "big")
    for ids in (
        [e.event_id for e in everything if e.task_id == "t3"],  # every 7th: windows serve runs
        [1, 2, 3, big - 1, big, big + 1, log.durable_id],
        [s.first_id for s in log.segments] + [s.last_id for s in log.segments[:-1]],
        [],
    ):
        ids = sorted(set(ids))
        assert log.read_ids(ids) == [e for e in everything if e.event_id in set(ids)]
    assert log.read_ids([5, log.durable_id + 1, log.durable_id + 9]) == [everything[4]]
    log.close_sync()


async def test_a_lost_index_is_relearned_by_the_first_walk(tmp_path) -> None:
    cfg = await _five_thousand(tmp_path / "d")
    seg_path = _seg_files(tmp_path / "d")[0]
    seg_path.with_suffix(".idx").unlink()  # a crash lost the unsynced index

    log = EventLog.open(tmp_path / "d", config=cfg, read_only=True)
    seg = log.segments[0]
    assert next(log.read(4000, 4000)).event_id == 4000
    learned = list(seg.index)

    assert len(learned) > 10, "the walk to event 4000 filled the index on its way"
    assert all(b[1] - a[1] <= 2 * 64 * 1024 for a, b in itertools.pairwise(learned))
    assert [e.event_id for e in log.read(2000, 2001)] == [2000, 2001]
    assert log.read_ids([1500, 3500]) == [*log.read(1500, 1500), *log.read(3500, 3500)]
    log.close_sync()


async def test_read_ids_refuses_a_record_whose_length_runs_past_the_segment(open_log) -> None:
    root = await _written(open_log, 100)
    first = _seg_files(root)[0]
    data = bytearray(first.read_bytes())
    data[4:8] = (10**6).to_bytes(4, "little")  # event 1 claims a megabyte
    first.write_bytes(bytes(data))
    tail = int(_seg_files(root)[-1].name[:20])
    log = open_log(replay_from=tail)
    with pytest.raises(CorruptLogError, match="runs past the durable end") as exc:
        log.read_ids([1])
    assert exc.value.path == str(first)
    await log.close()


def _on_loop(log: EventLog, monkeypatch) -> list[bool]:  # type: ignore[no-untyped-def]
    """Per write of `log` from now on: was it on the event loop's thread?"""
    loop_thread = threading.get_ident()
    where: list[bool] = []
    write = log._writer._write_batch

    def spy(parts):  # type: ignore[no-untyped-def]
        where.append(threading.get_ident() == loop_thread)
        write(parts)

    monkeypatch.setattr(log._writer, "_write_batch", spy)
    return where


async def test_a_standby_writes_on_its_loop_until_a_write_is_slow(
    open_log, tmp_path, monkeypatch
) -> None:
    primary = open_log()
    config = LogConfig(segment_max_bytes=4096, fsync=FsyncPolicy.ALWAYS)
    replica = EventLog.open(tmp_path / "replica", config=config, instance_id="n2")
    where, primary_where = _on_loop(replica, monkeypatch), _on_loop(primary, monkeypatch)
    slow = [False]

    def fdatasync(fd: int) -> None:
        # The switch is what is tested, not the disk: a real fdatasync on a busy
        # machine can itself take over INLINE_WRITE_MAX_S and move a "fast" write to
        # the thread (seen while other test suites ran beside this one).
        if slow[0]:
            time.sleep(2 * INLINE_WRITE_MAX_S)

    monkeypatch.setattr(os, "fdatasync", fdatasync)

    async def ship() -> None:
        await _fill(primary, 2)
        await replica.append_raw(primary.read_raw(replica.next_id).data)

    await ship()
    slow[0] = True
    await ship()  # inline still: how slow it is shows only once it is done
    await ship()  # on the thread now
    slow[0] = False
    await ship()  # fast again, measured on the thread
    await ship()
    assert where == [True, True, False, False, True]
    assert [e.event_id for e in replica.read()] == list(range(1, 11))

    assert primary_where and not any(primary_where), "a primary's writes stay off its loop"
    await replica.close()


async def test_records_are_shipped_ahead_while_being_written(
    open_log, tmp_path, fast_config, monkeypatch
) -> None:
    primary = open_log()
    await _fill(primary, 3)
    replica = EventLog.open(tmp_path / "replica", config=fast_config, instance_id="n2")
    await replica.append_raw(primary.read_raw(1).data)
    gate = hold_writes(primary, monkeypatch)
    appending = asyncio.create_task(_fill(primary, 4))
    await asyncio.wait_for(primary.wait_written(3), 5)
    assert (primary.durable_id, primary.written_id) == (3, 7)
    assert primary.read_raw(4).data == b"", "not durable here: not read unless asked"
    ahead = primary.read_raw(4, ahead=True)
    assert (ahead.first_id, ahead.last_id) == (4, 7)
    await replica.append_raw(ahead.data)
    assert replica.durable_id == 7, "the standby stored them before the primary did"
    assert not appending.done()
    gate.set()
    await appending
    assert primary.durable_id == 7
    assert primary.read_raw(4).data == ahead.data
    a = [(p.name, p.read_bytes()) for p in _seg_files(tmp_path / "data")]
    b = [(p.name, p.read_bytes()) for p in _seg_files(tmp_path / "replica")]
    assert a == b, "what was shipped ahead is byte for byte what landed here"
    await replica.close()


async def test_a_write_that_fails_after_shipping_ahead_is_reported_as_unknown(
    open_log, monkeypatch
) -> None:
    log = open_log()
    await _fill(log, 2)
    gate = hold_writes(log, monkeypatch, fail=True)
    appending = asyncio.create_task(_fill(log, 3))
    await asyncio.wait_for(log.wait_written(2), 5)
    assert log.read_raw(3, ahead=True).last_id == 5
    gate.set()
    with pytest.raises(LogFailedError, match="unknown"):
        await appending
    assert log.read_raw(3, ahead=True).data == b"", "nothing more is shipped from a failed log"


async def test_a_standby_writes_big_batches_and_rotations_on_its_thread(
    tmp_path, monkeypatch
) -> None:
    segment = 256 * 1024
    primary = EventLog.open(
        tmp_path / "p", config=LogConfig(segment_max_bytes=segment), instance_id="n1"
    )
    replica = EventLog.open(
        tmp_path / "r", config=LogConfig(segment_max_bytes=segment), instance_id="n2"
    )
    where = _on_loop(replica, monkeypatch)
    # Where a batch is written by its size and by rotation is what is tested, not the
    # disk nor the CPU: a real fdatasync, or a write preempted on a busy machine, over
    # INLINE_WRITE_MAX_S would send the next small batch to the thread (the switch on
    # slowness has a test of its own, above).
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    monkeypatch.setattr(writer, "INLINE_WRITE_MAX_S", 3600.0)

    async def ship(n: int, max_bytes: int = 1 << 20) -> None:
        await _fill(primary, n)
        while replica.next_id <= primary.durable_id:
            await replica.append_raw(primary.read_raw(replica.next_id, max_bytes).data)

    await ship(2)
    assert where == [True]
    await ship(600)  # ~100 KiB in one batch: a standby catching up
    assert where == [True, False]
    await ship(2)
    assert where[-1], "back on the loop for small batches"
    rotated = []
    while len(replica.segments) == 1:
        before = len(where)
        await ship(20)
        rotated = where[before:]
    assert rotated[-1] is False, "the batch that opens a segment is written on the thread"
    assert all(rotated[:-1])
    await replica.close()
    await primary.close()


@pytest.mark.parametrize("rotating", [False, True], ids=["in-segment", "new-segment"])
async def test_a_failed_fsync_is_cut_back_to_the_durable_position_before_reopening(
    tmp_path, clock, monkeypatch, rotating
) -> None:
    """fsyncgate: the records of a batch whose fdatasync failed are in the page cache and
    would read back valid; they were never acknowledged, and the disk need not hold them."""
    from apollo11.scheduler.log import eventlog

    config = LogConfig(segment_max_bytes=4096 if rotating else 1 << 20)
    log = EventLog.open(tmp_path / "data", config=config, instance_id="n1", clock=clock)
    await _fill(log, 3)
    if rotating:
        while len(_seg_files(tmp_path / "data")) == 1:
            await _fill(log, 1)
        while log.segments[-1].size < 4000:  # the next batch opens a segment
            await _fill(log, 1)
    durable = log.position()
    errors = metrics.LOG_WRITE_ERRORS._value.get()

    sync = os.fdatasync
    passes = [1 if rotating else 0]  # rotating: the old segment syncs, the new one fails

    def fail(fd: int) -> None:
        if passes[0]:
            passes[0] -= 1
            return sync(fd)
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(eventlog.os, "fdatasync", fail)
    with pytest.raises(LogFailedError, match="Input/output error"):
        await _fill(log, 40, task="lost")
    assert isinstance(log.failure, OSError)
    assert metrics.LOG_WRITE_ERRORS._value.get() == errors + 1
    with pytest.raises(LogFailedError, match="until it is reopened"):
        await _fill(log, 1)
    monkeypatch.undo()
    await log.close()
    assert eventlog.cut_unsynced(tmp_path / "data", durable) > 0
    assert eventlog.cut_unsynced(tmp_path / "data", durable) == 0, "cutting twice cuts nothing"
    again = EventLog.open(tmp_path / "data", config=config, instance_id="n1", clock=clock)
    assert again.durable_id == durable.event_id
    assert len(_seg_files(tmp_path / "data")) == len(again.segments)
    assert again.failure is None
    assert [e.task_id for e in again.read() if e.task_id.startswith("lost")] == []
    assert (await _fill(again, 1)) == [durable.event_id + 1]
    await again.close()


async def test_a_log_whose_rotation_could_not_create_the_segment_still_closes(
    tmp_path, clock, monkeypatch
) -> None:
    """A full disk can refuse the new segment's file itself: the write fails, and
    close() must not then raise EBADF for the descriptors the rotation had let go."""
    import errno

    from apollo11.scheduler.log import writer

    config = LogConfig(segment_max_bytes=4096, fsync=FsyncPolicy.UNSAFE_NEVER)
    log = EventLog.open(tmp_path / "data", config=config, instance_id="n1", clock=clock)
    await _fill(log, 3)
    durable = log.position()
    real = writer.open_append

    def no_space(path: str, create: bool = False) -> int:
        if create:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, create)

    monkeypatch.setattr(writer, "open_append", no_space)
    with pytest.raises(LogFailedError, match="No space left"):
        for _ in range(100):
            await _fill(log, 5)
    monkeypatch.undo()
    await log.close()
    assert log.position().event_id >= durable.event_id
    again = EventLog.open(tmp_path / "data", config=config, instance_id="n1", clock=clock)
    assert again.durable_id == log.durable_id
    await again.close()


async def test_a_log_is_writing_from_staged_until_durable(
    open_log, tmp_path, fast_config, monkeypatch
) -> None:
    """What a node's bulk reads give way to (nodeview/giveway.py), on either side."""
    primary = open_log()
    await _fill(primary, 3)
    assert not primary.writing
    replica = EventLog.open(tmp_path / "replica", config=fast_config, instance_id="n2")
    gate = hold_writes(replica, monkeypatch)
    durable = replica.stage_raw(primary.read_raw(1).data)
    assert replica.writing, "staged, not yet durable"
    gate.set()
    await durable
    assert replica.durable_id == 3 and not replica.writing
    await replica.close()
