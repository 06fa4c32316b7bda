"""Cluster-wide settings, kept in the store beside the leader key (Patroni keeps its
`ttl`, `synchronous_mode` ... in the DCS): every node reads the same values, so
two nodes can no longer disagree on the lease TTL or on how many standbys must
hold a write.

`/apollo11/<cluster>/config` holds `{"lease_ttl", "sync_replicas", "sync_mode"}`.
The first node to start writes its own flags there (a bootstrap value: a key
that exists is never overwritten by a node); `apollo11 config set` changes them
afterwards. A node follows the stored values: `sync_replicas` and `sync_mode`
at once, `lease_ttl` from its next campaign (a primary keeps the TTL its lease
was granted with; `apollo11 switchover` applies a new one now).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

MIN_TTL_S = 2.0
MAX_SYNC_REPLICAS = 8
SYNC_MODES = ("strict", "relaxed")


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    lease_ttl: float = 5.0
    sync_replicas: int = 1
    sync_mode: str = "strict"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, stored: Mapping[str, Any], default: ClusterConfig) -> ClusterConfig:
        """The stored values over `default` (a key not stored keeps the default's); a
        stored value that is not valid is refused (ValueError naming it)."""
        out = default
        for key, raw in stored.items():
            if key in FIELDS:
                out = out.with_value(key, raw)
        return out

    def with_value(self, key: str, raw: Any) -> ClusterConfig:
        """This config with `key` set from `raw` (a string from the command line, or
        a JSON value), or ValueError naming the key and what it takes."""
        if key not in FIELDS:
            raise ValueError(f"unknown cluster setting {key!r} (settings: {', '.join(FIELDS)})")
        value = _parse(key, raw)
        return ClusterConfig(**{**asdict(self), key: value})


FIELDS = ("lease_ttl", "sync_replicas", "sync_mode")


def _parse(key: str, raw: Any) -> Any:
    if key == "lease_ttl":
        try:
            ttl = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"lease_ttl must be a number of seconds, got {raw!r}") from None
        if not ttl >= MIN_TTL_S:
            raise ValueError(f"lease_ttl must be at least {MIN_TTL_S:g} s, got {raw!r}")
        return ttl
    if key == "sync_replicas":
        try:
            if isinstance(raw, bool):
                raise ValueError
            n = int(str(raw).strip())
        except ValueError:
            raise ValueError(f"sync_replicas must be a whole number, got {raw!r}") from None
        if not 0 <= n <= MAX_SYNC_REPLICAS:
            raise ValueError(f"sync_replicas must be 0 to {MAX_SYNC_REPLICAS}, got {raw!r}")
        return n
    if raw not in SYNC_MODES:
        raise ValueError(f"sync_mode must be one of {', '.join(SYNC_MODES)}, got {raw!r}")
    return str(raw)
