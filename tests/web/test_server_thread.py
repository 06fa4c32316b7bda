"""The HTTP port is served from a thread of its own (issue 28): its TLS handshakes
go on while the node's event loop is busy, its routes still run on the node's loop,
and stop leaves no thread and no open port. In process, with real TLS."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest

from apollo11.scheduler.security import Principals
from apollo11.scheduler.web import HttpServer
from apollo11.scheduler.web.server import HTTP_NICE
from tests.secure import Pki, make_pki

WAIT_S = 30.0  # generous: a loaded 2-core machine


class _Node:
    """What the pages read of a node; `role` notes the thread each read ran on."""

    def __init__(self, pki: Pki) -> None:
        self.settings = SimpleNamespace(
            node_id="n1",
            tls_cert=pki.dir / "n1.pem",
            tls_key=pki.dir / "n1-key.pem",
            metrics_open=False,
            http="127.0.0.1:0",
            advertise=None,
            http_allowed_hosts=[],
            http_max_connections=128,
            http_max_connections_per_source=32,
            http_new_connections_per_s=100.0,
        )
        self.principals = Principals(pki.tokens_file)
        self.read_on: list[int] = []

    @property
    def role(self) -> str:
        self.read_on.append(threading.get_ident())
        return "primary"


Served = tuple[HttpServer, int, _Node, Pki]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    pki = make_pki(tmp_path, nodes=("n1",))
    node = _Node(pki)
    http = HttpServer(node, "127.0.0.1:0")  # type: ignore[arg-type]
    port = await http.start()
    try:
        yield http, port, node, pki
    finally:
        await http.stop()


def _handshake(port: int, pki: Pki) -> str:
    """A TLS handshake with the port: the protocol it agreed."""
    ctx = ssl.create_default_context(cafile=str(pki.dir / "ca.pem"))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        return str(tls.version())


def _http_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "apollo11-http"]


async def test_tls_handshakes_go_on_while_the_nodes_loop_is_busy(served: Served) -> None:
    _, port, _, pki = served
    done = threading.Event()
    agreed: list[str] = []

    def client() -> None:
        agreed.append(_handshake(port, pki))
        done.set()

    threading.Thread(target=client, daemon=True).start()
    # the node's loop held (as by a long gRPC call): on the loop, the handshake
    # could not begin until it was let go
    held = done.wait(WAIT_S)
    assert held, "no TLS handshake while the node's loop was busy"
    assert agreed and agreed[0].startswith("TLS")


async def test_the_routes_run_on_the_nodes_loop(served: Served) -> None:
    _, port, node, pki = served
    trust = ssl.create_default_context(cafile=str(pki.dir / "ca.pem"))

    def get() -> httpx.Response:
        return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=trust, timeout=WAIT_S)

    r = await asyncio.to_thread(get)
    assert r.status_code == 200 and r.json() == {"node_id": "n1", "role": "primary"}
    assert node.read_on == [threading.get_ident()], "the node's state read off its loop"


async def test_stop_leaves_no_thread_and_closes_the_port(tmp_path: Path) -> None:
    pki = make_pki(tmp_path, nodes=("n1",))
    http = HttpServer(_Node(pki), "127.0.0.1:0")  # type: ignore[arg-type]
    port = await http.start()
    assert _http_threads()
    # a connection still in its handshake when the node stops is cut, not waited for
    idle = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    await http.stop()
    assert _http_threads() == []
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=WAIT_S).close()
    idle.settimeout(WAIT_S)
    try:
        assert idle.recv(1) == b"", "the idle connection was closed"
    except ConnectionResetError:
        pass  # closed too
    finally:
        idle.close()


async def test_a_port_taken_is_an_error_from_start_and_leaves_no_thread(tmp_path: Path) -> None:
    pki = make_pki(tmp_path, nodes=("n1",))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        http = HttpServer(_Node(pki), f"127.0.0.1:{port}")  # type: ignore[arg-type]
        with pytest.raises(OSError) as e:
            await http.start()
        assert "address already in use" in str(e.value).lower()
    assert _http_threads() == []


def _nice(tid: int) -> int:
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[16])  # field 19: nice


async def test_the_http_thread_runs_below_the_nodes_threads(served: Served) -> None:
    """A flood's handshakes on this port take their CPU from this thread's share,
    not from the loop that serves the node's calls (issue 28)."""
    (http_thread,) = _http_threads()
    assert http_thread.native_id is not None
    mine = _nice(threading.get_native_id())
    assert _nice(http_thread.native_id) == min(19, mine + HTTP_NICE)
    assert HTTP_NICE >= 10
