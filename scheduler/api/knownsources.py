"""The addresses that have made an authenticated call lately: spared when new
connections to the gRPC ports are shed (api/connshed.py).

A flood of connections with no credential is shed in the kernel, before gRPC core
spends a TLS handshake on it, by dropping a share of the SYNs. A filter keeps no
state, so without this it could not tell a worker reconnecting after a failover, or a
standby after a restart, from the flood: each waited out the same dropped SYNs. An
address with an authenticated call open, or that ended one within TTL_S, is known,
and its SYNs are never dropped; everyone else's may be, up to connshed.DROP_MAX
(DROP_MAX_WELCOMING for WELCOME_S after the node starts or takes over, when everyone
is new to it). A worker's or a standby's one stream can stay open for days: it counts
as long as it is open. The flood cannot make itself known without a credential; a
flood from a known address (behind the same NAT as a worker) gets through, as it did
before any of this. The loopback addresses are always spared: a process on the node's
own host (the container's health check, which needs no credential) is no remote flood,
and could do worse to the node than connect.

Each authenticated call begins and ends here (the interceptor,
security/interceptor.py): dict updates, no lock (one event loop).
"""

from __future__ import annotations

import functools
import ipaddress
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

TTL_S = 3600.0  # an address with no call for an hour is a stranger again
# After the node starts or takes over, the workers and clients that move to it are
# strangers to it: for this long the ceiling on strangers' SYNs is the lower one
# (connshed.DROP_MAX_WELCOMING), so that they connect within a few of their
# kernel's retries and are known from then on.
WELCOME_S = 120.0
# The most addresses kept, the most recently seen: each costs the filter 2 (IPv4) or
# 9 (IPv6) instructions, every SYN walks them, and the kernel charges the program to
# the socket's option memory (connshed.SPARED_INSNS_MAX bounds what is written).
MAX_KNOWN = 256
LOOPBACK: tuple[Address, ...] = (ipaddress.IPv4Address("127.0.0.1"), ipaddress.IPv6Address("::1"))


@functools.lru_cache(maxsize=1024)
def parse_peer(peer: str) -> Address | None:
    """The address in a gRPC peer string ("ipv4:10.0.0.7:5123", "ipv6:%5B::1%5D:5123":
    grpcio percent-encodes the brackets); None for others ("unix:..."). An IPv4 address
    mapped into IPv6 (a dual-stack socket) is the IPv4 one, as its packets are."""
    kind, _, rest = peer.partition(":")
    rest = urllib.parse.unquote(rest)
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
    welcome_s: float = WELCOME_S
    _seen: dict[Address, float] = field(default_factory=dict)  # oldest first
    _open: Counter[Address] = field(default_factory=Counter)  # calls open, by address
    _welcome_until: float = float("-inf")

    def __post_init__(self) -> None:
        self.welcome()  # a node just started knows nobody

    def welcome(self) -> None:
        """Everyone is new to this node (it took over): be lenient with strangers for a
        while."""
        self._welcome_until = self.clock() + self.welcome_s

    def welcoming(self) -> bool:
        return self.clock() < self._welcome_until

    def begin(self, peer: str) -> Callable[[], None] | None:
        """A call from `peer` (its gRPC peer string) passed authentication: what to call
        when it ends (None: no address in it)."""
        address = parse_peer(peer)
        if address is None:
            return None
        self._open[address] += 1
        self._saw(address)
        return functools.partial(self._end, address)

    def _end(self, address: Address) -> None:
        self._open[address] -= 1
        if self._open[address] <= 0:
            del self._open[address]
        self._saw(address)

    def _saw(self, address: Address) -> None:
        seen = self._seen
        seen.pop(address, None)  # re-inserted last: the dict is kept oldest first
        seen[address] = self.clock()
        if len(seen) > self.most:
            for old in seen:  # the least recently seen with no call open
                if old not in self._open:
                    del seen[old]
                    break

    @property
    def noted(self) -> int:
        """Addresses known from their calls (the loopback ones aside)."""
        return len(self._seen)

    def current(
        self,
    ) -> tuple[tuple[ipaddress.IPv4Address, ...], tuple[ipaddress.IPv6Address, ...]]:
        """The addresses known now, IPv4 and IPv6, most recently seen first, the
        loopback ones before all (connshed writes as many as its budget takes)."""
        since = self.clock() - self.ttl_s
        seen = self._seen
        for address in [a for a, at in seen.items() if at < since and a not in self._open]:
            del seen[address]
        v4: list[ipaddress.IPv4Address] = []
        v6: list[ipaddress.IPv6Address] = []
        for a in [*LOOPBACK, *(a for a in reversed(seen) if a not in LOOPBACK)]:
            if isinstance(a, ipaddress.IPv4Address):
                v4.append(a)
            else:
                v6.append(a)
        return tuple(v4), tuple(v6)
