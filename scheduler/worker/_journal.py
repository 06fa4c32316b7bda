"""A durable main's journal on a worker: the log is the primary's, reached over the
worker's stream (docs/durable.md, "Durable mains on workers").

The assignment carries what the main replays from (its checkpoints, its wait,
the task's first event, the primary's clock). What it records (checkpoints, a
WAIT, the children its spawns planned) and the waits it resolves go to the
primary as journal requests and come back as replies; the code after a
`ctx.step` runs only once its checkpoint is committed there, as on the primary.

A request whose stream breaks is asked again on the next one, of whichever node
leads then (a record is taken once: the primary skips positions its log holds).
`ask` raises `StepError` when the primary refuses (the attempt is not current any
more, a spawn is refused): the main must stop.

Deadlines are on the primary's clock: `now_ms` is its clock at dispatch plus the
time elapsed here, so a worker whose wall clock is off does not move a timer.
A spawned child's id is made here; the primary checks it and records the child.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import orjson

from apollo11.scheduler.taskid import new_task_id
from apollo11.scheduler.worker._records import Durable, JournalAnswer

# (record=(checkpoints, wait, children) | resolve=wait) -> the primary's answer
Ask = Callable[..., Awaitable[JournalAnswer]]


class RemoteJournal:
    """The `workflow.Journal` of one attempt of a durable main on this worker."""

    def __init__(self, durable: Durable, ask: Ask) -> None:
        self._checkpoints: list[dict[str, Any]] = (
            orjson.loads(durable.checkpoints_json) if durable.checkpoints_json else []
        )
        self._wait: dict[str, Any] | None = (
            orjson.loads(durable.wait_json) if durable.wait_json else None
        )
        self._first_event_id = durable.first_event_id
        self._clock_at = (durable.now_ms, time.monotonic())
        self._ask = ask
        self._planned: dict[str, dict[str, Any]] = {}  # child id -> its submission

    @property
    def checkpoints(self) -> Sequence[Mapping[str, Any]]:
        return self._checkpoints

    @property
    def wait(self) -> Mapping[str, Any] | None:
        return self._wait

    @property
    def first_event_id(self) -> int:
        return self._first_event_id

    def now_ms(self) -> int:
        ms, at = self._clock_at
        return ms + int((time.monotonic() - at) * 1000)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def plan_child(
        self,
        workflow: str,
        input: Any,
        version: int | None,
        key: str,
        parent: Mapping[str, Any],
    ) -> str:
        task_id = new_task_id()
        self._planned[task_id] = {
            "task_id": task_id,
            "workflow": workflow,
            "input": input,
            "version": version,
            "key": key,
            "parent": dict(parent),
        }
        return task_id

    async def resolve(self, wait: Mapping[str, Any], now_ms: int) -> Mapping[str, Any] | None:
        answer = await self._ask(resolve=orjson.dumps(wait))
        self._tick(answer)
        return orjson.loads(answer.resolution_json) if answer.resolution_json else None

    async def record(
        self, checkpoints: Sequence[Mapping[str, Any]], wait: Mapping[str, Any] | None = None
    ) -> None:
        spawned = [
            str(c["child"])
            for c in checkpoints
            if c.get("kind") == "spawn" and str(c.get("child")) in self._planned
        ]
        children = [self._planned[c] for c in spawned]
        answer = await self._ask(
            record=(
                orjson.dumps(list(checkpoints)),
                b"" if wait is None else orjson.dumps(wait),
                orjson.dumps(children),
            )
        )
        self._tick(answer)
        renamed: dict[str, str] = orjson.loads(answer.renamed_json) if answer.renamed_json else {}
        for c in checkpoints:
            new = renamed.get(str(c.get("child")))
            if new is not None and isinstance(c, dict):
                # the log holds this spawn's child under the id a torn batch gave it
                c["child"] = c["output"] = new
        for child in spawned:
            self._planned.pop(child, None)

    def _tick(self, answer: JournalAnswer) -> None:
        if answer.now_ms:
            self._clock_at = (answer.now_ms, time.monotonic())
