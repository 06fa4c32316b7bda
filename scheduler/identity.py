"""Cluster identity: which cluster a data directory belongs to.

A cluster id (random hex) is created once, by the first node that starts
against an empty store, in etcd at `/apollo11/<cluster>/id` (put if absent, in
a transaction), and kept in every data directory in `<data-dir>/CLUSTER`
(written atomically). A node decides at start, before it publishes anything:

* its data directory holds the id etcd holds: it starts;
* its data directory holds another id: it refuses to start, naming both (a
  data directory of another cluster, or --etcd/--cluster pointing at another
  cluster's store). Nothing is changed on either side;
* its data directory holds no id and no history: it adopts etcd's id;
* its data directory holds no id but a log: a data directory written before
  cluster ids existed (every node of a cluster upgraded to this version looks
  like that once). It adopts etcd's id, and says so in a warning. Refusing it
  would make every upgrade a manual step; the log is still checked where it
  matters, at the replication handshake (a history that is not the
  primary's is cut off into quarantine, never merged). A node that should not
  be in this cluster at all is stopped by the other checks: a node id already
  live is refused (scheduler/node.py), and so is a standby with another
  cluster id at the handshake;
* etcd holds no id (a new cluster, or an etcd that lost its data): the node
  puts its own (or a new one), and whichever node's put lands first is the
  cluster's id; the others then compare against it as above.

The id also travels in the replication handshake (Hello and Welcome), so a
standby of one cluster never follows a primary of another, whatever addresses
the lease names. A standalone node (no etcd) keeps no id: its data directory
is adopted by the first cluster it joins, as above.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import orjson

from apollo11.scheduler.errors import ApolloError
from apollo11.scheduler.log import write_atomic

ID_FILE = "CLUSTER"


class ForeignClusterError(ApolloError):
    """The data directory belongs to another cluster than the one in etcd."""


@dataclass(frozen=True, slots=True)
class Identity:
    cluster_id: str
    cluster: str  # the cluster's name when the id was written (for messages)


def new_id() -> str:
    return uuid.uuid4().hex


def read(data_dir: str | os.PathLike[str]) -> Identity | None:
    """The identity kept in a data directory; None when it holds none."""
    path = os.path.join(os.fspath(data_dir), ID_FILE)
    try:
        with open(path, "rb") as f:
            d = orjson.loads(f.read())
        return Identity(str(d["cluster_id"]), str(d.get("cluster") or ""))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ForeignClusterError(
            f"{path} is unreadable ({e}): fix or remove it (the node adopts etcd's cluster "
            f"id when it is absent)"
        ) from e


def write(data_dir: str | os.PathLike[str], ident: Identity) -> None:
    data = orjson.dumps({"cluster_id": ident.cluster_id, "cluster": ident.cluster})
    write_atomic(os.path.join(os.fspath(data_dir), ID_FILE), data)


def decide(
    *, data_dir: str, cluster: str, local: Identity | None, stored: str, has_history: bool
) -> tuple[Identity, str]:
    """The identity this node runs with, and the sentence to log; or
    ForeignClusterError. `stored` is the id etcd holds after this node's claim."""
    if local is None:
        ident = Identity(stored, cluster)
        if has_history:
            return ident, (
                f"cluster id: {data_dir} holds a log but no cluster id (written before "
                f"cluster ids existed): adopted cluster {cluster!r}'s id {stored}; if this "
                f"data directory belongs to another cluster, stop this node"
            )
        return ident, f"cluster id: joined cluster {cluster!r} ({stored})"
    if local.cluster_id != stored:
        was = f" {local.cluster!r}" if local.cluster and local.cluster != cluster else ""
        raise ForeignClusterError(
            f"data directory {data_dir} belongs to cluster{was} {local.cluster_id}, but "
            f"etcd holds cluster {cluster!r} with id {stored}: refusing to start. If this "
            f"node should join {cluster!r}, wipe its data directory (it then catches up "
            f"from the primary); if not, point --etcd/--cluster at its own cluster"
        )
    return local, f"cluster id: {stored} (cluster {cluster!r})"
