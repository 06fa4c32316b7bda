"""The deploy gate (`apollo11 replay-check`): replay recorded durable histories
against the code about to be deployed, before the deploy instead of after
(Temporal's Replayer, as a command).

Each durable task of the log is run against a journal that holds its checkpoints
and its registered wait and records nothing: every `ctx.*` call at a recorded
position must ask for what the log holds (kind, name, input hash), as on a real
wake-up; the first call past the log stops the run before it does anything
(`Frontier`), so no side effect runs and no clock is read. A run breaks when
its code asks for something else at a recorded position, or returns while the
log holds more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from apollo11.scheduler.durable._context import (
    DurableContext,
    DurableStepError,
    Frontier,
    NonDeterminism,
    Suspended,
)
from apollo11.scheduler.durable._workflow import DurableWorkflow

FirstEvent = Callable[[str, int], "tuple[int, Any] | None"]


@dataclass(frozen=True, slots=True)
class Run:
    """How one recorded run replayed: `ok`, `breaks` (non-determinism) or `error`."""

    task_id: str
    workflow: str
    version: int
    outcome: str
    checkpoints: int
    detail: str = ""  # where and what, for a run that does not replay
    report: Mapping[str, Any] = field(default_factory=dict)  # NonDeterminism.report()


class _ReplayJournal:
    replay_only = True

    def __init__(self, checkpoints: Sequence[Mapping[str, Any]], wait: Mapping[str, Any] | None,
                 first_event_id: int, first_event: FirstEvent) -> None:  # fmt: skip
        self._checkpoints = checkpoints
        self._wait = wait
        self._first_event_id = first_event_id
        self._first_event = first_event

    @property
    def checkpoints(self) -> Sequence[Mapping[str, Any]]:
        return self._checkpoints

    @property
    def wait(self) -> Mapping[str, Any] | None:
        return self._wait

    @property
    def first_event_id(self) -> int:
        return self._first_event_id

    def first_event(self, key: str, since: int) -> tuple[int, Any] | None:
        return self._first_event(key, since)

    async def resolve(self, wait: Mapping[str, Any], now_ms: int) -> Mapping[str, Any] | None:
        raise Frontier(-1)  # only asked past the log (a wait resolving)

    def plan_child(
        self,
        workflow: str,
        input: Any,
        version: int | None,
        key: str,
        parent: Mapping[str, Any],
    ) -> str:
        raise Frontier(-1)  # only asked past the log (a new spawn)

    def now_ms(self) -> int:
        raise Frontier(-1)  # only asked past the log (a new deadline)

    async def sleep(self, seconds: float) -> None:
        raise Frontier(-1)

    async def record(
        self, checkpoints: Sequence[Mapping[str, Any]], wait: Mapping[str, Any] | None = None
    ) -> None:
        raise Frontier(-1)


def check_run(
    wf: DurableWorkflow,
    *,
    task_id: str,
    input: Any,
    checkpoints: Sequence[Mapping[str, Any]],
    wait: Mapping[str, Any] | None,
    first_event_id: int,
    first_event: FirstEvent,
    failed: bool = False,
) -> Run:
    """Replay one recorded run of `wf` (its own event loop: the main is async).
    `failed`: the run ended FAILED, so its main raising again is what the log holds."""
    main = wf.main_fn
    assert main is not None
    journal = _ReplayJournal(checkpoints, wait, first_event_id, first_event)
    ctx = DurableContext(journal, task_id=task_id, attempt=0)

    def run(outcome: str, detail: str = "", report: Mapping[str, Any] | None = None) -> Run:
        return Run(task_id, wf.name, wf.version, outcome, len(checkpoints), detail, report or {})

    async def go() -> Run:
        model: Any = wf.input
        try:
            given = input if model is None else model.model_validate(input)
        except Exception as e:  # the model changed under a recorded input
            return run("error", f"its input no longer fits {model.__name__}: {e}")
        try:
            await main(ctx, given)
            ctx.finished()
        except (Frontier, Suspended, DurableStepError):
            # reached the end of the log, or a wait, or a recorded failure it lets through
            return run("ok")
        except NonDeterminism as n:
            return run("breaks", n.describe(), n.report())
        except Exception as e:
            if failed:
                return run("ok")  # it failed so, the first time too
            return run("error", f"the main raised {type(e).__name__}: {e}")
        return run("ok")

    return asyncio.run(go())


FINISHED = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})  # runs that never replay again


def check_all(
    tasks: Iterable[Any], registry: Any, first_event: FirstEvent, *, finished: bool = False
) -> tuple[list[Run], list[tuple[str, int, int]]]:
    """Replay the durable tasks in `tasks` (replay.TaskState) whose workflow version
    `registry` holds: those that will replay after a deploy (waiting, running,
    stopped as non-deterministic), and with `finished` the finished ones too (a
    corpus of histories the code must still replay). Returns the runs and, for
    versions it does not hold, (workflow, version, how many runs) as skipped."""
    runs: list[Run] = []
    skipped: dict[tuple[str, int], int] = {}
    for t in tasks:
        status = str(getattr(t.status, "value", t.status))
        if status in FINISHED and not finished:
            continue
        d = getattr(t, "durable", None)  # None: no checkpoint yet (or not durable)
        wf = registry.get(t.workflow, t.version)
        if not isinstance(wf, DurableWorkflow):
            if d is not None:  # a durable run of a version these modules do not hold
                key = (t.workflow, t.version)
                skipped[key] = skipped.get(key, 0) + 1
            continue
        runs.append(
            check_run(
                wf,
                task_id=t.task_id,
                input=t.input,
                checkpoints=list(d.checkpoints) if d is not None else [],
                wait=d.wait if d is not None else None,
                first_event_id=t.first_event_id,
                first_event=first_event,
                failed=status == "FAILED",
            )
        )
    return runs, [(n, v, c) for (n, v), c in sorted(skipped.items())]
