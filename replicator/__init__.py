"""Log shipping: the primary's sender and sync gate, the standby's receiver.

ports.py     what shipping needs of a node (Member, PrimarySide, StandbySide)
hub.py       the sync gate: standbys' acknowledgements, the writes waiting for them
sender.py    the Follow and ReadRecords services a primary serves
receiver.py  Follower: a standby's stream from its primary, applied as it comes
records.py   ReadRecords' client side: another member's copy of a range (mending)
divergence.py, channel.py  a rejoining primary's divergent tail; the peer channel

Import from here, not from the modules inside (an import-linter contract says
so). The names load their module on first use: the node imports the sender
only once it serves replication.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_HOME = {
    "Member": "ports",
    "PrimarySide": "ports",
    "StandbySide": "ports",
    "ReplicationHub": "hub",
    "ReplicationTimeout": "hub",
    "StandbyView": "hub",
    "ReplicationService": "sender",
    "Follower": "receiver",
    "FETCH_TIMEOUT_S": "records",
    "fetch_records": "records",
}

if TYPE_CHECKING:
    from apollo11.replicator.hub import ReplicationHub, ReplicationTimeout, StandbyView
    from apollo11.replicator.ports import Member, PrimarySide, StandbySide
    from apollo11.replicator.receiver import Follower
    from apollo11.replicator.records import FETCH_TIMEOUT_S
    from apollo11.replicator.records import fetch as fetch_records
    from apollo11.replicator.sender import ReplicationService
else:

    def __getattr__(name: str) -> object:
        home = _HOME.get(name)
        if home is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = importlib.import_module(f"{__name__}.{home}")
        value = getattr(module, "fetch" if name == "fetch_records" else name)
        globals()[name] = value
        return value


__all__ = [
    "FETCH_TIMEOUT_S",
    "Follower",
    "Member",
    "PrimarySide",
    "ReplicationHub",
    "ReplicationService",
    "ReplicationTimeout",
    "StandbySide",
    "StandbyView",
    "fetch_records",
]
