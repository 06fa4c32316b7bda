"""Shell steps: a DAG of shell commands, submitted as a JSON document, no Python needed.

    {"name": "nightly",
     "steps": [
       {"name": "dump", "run": "pg_dump db > /backups/$APOLLO11_TASK_ID.sql",
        "idempotency": "idempotent", "timeout_s": 600, "retry": {"attempts": 3}},
       {"name": "notify", "run": "./notify.sh", "after": ["dump"],
        "idempotency": "not_idempotent", "compensate": "./unnotify.sh"}]}

Each command runs with `/bin/sh -c` under a guard (scheduler/childguard.py), in a
process group of its own: a timeout, a cancel, the command's own end and its
node's death (even by SIGKILL) kill everything it started. It sees
APOLLO11_TASK_ID, APOLLO11_STEP, APOLLO11_ATTEMPT, APOLLO11_DEDUPE_KEY and
APOLLO11_FENCING_TOKEN ("term:attempt") in its environment, so it can
deduplicate, checkpoint, or have an external system refuse a deposed primary's
late attempt. A non-zero exit fails the step with the exit code and the tail
of its output in the FAILED event.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from apollo11.scheduler.childguard import guarded, stop
from apollo11.scheduler.errors import InvalidArgumentError, WorkflowDefinitionError
from apollo11.scheduler.workflow import (
    AUTO,
    Checkpoint,
    DedupeKey,
    Idempotency,
    Idempotent,
    NotIdempotent,
    Retry,
    Step,
    StepContext,
    StepError,
    Workflow,
)

SHELL_WORKFLOW = "shell"
SHELL_DISABLED = "shell steps are disabled on this cluster; start the nodes with --allow-shell"
OUTPUT_TAIL_BYTES = 1024
MAX_STEPS = 500
_STRATEGIES = {"idempotent", "dedupe_key", "checkpoint", "not_idempotent"}


def _runner(command: str) -> Any:
    async def run(ctx: StepContext) -> dict[str, Any]:
        env = {
            **os.environ,
            "APOLLO11_TASK_ID": ctx.task_id,
            "APOLLO11_STEP": ctx.step,
            "APOLLO11_ATTEMPT": str(ctx.attempt),
            "APOLLO11_DEDUPE_KEY": ctx.dedupe_key,
            "APOLLO11_FENCING_TOKEN": str(ctx.fencing_token),
        }
        proc = await asyncio.create_subprocess_exec(
            *guarded(["/bin/sh", "-c", command]),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # the guard leads a group its command shares
        )
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            await stop(proc)  # a timeout or cancel: the command and all it started
            raise
        tail = out[-OUTPUT_TAIL_BYTES:].decode(errors="replace")
        if proc.returncode != 0:
            raise StepError(
                f"command exited with code {proc.returncode}",
                exit_code=proc.returncode,
                output_tail=tail,
            )
        return {"exit_code": 0, "output_tail": tail}

    return run


def _field(
    step: dict[str, Any], i: int, key: str, kind: type | tuple[type, ...], default: Any
) -> Any:
    value = step.get(key, default)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise InvalidArgumentError(f"steps[{i}].{key} has the wrong type ({type(value).__name__})")
    return value


def shell_workflow(doc: Any) -> Workflow:
    """Build (and validate) the workflow a shell DAG document describes."""
    if not isinstance(doc, dict):
        raise InvalidArgumentError("a shell DAG must be a JSON object with 'name' and 'steps'")
    name = doc.get("name", "shell")
    steps = doc.get("steps")
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("name must be a non-empty string")
    if not isinstance(steps, list) or not steps:
        raise InvalidArgumentError("steps must be a non-empty list")
    if len(steps) > MAX_STEPS:
        raise InvalidArgumentError(f"steps has {len(steps)} entries, over the limit of {MAX_STEPS}")
    wf = Workflow(SHELL_WORKFLOW, version=1, description=name)
    for i, raw in enumerate(steps):
        if not isinstance(raw, dict):
            raise InvalidArgumentError(f"steps[{i}] must be an object")
        step_name = raw.get("name")
        if not isinstance(step_name, str) or not step_name:
            raise InvalidArgumentError(f"steps[{i}].name must be a non-empty string")
        run = raw.get("run")
        if not isinstance(run, str) or not run.strip():
            raise InvalidArgumentError(f"steps[{i}].run must be a non-empty command string")
        after = _field(raw, i, "after", list, [])
        if not all(isinstance(a, str) for a in after):
            raise InvalidArgumentError(f"steps[{i}].after must be a list of step names")
        strategy = raw.get("idempotency")
        if strategy not in _STRATEGIES:
            raise InvalidArgumentError(
                f"steps[{i}].idempotency must be one of {sorted(_STRATEGIES)} "
                f"(every step must declare how it is safe to run again)"
            )
        compensate = raw.get("compensate")
        if compensate is not None and (not isinstance(compensate, str) or not compensate.strip()):
            raise InvalidArgumentError(f"steps[{i}].compensate must be a command string")
        idem: Idempotency
        if strategy == "not_idempotent":
            idem = NotIdempotent(compensate=_runner(compensate) if compensate else None)
        else:
            idem = {"idempotent": Idempotent, "dedupe_key": DedupeKey, "checkpoint": Checkpoint}[
                strategy
            ]()
        timeout = _field(raw, i, "timeout_s", (int, float, str), AUTO)
        if isinstance(timeout, str) and timeout != AUTO:
            raise InvalidArgumentError(f"steps[{i}].timeout_s must be seconds or 'auto'")
        retry_doc = _field(raw, i, "retry", dict, {})
        try:
            retry = Retry(**retry_doc)
        except TypeError as e:
            raise InvalidArgumentError(f"steps[{i}].retry: {e}") from e
        wrong = retry.problems()
        if wrong:
            raise InvalidArgumentError(f"steps[{i}].retry: " + "; ".join(wrong))
        wf.add_step(
            Step(
                name=step_name,
                fn=_runner(run),
                after=tuple(after),
                idempotency=idem,
                retry=retry,
                timeout=timeout,
                compensation_retry=Retry(attempts=1_000_000, max_backoff_s=300),
            )
        )
    try:
        wf.validate()
    except WorkflowDefinitionError as e:
        raise InvalidArgumentError(f"shell DAG {name!r}: {e}") from e
    return wf
