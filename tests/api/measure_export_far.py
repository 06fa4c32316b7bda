"""`apollo11 export` from a node near by and from one far away (docs/benchmarks.md,
"Export"): the far one behind a TCP proxy that holds every chunk `delay_ms` each way
(no netem on this kernel), so that an export's calls in flight show:

    .venv/bin/python -m tests.api.measure_export_far [--delay-ms 5] [--tasks 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from pathlib import Path

from tests.api.measure_export import WORKFLOWS, _backlog, _export
from tests.nodes import start_node


async def _pump(r: asyncio.StreamReader, w: asyncio.StreamWriter, delay_s: float) -> None:
    """Forward what `r` reads to `w`, each chunk `delay_s` after it came, in order."""
    q: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def out() -> None:
        while True:
            at, data = await q.get()
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            if not data:
                w.close()
                return
            w.write(data)
            await w.drain()

    sending = asyncio.create_task(out())
    while data := await r.read(65536):
        q.put_nowait((time.monotonic() + delay_s, data))
    q.put_nowait((time.monotonic() + delay_s, b""))
    await sending


def _proxy(port: int, delay_s: float, ready: list[int]) -> None:
    async def serve() -> None:
        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            tr, tw = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.gather(
                _pump(r, tw, delay_s), _pump(tr, w, delay_s), return_exceptions=True
            )

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ready.append(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(serve())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay-ms", type=float, default=5, help="each way")
    ap.add_argument("--tasks", type=int, default=1000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        node = start_node(root / "n1", "--workflows", WORKFLOWS)
        try:
            asyncio.run(_backlog(node.address, a.tasks))
            print("near:", _export(node.address, root / "near.jsonl"))
            port = int(node.address.rsplit(":", 1)[1])
            ready: list[int] = []
            args = (port, a.delay_ms / 1000, ready)
            threading.Thread(target=_proxy, args=args, daemon=True).start()
            while not ready:
                time.sleep(0.05)
            far = _export(f"127.0.0.1:{ready[0]}", root / "far.jsonl")
            print(f"far ({a.delay_ms:g} ms each way): {far}")
        finally:
            node.stop()


if __name__ == "__main__":
    main()
