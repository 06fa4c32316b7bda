"""Leader election and the lease: an interface, an in-memory and an etcd implementation."""

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
from apollo11.lease.memory import MemoryLease, MemoryStore

__all__ = [
    "MIN_TTL_S",
    "LeaderInfo",
    "Lease",
    "LeaseUnavailable",
    "MemberInfo",
    "MemoryLease",
    "MemoryStore",
    "NodeIdTaken",
    "World",
    "check_ttl",
]
