"""The HTTP port's door: who may connect, for how long without a request, and
TLS done so that a connection that ends mid-handshake leaves nothing behind.

uvicorn's own door had three holes (issue 28), found from outside with no
credential against a secure node:

* memory: uvicorn hands TLS to asyncio (`create_server(ssl=...)`), whose
  SSLProtocol allocates a 256 KiB read buffer per connection. When a handshake
  fails or is cut, the exception's traceback holds the protocol's frames and the
  protocol holds the exception: a reference cycle (CPython gh-109534), freed
  only by a full collection of the cyclic GC, which a node runs almost never
  (gctune.py). 5,000 connections that closed mid-handshake took a node from
  80 MB to 744 MB, and glibc kept the pages after the cycles were gone;
* descriptors: no limit on connections but the open-files limit; a connection
  that never sent a byte was held until the TLS handshake timeout (60 s);
* time: no deadline for a request's headers (a client sending one byte a
  second held its connection forever).

So uvicorn serves plain TCP here. A connection comes in through the accept
loop (acceptor.py), which asks `Connections.admit` before asyncio builds anything
for it (`refusal`: in all and per source address, new ones a second per source
and in all) and leaves the kernel's queue alone while the accepts of the second
are spent (`Connections.wait_s`). An admitted connection gets this protocol, which
runs the TLS handshake itself through `loop.start_tls` with a deadline and drops
the failed handshake's traceback, and gives the connection `first_request_s` to
send a complete request's headers (each later one too: uvicorn's keep-alive
timeout closes a quiet connection before that). After a burst, freed memory goes
back to the system (memtrim.py).

Every refusal or drop is counted in apollo11_http_connections_dropped_total
{reason} and logged, at most once per LOG_EVERY_S per reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import ssl
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from uvicorn.protocols.http.h11_impl import H11Protocol

from apollo11.scheduler import metrics

log = logging.getLogger(__name__)

Reason = Literal["total", "per_source", "rate", "busy", "handshake", "no_request"]

LOG_EVERY_S = 10.0
# What a client may send before its TLS handshake is done: a ClientHello is a
# few hundred bytes; anything near this is not a browser.
EARLY_BYTES_MAX = 64 * 1024


ACCEPTS_PER_S = 200.0


def accept_ceiling(rate_in_all: float) -> float:
    """Connections to take from the kernel a second on a port that admits `rate_in_all`
    new ones a second from all sources: room for all it admits (that rate, and the
    lane of sources quiet for a second: as many again), at least ACCEPTS_PER_S."""
    return max(ACCEPTS_PER_S, 2 * rate_in_all)


@dataclass(frozen=True)
class ConnectionLimits:
    # Connections open at once: in all, and from one source address. A browser
    # opens about six per origin; a scraper one.
    total: int = 128
    per_source: int = 32
    # New connections from one source address: `per_source_rate` a second, in bursts
    # of up to `per_source_burst`. Each costs a TLS handshake (the HTTP thread's CPU): a
    # churn of 2,273 a second took 83 % of the node's CPU (docs/benchmarks.md).
    per_source_rate: float = 20.0
    per_source_burst: int = 40
    # New connections admitted from all sources together (setting
    # http_new_connections_per_s): a flood from many addresses, each under its own
    # rate (40 sources at 20 a second), began 800 TLS handshakes a second on the
    # event loop, ~0.5 ms each, which the gRPC calls it serves waited behind
    # (docs/bench-history/overload.md, Dec 6). Past it a connection is refused
    # ("busy") unless its source tried none for QUIET_S (a scrape, a browser's
    # first), which has a lane of as many again.
    rate_in_all: float = 100.0
    burst_in_all: int = 100
    # Connections taken from the kernel a second, refused ones too (an accept and a
    # close, ~35 us each); past it the kernel's queue holds them, and once that is
    # full the kernel drops new ones, whose clients retry a second later. No lower
    # than what the node admits (accept_ceiling): beside a paced HTTPS churn from 40
    # sources, 200 instead of 1,000 took a legitimate gRPC client from x0.63 to x0.84
    # of its rate, median of ten cells (docs/bench-history/overload.md, Dec 7 morning).
    accepts_per_s: float = ACCEPTS_PER_S
    # From accept to the end of the TLS handshake.
    handshake_s: float = 5.0
    # From the end of the handshake (or the last request) to a complete request's headers.
    first_request_s: float = 10.0


def refusal(
    limits: ConnectionLimits,
    *,
    total: int,
    from_source: int,
    tokens: float = 1.0,
    in_all: float = 1.0,
) -> Reason | None:
    """Why a new connection is turned away, given what is open now and the tokens left
    in its source's bucket and in the bucket of all sources; None: admitted."""
    if total >= limits.total:
        return "total"
    if from_source >= limits.per_source:
        return "per_source"
    if tokens < 1.0:
        return "rate"
    if in_all < 1.0:
        return "busy"
    return None


def refill(tokens: float, elapsed: float, limits: ConnectionLimits) -> float:
    """A source's bucket after `elapsed` seconds: `per_source_rate` a second, at most
    `per_source_burst`."""
    return min(float(limits.per_source_burst), tokens + elapsed * limits.per_source_rate)


class Bucket:
    """`rate` a second, at most `burst` at once."""

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._at = now

    def tokens(self, now: float) -> float:
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return self._tokens

    def take(self) -> None:
        self._tokens -= 1.0

    def wait_s(self, now: float, want: float) -> float:
        """Seconds until it holds `want` tokens (0: it does)."""
        return max(0.0, (min(want, self.burst) - self.tokens(now)) / self.rate)


# Once the accepts of the second are spent, accepting stops for at least this long:
# fewer wake-ups, and the kernel's queue, not the loop, holds what comes meanwhile.
PAUSE_MIN_S = 0.02


class Ticket:
    """One admitted connection's place in the counts, given back once."""

    __slots__ = ("_conns", "source", "transport")

    def __init__(self, conns: Connections, source: str) -> None:
        self._conns: Connections | None = conns
        self.source = source
        self.transport: asyncio.BaseTransport | None = None  # once asyncio made one

    def release(self) -> None:
        if self._conns is not None:
            self._conns._release(self)
            self._conns = None


BUCKETS_MAX = 10_000  # past it, full buckets (sources quiet a while) are forgotten
# A source that tried no connection for this long is quiet: past the rate in all, it
# still has a lane (a scrape every 15 s, a browser's first connection; a flood's
# sources come back sooner).
QUIET_S = 1.0


class Connections:
    """The connections on the HTTP port: those open, by source address, and the
    budgets for new ones."""

    def __init__(
        self, limits: ConnectionLimits, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self._clock = clock
        now = clock()
        # source -> (tokens, at, when it last tried a connection)
        self._buckets: dict[str, tuple[float, float, float]] = {}
        self._in_all = Bucket(limits.rate_in_all, limits.burst_in_all, now)
        self._quiet = Bucket(limits.rate_in_all, limits.burst_in_all, now)
        self._accepts = Bucket(limits.accepts_per_s, limits.accepts_per_s * PAUSE_MIN_S * 5, now)
        self._by_source: Counter[str] = Counter()
        self._open: set[Ticket] = set()
        self._dropped: Counter[str] = Counter()
        self._logged_at: dict[str, float] = {}

    @property
    def total(self) -> int:
        return len(self._open)

    def wait_s(self) -> float:
        """How long to leave new connections in the kernel's queue before taking the
        next (0: take it now): while the accepts of all sources are over their rate."""
        now = self._clock()
        if self._accepts.tokens(now) >= 1.0:
            return 0.0
        return max(PAUSE_MIN_S, self._accepts.wait_s(now, self.limits.accepts_per_s * PAUSE_MIN_S))

    def admit(self, source: str) -> Ticket | None:
        """A connection the kernel gave us: its ticket, or None (refused, counted)."""
        now = self._clock()
        self._accepts.tokens(now)
        self._accepts.take()
        full = float(self.limits.per_source_burst)
        tokens, at, seen = self._buckets.get(source, (full, now, -math.inf))
        lane = self._in_all
        if lane.tokens(now) < 1.0 and now - seen >= QUIET_S:
            lane = self._quiet  # a flood's sources are never quiet for long
        self._buckets[source] = (tokens, at, now)
        if len(self._buckets) > BUCKETS_MAX:
            self._forget_full(now)
        tokens = refill(tokens, now - at, self.limits)
        reason = refusal(
            self.limits,
            total=self.total,
            from_source=self._by_source[source],
            tokens=tokens,
            in_all=lane.tokens(now),
        )
        if reason is not None:  # the buckets stand: refill is the same from either point
            self.dropped(reason, source)
            return None
        self._buckets[source] = (tokens - 1.0, now, now)
        lane.take()
        self._by_source[source] += 1
        ticket = Ticket(self, source)
        self._open.add(ticket)
        metrics.HTTP_CONNECTIONS.set(len(self._open))
        return ticket

    def _forget_full(self, now: float) -> None:
        full = float(self.limits.per_source_burst)
        for source, (tokens, at, seen) in list(self._buckets.items()):
            if refill(tokens, now - at, self.limits) >= full and now - seen >= QUIET_S:
                del self._buckets[source]

    def _release(self, ticket: Ticket) -> None:
        self._open.discard(ticket)
        self._by_source[ticket.source] -= 1
        if self._by_source[ticket.source] <= 0:
            del self._by_source[ticket.source]
        metrics.HTTP_CONNECTIONS.set(len(self._open))

    def dropped(self, reason: Reason, source: str) -> None:
        metrics.HTTP_CONNECTIONS_DROPPED.labels(reason).inc()
        self._dropped[reason] += 1
        now = self._clock()
        if now - self._logged_at.get(reason, -LOG_EVERY_S) >= LOG_EVERY_S:
            self._logged_at[reason] = now
            log.warning(
                "HTTP port: dropped a connection from %s (%s; %d so far for this reason, "
                "limits: %d in all, %d per source, %g new a second per source, "
                "%g in all, %.0f s handshake, %.0f s to a request)",
                source,
                reason,
                self._dropped[reason],
                self.limits.total,
                self.limits.per_source,
                self.limits.per_source_rate,
                self.limits.rate_in_all,
                self.limits.handshake_s,
                self.limits.first_request_s,
            )

    def close_all(self) -> None:
        for ticket in list(self._open):
            if isinstance(ticket.transport, asyncio.Transport):
                ticket.transport.abort()


class GuardedHttp(asyncio.Protocol):
    """One admitted connection of the HTTP port (its `ticket`, from the accept loop):
    TLS, the request deadline; uvicorn's H11Protocol inside, once the connection may
    speak HTTP."""

    def __init__(
        self,
        conns: Connections,
        tls: ssl.SSLContext | None,
        *,
        ticket: Ticket,
        **uvicorn_args: Any,
    ) -> None:
        self._conns = conns
        self._tls = tls
        self._ticket = ticket
        self._inner = H11Protocol(**uvicorn_args)
        self._loop = asyncio.get_running_loop()
        self._raw: asyncio.Transport | None = None
        self._transport: asyncio.Transport | None = None  # what HTTP is spoken on
        self._source = ticket.source
        self._early: list[bytes] = []
        self._early_bytes = 0
        self._handshake: asyncio.Task[None] | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._seen_cycle: object = None

    @classmethod
    def bind(cls, conns: Connections, tls: ssl.SSLContext | None) -> type[asyncio.Protocol]:
        """What uvicorn's Config takes as `http`: called with a ticket and uvicorn's
        own arguments (web/server.py)."""
        return functools.partial(cls, conns, tls)  # type: ignore[return-value]

    # -- asyncio.Protocol: events of the raw transport (and, after start_tls, of the TLS one)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._ticket.transport = transport
        self._raw = transport
        if self._tls is None:
            self._speak_http(transport)
            return
        # Nothing is read until start_tls has put the TLS layer in front of us.
        transport.pause_reading()
        self._handshake = self._loop.create_task(self._start_tls(transport, self._tls))

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._inner.data_received(data)
            return
        # Bytes the TLS layer decrypted before _start_tls resumed: kept for HTTP.
        self._early_bytes += len(data)
        if self._early_bytes > EARLY_BYTES_MAX:
            self._drop("no_request")
            return
        self._early.append(data)

    def eof_received(self) -> bool | None:
        if self._transport is not None:
            self._inner.eof_received()
        return None  # close on EOF, as uvicorn does

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_deadline()
        if self._handshake is not None and not self._handshake.done():
            self._handshake.cancel()
        if self._transport is not None:
            self._inner.connection_lost(exc)
        self._release()

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._inner.resume_writing()

    # -- the connection's life

    async def _start_tls(self, raw: asyncio.Transport, tls: ssl.SSLContext) -> None:
        try:
            transport = await self._loop.start_tls(
                raw,
                self,
                tls,
                server_side=True,
                ssl_handshake_timeout=self._conns.limits.handshake_s,
            )
        except asyncio.CancelledError:
            raw.abort()
            self._release()
            raise
        except Exception as e:  # every failed handshake (timeout, TLS alert, reset) ends alike
            # The traceback's frames hold the SSL protocol and its buffers, which
            # hold the exception: clear it, so reference counting frees them now.
            e.__traceback__ = None
            del e
            raw.abort()
            self._conns.dropped("handshake", self._source)
            self._release()
            return
        if transport is None or raw.is_closing():
            self._release()
            return
        self._speak_http(transport)

    def _speak_http(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._inner.connection_made(transport)
        early, self._early = self._early, []
        for data in early:
            self._inner.data_received(data)
        self._arm_deadline()

    def _arm_deadline(self) -> None:
        self._deadline = self._loop.call_later(
            self._conns.limits.first_request_s, self._check_progress
        )

    def _check_progress(self) -> None:
        """Every first_request_s: a request began since the last check, or one is
        being answered; otherwise the client sends nothing (or headers too slowly)."""
        self._deadline = None
        cycle = self._inner.cycle
        answering = cycle is not None and not cycle.response_complete
        if cycle is self._seen_cycle and not answering:
            self._drop("no_request")
            return
        self._seen_cycle = cycle
        self._arm_deadline()

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _drop(self, reason: Reason) -> None:
        self._conns.dropped(reason, self._source)
        self._stop_deadline()
        for transport in (self._transport, self._raw):
            if transport is not None:
                with contextlib.suppress(Exception):
                    transport.abort()

    def _release(self) -> None:
        self._ticket.release()
