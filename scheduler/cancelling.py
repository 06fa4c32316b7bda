"""A task's cancellation, made to stick where grpc.aio can lose it.

grpc.aio loses a cancellation that lands while a streaming call waits for its
preparation after the call has already ended: the preparation task swallows it,
and the call's own outcome comes back instead (a refusal, or a clean end). A loop
that catches the call's errors and tries again then runs on, and whoever awaits
the task after cancelling it waits for ever: a standby whose role loop stopped
following a primary that had just stepped down kept retrying it and never
campaigned (replicator/receiver.py; tests/replicator/test_receiver.py).
"""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)

CHECK_S = 1.0  # a task ends within ms of its cancellation; else it is cancelled again


def end_if_cancelled() -> None:
    """Raise the cancellation this task was asked for, if it got lost on the way (the
    task still counts the request): call it in a retry loop before trying again."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def stop_task(task: asyncio.Task[None], what: str) -> None:
    """Cancel `task` and wait for its end, cancelling it again every CHECK_S for as
    long as it runs on (said in the log): whatever loses a cancellation one day, the
    caller is not kept waiting for ever. Its outcome is retrieved, never raised."""
    while not task.done():
        task.cancel()
        if not (await asyncio.wait((task,), timeout=CHECK_S))[0]:
            log.warning("%s runs on %gs after it was cancelled: cancelling it again", what, CHECK_S)
    if not task.cancelled():
        task.exception()  # retrieved: it ended as it was being stopped
