"""The commit gate: when a write may be acknowledged.

In this order, and nowhere else: (1) the event is durable here (the log's
group commit, scheduler/log/writer.py: the caller awaits it before it asks);
(2) in synchronous mode, `sync_replicas` standbys hold it durably
(replicator/hub.py; relaxed mode waits for those connected at most); (3) this
node is still sure it holds the lease (node/fence.py), checked before the wait
and again after it, because a primary paused during the wait (SIGSTOP) may
have been replaced meanwhile. A failed (3) is LeaseLostError, a timed-out (2)
OutcomeUnknownError: the event is in this log either way, its outcome is the
next primary's to say.

The engine receives the gate as its `commit`; nothing else acknowledges.
"""

from __future__ import annotations

from collections.abc import Callable

from apollo11.lease import ClusterConfig, World
from apollo11.replicator import ReplicationHub, ReplicationTimeout
from apollo11.scheduler.errors import LeaseLostError, OutcomeUnknownError


class Commit:
    def __init__(
        self,
        *,
        node_id: str,
        standalone: bool,
        sync_timeout_s: float,
        hub: Callable[[], ReplicationHub],  # the current term's (a new one each promotion)
        config: Callable[[], ClusterConfig],  # the cluster's settings in force
        lease_valid: Callable[[], bool],
        world: Callable[[], World | None] = lambda: None,  # for the message only
    ) -> None:
        self.node_id = node_id
        self.standalone = standalone
        self.sync_timeout_s = sync_timeout_s
        self._hub = hub
        self._config = config
        self._lease_valid = lease_valid
        self._world = world

    async def __call__(self, event_id: int) -> None:
        """Return once `event_id`, durable here, may be acknowledged; raise if never."""
        self._check_lease(event_id)
        need = self.replicas_needed()
        if need:
            try:
                await self._hub().wait(event_id, need, self.sync_timeout_s)
            except ReplicationTimeout as e:
                raise OutcomeUnknownError(f"{e}{self._not_streaming()}") from None
        self._check_lease(event_id)

    def replicas_needed(self) -> int:
        """How many standbys must hold a write before it is acknowledged now."""
        c = self._config()
        if not c.sync_replicas or self.standalone:
            return 0
        if c.sync_mode == "relaxed":
            return min(c.sync_replicas, len(self._hub().connected()))
        return c.sync_replicas

    def _check_lease(self, event_id: int) -> None:
        if not self._lease_valid():
            raise LeaseLostError(
                f"event {event_id} is durable on {self.node_id}, but this node is "
                f"no longer sure it holds the lease; the write's outcome is unknown (check "
                f"with the new primary)"
            )

    def _not_streaming(self) -> str:
        """Members etcd knows that have no replication stream here, for a message."""
        world = self._world()
        if world is None:
            return ""
        streaming = set(self._hub().by_node())
        absent = sorted(m for m in world.members if m != self.node_id and m not in streaming)
        return f"; members not following this primary: {', '.join(absent)}" if absent else ""
