"""Listing tasks newest first, a page at a time, over memory and the archive."""

from __future__ import annotations

import os
import zlib
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apollo11.scheduler.errors import SnapshotError
from apollo11.scheduler.state import State, Summary, TaskState, TaskStatus, archive, summarize
from apollo11.scheduler.state.archive import (
    ENTRY,
    FOOTER_V2,
    MAGIC_V2,
    Archive,
    Chunk,
    encode_entry,
    merge_chunks,
    write_chunk,
)

STATUSES = list(TaskStatus)


def _task(n: int, status: TaskStatus, workflow: str = "etl", done: int = 0) -> TaskState:
    return TaskState(
        f"t{n:05d}",
        workflow,
        1,
        None,
        {},
        {},
        status=status,
        submitted_ms=n,
        updated_ms=n + done,
        done=done,
    )


def _chunk(path: Path, tasks: list[TaskState], level: int = 0) -> Chunk:
    write_chunk(str(path), [encode_entry(t) for t in tasks], level)
    return Chunk(str(path))


def _pages(state: State, match: object, limit: int, scan_limit: int) -> tuple[list[Summary], int]:
    out: list[Summary] = []
    before = None
    calls = 0
    while True:
        calls += 1
        page, before = state.list_summaries(match, before, limit, scan_limit)  # type: ignore[arg-type]
        assert len(page) <= limit
        out.extend(page)
        if before is None:
            return out, calls
        assert calls < 10_000


copies = st.lists(
    st.tuples(st.integers(0, 59), st.sampled_from(STATUSES), st.integers(0, 5)), max_size=40
)


@settings(max_examples=60, deadline=None)
@given(
    chunk_tasks=st.lists(copies, max_size=4),
    memory=copies,
    want=st.sampled_from([None, TaskStatus.SUCCEEDED, TaskStatus.FAILED]),
    limit=st.integers(1, 7),
    scan_limit=st.integers(1, 30),
)
def test_pages_are_the_newest_copy_of_every_task_sorted_and_filtered(
    tmp_path_factory: pytest.TempPathFactory,
    chunk_tasks: list[list[tuple[int, TaskStatus, int]]],
    memory: list[tuple[int, TaskStatus, int]],
    want: TaskStatus | None,
    limit: int,
    scan_limit: int,
) -> None:
    base = tmp_path_factory.mktemp("arc")
    newest: dict[str, TaskState] = {}
    chunks = []
    for k, rows in enumerate(chunk_tasks):  # oldest chunk first
        tasks = {t.task_id: t for t in (_task(n, s, done=d) for n, s, d in rows)}
        chunks.append(_chunk(base / f"{k}.arc", list(tasks.values())))
        newest.update(tasks)
    state = State(archive=Archive(chunks))
    for n, s, d in memory:
        t = _task(n, s, workflow="mem", done=d)
        state.tasks[t.task_id] = t
        newest[t.task_id] = t
    expected = sorted(
        (summarize(t) for t in newest.values() if want is None or t.status is want),
        reverse=True,
    )
    match = None if want is None else (lambda s: s.status is want)

    got, _ = _pages(state, match, limit, scan_limit)

    assert got == expected


def test_a_page_reads_about_a_page_of_summaries_not_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = [
        _chunk(tmp_path / f"{k}.arc", [_task(n, TaskStatus.SUCCEEDED) for n in range(k, 30_000, 3)])
        for k in range(3)
    ]
    state = State(archive=Archive(chunks))
    decoded = 0
    real = archive._summary

    def counting(row: list[object]) -> Summary:
        nonlocal decoded
        decoded += 1
        return real(row)  # type: ignore[arg-type]

    monkeypatch.setattr(archive, "_summary", counting)

    first, token = state.list_summaries(None, None, 50)
    second, _ = state.list_summaries(None, token, 50)

    assert [s.task_id for s in first + second] == [f"t{n:05d}" for n in range(29_999, 29_899, -1)]
    assert decoded <= 2 * 3 * 64  # one read-ahead batch per chunk and page


def test_a_rare_filter_ends_pages_early_with_a_position_to_go_on_from(tmp_path: Path) -> None:
    tasks = [
        _task(n, TaskStatus.FAILED if n % 1000 == 0 else TaskStatus.SUCCEEDED) for n in range(5000)
    ]
    state = State(archive=Archive([_chunk(tmp_path / "a.arc", tasks)]))

    page, token = state.list_summaries(
        lambda s: s.status is TaskStatus.FAILED, None, 10, scan_limit=500
    )

    assert [s.task_id for s in page] == []  # t04000 is the 1000th from the top
    assert token == "t04500"
    got, calls = _pages(state, lambda s: s.status is TaskStatus.FAILED, 10, 500)
    assert [s.task_id for s in got] == [f"t{n:05d}" for n in (4000, 3000, 2000, 1000, 0)]
    assert calls == 11  # the last call finds the end


def _write_v2(path: Path, tasks: list[TaskState]) -> None:
    """A chunk as format 02 wrote it: entries and a hash index, no summaries."""
    body = bytearray(MAGIC_V2)
    keyed = []
    for t in tasks:
        task_id, entry, _, _ = encode_entry(t)
        keyed.append((zlib.crc32(task_id.encode()), len(body)))
        body += entry
    keyed.sort()
    hashes, offsets = array("I", (h for h, _ in keyed)), array("Q", (o for _, o in keyed))
    index = hashes.tobytes() + offsets.tobytes()
    footer = FOOTER_V2.pack(len(body), len(keyed), zlib.crc32(index), 0, b"A11ARCND")
    path.write_bytes(bytes(body) + index + footer)


def test_format_02_chunks_are_listed_and_merged_into_04(tmp_path: Path) -> None:
    old = [_task(n, TaskStatus.SUCCEEDED) for n in range(10)]
    _write_v2(tmp_path / "old.arc", old)
    v2 = Chunk(str(tmp_path / "old.arc"))
    v3 = _chunk(tmp_path / "new.arc", [_task(3, TaskStatus.FAILED), _task(12, TaskStatus.FAILED)])
    assert not v2.has_summaries and v3.has_summaries

    listed, _ = State(archive=Archive([v2, v3])).list_summaries(None, None, 100)

    assert [(s.task_id, s.status) for s in listed][:3] == [
        ("t00012", TaskStatus.FAILED),
        ("t00009", TaskStatus.SUCCEEDED),
        ("t00008", TaskStatus.SUCCEEDED),
    ]
    assert dict((s.task_id, s.status) for s in listed)["t00003"] is TaskStatus.FAILED
    merged = merge_chunks(str(tmp_path), [v2, v3], "merged.arc")
    assert merged.has_summaries and len(merged) == 11
    assert list(merged.summaries_before(None)) == listed
    assert merged.get("t00003") == v3.get("t00003")


def test_a_damaged_summary_is_reported_with_the_chunk_and_offset(tmp_path: Path) -> None:
    c = _chunk(tmp_path / "a.arc", [_task(n, TaskStatus.SUCCEEDED) for n in range(100)])
    c._load_index()
    at = int(c._summary_at[40])
    c.close()
    with open(tmp_path / "a.arc", "r+b") as f:
        f.seek(at + ENTRY.size + 3)
        f.write(b"#")

    with pytest.raises(SnapshotError, match=r"a\.arc: bad summary at \d+"):
        State(archive=Archive([Chunk(str(tmp_path / "a.arc"))])).list_summaries(None, None, 100)
    assert os.path.exists(tmp_path / "a.arc")  # reported, not repaired or skipped


def test_a_filter_on_unfinished_tasks_does_not_read_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archived = [_task(n, TaskStatus.SUCCEEDED) for n in range(1000)]
    state = State(archive=Archive([_chunk(tmp_path / "a.arc", archived)]))
    for n in (5, 2000, 2001):  # 5: archived, then brought back and retried
        t = _task(n, TaskStatus.RUNNING)
        state.tasks[t.task_id] = t

    def unread(*_: object) -> None:
        raise AssertionError("the archive was read")

    monkeypatch.setattr(Archive, "summaries_before", unread)
    page, token = state.list_summaries(
        lambda s: s.status is TaskStatus.RUNNING, None, 10, archived=False
    )

    assert [s.task_id for s in page] == ["t02001", "t02000", "t00005"] and token is None


def test_the_next_snapshot_rewrites_format_02_chunks_as_04_on_its_thread(tmp_path: Path) -> None:
    from apollo11.scheduler.log.eventlog import Position
    from apollo11.scheduler.state.archive import MAGIC, chunk_name
    from apollo11.scheduler.state.snapshot import Capture, Snapshots

    old = [_task(n, TaskStatus.SUCCEEDED) for n in range(50)]
    path = tmp_path / chunk_name(60, 0)
    _write_v2(path, old)
    v2 = Chunk(str(path))
    cap = Capture(70, 1, Position(70, 1, 0), b"{}", [], [], (v2,))

    written = Snapshots(str(tmp_path)).write(cap)

    (chunk,) = written.chunks
    assert chunk.has_summaries and path.read_bytes()[:8] == MAGIC
    assert [s.task_id for s in chunk.summaries_before(None)] == [t.task_id for t in old[::-1]]
    assert chunk.get("t00007") == v2.get("t00007"), "the old reader still reads its file"


def test_a_page_summarizes_the_rows_it_reads_not_every_task_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page of 50 summarized every task in memory: 272 ms a page at 100,000 tasks
    (docs/benchmarks.md, "Export"), the node's loop held all that time."""
    from apollo11.scheduler.state import index

    state = State()
    for n in range(5_000):
        t = _task(n, TaskStatus.SUCCEEDED)
        state.tasks[t.task_id] = t
    made = 0

    def counted(t: TaskState) -> Summary:
        nonlocal made
        made += 1
        return summarize(t)

    monkeypatch.setattr(index, "summarize", counted)
    page, after = state.list_summaries(None, "t04000", 50)
    assert [s.task_id for s in page] == [f"t{n:05d}" for n in range(3999, 3949, -1)]
    assert after == "t03950"
    assert made <= 51, f"{made} tasks summarized for a page of 50"
