"""A node: its store, lease, engine and servers, and its role in the cluster.

`Node` (node.py) composes them and runs the role loop; `serve` (process.py) runs
one node as a process. The other files are the node's parts: reshape.py (a
closed store's files changed), nodeid.py (is this node id free at start), the
pure election rule and role decisions in role.py.
"""

from apollo11.scheduler.node.node import Node
from apollo11.scheduler.node.process import raise_open_files_limit, serve
from apollo11.scheduler.node.role import FAILED

__all__ = ["FAILED", "Node", "raise_open_files_limit", "serve"]
