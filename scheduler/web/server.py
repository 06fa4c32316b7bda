"""FastAPI on the node's own event loop: /metrics, /healthz and the pages.

uvicorn runs as a task of the node's loop (no thread, no process); its signal
handling is turned off, because SIGTERM belongs to the node (it drains). With
--tls-cert/--tls-key it serves HTTPS with the same certificate as the gRPC port.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from apollo11.scheduler.web import scrape
from apollo11.scheduler.web.acceptor import Acceptor
from apollo11.scheduler.web.guard import Gate, PageRefused, allowed_hosts
from apollo11.scheduler.web.listener import ConnectionLimits, Connections, GuardedHttp, Ticket
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
            )
        )
        tls = None if s.tls_cert is None else _tls_context(s.tls_cert, s.tls_key)
        self.server = _Server(
            uvicorn.Config(
                self.app,
                host=host or "0.0.0.0",
                port=int(port),
                log_level="warning",
                lifespan="off",
                access_log=False,
                # Plain TCP for uvicorn: the connection's door is the Acceptor's
                # (web/acceptor.py: how many, how fast) and its TLS GuardedHttp's
                # (web/listener.py: how long without a request, and what a cut
                # handshake leaves behind).
                http=GuardedHttp.bind(self.connections, tls),
                backlog=BACKLOG,
                timeout_keep_alive=KEEP_ALIVE_S,
            ),
            self.connections,
        )
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> int:
        self._task = asyncio.create_task(self.server.serve(), name="apollo11-http")
        while not self.server.started:
            if self._task.done():
                self._task.result()  # raises the bind error
                raise OSError("the HTTP server stopped while starting")
            await asyncio.sleep(0.01)
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        self.server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 5)
        # uvicorn closed what speaks HTTP; what is still in its handshake is ours.
        self.connections.close_all()


def _tls_context(cert: Path, key: Path | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert), None if key is None else str(key))
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx
