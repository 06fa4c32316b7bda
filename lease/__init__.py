"""Leader election and the lease: an interface, an in-memory and an etcd implementation.

base.py the interface and its records, memory.py the in-memory lease, etcd.py
(+ etcd_client.py) etcd's, clusterconfig.py the cluster-wide settings kept
beside the lease, local_etcd.py a bundled etcd for `apollo11 dev` and tests.
Import from here, not from the modules inside (an import-linter contract says
so). EtcdLease, LocalEtcd and free_port load their module on first use: etcd's
client library is heavy, and a standalone node never needs it.
"""

import importlib
from typing import TYPE_CHECKING

from apollo11.lease.base import (
    MIN_TTL_S,
    LeaderInfo,
    Lease,
    LeaseUnavailable,
    MemberInfo,
    NodeIdTaken,
    World,
    check_ttl,
)
from apollo11.lease.clusterconfig import ClusterConfig
from apollo11.lease.memory import MemoryLease, MemoryStore

if TYPE_CHECKING:
    from apollo11.lease.etcd import EtcdLease
    from apollo11.lease.local_etcd import LocalEtcd, free_port
else:
    _LAZY = {"EtcdLease": "etcd", "LocalEtcd": "local_etcd", "free_port": "local_etcd"}

    def __getattr__(name: str) -> object:
        home = _LAZY.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
        globals()[name] = value
        return value


__all__ = [
    "MIN_TTL_S",
    "ClusterConfig",
    "EtcdLease",
    "LeaderInfo",
    "Lease",
    "LeaseUnavailable",
    "LocalEtcd",
    "MemberInfo",
    "MemoryLease",
    "MemoryStore",
    "NodeIdTaken",
    "World",
    "check_ttl",
    "free_port",
]
