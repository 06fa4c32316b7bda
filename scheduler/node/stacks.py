"""What a hung node waits for: every asyncio task's stack, and every thread's, on SIGUSR1.

`kill -USR1 <pid>` writes them to the node's log (stderr); the node goes on.
Two parts, because either may be the one that answers:

* every thread's stack, by faulthandler, from the signal handler itself: it
  shows up even when the event loop is blocked (a call into C that does not
  return, a busy loop) and nothing below would run;
* every asyncio task with its chain of awaits, down to the one it waits in
  (for the role loop, task `apollo11-role`), logged by the event loop. A
  task's own get_stack() shows only its outermost coroutine: where a loop that
  logs nothing is stuck is the bottom of the chain.
"""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import signal
import sys
import traceback
from types import FrameType
from typing import Any

log = logging.getLogger("apollo11.scheduler.node")

SIGNAL = signal.SIGUSR1


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Dump the stacks on SIGUSR1, from now on."""
    loop.add_signal_handler(SIGNAL, lambda: log.warning("%s", task_stacks()))
    # After the loop's handler, which it calls in turn (chain): registered first, it
    # would be replaced by the loop's.
    faulthandler.register(SIGNAL, file=sys.stderr, all_threads=True, chain=True)


def task_stacks() -> str:
    """Every task of the running loop, each with its chain of awaits and the future it
    waits on (another task, a timer, a call's completion)."""
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    parts = [f"SIGUSR1: the stacks of {len(tasks)} asyncio task(s); the threads' are above"]
    for task in tasks:
        frames = _awaits(task.get_coro())
        waiting_on = getattr(task, "_fut_waiter", None)  # asyncio's own, for a diagnostic
        parts.append(
            f"task {task.get_name()!r}"
            + (" (cancelling)" if task.cancelling() else "")
            + (f", waiting on {waiting_on!r}" if waiting_on is not None else "")
            + ":\n"
            + "".join(traceback.StackSummary.extract((f, f.f_lineno) for f in frames).format())
        )
    return "\n".join(parts).rstrip("\n")


def _awaits(coro: Any) -> list[FrameType]:
    """The frames of a coroutine and of the coroutines it awaits, outermost first; the
    chain ends at what is no coroutine (a future, an async generator's anext)."""
    frames: list[FrameType] = []
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        frame = frame or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        inner = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        coro = inner if inner is not None else getattr(coro, "gi_yieldfrom", None)
    return frames
