"""The environment's workers: steps run remotely, on the real worker code, in process.

`WorkflowEnvironment(workers=N)` makes each node's engine a `RemoteExecutor` (as
`--execution remote` does) and serves its Workers stream on a loopback port; N
`Worker`s (scheduler/worker/, the code `apollo11 worker` runs) connect to it over
gRPC, register, heartbeat and run the steps they are assigned. The port is the
cluster's one address: after a failover it serves the new primary's dispatch, and
the workers reconnect to it as they would follow a new primary.

`kill` is a worker process's death, not its drain: its stream is cut (what the
kernel does to a dead process's socket), its attempts are dropped unreported, and
the primary fails them as lost at once (`dispatch/remote.py`, `_gone`); the engine
retries them by their declarations. What cannot die in process: a step running in a
thread goes on to its end, and its result is thrown away (a coroutine is cancelled).

Real time, not the virtual clock: the stream's heartbeats and the silent-worker
cut-off (`HEARTBEAT_TIMEOUT_S`) are the dispatch's own, on the monotonic clock. A
killed worker does not wait for it (its stream breaks); an attempt adopted after a
`fail_over(at_rest=False)` whose worker is gone does: up to that long, in real time.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc

from apollo11.scheduler.dispatch import RemoteExecutor, WorkersService
from apollo11.scheduler.engine import AttemptToken
from apollo11.scheduler.errors import ApolloError, NoLeaderError, NotFoundError
from apollo11.scheduler.state import StepStatus, Store
from apollo11.scheduler.worker import Worker
from apollo11.scheduler.workflow import Registry

HEARTBEAT_INTERVAL_S = 0.2
# A silent worker is cut off after this (real seconds); a new primary waits as long
# for a worker to report an attempt it adopts.
HEARTBEAT_TIMEOUT_S = 1.0


class _Front:
    """The Workers service on the environment's one port: the leading node's, or
    UNAVAILABLE between two (a worker then tries again, as it does in a cluster)."""

    def __init__(self) -> None:
        self.service: WorkersService | None = None

    async def Connect(self, request_iterator: object, context: grpc.aio.ServicerContext) -> None:
        service = self.service
        if service is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "no primary yet: try again")
            return
        await service.Connect(request_iterator, context)


class Workers:
    """Worker processes (in process) and the port they reach the primary on."""

    def __init__(self, registry: Registry, *, count: int, slots: int) -> None:
        self.registry = registry
        self.count = count
        self.slots = slots
        self.dispatch: RemoteExecutor | None = None
        self._front = _Front()
        self._server: grpc.aio.Server | None = None
        self._address = ""
        self._running: dict[str, tuple[Worker, asyncio.Task[None]]] = {}
        self._made = 0

    @property
    def names(self) -> list[str]:
        """The live workers, in the order they started."""
        return list(self._running)

    async def open(self) -> None:
        from apollo11.v1 import worker_pb2_grpc

        server = grpc.aio.server()
        worker_pb2_grpc.add_WorkersServicer_to_server(self._front, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        self._server, self._address = server, f"127.0.0.1:{port}"

    async def close(self) -> None:
        for name in list(self._running):
            await self.kill(name)
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace=None)

    # ------------------------------------------------------------- the primary

    def executor(self, node_id: str) -> RemoteExecutor:
        """A leading node's dispatch (a new one per node, as each node has its own)."""
        self.dispatch = RemoteExecutor(
            node_id=node_id,
            heartbeat_interval_s=HEARTBEAT_INTERVAL_S,
            heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S,
        )
        return self.dispatch

    async def lead(self, term: int, store: Store, node_id: str, within_s: float) -> None:
        """The node leads: take workers, and wait for the live ones to be back."""
        dispatch = self.dispatch
        assert dispatch is not None
        dispatch.start(term, lambda *a: _is_current(store, *a))

        def not_leader() -> ApolloError:
            return NoLeaderError(f"{node_id} stopped being the primary: try again")

        self._front.service = WorkersService(dispatch, not_leader)
        await self._connected(within_s)

    async def step_down(self, why: str) -> None:
        """The node stops leading: its streams close; the workers look for the next."""
        self._front.service = None
        dispatch, self.dispatch = self.dispatch, None
        if dispatch is not None:
            await dispatch.stop(why)

    # ------------------------------------------------------------- the workers

    async def start(self, name: str | None, within_s: float) -> str:
        if name is None:
            self._made += 1
            name = f"w{self._made}"
            while name in self._running:
                self._made += 1
                name = f"w{self._made}"
        elif name in self._running:
            raise ValueError(f"worker {name!r} runs already (running: {', '.join(self._running)})")
        worker = Worker(self._address, self.registry, name=name, slots=self.slots)
        run = asyncio.create_task(worker.run(), name=f"apollo11-env-worker {name}")
        self._running[name] = (worker, run)
        await self._connected(within_s)
        return name

    async def kill(self, name: str | None = None) -> tuple[str, int]:
        """Kill a worker (`name`, or the one running the most attempts): its stream is
        cut, nothing more is sent. Returns its name and how many attempts it ran."""
        if not self._running:
            raise NotFoundError("no worker runs: start one with `await env.start_worker()`")
        if name is None:
            name = max(self._running, key=lambda n: len(self._running[n][0].running))
        elif name not in self._running:
            raise NotFoundError(f"no worker {name!r} runs (running: {', '.join(self._running)})")
        worker, run = self._running.pop(name)
        lost = len(worker.running)
        run.cancel()  # the stream is cancelled under the reader and writer: no goodbye
        with contextlib.suppress(asyncio.CancelledError):
            await run
        return name, lost

    async def _connected(self, within_s: float) -> None:
        """Until every live worker is registered with the leading node's dispatch."""
        dispatch = self.dispatch
        if dispatch is None:
            return
        async with asyncio.timeout(within_s):
            while any(n not in dispatch.workers for n in self._running):
                for name, (_, run) in self._running.items():
                    if run.done():  # refused, or broken: say why, not a timeout
                        raise RuntimeError(f"worker {name} ended: {run.exception()!r}")
                await asyncio.sleep(0.01)


def _is_current(store: Store, task_id: str, step: str, token: AttemptToken, worker: str) -> bool:
    """Is `token` the attempt the log says `step` runs, on `worker`? (As the node's
    node/leading.py asks: a worker's result counts only then.)"""
    task = store.state.tasks.get(task_id)
    found: Any = None if task is None else task.steps.get(step)
    return (
        found is not None
        and found.status is StepStatus.STARTED
        and found.started_event == token.event_id
        and found.started_term == token.term
        and found.worker == worker
    )
