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

So uvicorn serves plain TCP here and this protocol wraps each of its
connections: it admits the connection or drops it at once (`refusal`: per
source address, new ones a second per source, and in total), runs the TLS handshake itself through
`loop.start_tls` with a deadline and drops the failed handshake's traceback,
and gives the connection `first_request_s` to send a complete request's headers
(each later one too: uvicorn's keep-alive timeout closes a quiet connection
before that). After a burst, freed memory goes back to the system (memtrim.py).

Every refusal or drop is counted in apollo11_http_connections_dropped_total
{reason} and logged, at most once per LOG_EVERY_S per reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from uvicorn.protocols.http.h11_impl import H11Protocol

from apollo11.scheduler import metrics

log = logging.getLogger(__name__)

Reason = Literal["total", "per_source", "rate", "handshake", "no_request"]

LOG_EVERY_S = 10.0
# What a client may send before its TLS handshake is done: a ClientHello is a
# few hundred bytes; anything near this is not a browser.
EARLY_BYTES_MAX = 64 * 1024


@dataclass(frozen=True)
class ConnectionLimits:
    # Connections open at once: in all, and from one source address. A browser
    # opens about six per origin; a scraper one.
    total: int = 128
    per_source: int = 32
    # New connections from one source address: `per_source_rate` a second, in bursts
    # of up to `per_source_burst`. Each costs a TLS handshake on the event loop: a
    # churn of 2,273 a second took 83 % of the node's CPU (docs/benchmarks.md).
    per_source_rate: float = 20.0
    per_source_burst: int = 40
    # From accept to the end of the TLS handshake.
    handshake_s: float = 5.0
    # From the end of the handshake (or the last request) to a complete request's headers.
    first_request_s: float = 10.0


def refusal(
    limits: ConnectionLimits, *, total: int, from_source: int, tokens: float = 1.0
) -> Reason | None:
    """Why a new connection is turned away, given what is open now and the tokens left
    in its source's bucket; None: admitted."""
    if total >= limits.total:
        return "total"
    if from_source >= limits.per_source:
        return "per_source"
    if tokens < 1.0:
        return "rate"
    return None


def refill(tokens: float, elapsed: float, limits: ConnectionLimits) -> float:
    """A source's bucket after `elapsed` seconds: `per_source_rate` a second, at most
    `per_source_burst`."""
    return min(float(limits.per_source_burst), tokens + elapsed * limits.per_source_rate)


BUCKETS_MAX = 10_000  # past it, full buckets (sources quiet a while) are forgotten


class Connections:
    """The connections open on the HTTP port, by source address."""

    def __init__(
        self, limits: ConnectionLimits, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limits = limits
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (tokens, at)
        self._by_source: Counter[str] = Counter()
        self._open: set[asyncio.Transport] = set()
        self._dropped: Counter[str] = Counter()
        self._logged_at: dict[str, float] = {}

    @property
    def total(self) -> int:
        return len(self._open)

    def admit(self, source: str, transport: asyncio.Transport) -> bool:
        now = self._clock()
        tokens, at = self._buckets.get(source, (float(self.limits.per_source_burst), now))
        tokens = refill(tokens, now - at, self.limits)
        reason = refusal(
            self.limits, total=self.total, from_source=self._by_source[source], tokens=tokens
        )
        if reason is not None:  # the bucket stands: refill is the same from either point
            self.dropped(reason, source)
            return False
        self._buckets[source] = (tokens - 1.0, now)
        if len(self._buckets) > BUCKETS_MAX:
            self._forget_full(now)
        self._by_source[source] += 1
        self._open.add(transport)
        metrics.HTTP_CONNECTIONS.set(len(self._open))
        return True

    def _forget_full(self, now: float) -> None:
        full = float(self.limits.per_source_burst)
        for source, (tokens, at) in list(self._buckets.items()):
            if refill(tokens, now - at, self.limits) >= full:
                del self._buckets[source]

    def release(self, source: str, transport: asyncio.Transport) -> None:
        if transport not in self._open:
            return
        self._open.discard(transport)
        self._by_source[source] -= 1
        if self._by_source[source] <= 0:
            del self._by_source[source]
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
                "%.0f s handshake, %.0f s to a request)",
                source,
                reason,
                self._dropped[reason],
                self.limits.total,
                self.limits.per_source,
                self.limits.per_source_rate,
                self.limits.handshake_s,
                self.limits.first_request_s,
            )

    def close_all(self) -> None:
        for transport in list(self._open):
            transport.abort()


class GuardedHttp(asyncio.Protocol):
    """One connection of the HTTP port: admission, TLS, the request deadline;
    uvicorn's H11Protocol inside, once the connection may speak HTTP."""

    def __init__(
        self,
        conns: Connections,
        tls: ssl.SSLContext | None,
        **uvicorn_args: Any,
    ) -> None:
        self._conns = conns
        self._tls = tls
        self._uvicorn_args = uvicorn_args
        self._inner: H11Protocol  # made once admitted: a refusal costs no more than it must
        self._loop = asyncio.get_running_loop()
        self._raw: asyncio.Transport | None = None
        self._transport: asyncio.Transport | None = None  # what HTTP is spoken on
        self._source = "?"
        self._early: list[bytes] = []
        self._early_bytes = 0
        self._handshake: asyncio.Task[None] | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._seen_cycle: object = None

    @classmethod
    def bind(cls, conns: Connections, tls: ssl.SSLContext | None) -> type[asyncio.Protocol]:
        """What uvicorn's Config takes as `http`: it calls it with its own arguments."""
        return functools.partial(cls, conns, tls)  # type: ignore[return-value]

    # -- asyncio.Protocol: events of the raw transport (and, after start_tls, of the TLS one)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        peer = transport.get_extra_info("peername")
        self._source = str(peer[0]) if peer else "?"
        if not self._conns.admit(self._source, transport):
            transport.abort()
            return
        self._inner = H11Protocol(**self._uvicorn_args)
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
        if self._raw is not None:
            self._conns.release(self._source, self._raw)
