"""What the API and the web pages may read and do on their node, and nothing more.

`apollo11.scheduler.node.Node` satisfies it structurally; the API and the web never import
the node (which builds them), so the node can be replaced by anything of this
shape in a test. Replication's needs are replicator/ports.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from apollo11.replicator import PrimarySide

if TYPE_CHECKING:
    from apollo11.lease import ClusterConfig, LeaderInfo
    from apollo11.scheduler.engine import Engine
    from apollo11.scheduler.errors import ApolloError
    from apollo11.scheduler.nodeview.status import ClusterStatus, TermRecord, WorkerStatus
    from apollo11.scheduler.security import Principals
    from apollo11.scheduler.state import TaskState


class NodeView(PrimarySide, Protocol):
    @property
    def engine(self) -> Engine | None:
        """Present, and `leading`, only on the primary: every write goes through it."""

    @property
    def leader(self) -> LeaderInfo | None: ...

    @property
    def principals(self) -> Principals | None: ...

    @property
    def known_term(self) -> int: ...

    @property
    def cluster_config(self) -> ClusterConfig:
        """The cluster-wide settings in force on this node (etcd's, or its flags)."""

    @property
    def log_trouble(self) -> str | None:
        """Why this node's log refuses writes; None while it takes them."""

    def not_leader(self) -> ApolloError:
        """The error for a write this node cannot take now (where to go instead)."""

    def durable_id(self) -> int: ...

    async def task_at(self, task_id: str, event_id: int) -> TaskState | None:
        """Time travel for one task."""

    def not_found(self, task_id: str, as_of: int = 0) -> str:
        """What to answer for a task this node does not have (State.not_found: purged
        by retention, when it remembers that)."""

    def status(self) -> ClusterStatus: ...

    def history(self) -> list[TermRecord]:
        """Every term in this node's log, oldest first."""

    def workers(self) -> tuple[WorkerStatus, ...]:
        """The connected workers (none unless this node is the primary)."""

    async def switchover(self, to: str | None, *, operator: str) -> tuple[str, int, str]:
        """A planned hand-over to standby `to` (None: the one furthest ahead): (the
        target, the last event id it holds, the sentence)."""
