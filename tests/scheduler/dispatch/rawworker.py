"""A worker speaking the protocol by hand, for tests of the primary's half."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import grpc
import orjson

from apollo11.v1 import worker_pb2 as wpb
from apollo11.v1 import worker_pb2_grpc as wpbg


class RawWorker:
    def __init__(
        self, address: str, name: str = "w1", slots: int = 4, *, token: str | None = None
    ) -> None:
        self.address = address
        self.name = name
        self.slots = slots
        self.metadata = None if token is None else (("authorization", f"Bearer {token}"),)
        self.default_name = False  # `name` is its default (HOST-PID): Register.default_name
        self.instance = uuid.uuid4().hex
        self.channel: grpc.aio.Channel | None = None
        self.call: Any = None
        self.inbox: asyncio.Queue[wpb.DispatchMessage] = asyncio.Queue()
        self._kept: list[wpb.DispatchMessage] = []  # read by `next`, of another kind
        self._reader: asyncio.Task[None] | None = None
        self._beater: asyncio.Task[None] | None = None
        # grpc.aio takes one write at a time on a call: a second one while the first
        # is in flight fails the whole call (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS), and
        # the heartbeat task writes beside the test's own results
        self._writing = asyncio.Lock()
        self.beating = True  # heartbeats every 0.2 s while True (a silent worker: False)

    async def connect(
        self,
        workflows: tuple[tuple[str, int], ...] = (("pair", 1),),
        running: tuple[wpb.RunningAttempt, ...] = (),
    ) -> wpb.Registered:
        self.channel = grpc.aio.insecure_channel(self.address)
        self.call = wpbg.WorkersStub(self.channel).Connect(metadata=self.metadata)
        await self.call.write(
            wpb.WorkerMessage(
                register=wpb.Register(
                    name=self.name,
                    instance=self.instance,
                    slots=self.slots,
                    workflows=[wpb.WorkflowRef(name=n, version=v) for n, v in workflows],
                    running=list(running),
                    default_name=self.default_name,
                )
            )
        )
        first = await asyncio.wait_for(self.call.read(), 10)
        assert first.WhichOneof("body") == "registered", first
        self._reader = asyncio.create_task(self._read())
        self._beater = asyncio.create_task(self._beat())
        registered: wpb.Registered = first.registered
        return registered

    async def _read(self) -> None:
        while True:
            msg = await self.call.read()
            if msg is grpc.aio.EOF:
                return
            await self.inbox.put(msg)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            if self.beating:
                await self.heartbeat()

    async def next(self, kind: str, timeout: float = 10, *, pings: bool = False) -> Any:
        """The next message of `kind`. Messages of other kinds are kept for the calls
        that ask for them: the primary sends what it has queued in one go, an
        assignment before an ack queued earlier, and a loaded machine queues both
        before its sender wakes. The primary's pings (empty Acks) are dropped unless
        `pings`."""
        for i, msg in enumerate(self._kept):
            if msg.WhichOneof("body") == kind:
                del self._kept[i]
                return getattr(msg, kind)
        async with asyncio.timeout(timeout):
            while True:
                msg = await self.inbox.get()
                body = msg.WhichOneof("body")
                if body == "acks" and not msg.acks.acks and not pings:
                    continue
                if body == kind:
                    return getattr(msg, kind)
                self._kept.append(msg)

    async def result(self, a: wpb.Assignment, value: Any = None, **outcome: Any) -> None:
        r = wpb.StepResult(token=a.token, task_id=a.task_id, step=a.step, attempt=a.attempt)
        if "failure" in outcome:
            r.failure.CopyFrom(outcome["failure"])
        elif outcome.get("cancelled"):
            r.cancelled = True
        else:
            r.result_json = orjson.dumps(value)
        await self._write(wpb.WorkerMessage(results=wpb.Results(results=[r])))

    async def results(self, done: list[tuple[wpb.Assignment, Any]]) -> None:
        """Several results in one message, as a busy worker sends them."""
        rs = [
            wpb.StepResult(
                token=a.token,
                task_id=a.task_id,
                step=a.step,
                attempt=a.attempt,
                result_json=orjson.dumps(value),
            )
            for a, value in done
        ]
        await self._write(wpb.WorkerMessage(results=wpb.Results(results=rs)))

    async def packed(self, done: list[tuple[wpb.Assignment, Any]], *, cut: int = 0) -> None:
        """Succeeded results in columns (Results.ok_*), as this project's workers send
        them to a primary that reads them; `cut`: leave that many task ids out (a
        broken worker)."""
        m = wpb.Results(
            ok_terms=[a.token.term for a, _ in done],
            ok_event_ids=[a.token.event_id for a, _ in done],
            ok_task_ids=[a.task_id for a, _ in done][cut:],
            ok_steps=[a.step for a, _ in done],
            ok_attempts=[a.attempt for a, _ in done],
            ok_results_json=[orjson.dumps(v) for _, v in done],
            ok_seconds=[0.001 for _ in done],
        )
        await self._write(wpb.WorkerMessage(results=m))

    async def _write(self, message: wpb.WorkerMessage) -> None:
        async with self._writing:
            await self.call.write(message)

    async def heartbeat(self, *running: wpb.RunningAttempt) -> None:
        await self._write(wpb.WorkerMessage(heartbeat=wpb.WorkerHeartbeat(running=list(running))))

    async def close(self) -> None:
        for t in (self._reader, self._beater):
            if t is not None:
                t.cancel()
        if self.channel is not None:
            await self.channel.close()


def running(a: wpb.Assignment, details: Any = None) -> wpb.RunningAttempt:
    return wpb.RunningAttempt(
        token=a.token,
        task_id=a.task_id,
        step=a.step,
        attempt=a.attempt,
        heartbeat_json=b"" if details is None else orjson.dumps(details),
    )
