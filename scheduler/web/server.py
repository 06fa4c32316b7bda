"""FastAPI on the node's own event loop: /metrics, /healthz.

uvicorn runs as a task of the node's loop (no thread, no process); its signal
handling is turned off, because SIGTERM belongs to the node (it drains).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import uvicorn
from fastapi import FastAPI, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scheduler import metrics
from scheduler.web.pages import add_pages

if TYPE_CHECKING:
    from scheduler.node import Node


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the node handles SIGTERM/SIGINT itself


def make_app(node: Node) -> FastAPI:
    app = FastAPI(title="Apollo-11", docs_url=None, redoc_url=None, openapi_url=None)

    # Every route is async: it runs on the node's event loop, between the loop's own
    # changes to the state. A plain `def` would run in a thread pool and iterate the
    # state while the loop changes it. So each route must stay cheap.
    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        metrics.refresh(node)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, object]:
        return {"node_id": node.settings.node_id, "role": node.role}

    add_pages(app, node)
    return app


class HttpServer:
    def __init__(self, node: Node, listen: str) -> None:
        host, _, port = listen.rpartition(":")
        self.app = make_app(node)
        self.server = _Server(
            uvicorn.Config(
                self.app,
                host=host or "0.0.0.0",
                port=int(port),
                log_level="warning",
                lifespan="off",
                access_log=False,
            )
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
