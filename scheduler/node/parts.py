"""What every part of a node (roleloop, leading, logwatch, upkeep, views) reads of
the node that composes it: a Protocol, so that a part never imports node.py and a
test can hand it anything of this shape. Each part's own Host adds what only it
needs; what they read of the role is RoleFacts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from apollo11.lease import ClusterConfig, LeaderInfo, World
    from apollo11.replicator import Follower, ReplicationHub
    from apollo11.scheduler.config import NodeSettings
    from apollo11.scheduler.dispatch import RemoteExecutor
    from apollo11.scheduler.engine import Engine
    from apollo11.scheduler.node.fence import Fence
    from apollo11.scheduler.state import Store


class Parts(Protocol):
    @property
    def settings(self) -> NodeSettings: ...
    @property
    def store(self) -> Store | None: ...
    @property
    def engine(self) -> Engine | None: ...
    @property
    def dispatch(self) -> RemoteExecutor | None: ...
    @property
    def stopping(self) -> bool: ...

    def notice(self, text: str) -> None: ...


class RoleFacts(Protocol):
    """What the parts read of the node's role (roleloop.py's `RoleLoop`)."""

    @property
    def role(self) -> str: ...
    @property
    def shown_role(self) -> str: ...
    @property
    def leader(self) -> LeaderInfo | None: ...
    @property
    def world(self) -> World | None: ...
    @property
    def follower(self) -> Follower | None: ...
    @property
    def hub(self) -> ReplicationHub: ...
    @property
    def fence(self) -> Fence: ...
    @property
    def known_term(self) -> int: ...
    @property
    def cluster_config(self) -> ClusterConfig: ...
