"""A fake primary: the Workers service on loopback, driven by the test.

Each stream the worker opens becomes a `Conn` the test awaits (`primary.next_conn()`):
it holds the Register, every later message in order, and sends what the test asks
(assignments, cancels, acks). `conn.drop()` ends the stream, as a lost primary
would; `refuse` makes the service answer every stream with an error status (a
standby naming the primary, a duplicate name, a bad token).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import orjson

from apollo11.scheduler.wire import ELECTION_METADATA, LEADER_METADATA
from apollo11.v1 import worker_pb2 as pb
from apollo11.v1 import worker_pb2_grpc as pbg

WAIT_S = 20.0  # generous: the machine is shared


def token(term: int, event_id: int) -> pb.AttemptToken:
    return pb.AttemptToken(term=term, event_id=event_id)


def key(t: pb.AttemptToken) -> tuple[int, int]:
    return (t.term, t.event_id)


def assignment(
    step: str,
    event_id: int,
    *,
    term: int = 3,
    task_id: str = "t1",
    attempt: int = 1,
    input: Any = None,
    results: Any = None,
    last_heartbeat: Any = None,
    timeout_s: float = 60.0,
    workflow: str = "wtest",
    version: int = 1,
) -> pb.Assignment:
    return pb.Assignment(
        token=token(term, event_id),
        task_id=task_id,
        step=step,
        attempt=attempt,
        workflow=workflow,
        version=version,
        input_json=b"" if input is None else orjson.dumps(input),
        results_json=b"" if results is None else orjson.dumps(results),
        timeout_s=timeout_s,
        last_heartbeat_json=b"" if last_heartbeat is None else orjson.dumps(last_heartbeat),
        node_id="n1",
    )


@dataclass(frozen=True)
class Refusal:
    code: grpc.StatusCode
    details: str
    leader: str | None = None
    election: bool = False  # a node that knows no primary says so, as a node does


@dataclass
class Conn:
    register: pb.Register
    context: grpc.aio.ServicerContext[Any, Any]
    messages: asyncio.Queue[pb.WorkerMessage] = field(default_factory=asyncio.Queue)
    dropped: asyncio.Event = field(default_factory=asyncio.Event)
    # results read from a Results message that the test has not asked for yet
    unclaimed: dict[tuple[int, int], pb.StepResult] = field(default_factory=dict)

    async def send(self, message: pb.DispatchMessage) -> None:
        await self.context.write(message)

    async def assign(self, *assignments: pb.Assignment) -> None:
        await self.send(pb.DispatchMessage(assign=pb.Assign(assignments=assignments)))

    async def cancel(self, t: pb.AttemptToken, reason: str = "test") -> None:
        await self.send(pb.DispatchMessage(cancel=pb.CancelAttempt(token=t, reason=reason)))

    async def ack(self, t: pb.AttemptToken, accepted: bool = True, reason: str = "") -> None:
        ack = pb.ResultAck(token=t, accepted=accepted, reason=reason)
        await self.send(pb.DispatchMessage(acks=pb.Acks(acks=[ack])))

    def drop(self) -> None:
        self.dropped.set()

    async def next(self, kind: str | None = None) -> pb.WorkerMessage:
        """The next message (of `kind`: "results", "heartbeat"), skipping others."""
        async with asyncio.timeout(WAIT_S):
            while True:
                m = await self.messages.get()
                if kind is None or m.WhichOneof("body") == kind:
                    return m

    async def result(self, t: pb.AttemptToken) -> pb.StepResult:
        """The next StepResult for token `t` (one Results message may carry several)."""
        async with asyncio.timeout(WAIT_S):
            while key(t) not in self.unclaimed:
                m = await self.next("results")
                for r in m.results.results:
                    self.unclaimed.setdefault(key(r.token), r)
            return self.unclaimed.pop(key(t))

    async def heartbeat_with(self, t: pb.AttemptToken) -> pb.RunningAttempt:
        """The next heartbeat that reports `t` running with details."""
        async with asyncio.timeout(WAIT_S):
            while True:
                m = await self.next("heartbeat")
                for r in m.heartbeat.running:
                    if key(r.token) == key(t) and r.heartbeat_json:
                        return r


class FakePrimary(pbg.WorkersServicer):
    def __init__(
        self,
        *,
        node_id: str = "n1",
        term: int = 3,
        interval_s: float = 0.2,
        pings: bool = False,
    ) -> None:
        self.node_id = node_id
        self.term = term
        self.interval_s = interval_s
        self.pings = pings  # says it does (Registered.pings); sends none itself
        # frozen: as a SIGSTOPped process, a new stream is never answered (counted)
        self.frozen = False
        self.frozen_streams = 0
        self.refuse: Refusal | None = None
        self.stale: Sequence[pb.AttemptToken] = ()
        self.refused = 0
        self.registered_as = ""  # Registered.name ("": as an older primary, none)
        self._conns: asyncio.Queue[Conn] = asyncio.Queue()
        self.address = ""

    async def next_conn(self) -> Conn:
        async with asyncio.timeout(WAIT_S):
            return await self._conns.get()

    async def Connect(
        self, request_iterator: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        if self.refuse is not None:
            self.refused += 1
            if self.refuse.leader:
                context.set_trailing_metadata(((LEADER_METADATA, self.refuse.leader),))
            elif self.refuse.election:
                context.set_trailing_metadata(((ELECTION_METADATA, "1"),))
            await context.abort(self.refuse.code, self.refuse.details)
        if self.frozen:
            self.frozen_streams += 1
            while await context.read() is not grpc.aio.EOF:  # never answered
                pass
            return
        first = await context.read()
        assert first.WhichOneof("body") == "register"
        conn = Conn(first.register, context)
        await context.write(
            pb.DispatchMessage(
                registered=pb.Registered(
                    node_id=self.node_id,
                    term=self.term,
                    heartbeat_interval_s=self.interval_s,
                    heartbeat_timeout_s=self.interval_s * 5,
                    stale=list(self.stale),
                    name=self.registered_as,
                    pings=self.pings,
                )
            )
        )
        await self._conns.put(conn)

        async def pump() -> None:
            while True:
                m = await context.read()
                if m is grpc.aio.EOF:
                    return
                await conn.messages.put(m)

        reader = asyncio.create_task(pump())
        dropped = asyncio.create_task(conn.dropped.wait())
        await asyncio.wait({reader, dropped}, return_when=asyncio.FIRST_COMPLETED)
        reader.cancel()
        dropped.cancel()
        if conn.dropped.is_set():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the fake primary dropped it")


@asynccontextmanager
async def serving(primary: FakePrimary) -> AsyncIterator[str]:
    server = grpc.aio.server()
    pbg.add_WorkersServicer_to_server(primary, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    primary.address = f"127.0.0.1:{port}"
    try:
        yield primary.address
    finally:
        await server.stop(0)
