"""The standby's side of the role: following the primary it was told of
(replicator/receiver.py does the streaming), and the end of a repair, when a
standby refilled from the primary holds again what it held before.
leading.py is the primary's side."""

from __future__ import annotations

import asyncio
from typing import Protocol

from apollo11.lease import LeaderInfo
from apollo11.replicator import Follower, StandbySide
from apollo11.scheduler.state import Repair, repair_done


class Host(StandbySide, Protocol):
    repair: Repair | None

    def notice(self, text: str) -> None: ...


class Following:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.follower: Follower | None = None

    async def follow(self, leader: LeaderInfo, address: str) -> None:
        f = self.follower
        if f is not None and f.address == address and f.leader_term == leader.term:
            return
        await self.stop()
        self.follower = Follower(self.host, address, leader.term, leader_id=leader.node_id)
        self.follower.start()

    async def stop(self) -> None:
        if self.follower is not None:
            await self.follower.stop()
            self.follower = None

    async def check_repaired(self, leader: LeaderInfo) -> str:
        """A repairing standby is repaired once it holds every event it held before
        and has caught up with the primary it follows."""
        h = self.host
        r, store, f = h.repair, h.store, self.follower
        assert r is not None and store is not None
        durable = store.log.durable_id
        head = f.primary_durable_id if f is not None and f.connected else 0
        if head and durable >= max(r.needs_through, head):
            await asyncio.to_thread(repair_done, h.settings.data_dir)
            h.repair = None
            h.notice(
                f"repaired from {leader.node_id}: this node holds events through {durable} "
                f"again (it needed {r.needs_through}); the damaged files stay in {r.quarantine}"
            )
            return f"standby: repaired, following {leader.node_id} (term {leader.term})"
        return (
            f"repairing: following {leader.node_id} (term {leader.term}) at event {durable}, "
            f"needs {max(r.needs_through, head)}"
        )
