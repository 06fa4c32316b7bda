"""The HTTP port's accept loop: what the kernel hands the node, refused before
asyncio builds anything for it, and left in the kernel's queue while the accepts
of the second are spent.

asyncio's own accept (`loop.create_server`) takes up to `backlog` connections per
wake-up and builds a task, a transport and a protocol for each, refused or not:
~60 us of the event loop for a connection refused at once, which the gRPC calls the
same loop serves wait behind. Here a refused connection costs an accept and a close
(~35 us, most of it the kernel's), and past `accepts_per_s` the listening sockets
are not read at all until the next slice of the budget: the kernel's queue
(`backlog`) holds what comes meanwhile, and once it is full the kernel drops new
connections' SYNs, whose clients retry a second later. A flood then costs the loop
what the budgets allow, not what the flood offers (docs/bench-history/overload.md,
Dec 6).

An admitted connection goes to asyncio (`loop.connect_accepted_socket`) with the
protocol `protocol(ticket)` makes: GuardedHttp (listener.py), which gives the
ticket back when the connection ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import socket
import time
from collections.abc import Callable, Sequence

from apollo11.scheduler import metrics
from apollo11.scheduler.web.listener import LOG_EVERY_S, Connections, Ticket

log = logging.getLogger(__name__)

# Accepts per wake-up of the loop: the rest wait for its next turn, after the
# callbacks that are ready (gRPC calls among them).
ACCEPT_BATCH = 32
# Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM): what asyncio waits.
ACCEPT_RETRY_S = 1.0
# What accept(2) may report of the connection it was taking (its man page: "Linux
# accept() passes already-pending network errors on the new socket as an error code").
PENDING_NETWORK_ERRORS = frozenset(
    {
        errno.ENETDOWN,
        errno.EPROTO,
        errno.ENOPROTOOPT,
        errno.EHOSTDOWN,
        errno.ENONET,
        errno.EHOSTUNREACH,
        errno.EOPNOTSUPP,
        errno.ENETUNREACH,
        errno.EPERM,
    }
)


class Acceptor:
    """Accepts on the HTTP port's listening sockets. Stands where uvicorn keeps its
    asyncio servers (`close`, `wait_closed`, `sockets`)."""

    def __init__(
        self,
        sockets: Sequence[socket.socket],
        conns: Connections,
        protocol: Callable[[Ticket], asyncio.Protocol],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sockets = list(sockets)
        self._conns = conns
        self._protocol = protocol
        self._clock = clock
        self._loop = asyncio.get_running_loop()
        self._resume: asyncio.TimerHandle | None = None
        self._paused_at = 0.0
        self._handing: set[asyncio.Task[None]] = set()
        self._closed = False
        self._logged_at = -LOG_EVERY_S
        self._pauses = 0

    @classmethod
    async def listen(
        cls,
        host: str,
        port: int,
        *,
        backlog: int,
        conns: Connections,
        protocol: Callable[[Ticket], asyncio.Protocol],
    ) -> Acceptor:
        """Listen on every address `host` resolves to (as `loop.create_server` does)."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        sockets: list[socket.socket] = []
        try:
            for family, kind, proto, _, address in dict.fromkeys(infos):
                try:
                    sock = socket.socket(family, kind, proto)
                except OSError:  # e.g. ::1 on a host without IPv6: skipped, as asyncio does
                    continue
                sockets.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(backlog)
                sock.setblocking(False)
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        if not sockets:
            raise OSError(f"no address of {host!r} can be listened on here")
        acceptor = cls(sockets, conns, protocol)
        acceptor.start()
        return acceptor

    def start(self) -> None:
        for sock in self.sockets:
            self._loop.add_reader(sock.fileno(), self._accept, sock)

    def _accept(self, listening: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            wait = self._conns.wait_s()
            if wait > 0:
                self._pause(wait, f"over {self._conns.limits.accepts_per_s:g} accepts a second")
                return
            try:
                sock, peer = listening.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:
                if e.errno in PENDING_NETWORK_ERRORS:  # that connection's, not the port's
                    continue
                if e.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    raise
                self._pause(ACCEPT_RETRY_S, f"accept failed: {e}")
                return
            ticket = self._conns.admit(str(peer[0]) if peer else "?")
            if ticket is None:
                sock.close()
                continue
            made: list[asyncio.Protocol] = []
            task = self._loop.create_task(self._hand_over(sock, ticket, made))
            self._handing.add(task)
            task.add_done_callback(functools.partial(self._handed, sock, ticket, made))

    def _handed(
        self,
        sock: socket.socket,
        ticket: Ticket,
        made: list[asyncio.Protocol],
        task: asyncio.Task[None],
    ) -> None:
        self._handing.discard(task)
        if task.cancelled() and not made:
            # cancelled (by close) before it began: its except clause never ran
            sock.close()
            ticket.release()

    async def _hand_over(
        self, sock: socket.socket, ticket: Ticket, made: list[asyncio.Protocol]
    ) -> None:
        def protocol() -> asyncio.Protocol:
            made.append(self._protocol(ticket))
            return made[0]

        try:
            await self._loop.connect_accepted_socket(protocol, sock)
        except BaseException as e:
            # Once the protocol is made, asyncio's transport owns the socket and calls
            # connection_made, then connection_lost, which gives the ticket back.
            if not made:
                sock.close()
                ticket.release()
            if not isinstance(e, Exception):
                raise
            log.exception("HTTP port: could not serve a connection from %s", ticket.source)

    def _pause(self, seconds: float, why: str) -> None:
        for sock in self.sockets:
            self._loop.remove_reader(sock.fileno())
        self._paused_at = self._clock()
        self._resume = self._loop.call_later(seconds, self._go_on)
        self._pauses += 1
        if self._paused_at - self._logged_at >= LOG_EVERY_S:
            self._logged_at = self._paused_at
            log.warning(
                "HTTP port: stopped accepting for %.0f ms (%s; %d pauses so far)",
                seconds * 1000,
                why,
                self._pauses,
            )

    def _go_on(self) -> None:
        self._resume = None
        metrics.HTTP_ACCEPT_PAUSED.inc(self._clock() - self._paused_at)
        if not self._closed:
            self.start()

    def close(self) -> None:
        """Stop listening; connections admitted and not yet handed over are dropped."""
        if self._closed:
            return
        self._closed = True
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        for sock in self.sockets:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(sock.fileno())
            sock.close()
        for task in list(self._handing):
            task.cancel()

    async def wait_closed(self) -> None:
        if self._handing:
            await asyncio.gather(*self._handing, return_exceptions=True)
