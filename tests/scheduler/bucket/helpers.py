"""A store with history, a shipper on it, and the bucket read back: for the archive's
tests, in process (the node's parts without the node)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from apollo11.scheduler.bucket import ObjectStore, Shipper, Step
from apollo11.scheduler.log import FsyncPolicy, LogConfig
from apollo11.scheduler.state import Store, StoreConfig
from apollo11.scheduler.testing.history import etl_history

CONFIG = StoreConfig(
    log=LogConfig(segment_max_bytes=16 * 1024, fsync=FsyncPolicy.UNSAFE_NEVER),
    snapshot_interval=150,
)


@dataclass
class Host:
    """The node as the shipper sees it."""

    store: Store | None
    role: str = "primary"
    cluster_id: str = "c0ffee"
    reshaping: bool = False
    notices: list[str] = field(default_factory=list)

    def notice(self, text: str) -> None:
        self.notices.append(text)


def open_store(root: Path) -> Store:
    return Store.open(root, config=CONFIG, instance_id="n1")


async def write(store: Store, n_tasks: int, *, seed: int = 1, batch: int = 20) -> int:
    """Append an etl history of `n_tasks` tasks; the last durable id."""
    it = etl_history(n_tasks, seed=seed, concurrency=6)
    while chunk := list(itertools.islice(it, batch)):
        await store.log.append_many(chunk)
    return store.log.durable_id


def shipper(host: Host, objects: ObjectStore, node_id: str = "n1") -> Shipper:
    return Shipper(host, objects, node_id=node_id, cluster="test", poll_s=0.05, backoff_max_s=0.2)


async def ship_all(s: Shipper, max_steps: int = 500) -> list[Step]:
    """Cycle until the shipper has nothing left to do; the steps taken."""
    steps = []
    for _ in range(max_steps):
        step = await s.cycle()
        steps.append(step)
        if step.kind in ("idle", "blocked"):
            return steps
    raise AssertionError(f"still shipping after {max_steps} steps: {steps[-3:]}")
