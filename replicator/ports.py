"""What log shipping needs from a node, and nothing more.

The replicator is handed a node that satisfies these (scheduler/node.py's
`Node` does, structurally); it never imports the node. A test drives either
side with a small object of its own (tests/replicator/test_follow.py's primary is one).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from apollo11.replicator.hub import ReplicationHub
    from apollo11.scheduler.config import NodeSettings
    from apollo11.scheduler.state import Store


class Member(Protocol):
    """Either side: its settings (node id, peer certificates), its store, its cluster."""

    @property
    def settings(self) -> NodeSettings: ...

    @property
    def store(self) -> Store | None: ...

    @property
    def cluster_id(self) -> str: ...


class PrimarySide(Member, Protocol):
    """A node serving Follow streams: its role (only a primary ships) and its sync gate."""

    @property
    def role(self) -> str: ...

    @property
    def hub(self) -> ReplicationHub: ...


class StandbySide(Member, Protocol):
    """A node following a primary: where it says it is, what term it knows, and how
    its store is reshaped when the primary says so."""

    @property
    def address(self) -> str: ...

    @property
    def known_term(self) -> int: ...

    def saw_term(self, term: int) -> None: ...

    def adopt_segment_size(self, size: int) -> None: ...

    async def cut_divergent_tail(self, keep_through: int, reason: str) -> str: ...

    async def install_snapshot(self, staging: Path, watermark: int) -> str: ...
