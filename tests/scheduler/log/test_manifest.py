"""The manifest: the log may be longer than it says, never shorter."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from apollo11.scheduler.errors import CorruptLogError, LogTruncatedError
from apollo11.scheduler.log import Draft, EventLog, EventType, LogConfig
from apollo11.scheduler.log import manifest as manifests
from apollo11.scheduler.log.eventlog import cut_after

S = EventType.STEP_STARTED


async def _fill(log: EventLog, n: int) -> None:
    await log.append_many([Draft(S, f"t{i}", "s", {"pad": "p" * 40}) for i in range(n)])


def _segs(root: Path) -> list[Path]:
    return sorted((root / "log").glob("*.seg"))


async def _written(open_log, n: int) -> Path:  # type: ignore[no-untyped-def]
    log = open_log()
    await _fill(log, n)
    await log.close()
    return Path(log.data_dir.root)


async def test_a_clean_close_records_the_exact_end(open_log) -> None:
    root = await _written(open_log, 150)
    m = manifests.load(str(root / "log"))
    assert m is not None and m.reason == "a clean shutdown"
    last = _segs(root)[-1]
    assert (m.event_id, m.segment_id, m.offset) == (150, int(last.name[:20]), last.stat().st_size)
    assert [s for s, _ in m.segments] == [int(p.name[:20]) for p in _segs(root)]


async def test_rotation_and_time_write_it_off_the_append_path(tmp_path: Path) -> None:
    cfg = LogConfig(segment_max_bytes=4096, manifest_interval_s=0.01)
    log = EventLog.open(tmp_path / "d", config=cfg)
    for _ in range(5):
        await _fill(log, 40)
        await asyncio.sleep(0.02)
    await log.wait_manifest()
    m = manifests.load(str(tmp_path / "d" / "log"))
    assert m is not None and m.reason in ("segment rotation", "periodic")
    assert 0 < m.event_id <= log.durable_id
    await log.close()


async def test_deleting_the_newest_segment_is_refused(open_log) -> None:
    root = await _written(open_log, 150)
    newest = _segs(root)[-1]
    newest.unlink()
    for read_only in (False, True):
        with pytest.raises(LogTruncatedError) as exc:
            EventLog.open(root, read_only=read_only)
        e = exc.value
        assert (e.path, e.expected_id) == (str(newest), 150)
        assert e.found_id == int(newest.name[:20]) - 1
        assert f"events {e.found_id + 1}..150 were durable" in str(e)
    assert not newest.exists(), "no new segment was made in its place"


async def test_deleting_every_segment_is_refused(open_log) -> None:
    root = await _written(open_log, 50)
    for p in _segs(root):
        p.unlink()
    with pytest.raises(LogTruncatedError, match="holds no segment at all"):
        open_log()
    assert _segs(root) == []


@pytest.mark.parametrize("cut", [1, 7, 60])
async def test_a_shortened_tail_is_refused_and_left_alone(open_log, cut: int) -> None:
    root = await _written(open_log, 100)
    tail = _segs(root)[-1]
    size = tail.stat().st_size
    with open(tail, "r+b") as f:
        f.truncate(size - cut)
    with pytest.raises(LogTruncatedError) as exc:
        open_log()
    assert exc.value.path == str(tail) and exc.value.offset < size - cut + 1
    assert f"holds {size - cut} bytes of the {size} it had" in str(exc.value)
    assert tail.stat().st_size == size - cut


async def test_a_zeroed_end_inside_the_durable_range_is_refused(open_log) -> None:
    root = await _written(open_log, 100)
    tail = _segs(root)[-1]
    data = bytearray(tail.read_bytes())
    data[-30:] = bytes(30)  # same size; what was a torn tail is now known durable
    tail.write_bytes(bytes(data))
    with pytest.raises(LogTruncatedError, match="were durable at the last manifest"):
        open_log()
    assert tail.read_bytes() == bytes(data)


async def test_a_shortened_sealed_segment_is_refused_even_from_a_snapshot(open_log) -> None:
    root = await _written(open_log, 150)
    sealed = _segs(root)[1]
    size = sealed.stat().st_size
    with open(sealed, "r+b") as f:
        f.truncate(size // 2)
    tail_first = int(_segs(root)[-1].name[:20])
    with pytest.raises(LogTruncatedError, match="cannot be replayed across the gap"):
        open_log(replay_from=tail_first)  # recovery would not even read that segment


async def test_a_damaged_manifest_is_refused(open_log) -> None:
    root = await _written(open_log, 20)
    path = root / "log" / "MANIFEST"
    raw = bytearray(path.read_bytes())
    raw[-3] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptLogError, match="manifest fails its checksum"):
        open_log()


async def test_a_log_without_a_manifest_opens_as_before(open_log) -> None:
    root = await _written(open_log, 20)
    (root / "log" / "MANIFEST").unlink()
    log = open_log()
    assert log.durable_id == 20
    await log.close()
    assert manifests.load(str(root / "log")) is not None, "written at the next clean close"


async def test_cutting_a_divergent_tail_writes_the_shorter_end(open_log, tmp_path) -> None:
    root = await _written(open_log, 150)
    assert cut_after(root, 60, str(tmp_path / "q" / "tail.log")) == 90
    m = manifests.load(str(root / "log"))
    assert m is not None and m.event_id == 60
    log = open_log()
    assert log.durable_id == 60
    await log.close()
