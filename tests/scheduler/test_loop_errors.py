from __future__ import annotations

import errno
import logging

import pytest

from apollo11.scheduler.loop_errors import LoopErrorLog


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _emfile() -> dict[str, object]:
    err = OSError(errno.EMFILE, "Too many open files")
    return {"message": "socket.accept() out of system resource", "exception": err}


def test_the_same_error_is_logged_once_a_second_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Red-team: EMFILE from accept() is reported up to `backlog` times per wake-up,
    30 MB of log in 10 s."""
    clock = _Clock()
    handler = LoopErrorLog(now=clock)
    with caplog.at_level(logging.ERROR, logger="apollo11.scheduler.node"):
        for _ in range(5000):  # one wake-up's worth and more
            handler(None, _emfile())
            clock.t += 0.0001
        assert len(caplog.records) == 1
        assert caplog.records[0].exc_info is not None
        handler(None, {"message": "something else"})  # another message is not held back
        assert len(caplog.records) == 2
        clock.t += 1.0
        handler(None, _emfile())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert "socket.accept() out of system resource" in lines[2]
    assert "4999 more like it in the last 1.5 s not logged" in lines[2]


def test_many_distinct_messages_do_not_grow_without_bound() -> None:
    clock = _Clock()
    handler = LoopErrorLog(now=clock)
    for i in range(10_000):
        handler(None, {"message": f"error {i}"})
    assert len(handler._seen) <= 256
