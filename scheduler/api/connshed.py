"""New connections to the gRPC ports, shed in the kernel while gRPC core's threads
spend more than their CPU budget (setting grpc_threads_cpu_budget).

gRPC core accepts on the gRPC ports itself and runs each TLS handshake on its
EventEngine thread pool (threads named "event_engine"): ~0.2 ms of CPU for a
connection cut mid-handshake, with nothing in Python to refuse it before. The pool
starts another thread every second while all of its threads are busy, and each is
a thread like the event loop's to the kernel's scheduler: a churn of 3,000 such
connections a second from 40 addresses took the pool to half of the machine's
two cores, the loop that serves the calls waited for a core, and a client on a
connection already open kept a third of its rate (docs/bench-history/overload.md,
Dec 6).

The pool's threads run POOL_NICE below the node's own (Linux keeps a nice value per
thread, as for the HTTP port's thread, web/server.py): when the event loop and a
flood's handshakes both want a core, the loop gets most of it. The node's own calls
need the pool too (their reads and writes), but each costs it little next to a
handshake; beside a paced churn the client kept x0.76 of its rate instead of x0.62
(median of eight cells each, docs/bench-history/overload.md, Dec 7 morning).

So the node watches the CPU time of the pool's threads (/proc/self/task), and while
it is over budget it attaches a classic BPF filter to the gRPC listening sockets
that drops a fraction `drop` of new connections' SYNs, raised until the pool is
within budget, lowered again by DROP_EASE a tick once it is well under. A dropped
SYN costs the node nothing; its client sends it again a second later (then 3 s, 7 s
later); a flood of ordinary connect() calls slows down the same way. Connections
already open are never touched: the filter drops only SYNs without ACK, and it is
detached when `drop` is back to 0.

A filter keeps no state, so it cannot limit a source; it can spare some. The
addresses with a call with a credential open, or ended within the last hour
(api/knownsources.py: workers, clients, standbys), and the loopback ones, are written
into it (as many as SPARED_INSNS_MAX holds) and never dropped: a worker that
reconnects during a flood connects at once. Everyone else's
SYNs are dropped up to DROP_MAX, 95 %: a client the node has not seen lately may wait
out several of its kernel's retries. For two minutes after the node starts or takes
over (setting grpc_welcome_s), when the workers and clients moving to it are all
strangers, the ceiling is DROP_MAX_WELCOMING, 75 %, as it was for everyone before
Dec 7: there a quarter of a flood of 1,100 connections a second got through, three
times the pool's budget, and a client on its open connection kept x0.74–0.85 of its
rate; at 95 % x0.92–0.98 (docs/bench-history/overload.md, Dec 7 evening).

A filter on a socket needs no privilege. If attaching fails, the node logs it once
and sheds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import math
import os
import socket
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address

from apollo11.scheduler import metrics
from apollo11.scheduler.api.knownsources import KnownSources
from apollo11.scheduler.threadnice import lower

log = logging.getLogger(__name__)

TICK_S = 0.5
DROP_MAX = 0.95
DROP_MAX_WELCOMING = 0.75  # while the node is new to everyone (knownsources.WELCOME_S)
DROP_EASE = 0.05  # a tick, once under half the budget: from DROP_MAX to 0 in 9.5 s
DROP_STEP = 0.05  # what `drop` is rounded to: fewer filters attached
LOG_EVERY_S = 10.0
GRPC_POOL_THREAD = "event_engine"  # gRPC core's thread pool (work_stealing_thread_pool.cc)
# How much lower than the node's own threads the pool's run (their nice value): a
# tenth of a core beside a busy loop, all it wants beside an idle one. A thread the
# pool starts runs at the node's own until the next tick (TICK_S).
POOL_NICE = 10

SO_ATTACH_FILTER = 26
SO_DETACH_FILTER = 27
_CLK_TCK = os.sysconf("SC_CLK_TCK")


def next_drop(drop: float, used: float, budget: float, ceiling: float = DROP_MAX) -> float:
    """The fraction of new connections to drop next, given the fraction dropped over
    the last tick and the cores gRPC's pool used in it; at most `ceiling`."""
    if used > budget:
        # the pool's work scales with the connections let through: let through
        # budget/used of what passed
        want = max(drop + DROP_STEP, 1.0 - (1.0 - drop) * budget / used)
    elif used < budget / 2:
        want = drop - DROP_EASE
    else:
        want = drop
    want = min(ceiling, max(0.0, want))
    return round(round(want / DROP_STEP) * DROP_STEP, 2)


Instruction = tuple[int, int, int, int]  # struct sock_filter: code, jt, jf, k

_KEEP = (0x06, 0, 0, 0xFFFFFFFF)  # ret #-1: keep all of it
_SKF_AD_PROTOCOL = 0xFFFFF000  # SKF_AD_OFF + SKF_AD_PROTOCOL: the packet's ethertype
_SKF_NET_OFF = 0xFFF00000  # SKF_NET_OFF: offsets from the IP header, not the TCP one
_ETH_P_IP, _ETH_P_IPV6 = 0x0800, 0x86DD


def _spare_v4(addresses: Sequence[IPv4Address]) -> list[Instruction]:
    """Keep a packet whose IPv4 source is one of `addresses`; fall through if not."""
    if not addresses:
        return []
    out = [(0x20, 0, 0, _SKF_NET_OFF + 12)]  # ld [net + 12]: the source address
    for a in addresses:
        # each a jump of one: a list of any length stays in the 8-bit jump offsets
        out += [(0x15, 0, 1, int(a)), _KEEP]  # jeq #a: keep
    return out


def _spare_v6(addresses: Sequence[IPv6Address]) -> list[Instruction]:
    """As _spare_v4, for IPv6 sources (at net + 8, four words)."""
    out: list[Instruction] = []
    for a in addresses:
        words = struct.unpack("!4I", a.packed)
        for i, word in enumerate(words):
            left = 2 * (3 - i)  # the loads and tests after this one
            out += [(0x20, 0, 0, _SKF_NET_OFF + 8 + 4 * i), (0x15, 0, left + 1, word)]
        out.append(_KEEP)
    return out


def syn_filter(
    drop: float,
    spare_v4: Sequence[IPv4Address] = (),
    spare_v6: Sequence[IPv6Address] = (),
) -> list[Instruction]:
    """A classic BPF program for a TCP socket: drop a fraction `drop` of SYNs (SYN
    set, ACK not), at random, but none from the addresses spared; keep every other
    packet. A TCP socket's filter sees the packet from its TCP header on, for IPv4 and
    IPv6 alike; the IP header is at SKF_NET_OFF."""
    threshold = min(0xFFFFFFFF, math.floor(drop * 2**32))
    v4, v6 = _spare_v4(spare_v4), _spare_v6(spare_v6)
    program: list[Instruction] = [
        (0x30, 0, 0, 13),  # ldb [13]: the TCP flags
        (0x54, 0, 0, 0x12),  # and #(SYN|ACK)
        (0x15, 1, 0, 0x02),  # jeq #SYN: a new connection
        _KEEP,
    ]
    if v4 or v6:
        program += [
            (0x20, 0, 0, _SKF_AD_PROTOCOL),  # ld #proto
            (0x15, 0, 1, _ETH_P_IP),  # jeq #IPv4
            (0x05, 0, 0, 3),  # ja to the IPv4 list
            (0x15, 0, 1, _ETH_P_IPV6),  # jeq #IPv6
            (0x05, 0, 0, len(v4) + 2),  # ja to the IPv6 list
            (0x05, 0, 0, len(v4) + 1 + len(v6)),  # ja past both: neither
            *v4,
            (0x05, 0, 0, len(v6)),  # ja past the IPv6 list: not spared
            *v6,
        ]
    return [
        *program,
        (0x20, 0, 0, 0xFFFFF038),  # ld #rand (SKF_AD_OFF + SKF_AD_RANDOM)
        (0x25, 1, 0, threshold),  # jgt #threshold: keep; else drop
        (0x06, 0, 0, 0),  # ret #0: drop
        _KEEP,
    ]


Spared = tuple[tuple[IPv4Address, ...], tuple[IPv6Address, ...]]
NONE_SPARED: Spared = ((), ())
# The most instructions the spared addresses take in a filter (8 bytes each): the
# kernel charges a socket's filter to its option memory (net.core.optmem_max, 20 KiB
# on older kernels), and every SYN walks them.
SPARED_INSNS_MAX = 1024


def fit(v4: Sequence[IPv4Address], v6: Sequence[IPv6Address]) -> Spared:
    """As many of the addresses as SPARED_INSNS_MAX takes, the first of each list
    first (IPv4 before IPv6), sorted: the same addresses give the same filter."""
    room = SPARED_INSNS_MAX - 1  # the IPv4 list's one load
    kept4 = v4[: max(0, room // 2)]
    room -= 2 * len(kept4)
    kept6 = v6[: max(0, room // 9)]
    return tuple(sorted(kept4)), tuple(sorted(kept6))


def attach(fd: int, drop: float, spared: Spared = NONE_SPARED) -> None:
    """Drop a fraction `drop` of the SYNs to the listening socket `fd` (0: none), none
    of them from the addresses `spared` (IPv4, IPv6)."""
    with socket.socket(fileno=os.dup(fd)) as sock:  # the same socket, its own fd
        # detached first: a filter replacing another is charged beside it until it is in
        with contextlib.suppress(OSError):  # none attached: ENOENT
            sock.setsockopt(socket.SOL_SOCKET, SO_DETACH_FILTER, 0)
        if drop <= 0:
            return
        program = syn_filter(drop, *spared)
        code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in program))
        # struct sock_fprog {unsigned short len; struct sock_filter *filter;}; the
        # kernel copies the program before setsockopt returns
        fprog = struct.pack("HL", len(program), ctypes.addressof(code))
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


def listening_fds(ports: Iterable[int]) -> list[int]:
    """This process's listening TCP sockets on `ports` (gRPC core opened them)."""
    wanted = set(ports)
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            dup = os.dup(int(name))
        except OSError:  # gone (the directory's own fd among them)
            continue
        try:
            sock = socket.socket(fileno=dup)
        except OSError:  # not a socket
            os.close(dup)
            continue
        with sock:
            try:
                if (
                    sock.type == socket.SOCK_STREAM
                    and sock.family in (socket.AF_INET, socket.AF_INET6)
                    and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                    and sock.getsockname()[1] in wanted
                ):
                    found.append(int(name))
            except OSError:
                continue
    return found


def _identity(fd: int) -> tuple[int, int]:
    """Which file `fd` is: its device and inode."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class PoolCpu:
    """CPU seconds gRPC core's pool threads have used, counted across threads that
    come and go (the pool starts them when busy and ends them after 20 s idle)."""

    def __init__(self, task_dir: str = "/proc/self/task") -> None:
        self._dir = task_dir
        self._seen: dict[str, float] = {}
        self.total = 0.0
        self.started: list[int] = []  # the pool's threads first seen by the last sample

    def sample(self) -> float:
        now: dict[str, float] = {}
        for tid in os.listdir(self._dir):
            try:
                with open(f"{self._dir}/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name_end = stat.rindex(")")
            if stat[stat.index("(") + 1 : name_end] != GRPC_POOL_THREAD:
                continue
            fields = stat[name_end + 2 :].split()
            now[tid] = (int(fields[11]) + int(fields[12])) / _CLK_TCK
        self.total += sum(max(0.0, cpu - self._seen.get(tid, 0.0)) for tid, cpu in now.items())
        self.started = [int(tid) for tid in now if tid not in self._seen]
        self._seen = now
        return self.total


@dataclass
class ConnectionShedder:
    """Sheds new connections to `ports` while gRPC's pool is over `budget` cores."""

    ports: tuple[int, ...]
    budget: float
    clock: Callable[[], float] = time.monotonic
    known: KnownSources | None = None  # whose SYNs are never dropped
    drop: float = 0.0
    spared: Spared = NONE_SPARED  # as attached now
    can_spare: bool = True  # False once a filter with the known addresses was refused
    _logged_at: float = -LOG_EVERY_S
    _told: bool = False  # an episode's start was logged, its end not yet

    async def run(self) -> None:
        try:
            await self._run()
        except Exception as e:  # no /proc, an unreadable stat: the node goes on unshed
            log.warning("gRPC ports: cannot watch gRPC core's threads (%r): nothing shed", e)

    async def _run(self) -> None:
        fds = {fd: _identity(fd) for fd in listening_fds(self.ports)}
        if not fds:
            log.warning("gRPC ports %s: no listening socket found, nothing shed", self.ports)
            return
        cpu = PoolCpu()
        used_before, at = cpu.sample(), self.clock()
        lower(cpu.started, POOL_NICE)
        try:
            while True:
                await asyncio.sleep(TICK_S)
                used_now, now = cpu.sample(), self.clock()
                lower(cpu.started, POOL_NICE)
                used = (used_now - used_before) / max(1e-3, now - at)
                used_before, at = used_now, now
                welcoming = self.known is None or self.known.welcoming()
                ceiling = DROP_MAX_WELCOMING if welcoming else DROP_MAX
                drop = next_drop(self.drop, used, self.budget, ceiling)
                spared = NONE_SPARED
                if self.known is not None and self.can_spare:
                    spared = fit(*self.known.current())
                    metrics.GRPC_KNOWN_SOURCES.set(self.known.noted)
                changed = drop != self.drop or (drop > 0 and spared != self.spared)
                if changed and not self._set(fds, drop, used, spared):
                    return
        finally:
            if self.drop > 0:
                self._set(fds, 0.0, 0.0)

    def _set(
        self,
        fds: dict[int, tuple[int, int]],
        drop: float,
        used: float,
        spared: Spared = NONE_SPARED,
    ) -> bool:
        """Drop `drop` of the SYNs from now on; False: a filter could not be attached
        (none is left attached)."""
        try:
            for fd, identity in fds.items():
                if _identity(fd) != identity:  # closed, its number another file's now
                    raise OSError(f"descriptor {fd} is no longer the gRPC port's socket")
                try:
                    attach(fd, drop, spared)
                except OSError as e:
                    if spared == NONE_SPARED:
                        raise
                    log.warning(
                        "gRPC ports: cannot write %d known addresses into the socket filter "
                        "(%s): from now on they are shed as any other",
                        len(spared[0]) + len(spared[1]),
                        e,
                    )
                    self.can_spare, spared = False, NONE_SPARED
                    attach(fd, drop)
        except OSError as e:
            log.warning("gRPC ports: cannot attach a socket filter (%s): nothing shed", e)
            for fd, identity in fds.items():
                with contextlib.suppress(OSError):
                    if _identity(fd) == identity:
                        attach(fd, 0.0)
            self.drop, self.spared = 0.0, NONE_SPARED
            metrics.GRPC_SYN_DROP.set(0.0)
            return False
        now = self.clock()
        # an episode's start at most once per LOG_EVERY_S; its end whenever its start was told
        if self.drop == 0 and drop > 0 and now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            self._told = True
            log.warning(
                "gRPC ports: gRPC core's threads used %.0f %% of a core (budget %.0f %%, "
                "grpc_threads_cpu_budget), mostly TLS handshakes: dropping %.0f %% of "
                "new connections (their clients retry); connections open go on",
                used * 100,
                self.budget * 100,
                drop * 100,
            )
        elif drop == 0 and self._told:
            self._told = False
            log.warning("gRPC ports: no longer dropping new connections")
        self.drop, self.spared = drop, spared if drop > 0 else NONE_SPARED
        metrics.GRPC_SYN_DROP.set(drop)
        return True
