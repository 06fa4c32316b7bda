"""An ASGI app run on another event loop than the server that calls it.

The HTTP port's server runs on a thread of its own with its own event loop
(server.py): its accepts, TLS handshakes and HTTP parsing no longer take the node's
event loop, where the gRPC calls are served. The pages and /metrics read the node's
state, which only the node's loop may touch between its own changes: so the app
itself still runs there, and its `receive` and `send` go back to the server's loop,
whose transports they write.

Cancelling either side cancels the other (asyncio.run_coroutine_threadsafe): a
client that goes away ends its page's work on the node's loop, and a node that
stops ends the server's wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, TypeVar

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

T = TypeVar("T")


async def _on(loop: asyncio.AbstractEventLoop, call: Callable[[], Awaitable[T]]) -> T:
    """`call()` awaited on `loop`, from a coroutine of another loop."""

    async def there() -> T:
        return await call()

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(there(), loop))


def on_loop(app: App, loop: asyncio.AbstractEventLoop) -> App:
    """`app`, each call run on `loop` (the node's), for a server on another loop."""

    async def bridged(scope: Scope, receive: Receive, send: Send) -> None:
        server = asyncio.get_running_loop()

        async def receive_here() -> Message:
            return await _on(server, receive)

        async def send_here(message: Message) -> None:
            await _on(server, lambda: send(message))

        await _on(loop, lambda: app(scope, receive_here, send_here))

    return bridged
