"""Mending a sealed segment (scheduler/log/mend.py): only the segment's own records
are taken, whole; a refused mend changes nothing."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from apollo11.scheduler.log import EventLog, FsyncPolicy, LogConfig
from apollo11.scheduler.log.mend import MendRefused, check, rewrite
from apollo11.scheduler.log.segment import Segment
from apollo11.scheduler.testing.history import etl_history

LOG = LogConfig(segment_max_bytes=8 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER)


async def _log(root: Path) -> EventLog:
    log = EventLog.open(root, config=LOG)
    it = etl_history(20, seed=5, concurrency=4)
    while chunk := list(itertools.islice(it, 25)):
        await log.append_many(chunk)
    return log


def _records(log: EventLog, seg: Segment) -> bytes:
    out, pos = b"", seg.first_id
    while pos <= seg.last_id:
        batch = log.read_raw(pos, 1 << 20)
        out += batch.data
        pos = batch.last_id + 1
    return out


async def test_the_segments_own_records_mend_it(tmp_path: Path) -> None:
    log = await _log(tmp_path / "a")
    seg = log.segments[1]
    good = Path(seg.path).read_bytes()
    assert _records(log, seg) == good, "a segment file is its records, nothing more"
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0x10
    Path(seg.path).write_bytes(bytes(damaged))
    rewrite(seg, good)
    assert Path(seg.path).read_bytes() == good
    assert [e.event_id for e in log.read(seg.first_id, seg.last_id)] == list(
        range(seg.first_id, seg.last_id + 1)
    )
    await log.close()


async def test_records_that_are_not_the_segment_are_refused(tmp_path: Path) -> None:
    log = await _log(tmp_path / "a")
    seg, other = log.segments[1], log.segments[2]
    good = Path(seg.path).read_bytes()
    with pytest.raises(MendRefused, match="bytes"):
        check(seg, good[:-10])  # short
    with pytest.raises(MendRefused):
        check(seg, Path(other.path).read_bytes()[: len(good)].ljust(len(good), b"\0"))
    bad = bytearray(good)
    bad[100] ^= 0x01
    with pytest.raises(MendRefused, match="damaged too"):
        rewrite(seg, bytes(bad))
    assert Path(seg.path).read_bytes() == good, "a refused mend leaves the file as it was"
    await log.close()


async def test_the_segment_being_written_is_mended_up_to_its_durable_size(tmp_path: Path) -> None:
    log = await _log(tmp_path / "a")
    live = log.segments[-1]
    frozen = Segment(live.first_id, live.path, live.size, live.last_id)
    good = Path(live.path).read_bytes()[: frozen.size]
    with open(live.path, "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xff")
    it = etl_history(1, seed=9, concurrency=1)
    await log.append_many(list(itertools.islice(it, 3)))  # it grows meanwhile
    grown = Path(live.path).read_bytes()
    rewrite(frozen, good)
    assert Path(live.path).read_bytes() == good + grown[frozen.size :]
    assert [e.event_id for e in log.read(live.first_id)][-1] == log.durable_id
    await log.close()
