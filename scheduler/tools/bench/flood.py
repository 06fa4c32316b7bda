"""Connection floods with no credential: what anyone who can reach a port can do.

The patterns of issue 28, for `bench overload --connections` and for the tests
of the ports' doors (tests/web/test_connections.py, tests/api/test_conn_limits.py):

* idle: connect and send nothing;
* half: connect and send the first half of a TLS ClientHello, then nothing;
* churn: connect, send a whole ClientHello, close at once (the server is
  mid-handshake when the connection ends);
* halfclose: as churn, but shut the write side and wait for the server to close.

Each connection may come from its own loopback source address (`source`), so a
test can tell a flood from a legitimate client on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

Pattern = Literal["idle", "half", "churn", "halfclose"]
PATTERNS: tuple[Pattern, ...] = ("idle", "half", "churn", "halfclose")


def client_hello(alpn: Sequence[str] = ("h2", "http/1.1")) -> bytes:
    """The bytes a TLS client sends first (one ClientHello record)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(list(alpn))
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_side=False, server_hostname="apollo11")
    with contextlib.suppress(ssl.SSLWantReadError):
        obj.do_handshake()
    return outgoing.read()


@dataclass
class Held:
    """Connections a flood holds open; `closed()` counts those the server ended."""

    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    readers: list[asyncio.StreamReader] = field(default_factory=list)
    failed: int = 0  # connect refused or reset at once

    def closed(self) -> int:
        return sum(1 for r in self.readers if _ended(r)) + self.failed

    def open(self) -> int:
        return sum(1 for r in self.readers if not _ended(r))

    async def drain_reads(self) -> None:
        """Read what the server sent, so an EOF it sent is seen."""
        for r in self.readers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(r.read(65536), 0.001)

    def close(self) -> None:
        for w in self.writers:
            with contextlib.suppress(Exception):
                w.transport.abort()
        self.writers.clear()


def _ended(r: asyncio.StreamReader) -> bool:
    return r.at_eof() or r.exception() is not None


async def _connect(
    host: str, port: int, source: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port, local_addr=(source, 0))


async def hold(host: str, port: int, n: int, pattern: Pattern, *, source: str) -> Held:
    """Open `n` connections in the `idle` or `half` pattern and keep them."""
    first = b"" if pattern == "idle" else client_hello()[:40]
    held = Held()
    for _ in range(n):
        try:
            r, w = await _connect(host, port, source)
        except OSError:
            held.failed += 1
            continue
        if first:
            w.write(first)
        held.readers.append(r)
        held.writers.append(w)
    await asyncio.sleep(0.2)
    await held.drain_reads()
    return held


async def churn(
    host: str,
    port: int,
    n: int,
    pattern: Pattern,
    *,
    source: str,
    concurrency: int = 16,
    rate: float | None = None,
) -> int:
    """`n` connections in the `churn` or `halfclose` pattern, `concurrency` at a time
    (at most `rate` a second, if given); returns how many could not even connect."""
    hello = client_hello()
    failed = 0
    todo = iter(range(n))

    async def one() -> None:
        nonlocal failed
        failed += not await _one(host, port, pattern, source, hello)

    loop = asyncio.get_running_loop()
    gap = concurrency / rate if rate else 0.0  # each lane's share of the rate

    async def lane() -> None:
        next_at = loop.time()
        for _ in todo:
            await one()
            if gap:
                next_at += gap
                await asyncio.sleep(max(0.0, next_at - loop.time()))

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return failed


async def _one(host: str, port: int, pattern: Pattern, source: str, hello: bytes) -> bool:
    """One connection in the `churn` or `halfclose` pattern; False: it could not even
    connect."""
    try:
        r, w = await _connect(host, port, source)
    except OSError:
        return False
    try:
        w.write(hello)
        if pattern == "halfclose":
            with contextlib.suppress(Exception):  # the server may have closed first
                w.write_eof()
                await asyncio.wait_for(r.read(), 30)
        else:
            await asyncio.sleep(0)
            # RST, not FIN: the server is cut off mid-handshake
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    linger = struct.pack("ii", 1, 0)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
    finally:
        w.transport.abort()
    return True


CATCH_UP_S = 0.25


async def churn_open(
    host: str,
    port: int,
    pattern: Pattern,
    *,
    source: str,
    rate: float,
    seconds: float,
    in_flight_max: int = 64,
) -> int:
    """`rate` connections a second for `seconds` in the `churn` or `halfclose`
    pattern, open loop: each starts on time whether or not those before it have
    ended (a connect whose SYN the server dropped waits a second or more), up to
    `in_flight_max` at once; after a stall it makes up at most CATCH_UP_S of the
    schedule. Returns how many were started."""
    hello = client_hello()
    loop = asyncio.get_running_loop()
    flying: set[asyncio.Task[bool]] = set()
    started = 0
    # each start's time from its index, not from sums of 1/rate (whose rounding
    # depends on the size of loop.time(): the count did too)
    begin = loop.time()
    end = begin + seconds
    planned = round(rate * seconds)
    shift = 0.0  # of the schedule given up after stalls
    i = 0
    try:
        while i < planned and (at := begin + shift + i / rate) < end:
            await asyncio.sleep(max(0.0, at - loop.time()))
            if len(flying) >= in_flight_max:
                timeout = max(0.0, end - loop.time())
                await asyncio.wait(flying, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if len(flying) >= in_flight_max:
                    break
            task = loop.create_task(_one(host, port, pattern, source, hello))
            flying.add(task)
            task.add_done_callback(flying.discard)
            started += 1
            i += 1
            # behind (a stall, a stop): catch up at most CATCH_UP_S, not with a burst
            behind = loop.time() - (begin + shift + i / rate)
            if behind > CATCH_UP_S:
                shift += behind - CATCH_UP_S
    finally:  # cancelled too: none of its connections left behind
        for task in list(flying):
            task.cancel()
        await asyncio.gather(*flying, return_exceptions=True)
    return started


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds `pid`'s threads have used so far, by thread name (the main thread:
    "main"); threads that ended are not counted."""
    used: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return used
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        end = stat.rindex(")")
        name = "main" if int(tid) == pid else stat[stat.index("(") + 1 : end]
        fields = stat[end + 2 :].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        used[name] = used.get(name, 0.0) + cpu
    return used


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds `pid`'s threads (those alive now) have run on a core and have waited,
    runnable, for one (/proc/PID/task/TID/schedstat): a process that gets less CPU
    because others hold the cores waits more."""
    ran = waited = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0, 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                fields = f.read().split()
        except OSError:
            continue
        ran += int(fields[0])
        waited += int(fields[1])
    return ran / 1e9, waited / 1e9


def cpu_seconds(pid: int) -> float:
    """User + system CPU time `pid` has used so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    """How many files `pid` has open now (0 once it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0
