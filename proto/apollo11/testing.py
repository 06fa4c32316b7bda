"""Testing workflows: the real engine, store and log in process, on a virtual clock
(docs/testing.md).

    from apollo11.testing import WorkflowEnvironment, run_step

    async with WorkflowEnvironment(workflows=[approval]) as env:
        h = await env.submit(approval, {"id": "A1"})
        await env.fail_over()
        await env.send_event("approval:A1", {"by": "ana"})
        assert (await h.result())["state"] == "shipped"

Importing it loads the engine; it starts no thread and binds no port until an
environment starts (and then only the steps' threads, on no port at all). The
pytest fixture `apollo_env` comes with the package (a `pytest11` entry point).
"""

from apollo11.scheduler.testing import (
    DEFAULT_TIMEOUT_S,
    StalledError,
    TaskHandle,
    VirtualClock,
    WorkflowEnvironment,
    run_step,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "StalledError",
    "TaskHandle",
    "VirtualClock",
    "WorkflowEnvironment",
    "run_step",
]
