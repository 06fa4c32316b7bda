"""The HTTP port: /metrics, /healthz and the pages (FastAPI), served by uvicorn.

uvicorn runs on a thread of its own, with its own event loop: the accepts, the
TLS handshakes (~0.5 ms of CPU each, which Python's ssl does without the GIL) and
the HTTP parsing of a flood on this port no longer delay the gRPC calls the node's
loop serves (issue 28: 22 % of the node's samples were TLS handshakes, and a
client's submissions fell to x0.13-0.60 beside a flood). The app itself still runs
on the node's loop (bridge.py): its routes read the node's state between the
loop's own changes, as before. uvicorn's signal handling is turned off, because
SIGTERM belongs to the node (it drains). With --tls-cert/--tls-key it serves HTTPS
with the same certificate as the gRPC port.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from apollo11.scheduler.threadnice import lower_this_thread
from apollo11.scheduler.web import scrape
from apollo11.scheduler.web.acceptor import Acceptor
from apollo11.scheduler.web.bridge import on_loop
from apollo11.scheduler.web.guard import Gate, PageRefused, allowed_hosts
from apollo11.scheduler.web.listener import (
    ConnectionLimits,
    Connections,
    GuardedHttp,
    Ticket,
    accept_ceiling,
)
from apollo11.scheduler.web.pages import add_pages

if TYPE_CHECKING:
    from apollo11.scheduler.nodeview import NodeView

# On every response: no page of ours in another site's frame (clickjacking an
# action's confirmation), no content-type guessing, no task URL in a Referer.
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


# The kernel's queue of connections not yet accepted (uvicorn's default is 2048):
# what waits while the accept loop pauses (web/acceptor.py), each a descriptor once
# taken; a flood beyond it is dropped by the kernel.
BACKLOG = 256
KEEP_ALIVE_S = 5
# What uvicorn has, once told to exit, to finish the requests it serves; then what
# is left (connections still in their TLS handshake) is cut.
STOP_S = 5.0


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, connections: Connections) -> None:
        super().__init__(config)
        self.connections = connections

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the node handles SIGTERM/SIGINT itself

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's, but new connections come in through our accept loop, which
        refuses them before asyncio builds anything (web/acceptor.py); a bind error
        is raised, not an exit."""
        await self.lifespan.startup()
        config = self.config

        def protocol(ticket: Ticket) -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                ticket=ticket,
                config=config,
                server_state=self.server_state,
                app_state=self.lifespan.state,
            )

        acceptor = await Acceptor.listen(
            config.host,
            config.port,
            backlog=config.backlog,
            conns=self.connections,
            protocol=protocol,
        )
        self.servers = [acceptor]  # type: ignore[list-item]  # close() and wait_closed()
        self.started = True


def make_app(node: NodeView) -> FastAPI:
    app = FastAPI(title="Apollo-11", docs_url=None, redoc_url=None, openapi_url=None)
    s = node.settings
    gate = Gate(
        node.principals,
        node_id=s.node_id,
        tls=s.tls_cert is not None,
        metrics_open=s.metrics_open,
        hosts=allowed_hosts(
            node_id=s.node_id, http=s.http, advertise=s.advertise, extra=s.http_allowed_hosts
        ),
    )

    # Before any route: a Host this node does not know is DNS rebinding (or a
    # misdirected request). /healthz stays open to probes by any name; it tells
    # only the node id and role.
    @app.middleware("http")
    async def guard_host(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        try:
            if request.url.path != "/healthz":
                gate.check_host(request)
        except PageRefused as e:
            response: Response = PlainTextResponse(e.message + "\n", status_code=e.status)
        else:
            response = await call_next(request)
        response.headers.update(SECURITY_HEADERS)
        return response

    # Every route is async: it runs on the node's event loop, between the loop's own
    # changes to the state. A plain `def` would run in a thread pool and iterate the
    # state while the loop changes it. So each route must stay cheap.
    @app.get("/metrics")
    async def prometheus_metrics(request: Request) -> Response:
        try:
            gate.scraper(request)
        except PageRefused as e:
            headers = {"WWW-Authenticate": 'Bearer realm="apollo11"'} if e.status == 401 else None
            return PlainTextResponse(e.message + "\n", status_code=e.status, headers=headers)
        scrape.refresh(node)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    # Open: container probes need it, and it tells only the node id and its role.
    @app.get("/healthz")
    async def healthz() -> dict[str, object]:
        return {"node_id": node.settings.node_id, "role": node.role}

    add_pages(app, node, gate)
    return app


class HttpServer:
    """The HTTP port, served from a thread of its own (`apollo11-http`); `start` and
    `stop` are called from the node's loop, on which the app runs."""

    def __init__(self, node: NodeView, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        self.app = make_app(node)
        s = node.settings
        self.scheme = "https" if s.tls_cert is not None else "http"
        self.connections = Connections(
            ConnectionLimits(
                total=s.http_max_connections,
                per_source=s.http_max_connections_per_source,
                rate_in_all=s.http_new_connections_per_s,
                burst_in_all=max(1, round(s.http_new_connections_per_s)),
                accepts_per_s=accept_ceiling(s.http_new_connections_per_s),
            )
        )
        self._host = host or "0.0.0.0"
        self._port = int(port)
        self._tls = None if s.tls_cert is None else _tls_context(s.tls_cert, s.tls_key)
        self.server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the thread's
        self._exit: asyncio.Event | None = None  # the thread's: stop was asked
        self._ended: concurrent.futures.Future[None] | None = None  # the thread's end

    async def start(self) -> int:
        """The port it listens on, once it does; a bind error is raised here."""
        self.server = _Server(
            uvicorn.Config(
                on_loop(self.app, asyncio.get_running_loop()),
                host=self._host,
                port=self._port,
                log_level="warning",
                lifespan="off",
                access_log=False,
                # Plain TCP for uvicorn: the connection's door is the Acceptor's
                # (web/acceptor.py: how many, how fast) and its TLS GuardedHttp's
                # (web/listener.py: how long without a request, and what a cut
                # handshake leaves behind).
                http=GuardedHttp.bind(self.connections, self._tls),
                backlog=BACKLOG,
                timeout_keep_alive=KEEP_ALIVE_S,
            ),
            self.connections,
        )
        ready: concurrent.futures.Future[int] = concurrent.futures.Future()
        # what the node's loop cannot hand to anyone, the thread's logs alike
        errors = asyncio.get_running_loop().get_exception_handler()
        serve = self._serve(self.server, ready, errors)
        ended = self._ended = concurrent.futures.Future()

        def run() -> None:
            try:
                lower_this_thread(HTTP_NICE)
                asyncio.run(serve)
            finally:
                ended.set_result(None)

        self._thread = threading.Thread(target=run, name="apollo11-http")
        # daemon: a server that would not stop must not keep the process alive
        self._thread.daemon = True
        self._thread.start()
        try:
            return await asyncio.wrap_future(ready)
        except BaseException:
            await self.stop()
            raise

    async def _serve(
        self,
        server: _Server,
        ready: concurrent.futures.Future[int],
        errors: Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object] | None,
    ) -> None:
        """The thread's loop: uvicorn until stop is asked, then what is left cut."""
        self._loop = asyncio.get_running_loop()
        self._loop.set_exception_handler(errors)
        self._exit = asyncio.Event()
        serving = asyncio.create_task(server.serve(), name="apollo11-http-serve")
        try:
            while not server.started:
                if serving.done():
                    serving.result()  # raises the bind error
                    raise OSError("the HTTP server stopped while starting")
                await asyncio.sleep(0.01)
        except BaseException as e:
            ready.set_exception(e)
            return
        ready.set_result(int(server.servers[0].sockets[0].getsockname()[1]))
        exit_asked = asyncio.create_task(self._exit.wait())
        await asyncio.wait((serving, exit_asked), return_when=asyncio.FIRST_COMPLETED)
        exit_asked.cancel()
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, STOP_S)
        # uvicorn closed what speaks HTTP; what is still in its handshake is ours.
        self.connections.close_all()
        await asyncio.sleep(0)  # the aborted transports' connection_lost

    async def stop(self) -> None:
        """Stops serving and waits for the thread: the port is closed on return."""
        if self._loop is not None and self._exit is not None:
            with contextlib.suppress(RuntimeError):  # its loop already closed
                self._loop.call_soon_threadsafe(self._exit.set)
        await self._join()

    async def _join(self) -> None:
        # Awaited, not joined at once: the requests uvicorn finishes meanwhile need
        # this loop to answer them (bridge.py).
        if self._ended is None or self._thread is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(self._ended), STOP_S * 2)
        self._thread.join(0.1)


# How much lower than the node's own threads this thread runs (its nice value). A
# flood of handshakes on this port costs CPU whichever thread does it (~0.5 ms each);
# on a machine with no idle core that CPU came out of the node's share, and the
# client calls its loop serves waited for a core (issue 28: x0.44-0.76 beside an
# HTTPS churn). 10 lower, the kernel gives this thread about a tenth of what a thread
# of the node gets when both want a core, and all it wants when the node does not:
# pages and scrapes on an idle node are as fast as before; a flood slows its own
# handshakes first.
HTTP_NICE = 10


def _tls_context(cert: Path, key: Path | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), None if key is None else str(key))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx
