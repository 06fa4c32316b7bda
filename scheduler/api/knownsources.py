"""The addresses that have made an authenticated call lately: spared when new
connections to the gRPC ports are shed (api/connshed.py).

A flood of connections with no credential is shed in the kernel, before gRPC core
spends a TLS handshake on it, by dropping a share of the SYNs. A filter keeps no
state, so without this it could not tell a worker reconnecting after a failover, or a
standby after a restart, from the flood: each waited out the same dropped SYNs. An
address that made a call with a credential within TTL_S is known, and its SYNs are
never dropped; everyone else's may be, up to connshed.DROP_MAX. The flood cannot
make itself known without a credential; a flood from a known address (behind the
same NAT as a worker) gets through, as it did before any of this.

Noted per authenticated call (the interceptor, security/interceptor.py): a dict
update, no lock (one event loop).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field

TTL_S = 3600.0  # a worker or client quiet for an hour is a stranger again
# After the node starts or takes over, the workers and clients that move to it are
# strangers to it: for this long the ceiling on strangers' SYNs is the lower one
# (connshed.DROP_MAX_WELCOMING), so that they connect within a few of their
# kernel's retries and are known from then on.
WELCOME_S = 120.0
# The most addresses kept, the most recently seen: each costs the filter up to 9
# instructions of its 4,096, and every SYN walks them.
MAX_KNOWN = 256


def parse_peer(peer: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address in a gRPC peer string ("ipv4:10.0.0.7:5123", "ipv6:[::1]:5123");
    None for others ("unix:..."). An IPv4 address mapped into IPv6 (a dual-stack
    socket) is the IPv4 one, as its packets are."""
    kind, _, rest = peer.partition(":")
    try:
        if kind == "ipv4":
            return ipaddress.IPv4Address(rest.rpartition(":")[0])
        if kind == "ipv6":
            host = rest.rpartition(":")[0].strip("[]").partition("%")[0]
            address = ipaddress.IPv6Address(host)
            return address.ipv4_mapped or address
    except ValueError:
        return None
    return None


@dataclass
class KnownSources:
    clock: Callable[[], float] = time.monotonic
    ttl_s: float = TTL_S
    most: int = MAX_KNOWN
    _seen: dict[ipaddress.IPv4Address | ipaddress.IPv6Address, float] = field(default_factory=dict)
    welcome_s: float = WELCOME_S
    _welcome_until: float = float("-inf")
    # most calls come from the connection of the call before: its peer string parsed once
    _last: tuple[str, ipaddress.IPv4Address | ipaddress.IPv6Address | None] = ("", None)

    def __post_init__(self) -> None:
        self.welcome()  # a node just started knows nobody

    def welcome(self) -> None:
        """Everyone is new to this node (it took over): be lenient with strangers for a
        while."""
        self._welcome_until = self.clock() + self.welcome_s

    def welcoming(self) -> bool:
        return self.clock() < self._welcome_until

    def note(self, peer: str) -> None:
        """A call from `peer` (its gRPC peer string) passed authentication."""
        if peer == self._last[0]:
            address = self._last[1]
        else:
            address = parse_peer(peer)
            self._last = (peer, address)
        if address is None:
            return
        seen = self._seen
        seen.pop(address, None)  # re-inserted last: the dict is kept oldest first
        seen[address] = self.clock()
        if len(seen) > self.most:
            del seen[next(iter(seen))]

    def current(
        self,
    ) -> tuple[tuple[ipaddress.IPv4Address, ...], tuple[ipaddress.IPv6Address, ...]]:
        """The addresses seen within the TTL, IPv4 and IPv6, in a stable order (so a
        filter built from them changes only when they do)."""
        since = self.clock() - self.ttl_s
        seen = self._seen
        for address in [a for a, at in seen.items() if at < since]:
            del seen[address]
        v4 = sorted(a for a in seen if isinstance(a, ipaddress.IPv4Address))
        v6 = sorted(a for a in seen if isinstance(a, ipaddress.IPv6Address))
        return tuple(v4), tuple(v6)
