"""Helpers for tests that need an event log's writer to wait."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from apollo11.scheduler.log import EventLog


def hold_writes(
    log: EventLog, monkeypatch: pytest.MonkeyPatch, fail: bool = False
) -> threading.Event:
    """The log's next writes wait until the returned event is set (then fail if asked)."""
    gate = threading.Event()
    writer = log._writer  # the group commit: its _write_batch is the one write + fsync
    write = writer._write_batch

    def held(parts: Any) -> None:
        gate.wait(10)
        if fail:
            raise OSError(5, "Input/output error")
        write(parts)

    monkeypatch.setattr(writer, "_write_batch", held)
    return gate
