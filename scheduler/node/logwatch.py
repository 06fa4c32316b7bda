"""A failed event log becomes a fact the role loop reads, and is reopened.

A failed write or fsync makes the log refuse appends (scheduler/log). The
watch notices within WATCH_S, records why (`trouble`) and wakes the role loop,
which steps this node down as SIGTERM would (role.leave: resigning the lease,
so that a healthy standby takes over at once). Every LOG_RETRY_S it probes the
disk; once a probe write succeeds it cuts what the failed write left, reopens
the store, and clears the fact: the loop rejoins as a standby (standalone:
it leads again).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from apollo11.scheduler import metrics
from apollo11.scheduler.log import DataDir, Position, cut_unsynced
from apollo11.scheduler.node.parts import Parts
from apollo11.scheduler.state import Store

log = logging.getLogger("apollo11.scheduler.node")

LOG_RETRY_S = 1.0  # how often a node whose log failed tries to reopen it
WATCH_S = 0.05  # how often a node looks whether its event log failed (one attribute)
# Written and fsynced before a failed log is reopened: a disk that takes this takes
# writes again (a smaller probe would reopen into the next ENOSPC at once).
PROBE_BYTES = 1 << 20


class Host(Parts, Protocol):
    @property
    def role(self) -> str: ...
    @property
    def reshaping(self) -> bool: ...

    def wake(self) -> None: ...
    def reopen(self, change: Callable[[DataDir], str]) -> Awaitable[str]: ...


class LogWatch:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.trouble: str | None = None  # why this node's log refuses writes
        self._cut: Position | None = None  # where that log was last durable
        self._failed_at = 0.0  # monotonic
        self._retry_at = 0.0  # monotonic time of the next attempt to reopen it
        self._said = ""

    async def run(self) -> None:
        """Notice a failed log at once; reopen it once writes work again."""
        while not self.host.stopping:
            try:
                sentence = await self._cycle()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the watch must outlive one bad attempt
                log.exception("watching the event log failed")
                sentence = f"watching the event log failed: {e}"
            if sentence and sentence != self._said:
                log.warning("%s", sentence)
                self._said = sentence
            await asyncio.sleep(WATCH_S)

    async def _cycle(self) -> str | None:
        h = self.host
        store = h.store
        if store is None or h.stopping or h.reshaping:
            return None
        if self.trouble is None:
            failure = store.log.failure
            if failure is None:
                return None
            self.failed(str(failure) or type(failure).__name__, store)
            return None
        if time.monotonic() < self._retry_at:
            return None
        self._retry_at = time.monotonic() + LOG_RETRY_S
        return await self._reopen()

    def failed(self, why: str, store: Store | None) -> None:
        """The log refuses writes: record it, say so, and wake the role loop to step
        down (a primary that cannot log decides nothing, and holding the lease would
        keep the healthy standbys from taking over: issue 15)."""
        h = self.host
        self.trouble = why
        self._cut = store.log.position() if store is not None else None
        self._failed_at = time.monotonic()
        self._retry_at = self._failed_at + LOG_RETRY_S
        metrics.LOG_WRITABLE.set(0)
        if h.role != "primary":
            done = "stopped following"
        elif h.settings.standalone:
            done = "stopped leading (no standby to hand over to)"
        else:
            done = "resigned the lease for a standby to take over"
        # The notice first: a status read during the step-down showed role `failed`
        # with no reason (a flaky test, on main).
        h.notice(
            f"the event log failed ({why}): {done}; refusing writes until it can be "
            f"reopened (free space in {h.settings.data_dir}?), retrying every "
            f"{LOG_RETRY_S:g}s"
        )
        h.wake()

    async def _reopen(self) -> str:
        h = self.host
        data_dir = str(h.settings.data_dir)
        try:
            await asyncio.to_thread(probe_writes, data_dir)
        except OSError as e:
            return f"the event log is still failed: a probe write to {data_dir} failed ({e})"
        cut = self._cut

        def change(data: DataDir) -> str:
            if cut is None:
                return "nothing to cut"
            n = cut_unsynced(data.root, cut)
            return f"cut {n} bytes the failed write left after event {cut.event_id}"

        try:
            done = await h.reopen(change)
        except Exception as e:
            return f"the event log is still failed: reopening it failed ({e})"
        assert h.store is not None
        why, self.trouble, self._cut = self.trouble, None, None
        metrics.LOG_WRITABLE.set(1)
        spent = time.monotonic() - self._failed_at
        then = "leading again" if h.settings.standalone else "rejoining as a standby"
        h.notice(
            f"the event log failed ({why}); reopened it {spent:.1f}s later at event "
            f"{h.store.log.durable_id} ({done}); {then}"
        )
        h.wake()
        return f"reopened the event log: {then}"


def probe_writes(data_dir: str) -> None:
    """Write and fsync PROBE_BYTES beside the log, then remove them: does the disk
    take writes again? Raises OSError (ENOSPC, EIO) when not."""
    path = os.path.join(data_dir, ".write-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(bytes(PROBE_BYTES))
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(path)
