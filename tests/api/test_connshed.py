"""New connections to the gRPC ports shed in the kernel while gRPC core's threads are
over their CPU budget (scheduler/api/connshed.py).

Before: a churn of connections cut mid-handshake took gRPC core's pool to half of
the machine, and a client on a connection already open kept a third of its rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Any

import httpx
import pytest

from apollo11.lease.local_etcd import free_port
from apollo11.scheduler.api import connshed
from apollo11.scheduler.api.connshed import (
    DROP_MAX,
    DROP_MAX_WELCOMING,
    ConnectionShedder,
    PoolCpu,
    attach,
    listening_fds,
    next_drop,
)
from apollo11.scheduler.client import ApiError, SyncClient
from apollo11.scheduler.config import NodeSettings
from apollo11.scheduler.node import Node
from apollo11.scheduler.tools.bench import flood
from tests.nodes import NodeProc
from tests.secure import Pki, make_pki, start_secure_node

RATIO = "apollo11_grpc_new_connections_dropped_ratio"


def test_drop_follows_the_pool_over_its_budget_and_eases_off() -> None:
    assert next_drop(0.0, used=0.1, budget=0.25) == 0.0, "under budget: nothing"
    assert next_drop(0.0, used=1.0, budget=0.25) == 0.75, "let a quarter through"
    assert next_drop(0.5, used=0.5, budget=0.25) == 0.75, "half of what passed"
    assert next_drop(0.0, used=0.26, budget=0.25) == 0.05, "over by a little: a step"
    assert next_drop(0.8, used=5.0, budget=0.25) == DROP_MAX, "never all of them"
    assert next_drop(0.5, used=0.2, budget=0.25) == 0.5, "near the budget: hold"
    assert next_drop(0.5, used=0.0, budget=0.25) == 0.45, "well under: ease off"
    assert next_drop(0.05, used=0.0, budget=0.25) == 0.0
    assert next_drop(0.9, used=5.0, budget=0.25, ceiling=0.75) == 0.75, "a lower ceiling"
    assert DROP_MAX_WELCOMING < DROP_MAX


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def _connects_within(port: int, seconds: float, source: str = "", host: str = "127.0.0.1") -> bool:
    """Whether a connection to `port` is made within `seconds` (a dropped SYN is sent
    again only after a second), from `source` if given."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as c:
        if source:
            c.bind((source, 0))
        c.setblocking(False)
        assert c.connect_ex((host, port)) in (0, errno.EINPROGRESS)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                try:
                    c.getpeername()
                    return True
                except OSError:
                    pass
            time.sleep(0.01)
        return False


def test_the_filter_drops_syns_and_spares_connections_open() -> None:
    with _listening() as server:
        port = server.getsockname()[1]
        open_before = socket.create_connection(("127.0.0.1", port))
        peer, _ = server.accept()
        attach(server.fileno(), 1.0)
        assert not _connects_within(port, 0.5), "every SYN dropped"
        open_before.sendall(b"still here")
        assert peer.recv(64) == b"still here", "a connection open before goes on"
        peer.sendall(b"and back")
        assert open_before.recv(64) == b"and back"
        attach(server.fileno(), 0.0)
        assert _connects_within(port, 5), "detached: connections come in again"
        attach(server.fileno(), 0.0)  # detaching twice is nothing
        open_before.close()
        peer.close()


def test_the_addresses_spared_connect_while_all_others_are_dropped() -> None:
    known = [IPv4Address("127.0.0.3"), IPv4Address("127.0.0.5")]
    with _listening() as server:
        port = server.getsockname()[1]
        attach(server.fileno(), 1.0, (tuple(known), ()))
        assert _connects_within(port, 5, source="127.0.0.5"), "spared"
        assert _connects_within(port, 5, source="127.0.0.3"), "spared"
        assert not _connects_within(port, 0.5, source="127.0.0.4"), "not spared"
        assert not _connects_within(port, 0.5, source="127.0.0.1"), "not spared"
        attach(server.fileno(), 1.0, ((), (IPv6Address("::1"),)))
        assert not _connects_within(port, 0.5, source="127.0.0.3"), "no longer spared"


def test_ipv6_addresses_are_spared_by_all_of_their_128_bits() -> None:
    with socket.socket(socket.AF_INET6) as server:
        try:
            server.bind(("::1", 0))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        server.listen(16)
        port = server.getsockname()[1]
        near = IPv6Address("::2")  # differs in the last word only
        far = IPv6Address("1::1")  # differs in the first word only
        attach(server.fileno(), 1.0, ((IPv4Address("127.0.0.1"),), (near, far)))
        assert not _connects_within(port, 0.5, host="::1"), "not spared"
        attach(server.fileno(), 1.0, ((), (near, IPv6Address("::1"), far)))
        assert _connects_within(port, 5, host="::1"), "spared"


def test_the_listening_sockets_are_found_by_port_and_nothing_is_left_open() -> None:
    with _listening() as a, _listening() as b, socket.socket() as not_listening:
        not_listening.bind(("127.0.0.1", 0))
        ports = {a.getsockname()[1], not_listening.getsockname()[1]}
        files = len(os.listdir("/proc/self/fd"))
        assert listening_fds(ports) == [a.fileno()]
        assert b.fileno() not in listening_fds(ports)
        assert len(os.listdir("/proc/self/fd")) == files, "every descriptor looked at closed"


def test_a_shedder_that_cannot_watch_says_so_and_the_node_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: with no /proc, the task died and nothing said so until the node stopped
    def no_proc(ports: object) -> list[int]:
        raise FileNotFoundError("/proc/self/fd")

    monkeypatch.setattr(connshed, "listening_fds", no_proc)
    asyncio.run(asyncio.wait_for(ConnectionShedder(ports=(1,), budget=0.1).run(), 10))
    assert "cannot watch gRPC core's threads" in caplog.text


def test_a_descriptor_no_longer_the_ports_gets_no_filter(caplog: pytest.LogCaptureFixture) -> None:
    with _listening() as server:
        fd = server.fileno()
        seen = {fd: connshed._identity(fd)}
    with _listening() as other:  # most likely given the same number
        shedder = ConnectionShedder(ports=(1,), budget=0.1)
        mine = {other.fileno(): seen.get(other.fileno(), (0, 0))}
        assert not shedder._set(mine, 0.5, 1.0)
        assert shedder.drop == 0.0
        assert "no longer the gRPC port's socket" in caplog.text
        assert _connects_within(other.getsockname()[1], 0.5), "nothing attached to it"


def test_pool_cpu_counts_threads_that_come_and_go(tmp_path: Path) -> None:
    def thread(tid: int, name: str, ticks: int) -> None:
        d = tmp_path / str(tid)
        d.mkdir(exist_ok=True)
        fields = ["S"] + ["0"] * 10 + [str(ticks), "0"] + ["0"] * 30
        (d / "stat").write_text(f"{tid} ({name}) {' '.join(fields)}\n")

    tck = os.sysconf("SC_CLK_TCK")
    thread(1, "python", 500)
    thread(2, "event_engine", 100)
    cpu = PoolCpu(str(tmp_path))
    assert cpu.sample() == pytest.approx(100 / tck), "what the pool's threads used so far"
    thread(2, "event_engine", 150)
    thread(3, "event_engine", 20)  # started since
    assert cpu.sample() == pytest.approx(170 / tck)
    (tmp_path / "2" / "stat").unlink()  # ended: what it used stays counted
    (tmp_path / "2").rmdir()
    thread(3, "event_engine", 30)
    assert cpu.sample() == pytest.approx(180 / tck)


@dataclass
class Flooded:
    proc: NodeProc
    pki: Pki
    output: list[str]
    http: int

    def client(self, **kw: Any) -> SyncClient:
        kw.setdefault("token", self.pki.tokens["submitter"])
        return SyncClient(self.proc.address, ca=self.pki.dir / "ca.pem", **kw)

    def shedding(self) -> bool:
        return any("of new connections" in line for line in self.output)

    def gauge(self, name: str) -> float:
        """The node's metric `name`, read from /metrics as a reader."""
        trust = ssl.create_default_context(cafile=str(self.pki.dir / "ca.pem"))
        text = httpx.get(
            f"https://127.0.0.1:{self.http}/metrics",
            headers={"Authorization": f"Bearer {self.pki.tokens['reader']}"},
            verify=trust,
            timeout=30,
        ).text
        line = next(x for x in text.splitlines() if x.startswith(name))
        return float(line.split()[-1])

    def dropped_ratio(self) -> float:
        return self.gauge(RATIO)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Flooded]:
    pki = make_pki(tmp_path)
    # a small budget: the flood below is over it on a slow or busy machine too
    env = {"APOLLO11_GRPC_THREADS_CPU_BUDGET": "0.05", "GRPC_VERBOSITY": ""}
    http = free_port()
    proc = start_secure_node(tmp_path, pki, "--http", f"127.0.0.1:{http}", env=env)
    output: list[str] = []
    assert proc.proc.stdout is not None
    out = proc.proc.stdout
    # read the node's output as it comes: a full pipe would block the node
    threading.Thread(target=lambda: output.extend(out), daemon=True).start()
    yield Flooded(proc, pki, output, http)
    assert proc.stop() == 0


def test_a_churn_on_the_client_port_is_shed_and_a_client_connected_goes_on(
    node: Flooded,
) -> None:
    sources = [f"127.0.6.{i}" for i in range(1, 21)]

    async def churn_until_shed() -> None:
        async def churn() -> None:
            while True:
                await asyncio.gather(
                    *(
                        flood.churn(
                            "127.0.0.1", node.proc.port, 20, "churn", source=s, concurrency=2
                        )
                        for s in sources
                    )
                )

        # stopped as soon as shedding is logged: connects then wait on dropped SYNs
        flooding = asyncio.create_task(churn())
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not node.shedding():
            await asyncio.sleep(0.2)
        flooding.cancel()
        await asyncio.gather(flooding, return_exceptions=True)

    with node.client() as c:
        c.submit("etl")  # its connection is open before the flood
        asyncio.run(churn_until_shed())
        assert node.shedding(), "".join(node.output[-20:])
        assert c.submit("etl"), "a connection open before the flood goes on"
    # the flood is over: the pool goes quiet, and dropping eases off to nothing
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and node.dropped_ratio() > 0:
        time.sleep(0.5)
    assert node.dropped_ratio() == 0
    with node.client(retries=0) as fresh:
        fresh.status()


def _nice(pid: int, tid: int) -> int:
    stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[16])


def _pool_nices(pid: int) -> list[int]:
    """The nice value of each of gRPC core's pool threads in process `pid`."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            if Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() == "event_engine":
                out.append(_nice(pid, int(tid)))
        except OSError:  # ended meanwhile
            continue
    return out


def test_lower_sets_a_thread_below_the_process_and_not_twice() -> None:
    done = threading.Event()
    started = threading.Event()
    tids: list[int] = []

    def run() -> None:
        tids.append(threading.get_native_id())
        started.set()
        done.wait()

    t = threading.Thread(target=run)
    t.start()
    try:
        started.wait()
        mine = os.getpriority(os.PRIO_PROCESS, os.getpid())
        connshed.lower(tids, 5)
        connshed.lower(tids, 5)  # a thread seen again is not lowered further
        assert _nice(os.getpid(), tids[0]) == min(19, mine + 5)
        assert os.getpriority(os.PRIO_PROCESS, os.getpid()) == mine, "the node's own unchanged"
    finally:
        done.set()
        t.join()


def test_grpc_cores_pool_runs_below_the_nodes_own_threads(node: Flooded) -> None:
    """Before: the pool's threads (each flood handshake's CPU) ran at the node's own
    nice, and took a core from the loop that serves the calls as often as it did."""
    pid = node.proc.proc.pid
    main = _nice(pid, pid)
    with node.client() as c:
        c.submit("etl")  # the pool served it: its threads are there
    want = min(19, main + connshed.POOL_NICE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        nices = _pool_nices(pid)
        if nices and all(n == want for n in nices):
            break
        time.sleep(0.2)
    assert nices and all(n == want for n in nices), f"pool threads at {nices}, node at {main}"
    assert _nice(pid, pid) == main, "the node's own threads unchanged"


def _known_sources(node: Flooded) -> float:
    return node.gauge("apollo11_grpc_known_sources")


def _gauge_becomes(read: Any, want: float) -> float:
    deadline = time.monotonic() + 30
    while (got := read()) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    return float(got)


def test_an_address_that_proved_itself_connects_while_strangers_are_shed(
    node: Flooded,
) -> None:
    """Before: a worker or client reconnecting during a flood waited out dropped SYNs
    like the flood did (a share of up to DROP_MAX of each try)."""
    assert _gauge_becomes(lambda: _known_sources(node), 0) == 0
    with (
        node.client(token="not-a-token", retries=0) as refused,
        pytest.raises(ApiError, match="not valid"),
    ):
        refused.submit("etl")
    time.sleep(1.5)  # three of the shedder's ticks
    assert _known_sources(node) == 0, "a refused caller is not known"
    with node.client() as c:
        c.submit("etl")  # from 127.0.0.1, with a credential: known from now on
    assert _gauge_becomes(lambda: _known_sources(node), 1) == 1

    # open loop: the flood keeps its rate while its SYNs are dropped, and the pool
    # stays over its budget throughout (a closed loop slows down, and dropping eases)
    async def flood_for(seconds: float) -> None:
        sources = [f"127.0.7.{i}" for i in range(1, 21)]
        port = node.proc.port
        await asyncio.gather(
            *(
                flood.churn_open("127.0.0.1", port, "churn", source=s, rate=50, seconds=seconds)
                for s in sources
            )
        )

    loop = asyncio.new_event_loop()
    task = loop.create_task(flood_for(60))

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(task)

    flooding = threading.Thread(target=run)
    flooding.start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and node.dropped_ratio() < 0.5:
            time.sleep(0.2)
        assert node.dropped_ratio() >= 0.5, "".join(node.output[-20:])
        # each try's first SYN must pass: at a drop of 0.5, ten in a row by chance once
        # in a thousand
        made = [_connects_within(node.proc.port, 0.9, source="127.0.0.1") for _ in range(10)]
        assert node.dropped_ratio() >= 0.5, "still shedding"
        assert made == [True] * 10
    finally:
        loop.call_soon_threadsafe(task.cancel)
        flooding.join()
        loop.close()


def test_the_spared_addresses_fit_the_filters_budget_latest_first() -> None:
    v4 = [IPv4Address(f"10.0.{i // 250}.{i % 250}") for i in range(600)]
    v6 = [IPv6Address(f"2001:db8::{i:x}") for i in range(300)]
    kept4, kept6 = connshed.fit(v4, v6)
    assert set(kept4) == set(v4[:511]), "the first (the latest seen) of each list"
    assert kept6 == (), "no room left"
    kept4, kept6 = connshed.fit(v4[:10], v6)
    assert len(kept4) == 10 and set(kept6) == set(v6[: (1023 - 20) // 9])
    assert len(connshed.syn_filter(0.9, kept4, kept6)) < 4096 - 16
    assert list(kept6) == sorted(kept6), "sorted: the same addresses, the same filter"


def test_a_filter_refused_with_the_known_addresses_is_attached_without_them(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Before, any refused filter (the socket's option memory, with many addresses)
    ended shedding for the node's life."""
    real = connshed.attach

    def attach(fd: int, drop: float, spared: connshed.Spared = connshed.NONE_SPARED) -> None:
        if spared != connshed.NONE_SPARED:
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        real(fd, drop, spared)

    monkeypatch.setattr(connshed, "attach", attach)
    with _listening() as server:
        fd = server.fileno()
        port = server.getsockname()[1]
        shedder = ConnectionShedder(ports=(port,), budget=0.1)
        spared = ((IPv4Address("127.0.0.3"),), ())
        assert shedder._set({fd: connshed._identity(fd)}, 1.0, 2.0, spared)
        assert "from now on they are shed as any other" in caplog.text
        assert shedder.drop == 1.0 and not shedder.can_spare
        assert not _connects_within(port, 0.5, source="127.0.0.3"), "shed, not spared"
        assert shedder._set({fd: connshed._identity(fd)}, 0.0, 0.0)
        assert _connects_within(port, 5), "detached"


async def test_a_node_without_authentication_knows_nobody(tmp_path: Path) -> None:
    """Nobody can prove anything to it: the shedder is given no known addresses, and
    keeps the lower ceiling for everyone (before: a 95 % ceiling for all after two
    minutes)."""
    node = Node(NodeSettings(node_id="n1", data_dir=tmp_path / "d", listen="127.0.0.1:0"))
    await node.start()
    try:
        assert node.api is not None and node.api.known is None
        node.welcome_clients()  # a takeover: nothing to welcome with
    finally:
        await node.stop()
