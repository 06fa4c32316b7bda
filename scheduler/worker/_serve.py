"""A worker as a process (`apollo11 worker`): signals in, an exit status out.

SIGTERM or SIGINT drains (`Worker.stop`: running attempts get the grace period,
then are handed back); a second one stops at once, killing child processes. A
refusal of the configuration exits EX_CONFIG (78), which a supervisor can be
told not to restart on (systemd's RestartPreventExitStatus=78): restarting a
worker with a bad token or label only repeats the refusal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from apollo11.scheduler import gctune
from apollo11.scheduler.worker._worker import Worker, WorkerRefusedError

log = logging.getLogger("apollo11.worker")

EX_CONFIG = 78


async def serve(worker: Worker, *, grace_s: float) -> int:
    gctune.settle()  # its workflow modules are loaded: they live as long as it does
    loop = asyncio.get_running_loop()
    run = asyncio.create_task(worker.run(), name="apollo11-worker")
    signals = 0
    stopping: list[asyncio.Task[None]] = []  # held: the loop keeps only weak references

    def on_signal(sig: signal.Signals) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("%s: stopping, running attempts get %g s to finish", sig.name, grace_s)
            stopping.append(loop.create_task(worker.stop(grace_s)))
        else:
            log.warning("%s again: stopping now", sig.name)
            run.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal, sig)
    try:
        await run
    except WorkerRefusedError:
        return EX_CONFIG
    except asyncio.CancelledError:
        if signals < 2:
            raise
        log.warning("worker %s stopped before its attempts ended", worker.name)
        return 1
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)
    log.info("worker %s stopped", worker.name)
    return 0
