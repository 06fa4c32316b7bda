"""Synthetic but lawful histories: what a busy cluster's log looks like.

Used by benchmarks (replay and recovery rates) and by tests (snapshot
equivalence, golden logs). Every transition is one the state machine
accepts, so replaying a history produces no anomalies.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from apollo11.scheduler.log import Draft, EventType

ETL_STEPS = ("collect", "clean", "feature", "infer", "persist")


@dataclass
class _Run:
    task_id: str
    next_step: int = 0
    attempt: int = 0
    phase: str = "start"  # start -> end -> (start again | operator | compensated | next step)


def etl_history(
    n_tasks: int,
    *,
    seed: int = 0,
    concurrency: int = 32,
    fail_rate: float = 0.03,
    compensate_rate: float = 0.01,
    cancel_rate: float = 0.002,
    steps: tuple[str, ...] = ETL_STEPS,
    operator_rate: float = 0.3,
) -> Iterator[Draft]:
    """Drafts for `n_tasks` five-step pipelines, `concurrency` of them interleaved."""
    rng = random.Random(seed)
    deps = {s: ([steps[i - 1]] if i else []) for i, s in enumerate(steps)}
    submitted = 0
    live: list[_Run] = []
    while submitted < n_tasks or live:
        if submitted < n_tasks and ((len(live) < concurrency and rng.random() < 0.5) or not live):
            run = _Run(f"task-{seed}-{submitted:07d}")
            submitted += 1
            live.append(run)
            yield Draft(
                EventType.TASK_SUBMITTED,
                run.task_id,
                payload={
                    "workflow": "etl",
                    "version": 1,
                    "input": {"batch": submitted, "step_seconds": 0},
                    "steps": deps,
                    # as every submission through the client carries one
                    "idempotency_key": f"client-{seed}-{submitted}",
                },
            )
            continue
        run = live[rng.randrange(len(live))]
        step = steps[run.next_step]
        if run.phase == "start":
            run.attempt += 1
            run.phase = "end"
            yield Draft(EventType.STEP_STARTED, run.task_id, step, attempt=run.attempt)
        elif run.phase == "end":
            roll = rng.random()
            if roll < cancel_rate:
                live.remove(run)
                yield Draft(
                    EventType.STEP_FAILED,
                    run.task_id,
                    step,
                    {"error": "cancelled by operator", "final": True},
                    attempt=run.attempt,
                )
                yield Draft(
                    EventType.TASK_CANCELLED,
                    run.task_id,
                    payload={"operator": "alice", "reason": "bad input batch"},
                )
            elif roll < cancel_rate + fail_rate:
                final = rng.random() < operator_rate
                run.phase = "operator" if final else "start"
                yield Draft(
                    EventType.STEP_FAILED,
                    run.task_id,
                    step,
                    {"error": f"ConnectionError: reset (attempt {run.attempt})", "final": final},
                    attempt=run.attempt,
                )
            elif roll < cancel_rate + fail_rate + compensate_rate:
                run.phase = "compensated"
                yield Draft(
                    EventType.STEP_FAILED,
                    run.task_id,
                    step,
                    {"error": "partial write detected"},
                    attempt=run.attempt,
                )
                yield Draft(EventType.STEP_COMPENSATING, run.task_id, step, attempt=run.attempt)
            else:
                attempt, run.attempt = run.attempt, 0
                run.phase = "start"
                run.next_step += 1
                if run.next_step == len(steps):
                    live.remove(run)
                result = {"rows": rng.randrange(10**6), "uri": f"s3://bucket/{run.task_id}/{step}"}
                yield Draft(
                    EventType.STEP_SUCCEEDED, run.task_id, step, {"result": result}, attempt=attempt
                )
        elif run.phase == "operator":
            run.phase = "start"
            yield Draft(
                EventType.MANUAL_OVERRIDE,
                run.task_id,
                step,
                {"action": "retry", "operator": "bob", "reason": "upstream fixed"},
            )
        elif run.phase == "compensated":
            run.phase = "start"
            yield Draft(EventType.STEP_COMPENSATED, run.task_id, step, attempt=run.attempt)
