"""Shipping ahead: what standbys may be sent, and the newest records kept in memory.

Raft's parallel write: a batch's records become readable by followers as the
batch goes to the writer (`written_id`), so a standby stores them while this
node does, and a synchronous write waits for the slower of the two, not for
both in turn. A standby may then hold records this node never makes durable
(it crashes first): those were never acknowledged, and the election prefers
the most complete log, or the rejoin quarantines them if this node comes back
first.

The newest runs of records are kept here exactly as they were written: a
follower that keeps up is served from memory (`EventLog.read_raw`), with no
read and no second CRC pass (the bytes never left memory). Everything else
is read from the segment files (scheduler/log/reader.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import NamedTuple

from apollo11.scheduler.errors import LogClosedError


class RawBatch(NamedTuple):
    """Whole records exactly as on disk, for shipping byte for byte."""

    first_id: int
    last_id: int
    data: bytes
    # where the next record starts: pass it back as `at` to skip locating it
    segment_id: int = 0
    end_offset: int = 0


class RecentRun(NamedTuple):
    """Bytes of a recently written run of records, kept for shipping them again."""

    first_id: int
    last_id: int
    segment_id: int
    end_offset: int  # in the segment, after the last record
    data: bytes


class ShipAhead:
    """The records handed to the writer (`written_id`), and the newest of them, as runs.

    Loop thread only. Iterating gives the first ids of the runs kept, oldest first.
    """

    __slots__ = ("_bytes", "_max_bytes", "_runs", "_waiters", "written_id")

    def __init__(self, written_id: int, max_bytes: int) -> None:
        # The last event handed to the writer: shippable to standbys before it is
        # durable here. Never below the durable id.
        self.written_id = written_id
        self._waiters: asyncio.Future[None] | None = None
        self._runs: dict[int, RecentRun] = {}  # first event id -> run; insertion order
        self._bytes = 0
        self._max_bytes = max_bytes

    def __iter__(self) -> Iterator[int]:
        return iter(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def remember(self, run: RecentRun) -> None:
        runs = self._runs
        runs[run.first_id] = run
        self._bytes += len(run.data)
        while self._bytes > self._max_bytes and runs:
            oldest = runs.pop(next(iter(runs)))
            self._bytes -= len(oldest.data)

    def published(self, last_id: int) -> None:
        """Records through `last_id` went to the writer: followers may have them."""
        self.written_id = last_id
        self.wake()

    def wake(self) -> None:
        """Wake whoever waits in `wait` (to find more, or the log closed or failed)."""
        waiters, self._waiters = self._waiters, None
        if waiters is not None and not waiters.done():
            waiters.set_result(None)

    async def wait(self, after_id: int, writable: Callable[[], bool]) -> None:
        """Wait until an event after `after_id` is handed to the writer, while
        `writable()` (else LogClosedError)."""
        while self.written_id <= after_id:
            if not writable():
                raise LogClosedError("the event log is closed")
            if self._waiters is None:
                self._waiters = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._waiters)

    def read(self, from_id: int, max_bytes: int, limit: int) -> RawBatch | None:
        """Runs starting at `from_id` and ending by `limit`, from memory, within one
        segment; None if not there."""
        runs = self._runs
        run = runs.get(from_id)
        if run is None or run.last_id > limit:
            return None
        if len(run.data) > max_bytes and run.last_id > run.first_id:
            return None  # fewer records than the run is asked for: cut it from disk
        parts = [run.data]
        size = len(run.data)
        last = run
        while size < max_bytes:
            nxt = runs.get(last.last_id + 1)
            if nxt is None or nxt.segment_id != run.segment_id or nxt.last_id > limit:
                break
            parts.append(nxt.data)
            size += len(nxt.data)
            last = nxt
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        return RawBatch(from_id, last.last_id, data, run.segment_id, last.end_offset)

    def forget(self) -> None:
        self._runs.clear()
        self._bytes = 0
