"""The node's store: opened at start (in a cluster, a damaged one is set aside and
refilled from the primary), and closed and opened again around a change of its
files (reshape.py: a divergent tail cut, a snapshot installed, a failed log cut).

The keeper writes the node's `store` and `repair`: every other part reads them
there, and between a close and the open that follows `store` is None (the role
loop and the log's watch wait for it: `reshaping`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from apollo11.scheduler import metrics
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.errors import CorruptLogError, SnapshotError, SnapshotMismatchError
from apollo11.scheduler.log import DataDir
from apollo11.scheduler.node import reshape
from apollo11.scheduler.state import Repair, Store, load_repair, set_aside_for_repair


class Host(Protocol):
    @property
    def settings(self) -> NodeSettings: ...

    store: Store | None
    repair: Repair | None

    def notice(self, text: str) -> None: ...


class StoreKeeper:
    def __init__(
        self,
        host: Host,
        open_store: Callable[[int], Store],
        log_failed: Callable[[str], None],
    ) -> None:
        """`open_store(segment_bytes)` opens the store and builds what stands on it (the
        engine); `log_failed(why)` is told when a reopen fails (the log's watch)."""
        self.host = host
        self._open = open_store
        self._log_failed = log_failed
        self._lock = asyncio.Lock()
        self._segment_bytes = host.settings.segment_max_bytes

    @property
    def reshaping(self) -> bool:
        return self._lock.locked()

    def open(self) -> Store:
        return self._open(self._segment_bytes)

    async def open_or_set_aside(self) -> Store:
        """Open the store; in a cluster, a damaged one is set aside and refilled from
        the primary (scheduler/state/repair.py). Standalone there is nobody to refill it
        from: the damage is refused, naming the file."""
        h, s = self.host, self.host.settings
        try:
            store = self.open()
        except (CorruptLogError, SnapshotError, SnapshotMismatchError) as e:
            if s.standalone:
                raise
            h.repair = await asyncio.to_thread(set_aside_for_repair, s.data_dir, str(e))
            metrics.LOG_DAMAGE_FOUND.labels("startup").inc()
            h.notice(f"{s.node_id}: {h.repair.describe()}")
            return self.open()
        h.repair = load_repair(s.data_dir)
        if h.repair is not None:
            h.notice(f"{s.node_id} (restarted): {h.repair.describe()}")
        return store

    def adopt_segment_size(self, size: int) -> None:
        """Rotate segments where the primary does, so segment files stay byte-identical."""
        store = self.host.store
        if size and store is not None and size != store.log.config.segment_max_bytes:
            self._segment_bytes = size
            store.log.config = dataclasses.replace(store.log.config, segment_max_bytes=size)

    async def reopen(self, change: Callable[[DataDir], str]) -> str:
        """Close the store, change the files, open it again - whatever happens in between
        (a failed change leaves the files as they were, and the store is reopened).
        If the open fails, the closed store stays (its state answers reads) and the
        node's log counts as failed: the log's watch retries the open."""
        h = self.host
        async with self._lock:
            old = h.store
            assert old is not None
            await old.close()
            h.store = None
            try:
                data = DataDir.open(h.settings.data_dir)
                return await asyncio.to_thread(change, data)
            finally:
                try:
                    h.store = self.open()
                except Exception as e:
                    h.store = old
                    self._log_failed(f"reopening it failed: {e}")
                    raise

    async def cut_divergent_tail(self, keep_through: int, reason: str) -> str:
        """A deposed primary rejoining: move its divergent tail to quarantine."""
        return await self.reopen(
            lambda data: reshape.cut_divergent_tail(data, keep_through, reason)
        )

    async def install_snapshot(self, staging: Path, watermark: int) -> str:
        return await self.reopen(lambda data: reshape.install_snapshot(data, staging, watermark))
