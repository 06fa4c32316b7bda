"""The HTTP port's accept loop (scheduler/web/acceptor.py), in process: what it
refuses costs no protocol, and past the node-wide rates it leaves connections in
the kernel's queue rather than refusing them."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import ClassVar

from apollo11.scheduler.web.acceptor import Acceptor
from apollo11.scheduler.web.listener import ConnectionLimits, Connections, Ticket


class Echo(asyncio.Protocol):
    """Answers b"ok" once connected; gives its ticket back when the connection ends."""

    made: ClassVar[list[Ticket]] = []

    def __init__(self, ticket: Ticket) -> None:
        self.ticket = ticket

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.ticket.transport = transport
        Echo.made.append(self.ticket)
        transport.write(b"ok")

    def connection_lost(self, exc: Exception | None) -> None:
        self.ticket.release()


async def _open(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def test_past_the_accepts_of_the_second_connections_wait_in_the_kernel() -> None:
    # Before: asyncio took up to `backlog` at each wake-up, and built a transport and
    # a protocol for each, refused or not.
    Echo.made = []
    conns = Connections(ConnectionLimits(accepts_per_s=20, per_source_rate=1000))
    door = await Acceptor.listen("127.0.0.1", 0, backlog=64, conns=conns, protocol=Echo)
    port = door.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    try:
        began = loop.time()
        opened = [await _open(port, "127.0.3.1") for _ in range(16)]
        await asyncio.sleep(0.1)
        early = len(Echo.made)
        # the burst (a tenth of a second's) and what 20 a second adds; the rest wait
        # in the kernel's queue
        assert early <= 2 + 20 * (loop.time() - began) + 1, early
        answers = await asyncio.wait_for(asyncio.gather(*(r.readexactly(2) for r, _ in opened)), 30)
        assert answers == [b"ok"] * 16, "every one served in its turn, none refused"
        for _, w in opened:
            w.close()
    finally:
        door.close()
        await door.wait_closed()


async def test_a_refused_connection_gets_no_protocol_and_gives_nothing_back() -> None:
    Echo.made = []
    conns = Connections(ConnectionLimits(per_source=1))
    door = await Acceptor.listen("127.0.0.1", 0, backlog=64, conns=conns, protocol=Echo)
    port = door.sockets[0].getsockname()[1]
    try:
        r1, w1 = await _open(port, "127.0.4.1")
        assert await asyncio.wait_for(r1.readexactly(2), 10) == b"ok"
        r2, w2 = await _open(port, "127.0.4.1")
        with contextlib.suppress(ConnectionError):
            assert await asyncio.wait_for(r2.read(), 10) == b"", "closed at once"
        assert len(Echo.made) == 1, "no protocol for the refused one"
        assert conns.total == 1
        w1.close()
        w2.close()
        for _ in range(100):
            if conns.total == 0:
                break
            await asyncio.sleep(0.05)
        assert conns.total == 0, "the ticket came back with the connection"
    finally:
        door.close()
        await door.wait_closed()


async def test_close_stops_listening() -> None:
    conns = Connections(ConnectionLimits())
    door = await Acceptor.listen("127.0.0.1", 0, backlog=8, conns=conns, protocol=Echo)
    port = door.sockets[0].getsockname()[1]
    door.close()
    await door.wait_closed()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


async def test_a_connection_taken_but_not_yet_handed_over_gives_its_ticket_back_on_close() -> None:
    # Before: close() cancelled the hand-over before it began; its ticket stayed
    # counted and its socket was left to the garbage collector.
    conns = Connections(ConnectionLimits())
    door = await Acceptor.listen("127.0.0.1", 0, backlog=8, conns=conns, protocol=Echo)
    port = door.sockets[0].getsockname()[1]
    with socket.create_connection(("127.0.0.1", port)) as client:
        for _ in range(100):  # what the reader callback does, once the kernel has it
            door._accept(door.sockets[0])
            if conns.total:
                break
            await asyncio.sleep(0.01)
        assert conns.total == 1
        door.close()  # the same turn of the loop: the hand-over has not run
        await door.wait_closed()
        assert conns.total == 0
        client.settimeout(10)
        assert client.recv(1) == b"", "the node's end is closed"
