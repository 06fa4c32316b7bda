"""A node: its store, lease, engine and servers, and its role in the cluster.

`Node` (node.py) composes the parts, starts and stops them; `serve`
(process.py) runs one node as a process. The role in the cluster: roleloop.py
(the loop: read etcd, decide, carry out; the only way into and out of
primary), role.py (the pure decisions and the election rule), leading.py
(promotion, demotion, switchover; the fence of fence.py), etcdfacts.py (what
etcd holds: settings, cluster id, lost data), join.py and nodeid.py (may this
node take part at start). Around it: commit.py (when a write may be
acknowledged), logwatch.py (a failed log as a fact, and reopened), upkeep.py
(scrub and mend), views.py (what the API reads), reshape.py (a closed store's
files changed), files.py (the open-files budget), options.py (settings to
parts).
"""

from apollo11.scheduler.node.node import Node
from apollo11.scheduler.node.process import raise_open_files_limit, serve
from apollo11.scheduler.node.role import FAILED

__all__ = ["FAILED", "Node", "raise_open_files_limit", "serve"]
