"""memtrim: when freed memory is given back (the floods themselves: tests/web/
test_connections.py, tests/api/test_conn_limits.py)."""

from __future__ import annotations

from apollo11.scheduler import memtrim

MB = 1024 * 1024


def test_a_trim_is_due_past_the_floor_by_a_share_and_a_size() -> None:
    assert not memtrim.due(100 * MB, 100 * MB)
    assert not memtrim.due(110 * MB, 100 * MB), "under 15 % above the floor"
    assert memtrim.due(120 * MB, 100 * MB)
    assert not memtrim.due(36 * MB, 30 * MB), "20 % but under 8 MB: not worth 50 ms"
    assert memtrim.due(2000 * MB, 1700 * MB)


def test_trim_runs_on_glibc_and_the_rss_is_read() -> None:
    assert memtrim.trim() is True  # this machine's libc is glibc
    assert memtrim.rss_bytes() > 10 * MB
