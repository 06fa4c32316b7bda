"""Crash safety: a cut at any byte, and a real process killed with SIGKILL."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apollo11.scheduler.log import Draft, EventLog, EventType, FsyncPolicy, LogConfig

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
drafts = st.builds(
    Draft,
    st.sampled_from(list(EventType)),
    st.text(min_size=1, max_size=12),
    st.text(max_size=12),
    st.dictionaries(st.text(max_size=8), json_values, max_size=4),
    st.integers(0, 50),
)

CFG = LogConfig(segment_max_bytes=4096, fsync=FsyncPolicy.UNSAFE_NEVER)


def _write(root: Path, batches: list[list[Draft]]) -> list[tuple[int, int, str]]:
    """Write the batches; return (event_id, end offset in the global byte stream, segment)."""

    async def go() -> None:
        log = EventLog.open(root, config=CFG, instance_id="n1")
        for batch in batches:
            await log.append_many(batch)
        await log.close()

    asyncio.run(go())
    layout: list[tuple[int, int, str]] = []
    base = 0
    log = EventLog.open(root, config=CFG, read_only=True)
    for seg in log.segments:
        pos = 0
        for e in log.read(seg.first_id, seg.last_id):
            nxt = log.read_raw(e.event_id, max_bytes=1)
            pos += len(nxt.data)
            layout.append((e.event_id, base + pos, seg.path))
        base += seg.size
    log.close_sync()
    return layout


def _crash_at(root: Path, cut: int, garbage: bytes) -> None:
    """Simulate a crash: the byte stream survives up to `cut`, then garbage.

    The writes ended with a clean close, whose manifest holds the exact end (a cut
    before it is refused: see test_eventlog's manifest tests). A crash leaves an
    older manifest, at most as far as the cut; here none at all.
    """
    (root / "log" / "MANIFEST").unlink()
    base = 0
    for seg in sorted((root / "log").glob("*.seg")):
        size = seg.stat().st_size
        if base + size <= cut:
            base += size
            continue
        if cut <= base:
            seg.unlink()  # a later segment that never became durable
            continue
        with open(seg, "r+b") as f:
            f.truncate(cut - base)
            f.seek(0, os.SEEK_END)
            f.write(garbage)
        base += size


@pytest.mark.slow  # in process, but 60 examples of CPU: 3-4 s, near make check's budget
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batches=st.lists(st.lists(drafts, min_size=1, max_size=8), min_size=1, max_size=12),
    cut_frac=st.floats(0, 1),
    garbage=st.binary(max_size=64),
)
def test_recovered_log_is_the_durable_prefix(
    batches: list[list[Draft]], cut_frac: float, garbage: bytes
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "d"
        layout = _write(root, batches)
        written = [d for b in batches for d in b]
        total = layout[-1][1]
        cut = int(total * cut_frac)
        _crash_at(root, cut, garbage)
        survivors = [eid for eid, end, _ in layout if end <= cut]

        got: list[int] = []
        log = EventLog.open(
            root, config=CFG, on_events=lambda evs: got.extend(e.event_id for e in evs)
        )
        assert got == survivors, "recovered exactly the records wholly before the cut"
        events = list(log.read())
        for e, d in zip(events, written, strict=False):
            assert (e.event_type, e.task_id, e.step_name, dict(e.payload), e.attempt) == (
                d.event_type,
                d.task_id,
                d.step_name,
                d.payload,
                d.attempt,
            )

        async def more() -> int:
            e = await log.append(EventType.STEP_STARTED, "after", "crash")
            await log.close()
            return e.event_id

        assert asyncio.run(more()) == len(survivors) + 1, "ids continue after the prefix"


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from apollo11.scheduler.log import EventLog, EventType, LogConfig
    async def main():
        log = EventLog.open(sys.argv[1], config=LogConfig(segment_max_bytes=64 * 1024))
        async def producer(k):
            while True:
                e = await log.append(EventType.STEP_STARTED, f"t{k}", "s", {"k": k}, attempt=1)
                sys.stdout.write(f"{e.event_id}\\n")
                sys.stdout.flush()
        await asyncio.gather(*(producer(k) for k in range(16)))
    asyncio.run(main())
    """
)


def test_sigkill_never_loses_an_acknowledged_append(tmp_path: Path) -> None:
    """A real process, a real SIGKILL at a random moment, many times over."""
    root = tmp_path / "d"
    rng = random.Random(7)
    acked: set[int] = set()
    for _round in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        target = rng.randint(50, 2000)
        for n, line in enumerate(proc.stdout, 1):
            acked.add(int(line))
            if n >= target:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for line in proc.stdout:  # acks already in the pipe were acknowledged too
            acked.add(int(line))
        log = EventLog.open(root, config=LogConfig(segment_max_bytes=64 * 1024))
        ids = [e.event_id for e in log.read()]
        log.close_sync()
        assert ids == list(range(1, len(ids) + 1)), "no gaps, no reuse"
        assert acked <= set(ids), f"lost acknowledged events {sorted(acked - set(ids))[:5]}"


MARKING_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from apollo11.scheduler.log import Draft, EventLog, EventType, LogConfig
    async def main():
        # no rotation and no periodic manifest: the last one is the one written here
        cfg = LogConfig(manifest_interval_s=3600)
        log = EventLog.open(sys.argv[1], config=cfg)
        await log.append_many([Draft(EventType.STEP_STARTED, f"m{i}", "s") for i in range(300)])
        log.mark_end("a test")
        await log.wait_manifest()
        sys.stdout.write(f"MARKED {log.durable_id}\\n")
        sys.stdout.flush()
        async def producer(k):
            while True:
                e = await log.append(EventType.STEP_STARTED, f"t{k}", "s", {"k": k}, attempt=1)
                sys.stdout.write(f"{e.event_id}\\n")
                sys.stdout.flush()
        await asyncio.gather(*(producer(k) for k in range(16)))
    asyncio.run(main())
    """
)


def test_sigkill_then_a_torn_tail_past_the_manifest_is_cut_and_said_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """kill -9 mid-append: the log is longer than its manifest (fine); a torn tail past
    the manifest is cut as before, and the message says what is known about it."""
    root = tmp_path / "d"
    proc = subprocess.Popen(
        [sys.executable, "-c", MARKING_WRITER, str(root)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    marked = int(proc.stdout.readline().split()[1])
    acked: set[int] = set()
    for line in proc.stdout:
        acked.add(int(line))
        if len(acked) >= 200:
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    for line in proc.stdout:
        acked.add(int(line))

    ro = EventLog.open(root, read_only=True)
    ids = [e.event_id for e in ro.read()]
    ro.close_sync()
    assert ids == list(range(1, len(ids) + 1)) and acked <= set(ids), "longer than the manifest"
    assert len(ids) > marked

    tail = sorted((root / "log").glob("*.seg"))[-1]
    with open(tail, "r+b") as f:
        f.truncate(tail.stat().st_size - 5)  # the last record torn
    with caplog.at_level(logging.WARNING, logger="apollo11.scheduler.log.eventlog"):
        log = EventLog.open(root)
    assert log.durable_id == len(ids) - 1, "the torn record was cut, nothing else"
    log.close_sync()
    assert "a torn tail after the last manifest (written" in caplog.text
    assert f"events past {marked}, not known to have been acknowledged" in caplog.text
    assert "had not been acknowledged" not in caplog.text
